"""SpeculativeDecoder over small prefix-dependent toy models (tests/toy_models.py)."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
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
                                    k=k, greedy=True, schedule="constant")
        for prompt in ([3], [1, 2, 3], [49, 0]):
            assert dec.generate(prompt, max_new=40) == target.greedy_decode(prompt, 40)


def test_max_new_respected_exactly(sv):
    target, draft = pair()
    g = torch.Generator().manual_seed(0)
    for greedy in (True, False):
        dec = sv.SpeculativeDecoder(draft.greedy_draft if greedy else draft.sampling_draft(g),
                                    target.target_rows, k=5, greedy=greedy, generator=g, schedule="constant")
        for max_new in [0, 1, 2, 5, 6, 7, 33]:
            out = dec.generate([4, 2], max_new=max_new)
            assert len(out) == 2 + max_new and out[:2] == [4, 2]


def test_sampling_tokens_in_vocabulary_with_positive_probability(sv):
    target, draft = pair(vocab=30, noise=1.5)
    g = torch.Generator().manual_seed(1)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
    out = dec.generate([0], max_new=200)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0


def test_bad_callback_output(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(lambda prefix, k: (torch.zeros(k + 1, dtype=torch.int64), None),
                                target.target_rows, k=3, schedule="constant")
    with pytest.raises(ValueError, match="draft_step returned 4 tokens, expected at most k = 3"):
        dec.generate([1], max_new=10)


def test_constructor_checks(sv):
    target, draft = pair()
    d, t = draft.greedy_draft, target.target_rows
    cases = [  # (keyword arguments, exception, message)
        (dict(k=-1), ValueError, r"k must be an int in \[0, 1024\], got -1"),
        (dict(k=sv.SpeculativeDecoder.MAX_K + 1), ValueError, r"k must be an int in \[0, 1024\], got 1025"),
        (dict(k="4"), TypeError, "k must be an int, got str"),
        (dict(k=4.0), TypeError, "k must be an int, got float"),
        (dict(k=True), TypeError, "k must be an int, got bool"),
        (dict(k=torch.tensor([4])), TypeError, r"k must be an int, got a torch.int64 tensor of shape \[1\]"),
        (dict(greedy="yes"), TypeError, "greedy must be a bool, got str"),
        (dict(generator=123), TypeError, "generator must be a torch.Generator or None, got int"),
        (dict(verifier=3), TypeError, "verifier must be callable or None, got int"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            sv.SpeculativeDecoder(d, t, **kwargs, schedule="constant")
    with pytest.raises(TypeError, match="draft_step must be callable, got NoneType"):
        sv.SpeculativeDecoder(None, t, schedule="constant")
    with pytest.raises(TypeError, match="target_step must be callable, got int"):
        sv.SpeculativeDecoder(d, 3, schedule="constant")
    # Integers of other kinds are ints: NumPy scalars, 0-d integer tensors.
    for k in (np.int64(3), np.uint8(3), torch.tensor(3), torch.tensor(3, dtype=torch.uint64)):
        dec = sv.SpeculativeDecoder(d, t, k=k, schedule="constant")
        assert type(dec.k) is int and dec.k == 3
        assert dec.generate([1], max_new=9) == target.greedy_decode([1], 9)
    assert sv.SpeculativeDecoder(d, t, k=sv.SpeculativeDecoder.MAX_K, schedule="constant").k == 1024


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
    dec = sv.SpeculativeDecoder(target.greedy_draft, target.target_rows, k=6, schedule="constant")
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
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
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
            dec = sv.SpeculativeDecoder(d, t, k=4, greedy=greedy, generator=g, schedule="constant")
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
        dec = sv.SpeculativeDecoder(d, t, k=4, schedule="constant")
        prompt = [2, 8]
        dec.generate(prompt, max_new=max_new)
        for kind, prefix, x in log:
            k = x if kind == "draft" else len(x)
            assert len(prefix) + k + 1 <= len(prompt) + max_new  # never beyond max_new
            assert k > 0 or kind == "target"  # draft_step is never asked for 0 tokens
        assert dec.stats.proposed == sum(x for kind, _, x in log if kind == "draft")
    assert sv.SpeculativeDecoder(d, t, k=4, schedule="constant").generate([1], max_new=0) == [1]


@pytest.mark.parametrize("greedy", [True, False])
def test_each_prefix_extends_the_last_verified_prefix(sv, greedy):
    # The contract a KV cache relies on: within a round both callbacks see the same
    # prefix; the next round's prefix is it + the accepted proposals + the emitted token.
    target, draft = pair(noise=1.0)
    g = torch.Generator().manual_seed(2)
    d, t, log = recording(draft, target, greedy, g)
    dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy, generator=g, schedule="constant")
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
    dec = sv.SpeculativeDecoder(d, t, k=4, greedy=False, generator=g, schedule="constant")
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
    fields = [f.name for f in dataclasses.fields(s)]
    properties = [name for klass in type(s).__mro__ for name, attr in vars(klass).items()
                  if isinstance(attr, property) and not name.startswith("_")]
    assert "acceptance_by_position" in properties and "k" in fields
    assert sorted(d) == sorted(fields + properties)
    for name, value in d.items():
        assert value == getattr(s, name) or (value != value and getattr(s, name) != getattr(s, name)), name
    assert "tokens per target call" in s.summary()
    # A new generation starts new statistics.
    dec.generate([1], max_new=3)
    assert dec.stats.new_tokens == 3


def recount(k, records):
    """The statistics recounted from every round's (proposed, accepted), by their definitions."""
    positions = range(k)
    return {
        "rounds": len(records),
        "draft_calls": sum(1 for j, _ in records if j > 0),
        "proposed": sum(j for j, _ in records),
        "accepted": sum(n for _, n in records),
        "proposed_length_counts": [sum(1 for j, _ in records if j == m) for m in range(k + 1)],
        "accepted_length_counts": [sum(1 for _, n in records if n == m) for m in range(k + 1)],
        "decided_by_position": [sum(1 for j, n in records if j > i and n >= i) for i in positions],
        "accepted_by_position": [sum(1 for _, n in records if n > i) for i in positions],
    }


def random_verifier(records, seed):
    """Accepts a random number of the proposed tokens (all of them a third of the time),
    records (proposed, accepted), emits token 0."""
    rng = random.Random(seed)

    def verifier(target_rows, draft_probs, tokens, generator):
        j = tokens.numel()
        n = j if rng.random() < 1 / 3 else rng.randint(0, j)
        records.append((j, n))
        return n, 0
    return verifier


@pytest.mark.parametrize("k,max_new", [(1, 200), (5, 300), (5, 7), (17, 500), (1000, 30000)])
def test_statistics_against_a_recount(sv, k, max_new):
    every = []
    for seed in range(6):
        records = []
        dec = sv.SpeculativeDecoder(lambda prefix, j: ([1] * j, None),
                                    lambda prefix, t: torch.ones(len(t) + 1, 2),
                                    k=k, verifier=random_verifier(records, seed=seed), schedule="constant")
        out = dec.generate([1], max_new=max_new)
        s = dec.stats
        assert len(out) == 1 + max_new == 1 + s.new_tokens
        want = recount(k, records)
        assert {name: getattr(s, name) for name in want} == want
        assert s.full_acceptance_counts == [sum(1 for j, n in records if j == n == m) for m in range(k + 1)]
        assert s.acceptance_by_position[0] == want["accepted_by_position"][0] / want["decided_by_position"][0]
        every += records
    # The cases cover what the counters tell apart: rounds accepting all and some of their
    # proposals, and (k > 1) rounds shortened near max_new.
    assert any(n == j for j, n in every) and any(n < j for j, n in every)
    assert any(0 < j < k for j, _ in every) or k == 1


@pytest.mark.parametrize("k", [0, 1, 1000, 1024])
def test_statistics_memory_is_linear_in_k(sv, k):
    dec = sv.SpeculativeDecoder(lambda prefix, j: ([1] * j, None), lambda prefix, t: torch.ones(len(t) + 1, 2),
                                k=k, verifier=random_verifier([], seed=0), schedule="constant")
    for s in (dec.stats, sv.DecodeStats(k)):
        lists = [v for v in vars(s).values() if isinstance(v, (list, tuple, dict, set))]
        assert sum(len(v) for v in lists) <= 4 * (k + 1)
        assert all(type(x) is int for v in lists for x in v)  # flat lists of counts, no tables
    dec.generate([1], max_new=3 * k + 5)
    s = dec.stats
    assert sum(len(v) for v in vars(s).values() if isinstance(v, list)) <= 4 * (k + 1)
    assert s.schedule_reasons == {"constant": s.rounds}  # one count per reason
    assert len(s.decided_by_position) == len(s.accepted_by_position) == k
    assert f"at K = {k}" in s.summary()


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
                                greedy=False, generator=g, schedule="constant")
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
    u64 = lambda values: torch.tensor(values, dtype=torch.uint64)
    cases = [
        # (draft_step, target_step, greedy, exception, message)
        (lambda p, k: good_tokens(k), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (good_tokens(k), None, None), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (torch.zeros(k), None), rows, True, TypeError,
         "draft_step's tokens must have an integer dtype, got torch.float32"),
        (lambda p, k: (torch.zeros(k, dtype=torch.bool), None), rows, True, TypeError,
         "draft_step's tokens must have an integer dtype, got torch.bool"),
        (lambda p, k: ([True] * k, None), rows, True, TypeError, r"draft_step's tokens\[0\] must be an int, got bool"),
        (lambda p, k: ([0, 1.0, 2][:k], None), rows, True, TypeError, r"draft_step's tokens\[1\] must be an int, got float"),
        (lambda p, k: (torch.zeros(1, k, dtype=torch.int64), None), rows, True, ValueError,
         r"draft_step's tokens must be 1-D, at most k = 3 ids, got shape \[1, 3\]"),
        (lambda p, k: ("abc", None), rows, True, TypeError,
         "draft_step's tokens must be a 1-D integer tensor or a list of ints, got str"),
        (lambda p, k: (good_tokens(k + 1), None), rows, True, ValueError,
         "draft_step returned 4 tokens, expected at most k = 3"),
        (lambda p, k: (good_tokens(k).to("meta"), None), rows, True, ValueError,
         "draft_step's tokens must be on the CPU, got a tensor on meta"),
        # Values beyond int64 are reported as they are, not wrapped or overflowed.
        (lambda p, k: (u64([0, 2**64 - 1, 0][:k]), None), rows, True, ValueError,
         r"draft_step's tokens\[1\] = 18446744073709551615 is outside the range of token ids"),
        (lambda p, k: (u64([0, 0, 2**63][:k]), None), rows, True, ValueError,
         r"draft_step's tokens\[2\] = 9223372036854775808 is outside"),
        (lambda p, k: ([0, 2**64, 0][:k], None), rows, True, ValueError, r"draft_step's tokens\[1\] = 18446744073709551616 is outside"),
        (lambda p, k: ([-2**63 - 1, 0, 0][:k], None), rows, True, ValueError,
         r"draft_step's tokens\[0\] = -9223372036854775809 is outside"),
        (lambda p, k: ([0] * k, None), lambda p, t: None, True, TypeError, "target_step returned a NoneType"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t).double(), True, TypeError,
         "target_step returned rows of dtype torch.float64"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[:-1], True, ValueError,
         r"target_step returned rows of shape \[3, 10\], expected \[j\+1, V\] = \[4, V\] with V > 0 for the j = 3 "
         "proposed tokens"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[None], True, ValueError,
         r"target_step returned rows of shape \[1, 4, 10\]"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t).to("meta"), True, ValueError,
         "target_step returned rows on meta, expected a tensor on the CPU"),
        # Contents only the op sees: the op's error, attributed to the callback.
        (lambda p, k: ([0, 99, 0][:k], None), lambda p, t: rows(p, torch.zeros_like(t)), True, ValueError,
         r"the verification op rejected draft_step's tokens: spec_verify.verify_greedy: draft_tokens\[1\] = 99"),
        (lambda p, k: (u64([0, 10, 0][:k]), None), lambda p, t: rows(p, torch.zeros_like(t)), True, ValueError,
         r"rejected draft_step's tokens: .*draft_tokens\[1\] = 10 is outside the vocabulary \[0, 10\)"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t) * float("nan"), True, ValueError,
         r"the verification op rejected target_step's rows: spec_verify.verify_greedy: target_probs\[0, 0\] = nan"),
        (lambda p, k: (good_tokens(k), q(k).double()), rows, False, TypeError,
         "draft_step returned probs of dtype torch.float64"),
        (lambda p, k: (good_tokens(k), q(k + 1)), rows, False, ValueError,
         r"draft_step returned probs of shape \[4, 10\], expected \[j, V\] with j = 3, the number of tokens"),
        # Fewer tokens than k are fine, but the probs must have one row per token.
        (lambda p, k: (good_tokens(k - 1), q(k)), rows, False, ValueError,
         r"draft_step returned probs of shape \[3, 10\], expected \[j, V\] with j = 2"),
        (lambda p, k: (good_tokens(0), q(1)), rows, False, ValueError,
         r"draft_step returned probs of shape \[1, 10\], expected \[j, V\] with j = 0"),
        (lambda p, k: (good_tokens(k), [[0.1] * 10] * k), rows, False, TypeError, "draft_step returned probs as a list"),
        (lambda p, k: (good_tokens(k), torch.full((k, 9), 0.1)), rows, False, ValueError,
         "draft_step returned probs with V = 9 columns but target_step returned rows with V = 10"),
        (lambda p, k: (good_tokens(k), q(k).to("meta")), rows, False, ValueError,
         "draft_step returned probs on meta, expected a tensor on the CPU"),
        (lambda p, k: (good_tokens(k), -q(k)), rows, False, ValueError,
         r"the verification op rejected draft_step's probs: spec_verify.accept: draft_probs\[0, 0\]"),
        (lambda p, k: (good_tokens(k), q(k)), lambda p, t: rows(p, t) * 0, False, ValueError,
         r"the verification op rejected target_step's rows: spec_verify.accept: target_probs\[0\] has zero mass"),
    ]
    for d, t, greedy, exc, msg in cases:
        dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy, schedule="constant")
        with pytest.raises(exc, match=msg):
            dec.generate([1], max_new=10)


def test_target_step_gets_int64_contiguous_tokens(sv):
    # Whatever integer form draft_step returns its tokens in, target_step sees an int64 [k]
    # contiguous CPU tensor with the same values.
    target, draft = pair(vocab=10)
    wanted = [3, 1, 4]
    forms = [
        torch.tensor(wanted, dtype=torch.int32),
        torch.tensor(wanted, dtype=torch.uint8),
        torch.tensor(wanted, dtype=torch.uint64),
        torch.tensor([[3, 0], [1, 0], [4, 0]])[:, 0],  # a strided view
        wanted,
        tuple(wanted),
        [np.int64(3), np.uint16(1), torch.tensor(4)],
        np.array(wanted, dtype=np.int32),
    ]
    for form in forms:
        seen = []

        def target_step(prefix, proposed):
            seen.append(proposed)
            return target.target_rows(prefix, proposed)

        dec = sv.SpeculativeDecoder(lambda p, k: (form[:k], None), target_step, k=3, schedule="constant")
        dec.generate([1], max_new=4)  # one round of k = 3 (at least)
        proposed = seen[0]
        assert type(proposed) is torch.Tensor and proposed.dtype == torch.int64, form
        assert proposed.is_contiguous() and proposed.device.type == "cpu" and proposed.shape == (3,)
        assert proposed.tolist() == wanted


def test_argument_checks(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=2, schedule="constant")
    cases = [  # (generate's keyword arguments, exception, message)
        (dict(max_new=-1), ValueError, r"max_new must be an int in \[0, inf\], got -1"),
        (dict(max_new=2.0), TypeError, "max_new must be an int, got float"),
        (dict(max_new=True), TypeError, "max_new must be an int, got bool"),
        (dict(max_new="3"), TypeError, "max_new must be an int, got str"),
        (dict(eos_token_id="2"), TypeError, "eos_token_id must be an int, an iterable of ints or None, got str"),
        (dict(eos_token_id=2.0), TypeError, "eos_token_id must be an int, an iterable of ints or None, got float"),
        (dict(eos_token_id=True), TypeError, "eos_token_id must be an int, got bool"),
        (dict(eos_token_id=[3, False]), TypeError, r"eos_token_id\[1\] must be an int, got bool"),
        (dict(eos_token_id=torch.tensor(3.0)), TypeError, "eos_token_id must have an integer dtype, got torch.float32"),
        (dict(eos_token_id=torch.tensor([[3]])), ValueError, r"eos_token_id must be an int or a 1-D sequence of ints, got shape \[1, 1\]"),
        (dict(eos_token_id=-1), ValueError, r"eos_token_id\[0\] = -1 is negative"),
        (dict(eos_token_id=torch.tensor(3).to("meta")), ValueError, "eos_token_id must hold values"),
        (dict(prompt_ids=None), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got NoneType"),
        (dict(prompt_ids=7), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got int"),
        (dict(prompt_ids="abc"), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got str"),
        (dict(prompt_ids=[1.0]), TypeError, r"prompt_ids\[0\] must be an int, got float"),
        (dict(prompt_ids=[1, True]), TypeError, r"prompt_ids\[1\] must be an int, got bool"),
        (dict(prompt_ids=[2**64]), ValueError, r"prompt_ids\[0\] = 18446744073709551616 is outside"),
        (dict(prompt_ids=[4, -2]), ValueError, r"prompt_ids\[1\] = -2 is negative"),
        (dict(prompt_ids=torch.tensor([1.0])), TypeError, "prompt_ids must have an integer dtype, got torch.float32"),
        (dict(prompt_ids=torch.tensor([True])), TypeError, "prompt_ids must have an integer dtype, got torch.bool"),
        (dict(prompt_ids=torch.tensor([[1, 2], [3, 4]])), ValueError, r"prompt_ids must be 1-D \(or \[1, L\]\), got shape \[2, 2\]"),
        (dict(prompt_ids=torch.tensor([2**64 - 1], dtype=torch.uint64)), ValueError,
         r"prompt_ids\[0\] = 18446744073709551615 is outside"),
        (dict(prompt_ids=np.array([1.5])), TypeError, "prompt_ids must have an integer dtype, got torch.float64"),
        (dict(on_tokens=3), TypeError, "on_tokens must be callable or None, got int"),
    ]
    for kwargs, exc, msg in cases:
        kwargs = dict(dict(prompt_ids=[1], max_new=3), **kwargs)
        with pytest.raises(exc, match=msg):
            dec.generate(**kwargs)
        on_tokens = kwargs.pop("on_tokens", None)
        if on_tokens is None:  # stream checks its arguments at the call, not at the first next()
            with pytest.raises(exc, match=msg):
                dec.stream(**kwargs)
    # Integers of other kinds: NumPy scalars and arrays, 0-d integer tensors, any integer dtype.
    want = target.greedy_decode([3, 4], 5)
    for prompt in ([3, 4], (3, 4), torch.tensor([[3, 4]]), torch.tensor([3, 4], dtype=torch.uint8),
                   torch.tensor([3, 4], dtype=torch.uint64), np.array([3, 4]), np.array([[3, 4]], dtype=np.uint32),
                   [np.int64(3), torch.tensor(4)], range(3, 5)):
        for max_new in (5, np.int32(5), torch.tensor(5)):
            assert dec.generate(prompt, max_new=max_new) == want, (prompt, max_new)
    free = target.greedy_decode([3, 4], 30)
    stop = free[10]
    cut = truncate_at(free, 2, {stop})
    for eos in (stop, np.int64(stop), torch.tensor(stop), torch.tensor([stop]), np.array([stop, 9999]),
                [np.int16(stop)], (torch.tensor(stop, dtype=torch.uint64),), {stop}):
        assert dec.generate([3, 4], max_new=30, eos_token_id=eos) == cut, eos
    assert dec.generate([3, 4], max_new=30, eos_token_id=[]) == free


def test_kernel_package_imports_only_stdlib_torch_and_itself(sv):
    """At import, the package needs the standard library and torch only. The transformers
    adapter (transformers.py, _hf_cache.py) imports transformers inside its functions, when
    called, and the llama.cpp adapter (llama_cpp.py) llama_cpp likewise."""
    import ast
    import sys
    from pathlib import Path

    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    # What an adapter may import inside its functions (the transformers adapter's cache
    # handling is in _hf_cache.py).
    lazy_allowed = {"transformers.py": "transformers", "_hf_cache.py": "transformers", "llama_cpp.py": "llama_cpp"}
    for path in Path(sv.__file__).parent.rglob("*.py"):  # spec_verify.testing too
        tree = ast.parse(path.read_text())
        lazy = {id(node) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                for node in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                ok = name.split(".")[0] in allowed or (
                    id(node) in lazy and name.split(".")[0] == lazy_allowed.get(path.name))
                assert ok, f"{path.name} imports {name}"


def test_package_imports_only_torch(sv):
    """Importing the kernel (and reaching sv.transformers) does not import transformers, in a
    fresh interpreter. (Here, not in test_torch_integration.py: the emulated aarch64 run
    cannot start a subprocess.)"""
    import subprocess
    import sys

    code = ("import sys, os; from kernels import get_kernel; "
            "sv = get_kernel('phanerozoic/spec-verify', version=1, trust_remote_code=True); "
            "assert sv.transformers.speculative_decoder and sv.llama_cpp.speculative_decoder; "
            "print(sorted(m for m in ('transformers', 'numpy', 'llama_cpp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "transformers" not in out.stdout and "llama_cpp" not in out.stdout, out.stdout


# The verifier hook ------------------------------------------------------------------------

def test_default_verifiers_are_the_ops(sv):
    # verifier=None means verify_greedy (greedy=True) or accept (greedy=False): passing
    # them explicitly gives the same output from the same seeds.
    target, draft = pair(noise=1.0)
    greedy_op = lambda rows, probs, tokens, generator: sv.verify_greedy(rows, tokens)  # noqa: E731
    for greedy, explicit in ((True, greedy_op), (False, sv.accept)):
        outs = []
        for verifier in (None, explicit):
            g = torch.Generator().manual_seed(8)
            step = draft.greedy_draft if greedy else draft.sampling_draft(g)
            dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=greedy, generator=g,
                                        verifier=verifier, schedule="constant")
            outs.append(dec.generate([2], max_new=60))
        assert outs[0] == outs[1]
    assert sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, greedy=False, schedule="constant").verifier is sv.accept


def test_verifier_receives_the_round(sv):
    target, draft = pair(vocab=12, noise=1.0)
    g = torch.Generator().manual_seed(1)
    for greedy in (True, False):
        calls = []

        def verifier(rows, probs, tokens, generator):
            calls.append((rows, probs, tokens, generator))
            return 0, int(rows[0].argmax())

        step = draft.greedy_draft if greedy else draft.sampling_draft(g)
        dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=greedy, generator=g, verifier=verifier, schedule="constant")
        dec.generate([5], max_new=4)  # rounds of k = 3, 2, 1, 0
        assert [c[2].tolist() != [] for c in calls] == [True, True, True, False]
        for rows, probs, tokens, generator in calls:
            k = tokens.numel()
            assert rows.shape == (k + 1, 12) and tokens.dtype == torch.int64 and generator is g
            if greedy:
                assert probs is None
            else:
                assert probs.dtype == torch.float32 and probs.shape == (k, 12)  # [0, V] when k = 0


def test_verifier_output_is_checked(sv):
    target, draft = pair(vocab=10)
    cases = [
        (lambda r, p, t, g: (t.numel() + 1, 0), ValueError,
         r"the verifier returned \(n_accepted, next_token\) = \(4, 0\), expected 0 <= n_accepted <= j = 3 \(the "
         r"proposed tokens\)"),
        (lambda r, p, t, g: (-1, 0), ValueError, r"= \(-1, 0\)"),
        (lambda r, p, t, g: (0, 10), ValueError, r"0 <= next_token < V = 10"),
        (lambda r, p, t, g: 0, TypeError, "the verifier must return a pair"),
        (lambda r, p, t, g: (0, 1, 2), TypeError, "the verifier must return a pair"),
        (lambda r, p, t, g: (0.0, 1), TypeError, "the verifier's n_accepted must be an int, got float"),
        (lambda r, p, t, g: (0, True), TypeError, "the verifier's next_token must be an int, got bool"),
    ]
    for verifier, exc, msg in cases:
        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=verifier, schedule="constant")
        with pytest.raises(exc, match=msg):
            dec.generate([1], max_new=10)
    # Pairs of other integer kinds are fine.
    for result in ([0, 3], (np.int64(0), torch.tensor(3))):
        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=lambda r, p, t, g: result, schedule="constant")
        assert dec.generate([1], max_new=4) == [1, 3, 3, 3, 3]


def test_op_errors_are_attributed_by_the_argument_named_first(sv):
    # Only the argument right after the "spec_verify.<op>: " prefix counts: a message that
    # goes on to mention another argument is still attributed to the first. Messages of
    # any other form propagate unchanged.
    target, draft = pair(vocab=10)
    messages = [
        ("spec_verify.accept: target_probs[2] has zero mass (see draft_tokens and draft_probs)",
         "the verification op rejected target_step's rows: spec_verify.accept: target_probs[2]"),
        ("spec_verify.verify_greedy: draft_tokens must have shape [K] = [3] (K = target_probs.shape[0] - 1)",
         "the verification op rejected draft_step's tokens: "),
        ("spec_verify.accept: draft_probs[0, 1] = -1 is negative",
         "the verification op rejected draft_step's probs: "),
        ("spec_verify.accept_with_uniforms: uniforms[0] = 2 is outside [0, 1)", None),
        ("my verifier dislikes draft_tokens and target_probs", None),
        ("target_probs: spec_verify.accept: draft_probs", None),
    ]
    for message, wrapped in messages:
        def verifier(rows, probs, tokens, generator, message=message):
            raise ValueError(message)

        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=verifier, schedule="constant")
        with pytest.raises(ValueError) as info:
            dec.generate([1], max_new=10)
        if wrapped is None:
            assert str(info.value) == message
        else:
            assert str(info.value).startswith("SpeculativeDecoder: " + wrapped), str(info.value)
            assert str(info.value).endswith(message)


# Drafts of 0..k tokens, one-hot drafts, the verification method ---------------------------

def scripted(draft, counts, greedy=True, generator=None, with_probs=True):
    """A draft_step that proposes counts[r % len(counts)] tokens in round r (capped at the k
    it is given), from draft's greedy or sampled tokens; probs [j, V] or None."""
    inner = draft.greedy_draft if greedy else draft.sampling_draft(generator)
    calls = []

    def step(prefix, k):
        j = min(k, counts[len(calls) % len(counts)])
        calls.append((len(prefix), k, j))
        tokens, probs = inner(prefix, j)
        return tokens, (probs if with_probs else None)
    return step, calls


def test_rounds_with_0_to_k_proposals(sv):
    target, draft = pair(noise=1.0)
    seen = []

    def target_step(prefix, proposed):
        seen.append(proposed.shape[0])
        assert proposed.dtype == torch.int64 and proposed.is_contiguous()
        return target.target_rows(prefix, proposed)

    counts = [0, 3, 1, 4, 2, 0, 0, 4]
    for use_probs in (False, True):
        step, calls = scripted(draft, counts, with_probs=use_probs)
        seen.clear()
        dec = sv.SpeculativeDecoder(step, target_step, k=4, schedule="constant")
        assert dec.generate([2, 7], max_new=80) == target.greedy_decode([2, 7], 80)
        s = dec.stats
        # target_step got exactly the proposal ([0] included); the last round may have had
        # k = 0 (one token left), when draft_step is not called
        assert seen[:len(calls)] == [j for _, _, j in calls] and seen[len(calls):] in ([], [0])
        assert s.draft_calls == len(calls) and s.rounds == len(seen) == s.target_calls
        assert s.proposed_length_counts == [seen.count(j) for j in range(5)]
        assert s.proposed == sum(seen) and s.new_tokens == 80 == s.accepted + s.rounds
        assert s.proposed_length_counts[0] >= 3 and s.full_acceptance_counts[0] == s.proposed_length_counts[0]
        assert s.decided_by_position[0] == s.rounds - s.proposed_length_counts[0]  # j = 0 decides nothing
    # A draft that never proposes: plain greedy decoding, one target call per token.
    dec = sv.SpeculativeDecoder(lambda prefix, k: ([], None), target.target_rows, k=4, schedule="constant")
    assert dec.generate([2, 7], max_new=30) == target.greedy_decode([2, 7], 30)
    assert dec.stats.rounds == 30 == dec.stats.draft_calls + 1 and dec.stats.proposed == 0  # the last round: k = 0
    assert dec.stats.tokens_per_target_call == 1.0 and dec.stats.acceptance_rate != dec.stats.acceptance_rate


def test_sampled_rounds_with_0_to_k_proposals_and_probs(sv):
    # Sampling with probs: every round is verified by accept on its j proposals; the output
    # tokens have positive target probability, the statistics count what was proposed.
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(9)
    step, calls = scripted(draft, [2, 0, 4, 1, 3], greedy=False, generator=g)
    dec = sv.SpeculativeDecoder(step, target.target_rows, k=4, greedy=False, generator=g, schedule="constant")
    out = dec.generate([0], max_new=300)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0
    s = dec.stats
    assert s.proposed == sum(j for _, _, j in calls) and s.draft_calls == len(calls)
    assert s.proposed_length_counts == [sum(1 for *_, j in calls if j == m) for m in range(5)]
    assert 0 < s.acceptance_rate < 1


def test_verifier_gets_one_hot_drafts_as_none(sv):
    # Sampling with a draft that returns no probs: the verifier gets None (one-hot drafts),
    # or an empty [0, V] when nothing was proposed.
    target, draft = pair(vocab=12)
    got = []

    def verifier(rows, probs, tokens, generator):
        got.append((tokens.numel(), probs if probs is None else tuple(probs.shape)))
        return 0, int(rows[0].argmax())

    step, calls = scripted(draft, [2, 0, 3], with_probs=False)
    dec = sv.SpeculativeDecoder(step, target.target_rows, k=3, greedy=False, verifier=verifier, schedule="constant")
    dec.generate([1], max_new=6)
    assert got == [(2, None), (0, (0, 12)), (3, None), (2, None), (0, (0, 12)), (0, (0, 12))]


def test_method_argument(sv):
    target, draft = pair()
    d, t = draft.greedy_draft, target.target_rows
    assert sv.SpeculativeDecoder(d, t, schedule="constant").method == "token"
    assert sv.SpeculativeDecoder(d, t, greedy=False, schedule="constant").verifier is sv.accept
    dec = sv.SpeculativeDecoder(d, t, method="block", schedule="constant")
    assert dec.method == "block" and repr(dec) == "SpeculativeDecoder(k=4, greedy=True, method='block', schedule='constant')"
    # Greedy verification has one rule: "block" gives plain greedy decoding too.
    assert dec.generate([3], max_new=30) == target.greedy_decode([3], 30)
    cases = [
        (dict(method="tree"), ValueError, "SpeculativeDecoder: method must be \"token\" or \"block\", got 'tree'"),
        (dict(method=None), TypeError, "SpeculativeDecoder: method must be a str, \"token\" or \"block\", got NoneType"),
        (dict(method="block", verifier=sv.accept), ValueError,
         "method='block' chooses the default verifier's rule; a custom verifier decides its own"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            sv.SpeculativeDecoder(d, t, **kwargs, schedule="constant")
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    with pytest.raises(ValueError, match="SpeculativeDecoder.from_logits: method must be"):
        sv.SpeculativeDecoder.from_logits(draft.logits, logits, method="Block", schedule="constant")
    dec = sv.SpeculativeDecoder.from_logits(draft.logits, logits, 3, temperature=0, method="block", schedule="constant")
    assert "method='block'" in repr(dec) and dec.generate([3], max_new=20) == target.greedy_decode([3], 20)


def test_from_logits_with_a_token_drafter(sv):
    target, draft = pair(vocab=20)
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    step, calls = scripted(draft, [3, 0, 1])
    dec = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0, draft_step=step, schedule="constant")
    assert dec.generate([4], max_new=40) == target.greedy_decode([4], 40)
    assert dec.stats.proposed == sum(j for *_, j in calls) and dec.stats.proposed_length_counts[0] > 0
    what = "SpeculativeDecoder.from_logits"
    with pytest.raises(ValueError, match=f"{what}: pass draft_logits_step or draft_step, not both"):
        sv.SpeculativeDecoder.from_logits(draft.logits, logits, draft_step=step, schedule="constant")
    with pytest.raises(TypeError, match=f"{what}: draft_step must be callable, got int"):
        sv.SpeculativeDecoder.from_logits(None, logits, draft_step=3, schedule="constant")
    with pytest.raises(TypeError, match=f"{what}: draft_logits_step must be callable, got NoneType"):
        sv.SpeculativeDecoder.from_logits(None, logits, schedule="constant")
    # Draft logits with the wrong number of rows are reported as draft_step's logits.
    bad = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0.5,
                                            draft_step=lambda p, k: ([1, 2], torch.zeros(3, 20)), schedule="constant")
    with pytest.raises(ValueError, match=r"draft_step returned logits of shape \[3, 20\], expected \[j, V\] with j = 2"):
        bad.generate([1], max_new=5)


# These need the one-hot and block kernels (accept(target, None, ...), method="block").

@pytest.mark.parametrize("method", ["token", "block"])
def test_sampling_with_one_hot_drafts_and_variable_proposals(sv, method):
    target, draft = pair(vocab=30, noise=1.0)
    g = torch.Generator().manual_seed(10)
    for with_probs in (False, True):
        step, calls = scripted(draft, [2, 0, 4, 1, 3], greedy=False, generator=g, with_probs=with_probs)
        dec = sv.SpeculativeDecoder(step, target.target_rows, k=4, greedy=False, generator=g, method=method, schedule="constant")
        out = dec.generate([0], max_new=200)
        for i in range(1, len(out)):
            assert target.probs(out[:i])[out[i]] > 0
        s = dec.stats
        assert s.proposed == sum(j for *_, j in calls) and 0 < s.acceptance_rate < 1
    # from_logits with a token drafter: accept_logits(target, None, tokens) on warped rows.
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    step, calls = scripted(draft, [3, 0, 1], with_probs=False)
    dec = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0.8, top_p=0.9, generator=g,
                                            draft_step=step, method=method, schedule="constant")
    out = dec.generate([4], max_new=100)
    assert len(out) == 101 and 0 < dec.stats.acceptance_rate < 1


def test_numpy_bools_where_bools_go(sv):
    """greedy=np.bool_(True) is greedy=True (NumPy bools come from configs read with
    NumPy); a NumPy integer is not a bool, and the message names its NumPy type."""
    np = pytest.importorskip("numpy")
    target, draft = pair()
    prompt = [1, 2]
    want = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=True, schedule="constant").generate(prompt, max_new=20)
    got = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=np.bool_(True), schedule="constant").generate(
        prompt, max_new=20)
    assert got == want
    with pytest.raises(TypeError, match=r"^greedy must be a bool, got numpy\.int64$"):
        sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=np.int64(1), schedule="constant")
