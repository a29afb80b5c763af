"""Sampled sequences through tree rounds proposed by SuffixTreeDrafter keep the target's law,
with a global cache that earlier requests filled (and that every generation extends,
dropping its oldest requests), whole trees or trees cut by the schedule.

The pattern of tests/test_tree_sequence_law.py: ToyLM targets over 3 or 4 tokens, every
sequence of MAX_NEW = 4 new tokens counted over GENERATIONS = 12000 generations from one
prompt (the law of each computed exactly: tests/toy_models.py `sequence_law`).
Null hypothesis: the sequences are a multinomial sample from the target's autoregressive law
(with a stop token: sequences end at the first stop token or after MAX_NEW tokens).
Test: tests/law.py's G-test; a p-value below P_MIN = 1e-8 fails (with the 3 cases here a
correct decoder fails a run with probability < 1e-7). Seeds are fixed (the adaptive cases
run on a simulated clock, so a run is repeatable).
Power: the same test rejects (p < P_MIN) a tree verifier that forgets the residual (rejected
siblings' tokens kept in the row: tests/test_tree_sequence_law.py `forgetting_verifier`)
under the same drafter and cache.
"""
from __future__ import annotations

import pytest
import torch

from law import g_test
from test_schedule import SimClock
from test_suffix_law import filled_cache
from test_tree_sequence_law import forgetting_verifier
from toy_models import ToyLM, sequence_law, target_tree_rows

pytestmark = pytest.mark.slow  # 12000 generations per case: several seconds each

GENERATIONS = 12_000
MAX_NEW = 4
P_MIN = 1e-8
PROMPT = [1, 0, 2, 1, 0]


def timed_rows(model, clock, logits):
    """target_tree_step spending 1 ms * (1 + 0.05 (n - 1)) for n positions (a flat curve on
    which branches may pay), the prompt 0.05 ms a token."""
    rows = target_tree_rows(model, logits=logits)
    seen = {"fresh": True}

    def step(prefix, tokens, parents):
        n = tokens.numel() + 1
        clock.spend(len(prefix) * 0.00005 if seen["fresh"] else 0.001 * (1 + 0.05 * (n - 1)))
        seen["fresh"] = False
        return rows(prefix, tokens, parents)
    step.reset = lambda: seen.update(fresh=True)
    return step


def law_counts(sv, vocab, seed, stop=None, adaptive=True, logits=False, verifier=None):
    target = ToyLM(vocab, seed=seed, sharpness=1.0)
    law = sequence_law(target, PROMPT, MAX_NEW, stop)
    cells = {seq: i for i, seq in enumerate(sorted(law))}
    g = torch.Generator().manual_seed(seed)
    cache = filled_cache(sv, vocab, seed, requests=64, length=12, max_requests=64)
    clock = SimClock()
    schedule = sv.TreeSchedule(clock=clock) if adaptive else "constant"
    drafter = sv.SuffixTreeDrafter(cache, max_depth=4, min_token_prob=0.05, max_spec_factor=2.0, max_nodes=6,
                                   schedule=schedule)
    step = timed_rows(target, clock, logits)
    if logits:  # temperature 1: the warped logits rows are the probability rows
        dec = sv.TreeDecoder.from_logits(drafter, step, temperature=1.0, generator=g, verifier=verifier)
    else:
        dec = sv.TreeDecoder(drafter, step, greedy=False, generator=g, verifier=verifier)
    counts = torch.zeros(len(cells), dtype=torch.float64)
    accepted = rounds = 0
    for _ in range(GENERATIONS):
        step.reset()
        out = dec.generate(PROMPT, max_new=MAX_NEW, eos_token_id=stop)
        counts[cells[tuple(out[len(PROMPT):])]] += 1  # KeyError: an impossible sequence
        accepted += dec.stats.accepted
        rounds += dec.stats.rounds
    expected = torch.tensor([law[seq] for seq in sorted(law)], dtype=torch.float64)
    return counts, expected, accepted / rounds, drafter


CASES = [  # (vocab, seed, stop tokens, adaptive, logits)
    (3, 31, None, False, False),   # whole trees
    (4, 32, {3}, True, False),     # trees cut by the schedule, a stop token
    (3, 33, None, True, True),     # TreeDecoder.from_logits, temperature 1
]


@pytest.mark.parametrize("vocab,seed,stop,adaptive,logits", CASES,
                         ids=["whole", "cut-stop", "cut-logits"])
def test_sequences_follow_the_target_law_with_suffix_trees(sv, vocab, seed, stop, adaptive, logits):
    counts, law, accepted, drafter = law_counts(sv, vocab, seed, stop, adaptive, logits)
    g, df, p = g_test(counts, law)
    assert p > P_MIN, f"G = {g:.1f}, df = {df}, p = {p:.3g}"
    # (adaptive: each generation's first round is the prompt's, and some verify nothing)
    assert accepted > (0.1 if adaptive else 0.3), f"{accepted:.2f} nodes accepted per round"
    assert drafter.rounds["tree"] > 1000, drafter.rounds
    if adaptive:  # the schedule chose every kind of round
        assert drafter.rounds["none"] > 1000 and drafter.rounds["chain"] > 100, drafter.rounds
    assert len(drafter.cache) == 64


def test_a_verifier_forgetting_the_residual_fails_the_same_test(sv):
    vocab, seed, stop, adaptive, logits = CASES[0]
    counts, law, _, _ = law_counts(sv, vocab, seed, stop, adaptive, logits, verifier=forgetting_verifier)
    g, df, p = g_test(counts, law)
    assert p < P_MIN, f"a verifier without residual updates passed: G = {g:.1f}, df = {df}, p = {p:.3g}"
