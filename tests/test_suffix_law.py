"""The suffix drafter through the decoder: greedy output is plain greedy decoding, and sampled
sequences keep the target's law with confidence-chosen lengths and a global cache that
earlier requests filled (and that keeps filling, and dropping its oldest requests, as the
generations run).

Sequence law (as tests/test_sequence_law.py): ToyLM targets over 3 or 4 tokens, every
sequence of MAX_NEW = 4 new tokens counted over GENERATIONS = 12000 generations from one
prompt. Null hypothesis: the sequences are a multinomial sample from the target's
autoregressive law. Test: tests/law.py's G-test; a p-value below P_MIN = 1e-8 fails (with the
cases here a correct decoder fails a run with probability < 1e-7). Seeds are fixed. Power:
the same test rejects a verifier that accepts every draft token.
"""
from __future__ import annotations

import random

import pytest
import torch

from law import g_test
from test_schedule import SimClock, timed_target
from toy_models import ToyLM, sequence_law

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [1, 0]


def filled_cache(sv, vocab, seed, requests=40, length=30, **kw):
    """A cache holding `requests` earlier outputs: random walks that repeat short phrases."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(vocab) for _ in range(rng.randrange(2, 6))] for _ in range(4)]
    cache = sv.SuffixCache(**kw)
    for _ in range(requests):
        out = []
        while len(out) < length:
            out += rng.choice(phrases)
        cache.add(out)
    return cache


@pytest.mark.parametrize("schedule", ["constant", "adaptive"])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_output_equals_plain_greedy_decoding(sv, schedule, k):
    calls = tokens = 0
    for seed, vocab in ((1, 12), (2, 50)):
        target = ToyLM(vocab, seed=seed, sharpness=3.0)  # sharp: its text loops
        cache = filled_cache(sv, vocab, seed, max_requests=8)
        drafter = sv.SuffixDrafter(cache, max_depth=6)
        for use_logits in (False, True):
            dec = sv.SpeculativeDecoder(drafter, lambda p, t: target.target_rows(p, t, use_logits), k=k,
                                        schedule=schedule)
            for prompt in ([3], [1, 2, 3, 1, 2], [4, 4, 4, 0], [3]):
                held = len(cache)
                assert dec.generate(prompt, max_new=60) == target.greedy_decode(prompt, 60)
                assert len(cache) == min(held + 1, 8)  # the request went into the cache
                calls += dec.stats.target_calls
                tokens += dec.stats.new_tokens
    if schedule == "constant":  # the drafter did its job on this looping text
        assert calls < 0.6 * tokens, calls / tokens


def test_from_logits_greedy_with_the_suffix_drafter(sv):
    target = ToyLM(12, seed=1, sharpness=3.0)
    dec = sv.SpeculativeDecoder.from_logits(None, lambda p, t: target.target_rows(p, t, logits=True), 6,
                                            temperature=0, draft_step=sv.SuffixDrafter())
    for prompt in ([3], [1, 2, 3, 1, 2], [3]):
        assert dec.generate(prompt, max_new=50) == target.greedy_decode(prompt, 50)
    assert len(dec.draft_step.cache) == 3


def law_counts(sv, vocab, k, seed, stop=None, verifier=None, adaptive=True, factor=2.0, slope=0.1):
    target = ToyLM(vocab, seed=seed, sharpness=1.0)
    law = sequence_law(target, PROMPT, MAX_NEW, stop)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    # A cache filled by earlier requests (of the target's own kind of text), which every
    # generation below extends, dropping its oldest request past 64.
    cache = filled_cache(sv, vocab, seed, requests=64, length=12, max_requests=64)
    drafter = sv.SuffixDrafter(cache, max_depth=4, min_token_prob=0.02, max_spec_factor=factor)
    if adaptive:  # costs under which the confidence cut varies from round to round
        clock = SimClock()
        target_step = timed_target(target, clock, lambda n: 0.001 * (1 + slope * (n - 1)), prefill=0.00005)
        schedule = sv.AdaptiveSchedule(clock=clock)
    else:
        target_step, schedule = target.target_rows, "constant"
    dec = sv.SpeculativeDecoder(drafter, target_step, k=k, greedy=False, generator=g, verifier=verifier,
                                schedule=schedule)
    counts = torch.zeros(len(cells), dtype=torch.float64)
    chosen = [0] * (k + 1)
    for _ in range(GENERATIONS):
        if adaptive:
            target_step.reset()
        out = dec.generate(PROMPT, max_new=MAX_NEW, eos_token_id=stop)
        counts[cells[tuple(out[len(PROMPT):])]] += 1  # KeyError: an impossible sequence
        chosen = [a + b for a, b in zip(chosen, dec.stats.chosen_length_counts)]
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    return counts, expected, chosen, dec


CASES = [  # (vocab, k, seed, stop tokens, adaptive, max_spec_factor, slope of the cost curve)
    (3, 3, 21, None, True, 2.0, 0.1),
    (4, 4, 22, {3}, True, 2.0, 0.1),
    (3, 3, 23, None, False, 2.0, 0.1),
    (4, 4, 24, None, True, None, 0.05),  # the default cap: 4 times the match on this flat curve
]


@pytest.mark.slow
@pytest.mark.parametrize("vocab,k,seed,stop,adaptive,factor,slope", CASES)
def test_sequences_follow_the_target_law_with_a_filled_cache(sv, vocab, k, seed, stop, adaptive, factor, slope):
    counts, law, chosen, dec = law_counts(sv, vocab, k, seed, stop, adaptive=adaptive, factor=factor, slope=slope)
    g, df, p = g_test(counts, law)
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"
    drafted = sum(chosen[1:])
    assert drafted > 1000, chosen  # drafts were verified
    if adaptive:  # and the confidence cut chose several lengths, 0 included
        assert chosen[0] > 1000 and sum(1 for c in chosen[1:] if c > 100) >= 2, chosen
        assert dec.stats.calibration or dec.schedule.calibration()
    assert len(dec.draft_step.cache) == 64
    if factor is None:  # the decoder told the drafter that positions are cheap
        assert dec.draft_step.position_cost < 0.1


@pytest.mark.slow
def test_a_wrong_verifier_fails_the_same_test(sv):
    def always_accept(target_probs, draft_probs, tokens, generator):
        k = tokens.numel()
        return k, int(torch.multinomial(target_probs[k], 1, generator=generator))
    vocab, k, seed, stop, adaptive, factor, slope = CASES[0]
    counts, law, _, _ = law_counts(sv, vocab, k, seed, stop, verifier=always_accept, adaptive=adaptive,
                                   factor=factor, slope=slope)
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a wrong verifier passed: G = {g:.1f}, df = {df}, p = {p:.3g}"
