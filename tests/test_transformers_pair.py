"""SpeculativeDecoder on a pair of Hugging Face transformers causal LMs, through the packaged
adapter `spec_verify.transformers` (a KV cache per model, SpeculativeDecoder.from_logits),
reached from the kernel module as users reach it: `sv.transformers`.

Both models are built from a config with fixed seeds (nothing is downloaded): a 2-layer
Llama with hidden size 64 and a 32000-token vocabulary as the target, and as the draft the
same model with every weight tensor perturbed by Gaussian noise (3% of its spread), so the
draft agrees with the target most of the time, not always.

Tree mode (`sv.transformers.tree_decoder`, `CachedCausalLM.tree_logits`): rows scored through
the cache with a 4-D tree attention mask, or one forward per branch, equal plain forwards
over each node's path; greedy tree decoding equals `generate` (with a draft model, with
prompt-lookup trees and with suffix trees, also through `suffix_decoder(tree=True)`, whose
cache fills across generate calls and decoders); a model that rejects 4-D masks falls back
to branches.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import transformers  # a test dependency (requirements.txt), never imported by the kernel
import warp_reference as ref
from law import g_test

VOCAB = 32000
PROMPTS = [[1, 500, 1200, 7, 99, 3000], [1, 31999]]


def build_pair(seed: int = 0, noise: float = 0.03):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(config).eval()
    target.generation_config.eos_token_id = None  # stop only where a test says so
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return target, draft


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny matrices: a second intra-op thread only adds synchronisation, which costs 10x on
    # a loaded 2-core machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    transformers.utils.logging.set_verbosity_error()
    return build_pair()


def hf_greedy(model, prompt, max_new, eos=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                             max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=0)
    return out[0].tolist()


@pytest.mark.parametrize("k", [1, 4, 7])
def test_greedy_equals_transformers_generate(sv, models, k):
    target, draft = models
    for prompt in PROMPTS:
        dec = sv.transformers.speculative_decoder(draft, target, k=k, temperature=0, schedule="constant")
        out = dec.generate(prompt, max_new=48)
        assert out == hf_greedy(target, prompt, 48)
        stats = dec.stats
        assert stats.new_tokens == 48 and stats.stop_reason == "max_new"
        # The KV cache works: the target is fed the prompt once, then k+1 tokens a round
        # (the emitted token and the next proposals), never the prefix again.
        assert dec.target_cache.fed == len(prompt) - 1 + stats.proposed + stats.rounds
        # The draft is fed each of its own proposals but the last, and the emitted token.
        assert dec.draft_cache.fed <= len(prompt) - 1 + stats.proposed + stats.rounds
        if k == 4:
            # The perturbed draft agrees with the target most of the time, not always.
            assert 0.5 < stats.acceptance_rate < 0.98, stats.summary()


def test_greedy_stop_tokens_equal_transformers_generate(sv, models):
    target, draft = models
    prompt = PROMPTS[0]
    free = hf_greedy(target, prompt, 48)[len(prompt):]
    # Stop tokens picked from the free-running output, so the stop happens mid-stream.
    first_seen = [t for i, t in enumerate(free) if t not in free[:i]]
    one, two = first_seen[20], first_seen[12]
    dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0, schedule="constant")
    for eos in (one, [one, two]):
        expected = hf_greedy(target, prompt, 48, eos=eos)
        assert expected[-1] in ([eos] if isinstance(eos, int) else eos)
        assert len(expected) < len(prompt) + 48
        assert dec.generate(prompt, max_new=48, eos_token_id=eos) == expected
        assert dec.stats.stop_reason == "stop_token"


def test_sampling_is_reproducible_and_valid(sv, models):
    target, draft = models
    outs = []
    for _ in range(2):
        g = torch.Generator().manual_seed(7)
        dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0.7, generator=g, schedule="constant")
        chunks = list(dec.stream(PROMPTS[0], max_new=40))
        outs.append(sum(chunks, []))
        assert all(1 <= len(c) <= 5 for c in chunks) and len(outs[-1]) == 40
        assert all(0 <= t < VOCAB for t in outs[-1])
        assert dec.stats.rounds == len(chunks) and 0.3 < dec.stats.acceptance_rate <= 1.0
    assert outs[0] == outs[1]


def test_cache_follows_a_new_prompt(sv, models):
    # A second generation with another prompt must not reuse the first one's cache rows.
    target, draft = models
    dec = sv.transformers.speculative_decoder(draft, target, k=3, temperature=0, schedule="constant")
    for prompt in (PROMPTS[0], PROMPTS[1], PROMPTS[0][:3], PROMPTS[0]):
        assert dec.generate(prompt, max_new=12) == hf_greedy(target, prompt, 12)


@pytest.mark.slow
def test_top_p_first_token_law(sv, models):
    """Sampling with temperature 0.03 and top-p 0.8 (the tiny random models' logits are
    flat: their spread is about 0.16, so a low temperature makes a peaked row: 8 tokens kept,
    the least probable with probability 0.036), k = 2.

    Null hypothesis: the first token of a generation is distributed as the target's warped
    row after the prompt (the float64 reference warp of the target's logits): by the
    residual identity this holds whatever the draft proposes. Sample size: 700
    generations (one round each, from a fixed seed). Test: G-test (cells expecting fewer
    than 5 pooled); fails at p < 1e-6.
    """
    target, draft = models
    prompt = PROMPTS[0]
    params = dict(temperature=0.03, top_k=0, top_p=0.8, min_p=0.0)
    with torch.no_grad():
        logits = target(torch.tensor([prompt])).logits[0, -1].float()
    law, kept, _, margin = ref.warp_row(logits, *params.values())
    assert margin > ref.CLEAR and 3 <= int(kept.sum()) <= 40, (margin, int(kept.sum()))
    assert torch.equal(sv.warp(logits, **params) > 0, kept)
    g = torch.Generator().manual_seed(11)
    dec = sv.transformers.speculative_decoder(draft, target, k=2, generator=g, **params, schedule="constant")
    counts = torch.zeros(VOCAB)
    accepted = 0
    for _ in range(700):
        first_round = next(dec.stream(prompt, max_new=8))
        counts[first_round[0]] += 1
        accepted += len(first_round) - 1
    g_stat, df, p = g_test(counts, law)
    assert p > 1e-6, f"G = {g_stat:.1f}, df = {df}, p = {p:.3g}"
    assert 0 < accepted < 2 * 700, "the draft should be accepted sometimes, not always"


# Tree mode: sv.transformers.tree_decoder and CachedCausalLM.tree_logits --------------------------

def per_node_rows(model, prefix, tokens, parents):
    """Row 0 after prefix, row j+1 after prefix + the path to node j: one plain forward each."""
    ctx = [list(prefix)]
    for t, p in zip(tokens, parents):
        ctx.append(ctx[p + 1] + [t])
    with torch.no_grad():
        return torch.stack([model(torch.tensor([c])).logits[0, -1].float() for c in ctx])


class NoTreeMask(torch.nn.Module):
    """A causal LM that rejects custom 4-D attention masks, as some architectures do."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=True):
        if attention_mask is not None and attention_mask.dim() == 4:
            raise ValueError("this model does not take a 4-D attention mask")
        return self.inner(input_ids=input_ids, cache=cache, use_cache=use_cache)


@pytest.mark.parametrize("mode", ["mask", "branches"])
def test_tree_logits_equal_per_branch_forwards(sv, models, mode):
    """Rows of a tree scored through the cache (one masked forward, or one per branch) equal
    plain forwards over each node's path, within float32 tolerance, round after round as the
    prefix grows by a path of the last tree, and as a tree grows level by level."""
    target, _ = models
    cache = sv.transformers.CachedCausalLM(target)
    cache.tree_attention = mode
    gen = torch.Generator().manual_seed(0)
    prefix = list(PROMPTS[0])
    for r in range(8):
        n = int(torch.randint(0, 8, (1,), generator=gen))
        parents = [int(torch.randint(-1, j, (1,), generator=gen)) for j in range(n)]
        tokens = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        before = cache.fed
        rows = cache.tree_logits(prefix, tokens, parents)
        assert rows.shape == (n + 1, VOCAB)
        if mode == "mask" and r > 0:
            # The last tree's path was kept (moved into sequence order): fed are the token
            # after it and this tree.
            assert cache.fed - before == 1 + n
        torch.testing.assert_close(rows, per_node_rows(target, prefix, tokens, parents), atol=2e-5, rtol=1e-4)
        if n:
            grown_t, grown_p = tokens + [5, 6], parents + [n - 1, n]
            torch.testing.assert_close(cache.tree_logits(prefix, grown_t, grown_p),
                                       per_node_rows(target, prefix, grown_t, grown_p), atol=2e-5, rtol=1e-4)
        node, path = (n - 1 if n else -1), []
        while node >= 0:
            path.append(tokens[node])
            node = parents[node]
        prefix = prefix + path[::-1] + [r + 10]
        if r % 3 == 2:  # a chain call in between, as a draft model's would be
            torch.testing.assert_close(cache.logits(prefix, len(prefix) - 1),
                                       per_node_rows(target, prefix, [], []), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("widths", [(2, 2, 1), (3, 1), (1, 1, 1, 1)])
def test_greedy_tree_decoding_equals_transformers_generate(sv, models, widths):
    target, draft = models
    for prompt in PROMPTS:
        dec = sv.transformers.tree_decoder(target, draft, widths=widths, temperature=0, tree_attention="mask")
        out = dec.generate(prompt, max_new=40)
        assert out == hf_greedy(target, prompt, 40)
        stats = dec.stats
        assert stats.new_tokens == 40
        assert dec.target_cache.forwards == stats.rounds  # one masked forward a round
        # The target is fed the prompt, then each round the emitted token and the tree: the
        # accepted path's entries are kept, the others dropped.
        assert dec.target_cache.fed == len(prompt) - 1 + stats.proposed + stats.rounds
        assert stats.accepted > 0


class IgnoresTreeMask(torch.nn.Module):
    """A causal LM that takes a 4-D mask and position ids but ignores them (plain causal
    attention): the masked rows are wrong, and only a check can tell."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=True):
        return self.inner(input_ids=input_ids, cache=cache, use_cache=use_cache)


def test_auto_checks_the_mask_once(sv, models):
    target, draft = models
    prompt = PROMPTS[0]
    dec = sv.transformers.tree_decoder(target, draft, widths=(2, 2), temperature=0)
    assert dec.target_cache.tree_attention == "auto"
    assert dec.generate(prompt, max_new=24) == hf_greedy(target, prompt, 24)
    assert dec.target_cache.tree_attention == "mask" and dec.draft_cache.tree_attention == "mask"
    wrong = sv.transformers.tree_decoder(IgnoresTreeMask(target), draft, widths=(2, 2), temperature=0)
    assert wrong.generate(prompt, max_new=24) == hf_greedy(target, prompt, 24)
    assert wrong.target_cache.tree_attention == "branches"
    # Forced, the ignored mask gives wrong rows: what the check is for.
    forced = sv.transformers.CachedCausalLM(IgnoresTreeMask(target))
    forced.tree_attention = "mask"
    tokens, parents = [5, 6, 7], [-1, -1, 1]
    assert not torch.allclose(forced.tree_logits(prompt, tokens, parents),
                              per_node_rows(target, prompt, tokens, parents), atol=1e-3)


def test_tree_decoding_falls_back_to_one_forward_per_branch(sv, models):
    target, draft = models
    prompt = PROMPTS[0]
    dec = sv.transformers.tree_decoder(NoTreeMask(target), draft, widths=(2, 2), temperature=0)
    assert dec.generate(prompt, max_new=24) == hf_greedy(target, prompt, 24)
    assert dec.target_cache.tree_attention == "branches"
    assert dec.target_cache.forwards > dec.stats.rounds  # several branches a round
    strict = sv.transformers.tree_decoder(NoTreeMask(target), draft, widths=(2,), temperature=0,
                                          tree_attention="mask")
    with pytest.raises(ValueError, match="4-D attention mask"):
        strict.generate(prompt, max_new=4)


def test_tree_decoding_with_prompt_lookup(sv, models):
    target, _ = models
    prompt = PROMPTS[0] * 3  # repeats: prompt lookup finds matches
    dec = sv.transformers.tree_decoder(target, draft_tree=sv.PromptLookupTree(branches=3, depth=4), temperature=0)
    assert dec.generate(prompt, max_new=30) == hf_greedy(target, prompt, 30)
    assert dec.draft_cache is None


def test_tree_decoding_with_suffix_trees(sv, models):
    # SuffixTreeDrafter through the adapter (whole trees, and trees cut by its schedule on the
    # wall clock): greedy output is generate's, and each request goes into the drafter's cache.
    target, _ = models
    branching = [1, 500, 1200, 99, 1, 500, 7, 3000, 1, 500, 31999, 1, 500]  # (1, 500) has three continuations
    for schedule in ("constant", "adaptive"):
        drafter = sv.SuffixTreeDrafter(schedule=schedule, max_nodes=8)
        dec = sv.transformers.tree_decoder(target, draft_tree=drafter, temperature=0)
        for prompt in (branching, PROMPTS[0] * 3, branching):
            assert dec.generate(prompt, max_new=24) == hf_greedy(target, prompt, 24)
        assert len(drafter.cache) == 3
        if schedule == "constant":
            assert drafter.rounds["tree"] >= 2 and drafter.rounds["chain"] >= 5, drafter.rounds


def test_tree_sampling_is_reproducible_and_valid(sv, models):
    # Temperature 0.03: the tiny random models' rows are flat (logits spread about 0.16), so
    # only a low temperature gives the top children a fair chance.
    target, draft = models
    for draw in (True, False):
        outs = []
        for _ in range(2):
            g = torch.Generator().manual_seed(5)
            dec = sv.transformers.tree_decoder(target, draft, widths=(2, 2), temperature=0.03, generator=g,
                                               draw_children=draw)
            outs.append(dec.generate(PROMPTS[0], max_new=30))
            assert len(outs[-1]) == len(PROMPTS[0]) + 30 and all(0 <= t < VOCAB for t in outs[-1])
            assert dec.stats.accepted > 0
        assert outs[0] == outs[1]


def test_tree_decoder_arguments(sv, models):
    target, draft = models
    with pytest.raises(ValueError, match="pass draft_model or draft_tree"):
        sv.transformers.tree_decoder(target)
    with pytest.raises(ValueError, match="widths must be"):
        sv.transformers.tree_decoder(target, draft, widths=(2, 0))
    with pytest.raises(ValueError, match="tree_attention must be"):
        sv.transformers.tree_decoder(target, draft, tree_attention="dense")


def test_suffix_decoder_with_trees(sv, models):
    # suffix_decoder(tree=True) is tree_decoder over a SuffixTreeDrafter sharing the cache it is
    # given, with tree_decoder's defaults (the drafter's, k as max_nodes). Greedy output is
    # generate's; each request goes into the cache, across generate calls and across decoders;
    # a second request finds the first one's output there.
    target, _ = models
    branching = [1, 500, 1200, 99, 1, 500, 7, 3000, 1, 500, 31999, 1, 500]  # (1, 500) has three continuations
    cache = sv.SuffixCache(max_requests=4)
    dec = sv.transformers.suffix_decoder(target, temperature=0, cache=cache, tree=True)
    reference = sv.transformers.tree_decoder(target, draft_tree=sv.SuffixTreeDrafter(cache), temperature=0)
    assert type(dec) is sv.TreeDecoder and repr(dec) == repr(reference)
    assert type(dec.drafter) is sv.SuffixTreeDrafter and repr(dec.drafter) == repr(reference.draft_tree)
    assert dec.drafter.cache is cache and type(dec.drafter.schedule) is sv.TreeSchedule
    assert dec.target_cache.model is target and dec.draft_cache is None
    for rep in range(2):  # one decoder, two requests: the cache keeps both
        assert dec.generate(branching, max_new=24) == hf_greedy(target, branching, 24)
        assert len(cache) == rep + 1 and cache.tokens == 24 * (rep + 1)
    # Whole trees every round (schedule "constant": no clock, so the rounds are fixed), k nodes
    # at most, on the same cache.
    shared = sv.transformers.suffix_decoder(target, k=8, temperature=0, cache=cache, tree=True, schedule="constant")
    assert shared.drafter.max_nodes == 8 and shared.drafter.cache is cache
    repeating = PROMPTS[0] * 3
    expected = hf_greedy(target, repeating, 24)
    assert shared.generate(repeating, max_new=24) == expected and len(cache) == 3
    assert shared.generate(branching, max_new=24) == hf_greedy(target, branching, 24) and len(cache) == 4
    assert shared.drafter.rounds["tree"] >= 2, shared.drafter.rounds  # trees were verified
    assert len(shared.stats.node_counts) - 1 <= 8  # node_counts[n]: rounds with n nodes
    # A request seen before: the cache holds its output, which a decoder without one lacks.
    again = sv.transformers.suffix_decoder(target, k=8, temperature=0, cache=cache, tree=True, schedule="constant")
    alone = sv.transformers.suffix_decoder(target, k=8, temperature=0, cache=False, tree=True, schedule="constant")
    assert again.generate(repeating, max_new=24) == expected == alone.generate(repeating, max_new=24)
    assert alone.drafter.cache is None and len(cache) == 4  # at most max_requests kept
    assert again.stats.accepted > alone.stats.accepted, (again.stats.accepted, alone.stats.accepted)


def test_suffix_decoder_with_trees_samples_reproducibly(sv, models):
    # Sampling through tree=True (deterministic children, the tree rule's draws from the
    # generator), on a cache holding the greedy output of the same request: a seed gives one
    # output (schedule "constant": no clock in the cut), valid tokens, some proposals
    # accepted. Temperature 0.005: the tiny model's rows are flat (logits spread about 0.16),
    # so only a near-greedy text follows the cached one.
    target, _ = models
    prompt = PROMPTS[0] * 3
    outs = []
    for _ in range(2):
        cache = sv.SuffixCache()
        sv.transformers.suffix_decoder(target, temperature=0, cache=cache, tree=True).generate(prompt, max_new=30)
        g = torch.Generator().manual_seed(7)
        dec = sv.transformers.suffix_decoder(target, k=8, temperature=0.005, generator=g, cache=cache, tree=True,
                                             schedule="constant")
        outs.append(dec.generate(prompt, max_new=30))
        assert len(outs[-1]) == len(prompt) + 30 and all(0 <= t < VOCAB for t in outs[-1])
        assert dec.stats.accepted > 0 and dec.generator is g and len(cache) == 2
    assert outs[0] == outs[1]
