"""SpeculativeDecoder over small prefix-dependent toy models (tests/toy_models.py)."""
from __future__ import annotations

import pytest
import torch

from toy_models import ToyLM


def pair(vocab=50, noise=0.7):
    target = ToyLM(vocab, seed=1)
    draft = ToyLM(vocab, seed=2, base=target, noise=noise)
    return target, draft


@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_greedy_output_equals_plain_greedy_decoding(sv, isa, k):
    target, draft = pair()
    for use_logits in (False, True):
        dec = sv.SpeculativeDecoder(draft.greedy_draft,
                                    lambda prefix, proposed: target.target_rows(prefix, proposed, use_logits),
                                    k=k, greedy=True)
        for prompt in ([3], [1, 2, 3], [49, 0]):
            assert dec.generate(prompt, max_new=40) == target.greedy_decode(prompt, 40)


def test_max_new_respected_exactly(sv):
    target, draft = pair()
    g = torch.Generator().manual_seed(0)
    for greedy in (True, False):
        dec = sv.SpeculativeDecoder(draft.greedy_draft if greedy else draft.sampling_draft(g),
                                    target.target_rows, k=5, greedy=greedy, generator=g)
        for max_new in [0, 1, 2, 5, 6, 7, 33]:
            out = dec.generate([4, 2], max_new=max_new)
            assert len(out) == 2 + max_new and out[:2] == [4, 2]


def test_sampling_tokens_in_vocabulary_with_positive_probability(sv):
    target, draft = pair(vocab=30, noise=1.5)
    g = torch.Generator().manual_seed(1)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g)
    out = dec.generate([0], max_new=200)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0


def test_bad_callback_output(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(lambda prefix, k: (torch.zeros(k + 1, dtype=torch.int64), None),
                                target.target_rows, k=3)
    with pytest.raises(ValueError, match="draft_step returned 4 tokens, expected k = 3"):
        dec.generate([1], max_new=10)
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=False)
    with pytest.raises(ValueError, match="must return the draft probabilities"):
        dec.generate([1], max_new=10)


def test_constructor_checks(sv):
    target, draft = pair()
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=-1)
    with pytest.raises(TypeError, match="callables"):
        sv.SpeculativeDecoder(None, target.target_rows)


# Stop tokens, streaming, K shrinking, the callback contract, statistics ------------------

def recording(draft, target, greedy=True, generator=None):
    """Callbacks that log every call: ("draft", prefix, k) and ("target", prefix, proposed)."""
    log = []
    inner = draft.greedy_draft if greedy else draft.sampling_draft(generator)

    def draft_step(prefix, k):
        log.append(("draft", list(prefix), k))
        return inner(prefix, k)

    def target_step(prefix, proposed):
        log.append(("target", list(prefix), proposed.tolist()))
        return target.target_rows(prefix, proposed)
    return draft_step, target_step, log


def truncate_at(seq, prompt_len, stops):
    for i in range(prompt_len, len(seq)):
        if seq[i] in stops:
            return seq[:i + 1]
    return seq


def test_stop_tokens_cut_the_output_even_inside_an_accepted_block(sv):
    target, _ = pair()
    # The target as its own draft: every block is accepted whole, so a stop token emitted
    # in the middle of a block must cut it.
    dec = sv.SpeculativeDecoder(target.greedy_draft, target.target_rows, k=6)
    prompt = [3, 1]
    free = target.greedy_decode(prompt, 60)
    new = free[len(prompt):]
    inside = next(t for i, t in enumerate(new) if i % 7 not in (0, 6) and t not in new[:i])
    for stops in ([inside], [inside, new[-1]], [new[0]], [new[-1]], [9999]):
        eos = stops[0] if len(stops) == 1 else stops
        out = dec.generate(prompt, max_new=60, eos_token_id=eos)
        assert out == truncate_at(free, len(prompt), set(stops))
        assert dec.stats.new_tokens == len(out) - len(prompt)
        assert dec.stats.stop_reason == ("stop_token" if len(out) < len(free) or free[-1] in stops else "max_new")
    assert dec.stats.acceptance_rate == 1.0
    # A stop token in the prompt does not count.
    assert dec.generate([inside, 2], max_new=10, eos_token_id=inside)[:2] == [inside, 2]


def test_stop_tokens_while_sampling(sv):
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(5)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g)
    stopped = 0
    for _ in range(30):
        out = dec.generate([0], max_new=40, eos_token_id=(7, 11))
        new = out[1:]
        assert all(t not in (7, 11) for t in new[:-1])
        assert len(new) == 40 or new[-1] in (7, 11)
        stopped += dec.stats.stop_reason == "stop_token"
    assert 0 < stopped < 30


def test_stream_and_callback_deliver_each_round(sv):
    target, draft = pair()
    for greedy in (True, False):
        outs = []
        for form in ("generate", "on_tokens", "stream"):
            g = torch.Generator().manual_seed(3)
            d, t, log = recording(draft, target, greedy, g)
            dec = sv.SpeculativeDecoder(d, t, k=4, greedy=greedy, generator=g)
            if form == "generate":
                outs.append(dec.generate([5], max_new=37, eos_token_id=13)[1:])
                continue
            chunks = []
            if form == "on_tokens":
                dec.generate([5], max_new=37, eos_token_id=13, on_tokens=chunks.append)
            else:
                it = dec.stream([5], max_new=37, eos_token_id=13)
                assert log == []  # lazy: nothing runs before the first next()
                for c in it:
                    # each chunk arrives as soon as its round is verified
                    assert log[-1][0] == "target" and dec.stats.rounds == len(chunks) + 1
                    chunks.append(c)
            assert all(1 <= len(c) <= 5 for c in chunks) and len(chunks) == dec.stats.rounds
            outs.append(sum(chunks, []))
        assert outs[0] == outs[1] == outs[2]


def test_k_shrinks_so_no_draft_token_is_wasted(sv):
    target, draft = pair()
    for max_new in (1, 2, 5, 9, 23):
        d, t, log = recording(draft, target)
        dec = sv.SpeculativeDecoder(d, t, k=4)
        prompt = [2, 8]
        dec.generate(prompt, max_new=max_new)
        for kind, prefix, x in log:
            k = x if kind == "draft" else len(x)
            assert len(prefix) + k + 1 <= len(prompt) + max_new  # never beyond max_new
            assert k > 0 or kind == "target"  # draft_step is never asked for 0 tokens
        assert dec.stats.proposed == sum(x for kind, _, x in log if kind == "draft")
    assert sv.SpeculativeDecoder(d, t, k=4).generate([1], max_new=0) == [1]


@pytest.mark.parametrize("greedy", [True, False])
def test_each_prefix_extends_the_last_verified_prefix(sv, greedy):
    # The contract a KV cache relies on: within a round both callbacks see the same
    # prefix; the next round's prefix is it + the accepted proposals + the emitted token.
    target, draft = pair(noise=1.0)
    g = torch.Generator().manual_seed(2)
    d, t, log = recording(draft, target, greedy, g)
    dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy, generator=g)
    out = dec.generate([4, 4], max_new=50)
    targets = [(prefix, proposed) for kind, prefix, proposed in log if kind == "target"]
    drafts = [prefix for kind, prefix, _ in log if kind == "draft"]
    assert drafts == [p for p, proposed in targets if proposed]
    assert targets[0][0] == [4, 4]
    for (prefix, proposed), (following, _) in zip(targets, targets[1:] + [(out, None)]):
        grown = following[len(prefix):]
        assert following[:len(prefix)] == prefix and 1 <= len(grown) <= len(proposed) + 1
        assert grown[:-1] == proposed[:len(grown) - 1]


def test_statistics_are_consistent(sv):
    target, draft = pair(noise=1.0)
    g = torch.Generator().manual_seed(4)
    d, t, log = recording(draft, target, False, g)
    dec = sv.SpeculativeDecoder(d, t, k=4, greedy=False, generator=g)
    out = dec.generate([1], max_new=300)
    s = dec.stats
    rounds = [x for kind, _, x in log if kind == "target"]
    assert s.rounds == s.target_calls == len(rounds)
    assert s.draft_calls == sum(1 for kind, *_ in log if kind == "draft")
    assert s.proposed == sum(len(x) for x in rounds)
    assert s.new_tokens == len(out) - 1 == 300 == s.accepted + s.rounds
    assert sum(s.accepted_length_counts) == s.rounds
    assert sum(n * c for n, c in enumerate(s.accepted_length_counts)) == s.accepted
    assert sum(s.accepted_by_position) == s.accepted
    assert s.accepted_by_position[0] <= s.decided_by_position[0] <= s.rounds
    assert s.acceptance_rate == s.accepted / s.proposed
    assert s.mean_accepted == s.accepted / s.rounds
    assert s.tokens_per_target_call == 300 / s.rounds
    assert min(s.draft_ns, s.target_ns, s.verify_ns) > 0
    assert 0 < s.acceptance_rate < 1 and s.stop_reason == "max_new"
    d = s.as_dict()
    assert d["rounds"] == s.rounds and "acceptance_by_position" in d
    assert "tokens per target call" in s.summary()
    # A new generation starts new statistics.
    dec.generate([1], max_new=3)
    assert dec.stats.new_tokens == 3


def test_acceptance_by_position_estimates_the_analytic_rates(sv):
    # Prefix-independent rows: the setting of the analytic law, so the decoder's per-position
    # acceptance rates estimate alpha_i = sum_v min(p_i, q_i).
    from law import acceptance_rates

    K, V = 3, 8
    g = torch.Generator().manual_seed(6)
    p = torch.softmax(torch.randn(K + 1, V, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(K, V, generator=g) * 1.5, -1)

    def draft_step(prefix, k):
        return torch.multinomial(q[:k], 1, generator=g).reshape(k), q[:k]

    dec = sv.SpeculativeDecoder(draft_step, lambda prefix, proposed: p[:len(proposed) + 1], k=K,
                                greedy=False, generator=g)
    dec.generate([0], max_new=6000)
    s = dec.stats
    alpha = acceptance_rates(p, q).tolist()
    for i in range(K):
        n = s.decided_by_position[i]
        se = (alpha[i] * (1 - alpha[i]) / n) ** 0.5
        assert abs(s.acceptance_by_position[i] - alpha[i]) < 5 * se, (i, s.acceptance_by_position, alpha)


def test_bad_callback_output_names_the_callback(sv):
    target, draft = pair(vocab=10)
    good_tokens = lambda k: torch.zeros(k, dtype=torch.int64)
    rows = lambda prefix, proposed: target.target_rows(prefix, proposed)
    q = lambda k: torch.full((k, 10), 0.1)
    cases = [
        # (draft_step, target_step, greedy, exception, message)
        (lambda p, k: good_tokens(k), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (good_tokens(k), None, None), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (torch.zeros(k), None), rows, True, TypeError, "draft_step returned tokens of dtype torch.float32"),
        (lambda p, k: (torch.zeros(1, k, dtype=torch.int64), None), rows, True, ValueError,
         r"draft_step returned tokens of shape \[1, 3\]"),
        (lambda p, k: ("abc", None), rows, True, TypeError, "draft_step returned tokens as a str"),
        (lambda p, k: (good_tokens(k - 1), None), rows, True, ValueError, "draft_step returned 2 tokens, expected k = 3"),
        (lambda p, k: ([0] * k, None), lambda p, t: None, True, TypeError, "target_step returned a NoneType"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t).double(), True, TypeError,
         "target_step returned rows of dtype torch.float64"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[:-1], True, ValueError,
         r"target_step returned rows of shape \[3, 10\], expected \[k\+1, V\] = \[4, V\]"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[None], True, ValueError,
         r"target_step returned rows of shape \[1, 4, 10\]"),
        (lambda p, k: ([0, 99, 0][:k], None), lambda p, t: rows(p, torch.zeros_like(t)), True, ValueError,
         "rejected draft_step's tokens"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t) * float("nan"), True, ValueError,
         "rejected target_step's rows"),
        (lambda p, k: (good_tokens(k), q(k).double()), rows, False, TypeError,
         "draft_step returned probs of dtype torch.float64"),
        (lambda p, k: (good_tokens(k), q(k + 1)), rows, False, ValueError, r"draft_step returned probs of shape \[4, 10\]"),
        (lambda p, k: (good_tokens(k), [[0.1] * 10] * k), rows, False, TypeError, "draft_step returned probs as a list"),
        (lambda p, k: (good_tokens(k), torch.full((k, 9), 0.1)), rows, False, ValueError,
         "draft_step returned probs with V = 9 columns but target_step returned rows with V = 10"),
        (lambda p, k: (good_tokens(k), -q(k)), rows, False, ValueError, "rejected draft_step's probs"),
    ]
    for d, t, greedy, exc, msg in cases:
        dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy)
        with pytest.raises(exc, match=msg):
            dec.generate([1], max_new=10)


def test_argument_checks(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=2)
    with pytest.raises(ValueError, match="max_new must be an int >= 0"):
        dec.generate([1], max_new=-1)
    with pytest.raises(ValueError, match="max_new must be an int >= 0"):
        dec.stream([1], max_new=2.0)  # raised at the call, not at the first next()
    with pytest.raises(TypeError, match="eos_token_id must be"):
        dec.generate([1], max_new=3, eos_token_id="2")
    with pytest.raises(TypeError, match="prompt_ids must"):
        dec.generate([1.0], max_new=3)
    # A tokenizer's [1, L] batch of one is a prompt too.
    assert dec.generate(torch.tensor([[3, 4]]), max_new=5) == target.greedy_decode([3, 4], 5)


def test_kernel_package_imports_only_stdlib_torch_and_itself(sv):
    import ast
    import sys
    from pathlib import Path

    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    for path in Path(sv.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
