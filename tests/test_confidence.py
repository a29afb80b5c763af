"""The schedule with a drafter's per-token estimates (`confidences`): the cut of each proposal
on a measured cost curve, the calibration of the estimates, and the decoder's use of both.

Costs are set by feeding the schedule measurements (or, through the decoder, by the
simulated clock of tests/test_schedule.py), so every choice is deterministic.
"""
from __future__ import annotations

import random

import pytest
import torch

from test_schedule import SimClock, timed_target
from toy_models import ToyLM


def measured(sv, slope: float, top: int = 17, prompt_per_token: float = None, **kw):
    """An AdaptiveSchedule that has measured c(n) = 0.01 * (1 + slope * (n - 1)) for n = 1..top
    (the prompt at `prompt_per_token` seconds a token: twice a position's cost by default,
    so no recheck finds a cheaper rate)."""
    s = sv.AdaptiveSchedule(**kw)
    s.k_max = top - 1
    per = 0.02 * slope if prompt_per_token is None else prompt_per_token
    s.choose(top - 1)  # the prompt's round
    s.observe_target(1, 10 * max(per, 1e-6), 10)
    s.choose(top - 1)
    s.observe_target(1, 0.01, 10)  # c(1)
    for n in range(2, top + 1):
        s.observe_target(n, 0.01 * (1 + slope * (n - 1)), 10)
    return s


def best_by_enumeration(estimates, slope, margin=0.03):
    """The n whose rate (1 + sum of the products of the first estimates) / (1 + slope * n)
    is highest, 0 unless above 1 + margin: the rule, written out by enumeration."""
    rates = []
    for n in range(len(estimates) + 1):
        total, reach = 1.0, 1.0
        for e in estimates[:n]:
            reach *= e
            total += reach
        rates.append(total / (1 + slope * n))
    best = max(range(len(rates)), key=lambda n: (rates[n], -n))
    return best if rates[best] > 1 + margin else 0


def test_nothing_is_proposed_where_nothing_pays(sv):
    s = measured(sv, slope=1.0)  # a position costs a whole step
    for estimates in ([1.0] * 16, [0.99] * 8, [0.6, 0.5]):
        assert s.cut(estimates) == 0


def test_everything_is_proposed_where_everything_pays(sv):
    s = measured(sv, slope=0.01)  # nearly free positions
    for estimates in ([0.9] * 16, [1.0] * 5, [0.7] * 8):
        assert s.cut(estimates) == len(estimates)


@pytest.mark.parametrize("slope", [0.1, 0.25, 0.5])
def test_the_cut_is_where_the_expected_gain_stops_paying(sv, slope):
    s = measured(sv, slope=slope)
    assert s.cut([1.0, 1.0, 1.0, 0.1, 0.1]) == {0.1: 3, 0.25: 3, 0.5: 3}[slope]
    rng = random.Random(int(slope * 100))
    for _ in range(200):
        estimates = [round(rng.random() ** 0.3, 3) for _ in range(rng.randrange(1, 17))]
        assert s.cut(estimates) == best_by_enumeration(estimates, slope), estimates


def feed(s, estimate, accept_probability, n, rng, start=0):
    """n proposals of one token with `estimate`, accepted with `accept_probability`."""
    seq = [0] * start
    for _ in range(n):
        s.drafted(len(seq), [1], [estimate])
        seq.append(1 if rng.random() < accept_probability else 2)
        s.observe_emitted(seq)


# Null hypothesis: the calibration's observed acceptance in a bucket equals the true one, q.
# It is an EWMA of Bernoulli(q) outcomes with weight 0.02 per observation: standard deviation
# sqrt(q (1 - q) * 0.02 / 1.98) <= 0.05. A false alarm needs a deviation of 0.3 = 6 standard
# deviations (< 1e-8 per bucket by the Gaussian tail; 1e-6 per run by Hoeffding's bound on the
# weighted sum is not needed at these margins). Power: an overconfident drafter (q = e / 2)
# is told apart from a calibrated one in every bucket where e / 2 differs from e by > 0.3.
@pytest.mark.parametrize("bias", [1.0, 0.5], ids=["calibrated", "overconfident"])
def test_calibration_converges_to_the_observed_acceptance(sv, bias):
    s = sv.AdaptiveSchedule()
    rng = random.Random(7)
    for e in (0.15, 0.55, 0.95):
        feed(s, e, bias * e, 2000, rng)
    table = {round(row["mean_estimate"], 2): row for row in s.calibration()}
    assert sorted(table) == [0.15, 0.55, 0.95]
    for e, row in table.items():
        assert abs(row["observed"] - bias * e) < 0.3, row
        assert abs(s.calibrated(e) - row["observed"]) < 0.05  # the prior weighs two observations
    # The estimates of the overconfident drafter are told apart at 0.95 (and 0.55: 0.275 off).
    assert (abs(table[0.95]["observed"] - 0.95) < 0.3) == (bias == 1.0)


def test_calibration_lowers_the_cut_of_an_overconfident_drafter(sv):
    s = measured(sv, slope=0.1)
    assert s.cut([0.95] * 8) == 8
    feed(s, 0.95, 0.2, 300, random.Random(3))
    assert s.cut([0.95] * 8) <= 1


class ConfidentDrafter:
    """Proposes the target's greedy continuation for its first `right` tokens (estimate
    0.95), then wrong tokens (estimate 0.05)."""

    shadowable = True

    def __init__(self, model: ToyLM, clock: SimClock, right: int):
        self.model, self.clock, self.right = model, clock, right
        self.confidences = []

    def __call__(self, prefix, k):
        self.clock.spend(1e-6)
        seq, out = list(prefix), []
        for i in range(k):
            best = int(self.model.logits(seq).argmax())
            out.append(best if i < self.right else (best + 1) % self.model.vocab)
            seq.append(out[-1])
        self.confidences = [0.95 if i < self.right else 0.05 for i in range(k)]
        return torch.tensor(out, dtype=torch.int64), None


@pytest.mark.parametrize("slope,right,want", [(0.1, 3, 3), (0.1, 6, 6), (1.0, 6, 0), (0.02, 8, 8)])
def test_the_decoder_verifies_the_positions_that_pay(sv, slope, right, want):
    target = ToyLM(16, seed=3, sharpness=3.0)
    clock = SimClock()
    step = timed_target(target, clock, lambda n: 0.001 * (1 + slope * (n - 1)), prefill=0.001 * max(slope, 0.02))
    dec = sv.SpeculativeDecoder(ConfidentDrafter(target, clock, right), step, k=8,
                                schedule=sv.AdaptiveSchedule(clock=clock))
    prompt = [1, 2, 3]
    for _ in range(3):
        step.reset()
        out = dec.generate(prompt, max_new=120)
        assert out == target.greedy_decode(prompt, 120)
    stats = dec.stats
    drafted = stats.chosen_length_counts
    # Rounds of the last generation: every verified proposal is cut at `want` (a few rounds
    # near max_new have a smaller cap; refresh rounds are plain steps).
    assert drafted[want] >= 0.8 * sum(drafted[1:] if want else drafted), (drafted, stats.schedule_reasons)
    if want:
        assert stats.accepted_length_counts[want] >= 0.8 * sum(stats.accepted_length_counts[1:])
    assert stats.calibration and stats.calibration[-1]["observed"] > 0.9  # the 0.95 bucket: always right
    low = [row for row in stats.calibration if row["estimate"][0] == 0.0]
    assert not low or low[0]["observed"] < 0.1  # the wrong tokens: never


def test_bad_confidences_are_refused(sv):
    target = ToyLM(8, seed=1)

    class Bad:
        shadowable = True

        def __init__(self, confidences):
            self.confidences = confidences

        def __call__(self, prefix, k):
            return [0] * k, None

    for conf, msg in (([0.5], "one estimate per proposed token"), ("x", "one estimate per proposed token"),
                      ([2.0] * 4, r"numbers in \[0, 1\]")):
        dec = sv.SpeculativeDecoder(Bad(conf), target.target_rows, k=4, schedule="adaptive")
        with pytest.raises(ValueError, match=msg):
            dec.generate([1, 2], max_new=10)


def test_prompt_lookup_estimates_follow_its_record(sv):
    lookup = sv.PromptLookup(max_ngram=2)
    assert lookup([1, 2, 3, 1, 2], 3) == ([3, 1, 2], None) and lookup.confidences == [0.5] * 3  # no record yet
    periodic = [1, 2, 3, 4, 5] * 40
    for end in range(10, 150):
        lookup(periodic[:end], 4)
    assert len(lookup.confidences) == 4 and min(lookup.confidences) > 0.9
    # A bigram always followed by a fresh token: its copies fail at the first position.
    rng = random.Random(1)
    text = []
    for _ in range(60):
        text += [7, 8, rng.randrange(100, 10_000)]
    lookup.reset()
    first = []
    for end in range(5, len(text) + 1):
        tokens, _ = lookup(text[:end], 4)
        if text[end - 2:end] == [7, 8]:
            first.append(lookup.confidences[0])
    # The record decays by 0.9 a proposal (a fresh token that repeats an earlier one is copied).
    assert first[0] > 0.5 and sorted(first)[len(first) // 2] < 0.2 and min(first) < 0.1, first


def test_costs_and_calibration_carry_across_generations(sv):
    target = ToyLM(16, seed=3, sharpness=3.0)
    clock = SimClock()
    step = timed_target(target, clock, lambda n: 0.001 * (1 + 0.1 * (n - 1)), prefill=0.0001)
    dec = sv.SpeculativeDecoder(ConfidentDrafter(target, clock, 3), step, k=8,
                                schedule=sv.AdaptiveSchedule(clock=clock))
    dec.generate([1, 2, 3], max_new=60)
    first = dec.stats
    step.reset()
    dec.generate([1, 2, 3], max_new=60)
    second = dec.stats
    # The second generation starts where the first left: no measuring round, every drafted
    # round cut at 3 (but the last, whose cap max_new lowers), the calibration's counts grown.
    assert first.schedule_reasons.get("measure") == 1 and "measure" not in second.schedule_reasons
    assert sum(second.chosen_length_counts[1:]) - 1 <= second.chosen_length_counts[3]
    assert second.calibration[-1]["weight"] > first.calibration[-1]["weight"]


def test_the_schedule_estimates_what_a_position_costs(sv):
    assert sv.AdaptiveSchedule().position_cost(16) is None  # nothing measured
    for slope in (0.02, 0.3, 1.0):
        assert measured(sv, slope).position_cost(16) == pytest.approx(slope, rel=1e-9)


@pytest.mark.parametrize("slope", [0.02, 0.5])
def test_the_decoder_tells_the_drafter_what_a_position_costs(sv, slope):
    class Recording(sv.SuffixDrafter):
        def __call__(self, prefix, k):
            seen.append(self.position_cost)
            return super().__call__(prefix, k)

    seen = []
    target = ToyLM(16, seed=3, sharpness=3.0)
    clock = SimClock()
    step = timed_target(target, clock, lambda n: 0.001 * (1 + slope * (n - 1)), prefill=0.001 * slope)
    dec = sv.SpeculativeDecoder(Recording(cache=False), step, k=16, schedule=sv.AdaptiveSchedule(clock=clock))
    prompt = [1, 2, 3, 4, 5, 6, 1, 2, 3]
    assert dec.generate(prompt, max_new=80) == target.greedy_decode(prompt, 80)
    # The first draft call comes before c(1) is measured; then the schedule's prior (a
    # position at half a step) until a call of several positions is measured; then the slope.
    assert seen[0] is None and len(seen) > 10
    first = next(i for i, c in enumerate(seen) if i and c == pytest.approx(slope, rel=1e-6))
    assert all(c == pytest.approx(max(0.5, slope)) for c in seen[1:first]), seen
    assert all(c == pytest.approx(slope, rel=1e-6) for c in seen[first:]), seen
