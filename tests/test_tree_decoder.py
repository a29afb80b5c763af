"""The decoder's tree mode (TreeDecoder and TreeDecoder.from_logits) over the toy
models of tests/toy_models.py: greedy output identical to plain greedy decoding, max_new
and stop tokens, the KV-cache contract (what the callbacks are given each round), and
errors naming the callback. The sequence law is in test_tree_sequence_law.py."""
from __future__ import annotations

import pytest
import torch

from toy_models import (pair, paths_of, sampling_tree_draft, target_tree_rows, topk_tree_draft,
                        tree_shape)

SHAPES = [(), (1, 1, 1, 1), (2, 2, 1), (3, 1, 1), (4,), (2, 2, 2, 1)]


def test_tree_shape():
    assert tree_shape(()) == []
    assert tree_shape((2, 1)) == [-1, 0, -1, 2]
    assert tree_shape((1, 1, 1)) == [-1, 0, 1]
    assert tree_shape((2, 2)) == [-1, 0, 0, -1, 3, 3]


@pytest.mark.parametrize("widths", SHAPES, ids=[str(w) for w in SHAPES])
def test_greedy_trees_equal_plain_greedy_decoding(sv, widths):
    target, draft = pair()
    decoders = [sv.TreeDecoder(topk_tree_draft(draft, widths), target_tree_rows(target, logits))
                for logits in (False, True)]
    decoders.append(sv.TreeDecoder.from_logits(topk_tree_draft(draft, widths),
                                               target_tree_rows(target, logits=True), temperature=0))
    for dec in decoders:
        for prompt, max_new in (([3], 40), ([1, 2, 3], 17), ([49, 0], 1), ([7], 0)):
            assert dec.generate(prompt, max_new=max_new) == target.greedy_decode(prompt, max_new)
            stats = dec.stats
            assert stats.new_tokens == max_new and stats.stop_reason == "max_new"
            if widths and max_new > 1:
                assert stats.accepted > 0  # the draft mostly agrees: some paths are accepted


def test_wider_trees_accept_more_than_their_first_branch(sv):
    """The first branch of a (2, 1, 1) top-k tree is the chain of the draft's argmaxes, so a
    (2, 1, 1) tree accepts at least as much per round as the chain (1, 1, 1) on the same
    rounds, and here strictly more over a generation (the second branch is taken where the
    draft's argmax is not the target's)."""
    target, draft = pair(noise=1.5)
    per_call = {}
    for widths in ((1, 1, 1), (2, 1, 1), (3, 1, 1)):
        dec = sv.TreeDecoder(topk_tree_draft(draft, widths), target_tree_rows(target))
        assert dec.generate([5], max_new=300) == target.greedy_decode([5], 300)
        per_call[widths] = dec.stats.tokens_per_target_call
    assert per_call[(1, 1, 1)] < per_call[(2, 1, 1)] < per_call[(3, 1, 1)], per_call


def test_a_greedy_tree_with_repeated_siblings_is_fine(sv):
    # Greedy verification follows the first child holding the argmax: repeats do no harm.
    target, _ = pair()

    def draft(prefix):
        t = int(target.logits(prefix).argmax())
        return [t, t, 0], [-1, -1, 0], None

    dec = sv.TreeDecoder(draft, target_tree_rows(target))
    assert dec.generate([4], max_new=30) == target.greedy_decode([4], 30)
    # Every round accepts node 0 (the argmax; node 1 repeats it and is never tried), and
    # node 2 (token 0) is never the argmax after it on this prompt.
    assert dec.stats.accepted_length_counts == [0, 15] and dec.stats.rounds == 15


def test_stop_token_inside_an_accepted_path(sv):
    target, draft = pair()
    plain = target.greedy_decode([3], 40)
    stop = plain[1 + 12]  # the 13th new token
    first = plain.index(stop, 1)
    dec = sv.TreeDecoder(topk_tree_draft(draft, (2, 2, 2)), target_tree_rows(target))
    assert dec.generate([3], max_new=40, eos_token_id=stop) == plain[:first + 1]
    assert dec.stats.stop_reason == "stop_token"


class Recorder:
    """Wraps the callbacks, keeping what each round was given and returned."""

    def __init__(self, draft_tree, target_step):
        self.draft_tree, self.target_step = draft_tree, target_step
        self.drafts, self.targets = [], []

    def draft(self, prefix):
        out = self.draft_tree(prefix)
        self.drafts.append((list(prefix), out))
        return out

    def target(self, prefix, tokens, parents):
        assert tokens.dtype == torch.int64 and parents.dtype == torch.int64
        assert tokens.is_contiguous() and parents.is_contiguous() and tokens.shape == parents.shape
        self.targets.append((list(prefix), tokens.tolist(), parents.tolist()))
        return self.target_step(prefix, tokens, parents)


@pytest.mark.parametrize("greedy", [True, False])
def test_the_kv_contract(sv, greedy):
    """Each round's prefix extends the last by exactly one root path of the last tree plus one
    token; draft_tree and target_tree_step see the same prefix; trees are never deeper than
    the tokens left less one (deeper nodes dropped, their subtrees with them), and with one
    token left draft_tree is not called."""
    target, draft = pair(noise=1.0)
    g = torch.Generator().manual_seed(3)
    widths = (2, 2, 2, 1)
    rec = Recorder(topk_tree_draft(draft, widths) if greedy else sampling_tree_draft(draft, widths, g),
                   target_tree_rows(target))
    dec = sv.TreeDecoder(rec.draft, rec.target, greedy=greedy, generator=g)
    prompt, max_new = [2, 9], 37
    out = dec.generate(prompt, max_new=max_new)
    assert len(out) == len(prompt) + max_new
    drafted = {len(prefix): prefix for prefix, _ in rec.drafts}
    for r, (prefix, tokens, parents) in enumerate(rec.targets):
        assert out[:len(prefix)] == prefix
        left = len(prompt) + max_new - len(prefix)
        if left > 1:
            assert drafted[len(prefix)] == prefix
        else:
            assert tokens == [] and len(prefix) not in drafted
        depth = max((len(c) - len(prefix) for c in paths_of(prefix, tokens, parents)), default=0)
        assert depth <= left - 1
        following = rec.targets[r + 1][0] if r + 1 < len(rec.targets) else out
        accepted = following[len(prefix):-1]
        assert accepted == [] or accepted in [c[len(prefix):] for c in paths_of(prefix, tokens, parents)]
    assert dec.stats.pruned > 0  # the last rounds met max_new
    assert dec.stats.rounds == len(rec.targets) and dec.stats.draft_calls == len(rec.drafts)
    assert sum(n * c for n, c in enumerate(dec.stats.node_counts)) == sum(len(t) for _, t, _ in rec.targets)


def test_pruning_keeps_draft_rows_aligned(sv):
    """Near max_new, the dropped nodes' draft rows go with them: with a verifier that checks
    every kept node's draft row is the one the drafter made for it."""
    target, draft = pair()
    g = torch.Generator().manual_seed(0)
    drafter = sampling_tree_draft(draft, (2, 3, 1), g)
    seen = []

    def verifier(rows, draft_rows, tokens, parents, generator):
        prefix = seen[-1]
        if draft_rows is None:  # one token left: no tree
            assert tokens.numel() == 0
            return sv.verify_tree_probs(rows, tokens, parents, generator=generator)
        ctx = [prefix] + paths_of(prefix, tokens.tolist(), parents.tolist())
        assert draft_rows.shape[0] == len(ctx)
        for i, c in enumerate(ctx):
            assert torch.equal(draft_rows[i], draft.probs(c))
            assert torch.equal(rows[i], target.probs(c))
        return sv.verify_tree_probs(rows, tokens, parents, draft_rows, generator=generator)

    def target_step(prefix, tokens, parents):
        seen.append(list(prefix))
        return target_tree_rows(target)(prefix, tokens, parents)

    dec = sv.TreeDecoder(drafter, target_step, greedy=False, generator=g, verifier=verifier)
    for max_new in (2, 3, 5, 20):
        assert len(dec.generate([1], max_new=max_new)) == 1 + max_new
    assert dec.stats.pruned > 0


def test_sampled_tokens_have_positive_probability(sv):
    target, draft = pair(vocab=30, noise=1.5)
    g = torch.Generator().manual_seed(1)
    for drafter in (topk_tree_draft(draft, (2, 2)), sampling_tree_draft(draft, (2, 2), g)):
        dec = sv.TreeDecoder(drafter, target_tree_rows(target), greedy=False, generator=g)
        out = dec.generate([0], max_new=150)
        assert all(target.probs(out[:i])[out[i]] > 0 for i in range(1, len(out)))
        assert 0 < dec.stats.acceptance_rate < 1


def test_stats(sv):
    target, draft = pair()
    dec = sv.TreeDecoder(topk_tree_draft(draft, (2, 1)), target_tree_rows(target))
    dec.generate([1], max_new=30)
    s = dec.stats
    assert s.rounds == s.target_calls == sum(s.node_counts) == sum(s.depth_counts) == sum(s.accepted_length_counts)
    assert s.new_tokens == 30 == s.accepted + s.rounds
    assert s.tokens_per_target_call == 30 / s.rounds
    # Only the last round can meet max_new (2 tokens left: the depth-2 nodes dropped; 1 left:
    # no draft_tree call); every other round verifies the whole 4-node tree.
    assert s.proposed + s.pruned == 4 * s.draft_calls
    assert s.node_counts[4] == s.depth_counts[2] >= s.rounds - 1
    d = s.as_dict()
    assert d["tokens_per_target_call"] == s.tokens_per_target_call and d["node_counts"] == s.node_counts
    assert "tree rounds" in s.summary()
    assert repr(dec) == "TreeDecoder(greedy=True)"


# Errors: each names the callback whose output is wrong. ---------------------------------------------

def fixed_draft(tokens, parents, rows=None):
    return lambda prefix: (tokens, parents, rows)


def constant_target(prefix, tokens, parents):
    # Rows that do not depend on the tree: the op, not the target, meets a bad token.
    return torch.ones(tokens.numel() + 1, 50)


ERRORS = [
    # (draft_tree output, greedy, error type, message)
    (([1], [-1]), True, TypeError, r"draft_tree must return a triple \(tokens, parents, draft_rows\), got a tuple of "
                              r"length 2"),
    (([1, 2], [-1], None), True, ValueError, "draft_tree returned 2 tokens but 1 parents"),
    (([1, 2], [-1, 1], None), True, ValueError, r"draft_tree's parents\[1\] = 1 must be in \[-1, 1\)"),
    (([1, 2], [-1, -2], None), True, ValueError, r"draft_tree's parents\[1\] = -2 must be in \[-1, 1\)"),
    (([1.5], [-1], None), True, TypeError, "draft_tree's tokens"),
    ((torch.tensor([[1]]), torch.tensor([[-1]]), None), True, ValueError, r"draft_tree's tokens must be 1-D"),
    (([1, 2], [-1, -1], None), True, None, None),  # fine: greedy
    (([1, 1], [-1, -1], None), False, ValueError, r"rejected draft_tree's tokens: spec_verify.verify_tree_probs: "
                                                  r"tokens\[1\] = 1 repeats its sibling tokens\[0\]"),
    (([1, 1], [-1, -1], torch.ones(3, 50)), False, None, None),  # fine: drawn children may repeat
    (([1, 50], [-1, 0], None), False, ValueError, r"rejected draft_tree's tokens: .*tokens\[1\] = 50 is outside "
                                                  r"the vocabulary \[0, 50\)"),
    (([1], [-1], torch.ones(1, 50)), False, ValueError, r"draft_tree's rows have shape \[1, 50\], expected "
                                                        r"\[N\+1, V\] with N = 1"),
    (([1], [-1], torch.ones(2, 50, dtype=torch.float64)), False, TypeError, "draft_tree's rows have dtype "
                                                                            "torch.float64"),
    (([1], [-1], torch.ones(2, 49)), False, ValueError, "draft_tree's rows have V = 49 columns but "
                                                        "target_tree_step returned rows with V = 50"),
    (([1], [-1], torch.full((2, 50), -1.0)), False, ValueError, "rejected draft_tree's rows"),
]


@pytest.mark.parametrize("out,greedy,error,message", ERRORS)
def test_malformed_trees_raise_naming_draft_tree(sv, out, greedy, error, message):
    dec = sv.TreeDecoder(lambda prefix: out, constant_target, greedy=greedy,
                         generator=torch.Generator().manual_seed(0))
    if error is None:
        dec.generate([1], max_new=3)
    else:
        with pytest.raises(error, match=message):
            dec.generate([1], max_new=3)


def test_bad_target_rows_raise_naming_the_target_callback(sv):
    draft = fixed_draft([1, 2], [-1, 0])
    cases = [
        (lambda p, t, q: torch.ones(2, 50), ValueError, r"target_tree_step returned rows of shape \[2, 50\], "
                                                         r"expected \[N\+1, V\] = \[3, V\]"),
        (lambda p, t, q: torch.ones(3, 50, dtype=torch.float16), TypeError, "target_tree_step returned rows of dtype"),
        (lambda p, t, q: [0.5] * 3, TypeError, "target_tree_step returned a list"),
        (lambda p, t, q: torch.full((3, 50), float("nan")), ValueError, "rejected target_tree_step's rows"),
    ]
    for target_step, error, message in cases:
        for greedy in (True, False):
            dec = sv.TreeDecoder(draft, target_step, greedy=greedy)
            with pytest.raises(error, match=message):
                dec.generate([1], max_new=3)
    dec = sv.TreeDecoder.from_logits(draft, lambda p, t, q: torch.full((3, 50), float("nan")))
    with pytest.raises(ValueError, match="rejected target_tree_logits_step's logits"):
        dec.generate([1], max_new=3)


def test_a_verifier_returning_a_non_path_raises(sv):
    target, _ = pair()
    for path in ([1], [0, 2], [3], [0, 0]):  # tree: 0 -> 1, 2 -> 3 (two branches)
        dec = sv.TreeDecoder(fixed_draft([1, 2, 3, 4], [-1, 0, -1, 2]), target_tree_rows(target),
                             verifier=lambda *a, path=path: (path, 0))
        with pytest.raises(ValueError, match="not a path from the root"):
            dec.generate([1], max_new=5)
    dec = sv.TreeDecoder(fixed_draft([1], [-1]), target_tree_rows(target),
                         verifier=lambda *a: ([0], 50))
    with pytest.raises(ValueError, match=r"next_token = 50, outside \[0, V = 50\)"):
        dec.generate([1], max_new=5)


def test_constructor_checks(sv):
    target, _ = pair()
    step = target_tree_rows(target)
    with pytest.raises(TypeError, match="TreeDecoder: draft_tree must be callable"):
        sv.TreeDecoder(None, step)
    with pytest.raises(TypeError, match="TreeDecoder: greedy must be a bool"):
        sv.TreeDecoder(step, step, greedy=1)
    with pytest.raises(TypeError, match="TreeDecoder: generator must be a torch.Generator"):
        sv.TreeDecoder(step, step, generator=0)
    with pytest.raises(ValueError, match="top_p"):
        sv.TreeDecoder.from_logits(step, step, top_p=0.0)
    with pytest.raises(TypeError, match="TreeDecoder.from_logits: target_tree_logits_step must be callable"):
        sv.TreeDecoder.from_logits(step, 3)


def test_stream_and_warped_sampling(sv):
    """TreeDecoder.from_logits with top_k = 3 and children drawn from the draft's warped logits
    (sv.sample with the same parameters): every emitted token is among the target's top 3
    after its prefix; stream's chunks are generate's output, seed for seed."""
    target, draft = pair(vocab=30, noise=0.5)
    params = dict(temperature=0.8, top_k=3)

    def drafter(generator):
        parents = tree_shape((2, 2))

        def draft_tree(prefix):
            tokens, ctx = [], []
            for p in parents:
                base = list(prefix) if p < 0 else ctx[p]
                t = int(sv.sample(draft.logits(base), generator=generator, **params))
                tokens.append(t)
                ctx.append(base + [t])
            rows = torch.stack([draft.logits(c) for c in [list(prefix)] + ctx])
            return tokens, parents, rows
        return draft_tree

    outs = []
    for streaming in (False, True):
        g = torch.Generator().manual_seed(4)
        dec = sv.TreeDecoder.from_logits(drafter(g), target_tree_rows(target, logits=True),
                                         generator=g, **params)
        if streaming:
            chunks = list(dec.stream([2], max_new=60))
            assert all(1 <= len(c) <= 3 for c in chunks) and len(chunks) == dec.stats.rounds
            outs.append([2] + sum(chunks, []))
        else:
            outs.append(dec.generate([2], max_new=60))
        out = outs[-1]
        assert all(out[i] in torch.topk(target.logits(out[:i]), 3).indices.tolist() for i in range(1, len(out)))
        assert dec.stats.accepted > 0
    assert outs[0] == outs[1]
    assert repr(dec) == "TreeDecoder.from_logits(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0)"


def test_one_decoder_family(sv):
    """SpeculativeDecoder (chains) and TreeDecoder (trees) are both real subclasses of
    sv.Decoder, their statistics of sv.RoundStats; neither decoder is the other's kind, no
    abstract-base-class registration makes it seem so, and neither module imports the other."""
    import ast
    import inspect
    from pathlib import Path

    target, draft = pair()
    tree = sv.TreeDecoder(topk_tree_draft(draft, (2, 1)), target_tree_rows(target))
    tree_logits = sv.TreeDecoder.from_logits(topk_tree_draft(draft, (2, 1)), target_tree_rows(target, True),
                                             temperature=0)
    chain = sv.SpeculativeDecoder(sv.PromptLookup(), lambda prefix, proposed: target.target_rows(prefix, proposed))
    for dec, kind, stats in ((tree, sv.TreeDecoder, sv.TreeDecodeStats),
                             (tree_logits, sv.TreeDecoder, sv.TreeDecodeStats),
                             (chain, sv.SpeculativeDecoder, sv.DecodeStats)):
        dec.generate([3], max_new=5)
        assert isinstance(dec, sv.Decoder) and type(dec) is kind
        assert isinstance(dec.stats, sv.RoundStats) and type(dec.stats) is stats
        assert dec.stats.rounds == dec.stats.target_calls > 0 and dec.stats.new_tokens == 5
    assert sv.Decoder in sv.TreeDecoder.__mro__ and sv.Decoder in sv.SpeculativeDecoder.__mro__
    assert not isinstance(tree, sv.SpeculativeDecoder) and not isinstance(chain, sv.TreeDecoder)
    assert type(sv.Decoder) is type  # a plain class: nothing registered as a virtual subclass
    package = Path(inspect.getfile(sv.SpeculativeDecoder)).parent
    for module, other in (("decoder.py", "tree_decoder"), ("tree_decoder.py", "decoder")):
        tree_ast = ast.parse((package / module).read_text())
        imported = {node.module for node in ast.walk(tree_ast) if isinstance(node, ast.ImportFrom)}
        assert other not in imported, f"{module} imports {other}"
        assert ".register(" not in (package / module).read_text()
