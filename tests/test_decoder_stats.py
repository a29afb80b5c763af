"""SpeculativeDecoder's statistics (DecodeStats) over toy models (tests/toy_models.py):
consistent with the callbacks' calls, equal to a recount of every round by the definitions,
memory linear in k, and per-position acceptance rates that estimate the analytic ones."""
from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from toy_models import pair, recording


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
