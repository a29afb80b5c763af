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


# One-hot drafts (DESIGN.md, "One-hot drafts") ------------------------------------------------
#
# A drafter without probabilities proposes t_i; the verifier accepts it with probability
# p_i(t_i) and on rejection draws from p_i without t_i. With t_i drawn independently from
# r_i (rows [K, V]; a one-hot r_i fixes the token), beta_i = sum_t r_i(t) p_i(t) and
#     P(N = n, x) = (prod_{i<n} beta_i) * p_n(x) * (1 - r_n(x))   for n < K,
#     P(N = K, x) = (prod_{i<K} beta_i) * p_K(x).

def one_hot_rates(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """beta_i for i < K."""
    k = r.shape[0]
    return (normalise(p[:k]) * normalise(r)).sum(-1)


def one_hot_joint_law(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """[K+1, V] float64: P(N = n, x) for one-hot drafts with tokens t_i ~ r_i."""
    k = r.shape[0]
    pn = normalise(p)
    reach = reach_probabilities(one_hot_rates(p, r))
    law = torch.empty_like(pn)
    if k:
        law[:k] = reach[:k, None] * pn[:k] * (1 - normalise(r))
    law[k] = reach[k] * pn[k]
    return law


def one_hot_law_residual_with_token(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The law of a plausible bug: on rejection the correction is drawn from p_n, t_n included."""
    k = r.shape[0]
    pn = normalise(p)
    beta = one_hot_rates(p, r)
    reach = reach_probabilities(beta)
    law = torch.empty_like(pn)
    if k:
        law[:k] = (reach[:k] * (1 - beta))[:, None] * pn[:k]
    law[k] = reach[k] * pn[k]
    return law


# Block verification (DESIGN.md, "Block verification"; Sun et al., ICLR 2025) ---------------
#
# For fixed draft tokens the accepted length tau is decided by independent uniforms against
# h_1..h_K: P(tau = n) = h_n * prod_{m>n} (1 - h_m), P(tau = 0) = prod_m (1 - h_m); the
# emitted token then comes from p_K (tau = K) or from max(0, rho_tau p_tau - q_tau). With
# draft tokens drawn from rows r, the law is the mixture over every token tuple.

def block_weights(pn: torch.Tensor, qn, tokens, wrong_h=None):
    """(rho [K+1], h [K+1] with h[0] unused) in float64 for normalised target rows pn and
    draft rows qn (None: one-hot drafts). `wrong_h(n, rho, z)` replaces h_n for n < K (for
    power tests)."""
    k = len(tokens)
    rho = [1.0]
    for n in range(1, k + 1):
        t = tokens[n - 1]
        pt = float(pn[n - 1, t])
        qt = 1.0 if qn is None else float(qn[n - 1, t])
        if rho[-1] == 0.0 or pt == 0.0:
            rho.append(0.0)
        elif qt == 0.0:
            rho.append(1.0)
        else:
            rho.append(min(1.0, rho[-1] * pt / qt))
    h = [0.0] * (k + 1)
    for n in range(1, k):
        q_row = torch.zeros_like(pn[n]) if qn is None else qn[n]
        if qn is None:
            q_row[tokens[n]] = 1.0
        z = float((rho[n] * pn[n] - q_row).clamp(min=0).sum())
        d = z + 1.0 - rho[n]
        h[n] = wrong_h(n, rho[n], z) if wrong_h else (z / d if d > 0 else 1.0)
    h[k] = rho[k]
    return rho, h


def block_law_fixed(pn: torch.Tensor, qn, tokens, wrong_h=None) -> torch.Tensor:
    """[K+1, V] float64: P(tau = n, x) for fixed draft tokens."""
    k = len(tokens)
    rho, h = block_weights(pn, qn, tokens, wrong_h)
    law = torch.zeros(k + 1, pn.shape[1], dtype=torch.float64)
    after = 1.0  # prod_{m>n} (1 - h_m)
    for n in range(k, -1, -1):
        p_tau = (h[n] if n > 0 else 1.0) * after
        if n == k:
            law[n] = p_tau * pn[k]
        elif p_tau > 0:
            q_row = torch.zeros_like(pn[n]) if qn is None else qn[n]
            if qn is None:
                q_row[tokens[n]] = 1.0
            res = (rho[n] * pn[n] - q_row).clamp(min=0)
            if float(res.sum()) > 0:
                law[n] = p_tau * res / res.sum()
            else:  # the kernels draw from p then (a zero residual has no law of its own)
                law[n] = p_tau * pn[n]
        if n > 0:
            after *= 1.0 - h[n]
    return law


def block_joint_law(p: torch.Tensor, q, r: torch.Tensor, wrong_h=None) -> torch.Tensor:
    """[K+1, V] float64: P(tau = n, x) with draft tokens t_i ~ r_i independently; q the draft
    rows the verifier is given (None: one-hot drafts)."""
    import itertools

    k = r.shape[0]
    pn = normalise(p)
    qn = None if q is None else normalise(q)
    rn = normalise(r)
    law = torch.zeros(k + 1, p.shape[1], dtype=torch.float64)
    support = [torch.nonzero(rn[i]).flatten().tolist() for i in range(k)]
    for tokens in itertools.product(*support):
        weight = 1.0
        for i, t in enumerate(tokens):
            weight *= float(rn[i, t])
        law += weight * block_law_fixed(pn, qn, list(tokens), wrong_h)
    return law


def mean_accepted(law: torch.Tensor) -> float:
    """E[N] of a joint law [K+1, V] of (N, x)."""
    n = torch.arange(law.shape[0], dtype=torch.float64)
    return float((law.sum(1) * n).sum())
