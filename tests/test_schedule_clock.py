"""AdaptiveSchedule with a clock that does not advance, goes back, or returns no number.

A step measured as zero or negative seconds is not a measurement: the schedule leaves it out
of its costs (nothing divides by a zero c(1)) and counts it in costs()["unmeasured_steps"];
the output is unchanged (greedy: plain greedy decoding of the target). A reading that is not
a real number is a TypeError, NaN or infinite a ValueError, each naming the clock.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from toy_models import ToyLM

V = 40
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def models():
    target = ToyLM(V, seed=11)
    return target, ToyLM(V, seed=12, base=target, noise=0.4)


def _backwards():
    counter = itertools.count(10 ** 12, -1000)
    return lambda: next(counter)


STALLED = {"zero": lambda: 0, "constant float": lambda: 5.0, "backwards": None, "numpy": "numpy"}


@pytest.mark.parametrize("clock", list(STALLED))
def test_a_clock_that_does_not_advance_keeps_greedy_output(sv, models, clock):
    target, draft = models
    if clock == "backwards":
        reading = _backwards()
    elif clock == "numpy":
        np = pytest.importorskip("numpy")
        reading = lambda: np.int64(7)  # noqa: E731
    else:
        reading = STALLED[clock]
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=4,
                                schedule=sv.AdaptiveSchedule(clock=reading))
    for _ in range(2):  # costs are kept across generations
        out = dec.generate(PROMPT, max_new=40)
        assert out == target.greedy_decode(PROMPT, 40)
        assert dec.stats.costs["unmeasured_steps"] > 0
        assert dec.stats.costs["target_seconds_by_positions"] == {}
        assert sum(dec.stats.proposed_length_counts) == sum(dec.stats.schedule_reasons.values())


def test_a_stalled_clock_in_a_sampled_decoder(sv, models):
    target, draft = models
    g = torch.Generator().manual_seed(0)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=3, greedy=False, generator=g,
                                schedule=sv.AdaptiveSchedule(clock=lambda: 0))
    out = dec.generate(PROMPT, max_new=30)
    assert len(out) == len(PROMPT) + 30 and all(0 <= t < V for t in out)


def test_a_clock_that_stalls_after_measuring(sv, models):
    # Measured steps first, then a clock stuck at one reading: the costs measured stay finite.
    target, draft = models
    ticks = itertools.chain(range(0, 10 ** 9, 10 ** 6), itertools.repeat(10 ** 9))
    schedule = sv.AdaptiveSchedule(clock=lambda: next(ticks))
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=4, schedule=schedule)
    for _ in range(3):
        assert dec.generate(PROMPT, max_new=60) == target.greedy_decode(PROMPT, 60)
    costs = schedule.costs()
    assert all(math.isfinite(c) and c > 0 for c in costs["target_seconds_by_positions"].values())


@pytest.mark.parametrize("reading, error, words", [
    (None, TypeError, "got NoneType"),
    ("12", TypeError, "got str"),
    (True, TypeError, "got bool"),
    (float("nan"), ValueError, "nan"),
    (float("inf"), ValueError, "inf"),
])
def test_a_clock_that_returns_no_number_is_named(sv, models, reading, error, words):
    target, draft = models
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=4,
                                schedule=sv.AdaptiveSchedule(clock=lambda: reading))
    with pytest.raises(error, match=r"AdaptiveSchedule: clock\(\) must return") as info:
        dec.generate(PROMPT, max_new=8)
    assert words in str(info.value)
