"""The multi-request benchmark's oracle (benchmarks/e2e_oracle.py): its dynamic programming
against brute force over every schedule of round lengths, its interpolation of the cost
curve, and its replay of a drafter that learns from earlier outputs."""
import functools
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import e2e_oracle as oracle  # noqa: E402

CURVES = [
    {1: 1.0, 2: 1.0, 3: 1.05, 5: 1.1, 9: 1.2, 17: 1.5},   # flat: transformers bfloat16
    {1: 1.0, 2: 2.1, 3: 2.9, 5: 4.8, 9: 9.6, 17: 11.6},   # steep: llama.cpp on one core
]


def brute(matches, lengths, curve, draft):
    # Every sequence of choices, by recursion over the position reached.
    total = len(matches)

    @functools.lru_cache(maxsize=None)
    def best(i):
        if i >= total:
            return 0.0
        options = [oracle.cost_at(curve, 1) + best(i + 1)]
        for k in range(1, lengths[i] + 1):
            options.append(oracle.cost_at(curve, k + 1) + draft + best(i + min(k, matches[i]) + 1))
        return min(options)
    return best(0)


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("seed", range(20))
def test_dp_equals_brute_force(curve, seed):
    rng = random.Random(seed)
    total = rng.randrange(1, 30)
    lengths = [rng.randrange(0, 17) for _ in range(total)]
    matches = [rng.randrange(0, n + 1) for n in lengths]
    draft = rng.choice([0.0, 0.01, 0.3])
    assert oracle.oracle_cost(matches, lengths, curve, draft) == pytest.approx(brute(matches, lengths, curve, draft))


def test_nothing_proposed_costs_plain():
    assert oracle.oracle_cost([0] * 7, [0] * 7, CURVES[1], 0.0) == pytest.approx(7.0)


def test_a_perfect_draft_on_a_flat_curve():
    # 8 tokens, the drafter right about all of them from position 0: one round of 8
    # positions (7 proposed + 1) costs c(8), interpolated between c(5) and c(9).
    matches = [7 - i for i in range(8)]
    assert oracle.oracle_cost(matches, [7] * 8, CURVES[0], 0.0) == pytest.approx(1.1 + 0.1 * 3 / 4)


def test_cost_at_interpolates_and_extends():
    curve = {1: 1.0, 3: 3.0, 5: 4.0}
    assert oracle.cost_at(curve, 2) == pytest.approx(2.0)
    assert oracle.cost_at(curve, 4) == pytest.approx(3.5)
    assert oracle.cost_at(curve, 7) == pytest.approx(5.0)  # along the last segment


class _FakeLookup:
    """A stand-in for sv.PromptLookup: the continuation of the last token's last occurrence."""

    def __call__(self, prefix, k):
        last = prefix[-1]
        for i in range(len(prefix) - 2, -1, -1):
            if prefix[i] == last:
                return prefix[i + 1:i + 1 + k], None
        return [], None

    def reset(self):
        pass


class _FakeSv:
    PromptLookup = _FakeLookup


def test_history_helps_only_after_the_first_request():
    # Outputs that repeat each other but not their prompts: the current request's lookup
    # finds nothing, the lookup over earlier outputs drafts every request after the first.
    prompts = [[100 + r] for r in range(4)]
    outputs = [[1, 2, 3, 4, 5, 6, 7, 8] for _ in range(4)]
    current = oracle.replay(oracle.CurrentLookup(_FakeSv()), prompts, outputs, CURVES[0])
    history = oracle.replay(oracle.HistoryLookup(_FakeSv()), prompts, outputs, CURVES[0])
    assert current["per_request"] == pytest.approx([1.0] * 4)
    assert history["per_request"][0] == pytest.approx(1.0)
    assert min(history["per_request"][1:]) > 2.0
