"""accept() against the exact law of speculative sampling (tests/law.py).

Each family fixes position-dependent rows p_i (target, K+1 of them) and q_i (draft, K),
draws every round's draft tokens t_i ~ q_i independently, runs accept, and counts the
pair (N, emitted token) over the (K+1)*V cells.
Null hypothesis: the counts are multinomial with the analytic law P(N = n, x).
Sample size: ROUNDS rounds per family. Threshold: the G-test's p-value must exceed 1e-8 (with
10 families per path, a correct kernel fails a run with probability < 1e-7; seeds are
fixed, so a run is repeatable). Power: the same counts are also tested against the law of
a plausible bug (the correction drawn from p instead of the residual), which must be
rejected at p < 1e-8.
"""
from __future__ import annotations

import math

import pytest
import torch

from law import accepted_length_law, acceptance_rates, expected_accepted, g_test, joint_law, normalise

ROUNDS = 60_000
P_MIN = 1e-8
K, V = 3, 8


def smooth(g, rows, scale=1.0):
    return torch.softmax(torch.randn(rows, V, generator=g) * scale, -1).float()


def family(name: str):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    p, q = smooth(g, K + 1), smooth(g, K)
    if name == "smooth":
        pass
    elif name == "spiky":
        p, q = smooth(g, K + 1, 4.0), smooth(g, K, 4.0)
    elif name == "disjoint":  # alpha = 0 at every position
        p[:, V // 2:] = 0
        q[:, : V // 2] = 0
    elif name == "equal":  # alpha = 1
        q = p[:K].clone()
    elif name == "one_hot_draft":
        q = torch.zeros(K, V)
        q[torch.arange(K), torch.tensor([1, 5, 2])] = 1.0
    elif name == "zeros_in_target":  # p = 0 where the draft still proposes
        p[:, ::3] = 0
    elif name == "scaled_tiny_target_huge_draft":
        p, q = p * 1e-20, q * 1e20
    elif name == "scaled_huge_target_tiny_draft":
        p, q = p * 1e20, q * 1e-20
    elif name == "mixed_positions":  # a different shape of pair at each position
        q[0] = p[0]
        p[1, :4], q[1, 4:] = 0, 0
        q[2] = 0
        q[2, 7] = 3.0
    elif name == "unnormalised":
        p = p * torch.rand(K + 1, 1, generator=g) * 50
        q = q * torch.rand(K, 1, generator=g) * 0.01
    else:
        raise KeyError(name)
    return p.contiguous(), q.contiguous()


FAMILIES = ["smooth", "spiky", "disjoint", "equal", "one_hot_draft", "zeros_in_target",
            "scaled_tiny_target_huge_draft", "scaled_huge_target_tiny_draft", "mixed_positions",
            "unnormalised"]


def run_rounds(sv, p, q, rounds, seed):
    """Counts of (N, x) over `rounds` rounds, draft tokens drawn from normalised q."""
    k, vocab = q.shape[0], p.shape[1]
    g = torch.Generator().manual_seed(seed)
    qn = normalise(q)
    tokens = torch.stack([torch.multinomial(qn[i], rounds, replacement=True, generator=g)
                          for i in range(k)], 1) if k else torch.empty(rounds, 0, dtype=torch.int64)
    cells = []
    for row in tokens:
        n, x = sv.accept(p, q, row, g)
        cells.append(n * vocab + x)
    return torch.bincount(torch.tensor(cells), minlength=(k + 1) * vocab).reshape(k + 1, vocab)


def wrong_law_correction_from_p(p, q):
    """The law if rejection drew the correction from p_i instead of the residual."""
    k = q.shape[0]
    pn = normalise(p)
    alpha = acceptance_rates(p, q)
    reach = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alpha, 0)])
    law = torch.empty_like(pn)
    law[:k] = (reach[:k] * (1 - alpha))[:, None] * pn[:k]
    law[k] = reach[k] * pn[k]
    return law


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_joint_law_of_accepted_length_and_token(sv, isa, name):
    p, q = family(name)
    counts = run_rounds(sv, p, q, ROUNDS, seed=1234)
    law = joint_law(p, q)
    g, df, pval = g_test(counts, law)
    assert pval > P_MIN, f"{name}: G = {g:.1f}, df = {df}, p = {pval:.3g}\ncounts:\n{counts}\nexpected:\n{law * ROUNDS}"
    wrong = wrong_law_correction_from_p(p, q)
    if (wrong - law).abs().max() > 0.02:  # the bug changes this family's law visibly
        assert g_test(counts, wrong)[2] < P_MIN, f"{name}: the test cannot tell the residual from p"


def test_zero_draft_tokens(sv, isa):
    """K = 0: one uniform, the token drawn from p_0."""
    g = torch.Generator().manual_seed(7)
    p = smooth(g, 1)
    q = torch.empty(0, V)
    counts = run_rounds(sv, p, q, 20_000, seed=99)
    assert g_test(counts, joint_law(p, q))[2] > P_MIN


@pytest.mark.slow
def test_mean_accepted_length_at_full_vocabulary(sv, isa):
    """E[N] at V = 32000, K = 4 with an imperfect draft (the target's logits plus noise).

    Null hypothesis: the sample mean of N over 6000 rounds comes from the analytic law
    (mean and variance computed exactly). Threshold: |z| < 5.5 (two-sided p < 4e-8).
    """
    k, vocab, rounds = 4, 32000, 6000
    g = torch.Generator().manual_seed(2024)
    logits = torch.randn(k + 1, vocab, generator=g) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=g) * 1.5, -1)
    alpha = acceptance_rates(p, q)
    law_n = accepted_length_law(alpha)
    n = torch.arange(k + 1, dtype=torch.float64)
    mean = expected_accepted(alpha)
    assert abs(float((law_n * n).sum()) - mean) < 1e-12
    sd = math.sqrt(float((law_n * n * n).sum()) - mean**2)
    counts = run_rounds(sv, p, q, rounds, seed=5)
    got = float((counts.sum(1).double() * n).sum()) / rounds
    z = (got - mean) / (sd / math.sqrt(rounds))
    assert abs(z) < 5.5, f"mean {got:.4f} vs analytic {mean:.4f} (z = {z:.2f})"
    # The accepted-length histogram as a whole, too.
    assert g_test(counts.sum(1), law_n)[2] > P_MIN


def test_first_token_has_target_law(sv, isa):
    """Residual identity: whatever the draft, the first token of a round (accepted draft token
    or correction) has law p_0. Null hypothesis: first tokens ~ p_0; 40000 rounds; p > 1e-8."""
    g = torch.Generator().manual_seed(11)
    p, q = smooth(g, K + 1, 2.0), smooth(g, K, 2.0)
    rounds = 40_000
    qn = normalise(q)
    tokens = torch.stack([torch.multinomial(qn[i], rounds, replacement=True, generator=g) for i in range(K)], 1)
    first = []
    for row in tokens:
        n, x = sv.accept(p, q, row, g)
        first.append(int(row[0]) if n > 0 else x)
    counts = torch.bincount(torch.tensor(first), minlength=V)
    assert g_test(counts, normalise(p)[0])[2] > P_MIN
