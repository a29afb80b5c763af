"""The analytic law of speculative sampling, and the goodness-of-fit test the suite uses.

With draft token t_i drawn from q_i independently and p_i fixed (rows normalised),
alpha_i = sum_v min(p_i(v), q_i(v)) and the pair (N, emitted token x) has the law
    P(N = n, x) = (prod_{i<n} alpha_i) * max(0, p_n(x) - q_n(x))   for n < K,
    P(N = K, x) = (prod_{i<K} alpha_i) * p_K(x).
"""
from __future__ import annotations

import math

import torch


def normalise(rows: torch.Tensor) -> torch.Tensor:
    rows = rows.double()
    return rows / rows.sum(-1, keepdim=True)


def acceptance_rates(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """alpha_i for i < K."""
    k = q.shape[0]
    return torch.minimum(normalise(p[:k]), normalise(q)).sum(-1)


def reach_probabilities(alpha: torch.Tensor) -> torch.Tensor:
    """P(N >= n) = prod_{i<n} alpha_i for n = 0..K."""
    return torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(alpha.double(), 0)])


def joint_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[K+1, V] float64: P(N = n, x)."""
    k = q.shape[0]
    pn = normalise(p)
    reach = reach_probabilities(acceptance_rates(p, q))
    law = torch.empty_like(pn)
    if k:
        law[:k] = reach[:k, None] * (pn[:k] - normalise(q)).clamp(min=0)
    law[k] = reach[k] * pn[k]
    return law


def accepted_length_law(alpha: torch.Tensor) -> torch.Tensor:
    """P(N = n) for n = 0..K."""
    reach = reach_probabilities(alpha)
    law = reach.clone()
    law[:-1] = reach[:-1] * (1 - alpha.double())
    return law


def expected_accepted(alpha: torch.Tensor) -> float:
    """E[N] = sum_{n=1..K} prod_{i<n} alpha_i."""
    return float(reach_probabilities(alpha)[1:].sum())


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square(df)."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(x / 2, dtype=torch.float64)))


def g_test(observed: torch.Tensor, law: torch.Tensor, min_expected: float = 5.0):
    """G-test of counts against a law over the same cells.

    Null hypothesis: the counts are a multinomial sample of size observed.sum() from `law`.
    Cells the law gives probability exactly 0 must hold no count (an impossible outcome is
    a failure outright: p-value 0). Cells expecting fewer than `min_expected` counts are
    pooled into one, so the chi-square approximation holds. Returns (G, df, p-value).
    """
    observed = observed.double().flatten()
    law = law.double().flatten()
    law = law / law.sum()
    if bool((observed[law == 0] > 0).any()):
        return math.inf, 0, 0.0
    expected = law * observed.sum()
    big = expected >= min_expected
    obs = observed[big]
    exp = expected[big]
    small_exp = float(expected[~big].sum())
    if small_exp > 0:
        obs = torch.cat([obs, observed[~big].sum().reshape(1)])
        exp = torch.cat([exp, torch.tensor([small_exp], dtype=torch.float64)])
    nz = obs > 0
    g = 2.0 * float((obs[nz] * torch.log(obs[nz] / exp[nz])).sum())
    df = int(obs.numel()) - 1
    return g, df, chi2_sf(g, df) if df > 0 else 1.0
