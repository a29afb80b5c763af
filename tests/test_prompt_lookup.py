"""PromptLookup: its proposals, its cost, and the decoder's output with it.

- Proposals on constructed prefixes against the rule as stated (longest suffix n-gram first,
  then its most recent earlier occurrence, the continuation copied as it runs), and against
  a brute-force statement of the same rule on random prefixes grown round by round.
- Cost: the index work of each call (PromptLookup.work, n-gram keys formed) is bounded by the
  tokens appended since the previous call, whatever the length of the prefix.
- Greedy output with PromptLookup as draft_step is plain greedy decoding of the target.
- Sampling (one-hot drafts): whole generated sequences have the target's autoregressive law.
  Models: ToyLM targets (tests/toy_models.py) over 3 tokens, whose rows depend on the last
  two tokens and the position, so the law of every sequence of MAX_NEW = 4 new tokens is
  exact (sequence_law). Null hypothesis: the GENERATIONS = 12000 sequences from one prompt
  are a multinomial sample from that law. Test: tests/law.py's G-test (cells expecting fewer
  than 5 pooled). Threshold: p < P_MIN = 1e-8 fails; with six cases a correct decoder fails
  a run with probability < 1e-7. Seeds are fixed, so a run is repeatable. Power: the same
  test must reject (p < P_MIN) a one-hot verifier that draws the correction from p_i with
  t_i left in.
"""
from __future__ import annotations

import random

import pytest
import torch

from law import g_test
from toy_models import ToyLM, sequence_law


def brute_force(prefix, k, max_ngram, min_ngram):
    """The rule, stated directly: O(length * max_ngram) per call."""
    length = len(prefix)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = prefix[length - n:]
        # earlier occurrences end at e < length; the most recent ends last
        ends = [e for e in range(n, length) if prefix[e - n:e] == suffix]
        if ends:
            seq = list(prefix)
            for j in range(k):
                seq.append(seq[ends[-1] + j])
            return seq[length:]
    return []


# Proposals on constructed prefixes ------------------------------------------------------------

@pytest.mark.parametrize("prefix,k,sizes,want", [
    # a repeat: the 2-gram (5, 6) occurred before, followed by 7 8 5
    ([5, 6, 7, 8, 5, 6], 3, (3, 1), [7, 8, 5]),
    # no suffix of any size occurred before: no proposal
    ([1, 2, 3, 4], 3, (3, 1), []),
    ([7], 2, (3, 1), []),
    ([], 2, (3, 1), []),
    # the longest suffix wins over a more recent shorter one: (1, 2) -> 3 at the start,
    # while the 1-gram (2) last occurred before 9
    ([1, 2, 3, 2, 9, 1, 2], 2, (3, 1), [3, 2]),
    # among occurrences of the same n-gram, the most recent: (4, 5) -> 6 first, -> 8 later
    ([4, 5, 6, 4, 5, 8, 4, 5], 1, (3, 1), [8]),
    ([4, 5, 6, 4, 5, 8, 4, 5], 3, (3, 1), [8, 4, 5]),
    # the match at the very end: the 1-gram (7) last occurred just before the suffix
    ([1, 7, 7], 3, (3, 1), [7, 7, 7]),
    # overlapping occurrences: (3, 3, 3) ends one token before the end and overlaps the suffix
    ([3, 3, 3, 3], 2, (3, 1), [3, 3]),
    # a periodic run: the copy runs into the suffix and on into the proposal itself
    ([1, 2, 3, 1, 2, 3, 1, 2], 5, (3, 1), [3, 1, 2, 3, 1]),
    ([1, 2, 3, 1, 2, 3, 1, 2], 8, (3, 1), [3, 1, 2, 3, 1, 2, 3, 1]),
    ([0, 4, 9, 4], 5, (3, 1), [9, 4, 9, 4, 9]),
    # min_ngram: a 1-gram match alone does not count
    ([1, 2, 3, 2], 2, (3, 2), []),
    ([1, 2, 3, 2], 2, (3, 1), [3, 2]),
    # max_ngram: with max 1 the most recent 1-gram wins, a longer match elsewhere is not seen
    ([1, 2, 3, 2, 9, 1, 2], 2, (1, 1), [9, 1]),
    ([1, 2, 3, 2, 9, 1, 2], 2, (2, 2), [3, 2]),
    # the 4-gram (9, 1, 2, 3) is seen only with max_ngram >= 4; below, the 3-gram's most
    # recent occurrence wins
    ([9, 1, 2, 3, 5, 0, 1, 2, 3, 6, 9, 1, 2, 3], 1, (3, 1), [6]),
    ([9, 1, 2, 3, 5, 0, 1, 2, 3, 6, 9, 1, 2, 3], 1, (4, 1), [5]),
    # k = 0: nothing
    ([5, 6, 7, 5, 6], 0, (3, 1), []),
])
def test_proposals_on_constructed_prefixes(sv, prefix, k, sizes, want):
    max_ngram, min_ngram = sizes
    assert brute_force(prefix, k, max_ngram, min_ngram) == want  # the cases state the rule
    lookup = sv.PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)
    assert lookup(prefix, k) == (want, None)
    # Grown token by token (the index built incrementally), the last call proposes the same.
    lookup = sv.PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)
    for i in range(len(prefix)):
        lookup(prefix[:i], 1)
    assert lookup(prefix, k) == (want, None)


@pytest.mark.parametrize("vocab,max_ngram,min_ngram", [(2, 3, 1), (3, 3, 1), (4, 4, 2), (6, 2, 2), (20, 5, 1)])
def test_proposals_equal_the_rule_on_random_prefixes(sv, vocab, max_ngram, min_ngram):
    rng = random.Random(vocab * 100 + max_ngram)
    lookup = sv.PromptLookup(max_ngram, min_ngram)
    for generation in range(6):
        seq = [rng.randrange(vocab) for _ in range(rng.randrange(0, 12))]
        proposed_any = False
        while len(seq) < 150:
            k = rng.randrange(0, 7)
            got, probs = lookup(list(seq), k)
            assert probs is None and got == brute_force(seq, k, max_ngram, min_ngram), (seq, k)
            proposed_any |= bool(got)
            # the next prefix, as a decoder would make it: some of the proposal, then a token
            n = rng.randrange(0, len(got) + 1)
            seq += got[:n] + [rng.randrange(vocab)]
        assert proposed_any


def test_a_new_prompt_resets_the_index(sv):
    rng = random.Random(3)
    lookup = sv.PromptLookup()
    first = [rng.randrange(5) for _ in range(300)]
    for i in range(0, 300, 3):
        lookup(first[:i], 4)
    prompts = [
        [1, 2, 3, 1, 2],         # shorter than what was indexed
        first[:40],              # a prefix of the previous sequence: the same proposals
        [9] + first[1:] + [1],   # longer, differing at the first token
        first[:200] + [7] + first[201:] + [2, 2],  # longer, differing just before the end
    ]
    prompts[3][-4] = 8
    for prompt in prompts:
        lookup(first, 4)  # the index holds `first` again
        want = brute_force(prompt, 4, 3, 1)
        assert lookup(prompt, 4) == (want, None), prompt
        # and the calls after it follow the new prompt
        grown = prompt + want[:1] + [0]
        assert lookup(grown, 4) == (brute_force(grown, 4, 3, 1), None)
    # reset() forgets explicitly; a fresh start gives a fresh instance's answers
    lookup.reset()
    assert lookup(prompts[0], 3) == sv.PromptLookup()(prompts[0], 3)


def test_prefix_forms_and_argument_checks(sv):
    import numpy as np

    lookup = sv.PromptLookup()
    want = ([7, 8, 5], None)
    for prefix in ([5, 6, 7, 8, 5, 6], (5, 6, 7, 8, 5, 6), [np.int64(5), 6, 7, torch.tensor(8), 5, 6]):
        assert sv.PromptLookup()(prefix, 3) == want
    assert lookup([5, 6, 7, 8, 5, 6], np.int32(3)) == want
    assert repr(sv.PromptLookup(4, 2)) == "PromptLookup(max_ngram=4, min_ngram=2)"
    cases = [
        (lambda: sv.PromptLookup(max_ngram=0), ValueError, r"PromptLookup: max_ngram must be an int in \[1, inf\], got 0"),
        (lambda: sv.PromptLookup(max_ngram=2, min_ngram=3), ValueError,
         r"PromptLookup: min_ngram must be an int in \[1, 2\], got 3"),
        (lambda: sv.PromptLookup(min_ngram=0), ValueError, r"min_ngram must be an int in \[1, 3\], got 0"),
        (lambda: sv.PromptLookup(max_ngram=2.0), TypeError, "PromptLookup: max_ngram must be an int, got float"),
        (lambda: sv.PromptLookup(min_ngram=True), TypeError, "PromptLookup: min_ngram must be an int, got bool"),
        (lambda: lookup([1, 2], -1), ValueError, "PromptLookup: k must be an int >= 0, got -1"),
        (lambda: lookup([1, 2], 2.0), TypeError, "PromptLookup: k must be an int, got float"),
        (lambda: lookup([1, 2.5], 2), TypeError, r"PromptLookup: prefix\[1\] must be an int, got float"),
        (lambda: lookup((1, True), 2), TypeError, r"PromptLookup: prefix\[1\] must be an int, got bool"),
    ]
    for call, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            call()


# Cost ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_ngram,min_ngram", [(3, 1), (5, 2)])
def test_work_per_call_does_not_grow_with_the_prefix(sv, max_ngram, min_ngram):
    # Each call forms at most (sizes) keys per token appended since the previous call, plus
    # (sizes) lookups: a bound without the prefix length in it. A drafter that rescans or
    # re-indexes the prefix breaks it within a few calls.
    sizes = max_ngram - min_ngram + 1
    rng = random.Random(7)
    lookup = sv.PromptLookup(max_ngram, min_ngram)
    text = [rng.randrange(50) for _ in range(400)]
    seq = list(text[:50])
    before, last_length, per_call = lookup.work, 0, []
    while len(seq) < 40_000:
        got, _ = lookup(seq, 6)
        spent, appended = lookup.work - before, len(seq) - last_length
        assert spent <= sizes * (appended + 1), (len(seq), appended, spent)
        per_call.append((len(seq), spent))
        before, last_length = lookup.work, len(seq)
        # a copying text: the accepted part of the proposal, then the text's next token
        n = rng.randrange(0, len(got) + 1)
        seq += got[:n] + [text[len(seq) % len(text)]]
    # the first call indexed the prompt, once; every later call appended at most k + 1 = 7
    assert per_call[0][1] <= sizes * (50 + 1) and max(s for _, s in per_call[1:]) <= sizes * 8
    # Work per token appended, early and late: the same scale (the bound above is the proof;
    # this says the run exercised it: the late part copies more and pays no more per token).
    def per_token(lo, hi):
        calls = [(length, spent) for length, spent in per_call[1:] if lo <= length < hi]
        return sum(spent for _, spent in calls) / (calls[-1][0] - calls[0][0])
    early, late = per_token(0, 2_000), per_token(35_000, 40_000)
    assert late < 1.5 * early, (early, late)


# Through the decoder --------------------------------------------------------------------------

def repetitive_target(vocab=12, seed=1):
    # A sharp ToyLM: its greedy and sampled text falls into loops, which prompt lookup copies.
    return ToyLM(vocab, seed=seed, sharpness=3.0)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_output_equals_plain_greedy_decoding(sv, k):
    calls, empty = [], 0
    for seed, vocab in ((1, 12), (2, 50)):
        target = repetitive_target(vocab, seed)
        for max_ngram, min_ngram in ((3, 1), (2, 2)):
            lookup = sv.PromptLookup(max_ngram, min_ngram)
            for use_logits in (False, True):
                dec = sv.SpeculativeDecoder(lookup, lambda p, t: target.target_rows(p, t, use_logits), k=k, schedule="constant")
                for prompt in ([3], [1, 2, 3, 1, 2], [4, 4, 4, 0]):
                    assert dec.generate(prompt, max_new=60) == target.greedy_decode(prompt, 60)
                    s = dec.stats
                    assert s.proposed == sum(j * c for j, c in enumerate(s.proposed_length_counts))
                    assert s.new_tokens == 60 == s.accepted + s.rounds
                    calls.append(s.target_calls)
                    empty += s.proposed_length_counts[0]
    # The drafter did its job on this looping text (fewer target calls than tokens), and some
    # rounds found nothing to propose (plain target steps).
    assert empty > 0 and sum(calls) < {1: 0.8, 4: 0.6, 8: 0.6}[k] * 60 * len(calls), sum(calls) / len(calls)


def test_from_logits_greedy_with_prompt_lookup(sv):
    target = repetitive_target()
    dec = sv.SpeculativeDecoder.from_logits(None, lambda p, t: target.target_rows(p, t, logits=True), 4,
                                            temperature=0, draft_step=sv.PromptLookup(), schedule="constant")
    assert repr(dec) == "SpeculativeDecoder.from_logits(k=4, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, schedule='constant')"
    for prompt in ([3], [1, 2, 3, 1, 2]):
        assert dec.generate(prompt, max_new=50) == target.greedy_decode(prompt, 50)
    assert dec.stats.accepted > 0


# The law of sampled sequences with one-hot drafts ---------------------------------------------

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [2, 1, 0, 2, 1, 2, 2, 0]


def reference_one_hot(target_rows, draft_probs, tokens, generator):
    """One-hot verification in float64 (the rule of accept(target, None, tokens)): accept t_i
    with probability p_i(t_i); on rejection draw from p_i without t_i; all accepted: p_K."""
    assert draft_probs is None or draft_probs.shape[0] == 0
    p = target_rows.double()
    p = p / p.sum(-1, keepdim=True)
    u = torch.rand(tokens.numel() + 1, dtype=torch.float64, generator=generator)
    for i, t in enumerate(tokens.tolist()):
        if not u[i] < p[i, t]:
            r = p[i].clone()
            r[t] = 0
            return i, int(torch.multinomial(r, 1, generator=generator))
    return tokens.numel(), int(torch.multinomial(p[-1], 1, generator=generator))


def wrong_one_hot(target_rows, draft_probs, tokens, generator):
    """The acceptance test right, but the correction drawn from p_i with t_i left in."""
    p = target_rows.double()
    p = p / p.sum(-1, keepdim=True)
    u = torch.rand(tokens.numel() + 1, dtype=torch.float64, generator=generator)
    for i, t in enumerate(tokens.tolist()):
        if not u[i] < p[i, t]:
            return i, int(torch.multinomial(p[i], 1, generator=generator))
    return tokens.numel(), int(torch.multinomial(p[-1], 1, generator=generator))


def lookup_counts(sv, seed, k, verifier=None, logits=None, method="token"):
    target = ToyLM(3, seed=seed, sharpness=1.0)
    law = sequence_law(target, PROMPT, MAX_NEW)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    lookup = sv.PromptLookup(max_ngram=3, min_ngram=2)  # min 2: some rounds find no match
    if logits is None:
        dec = sv.SpeculativeDecoder(lookup, target.target_rows, k=k, greedy=False, generator=g, verifier=verifier,
                                    method=method, schedule="constant")
    else:  # from logits at temperature 1, no cuts: the warped rows are the target's rows
        dec = sv.SpeculativeDecoder.from_logits(None, lambda p, t: target.target_rows(p, t, logits=True), k,
                                                temperature=1.0, generator=g, draft_step=lookup, method=method, schedule="constant")
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = proposed = empty = 0
    for _ in range(GENERATIONS):
        out = dec.generate(PROMPT, max_new=MAX_NEW)
        counts[cells[tuple(out[len(PROMPT):])]] += 1  # KeyError: an impossible sequence
        accepted += dec.stats.accepted
        proposed += dec.stats.proposed
        empty += dec.stats.proposed_length_counts[0]
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    return counts, expected, accepted / max(proposed, 1), empty


@pytest.mark.slow
@pytest.mark.parametrize("seed,k,verifier,method", [(45, 3, "reference", "token"), (48, 3, "kernel", "token"),
                                                    (52, 1, "kernel", "token"), (53, 6, "logits", "token"),
                                                    (48, 3, "kernel", "block"), (53, 6, "logits", "block")])
def test_sampled_sequences_follow_the_target_law(sv, seed, k, verifier, method):
    # "reference": the decoder's plumbing with a float64 one-hot verifier (the hook); "kernel":
    # the default verifier, accept(target, None, tokens, method=method); "logits": from_logits
    # with draft_step, accept_logits(target, None, tokens, method=method) on the warped rows.
    counts, law, rate, empty = lookup_counts(sv, seed, k, verifier=reference_one_hot if verifier == "reference"
                                             else None, logits=True if verifier == "logits" else None,
                                             method=method)
    g, df, p = g_test(counts, law)
    assert 0.2 < rate < 0.95 and empty > 0, f"acceptance rate {rate:.2f}, {empty} rounds without a proposal"
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"


@pytest.mark.slow
def test_a_wrong_one_hot_correction_fails_the_same_test(sv):
    counts, law, _, _ = lookup_counts(sv, 48, 3, verifier=wrong_one_hot)
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a wrong one-hot verifier passed: G = {g:.1f}, df = {df}, p = {p:.3g}"
