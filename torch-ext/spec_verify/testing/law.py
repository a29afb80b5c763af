"""The exact law of speculative sampling in float64, and the goodness-of-fit test against it.

Everything here is computed from the rows in float64 with torch alone: no op of spec-verify.

Token-wise verification (Leviathan et al. 2023; Chen et al. 2023). Rows p_i (target, K+1)
and q_i (draft, K) are normalised here (a verifier may be given them unnormalised). The
draft token t_i is drawn from r_i independently across positions (r = q for an ordinary
draft). Position i accepts t_i with probability min(1, p_i(t_i) / q_i(t_i)) (1 where
q_i(t_i) = 0 < p_i(t_i), 0 where p_i(t_i) = 0), so with

    beta_i = sum_t r_i(t) min(1, p_i(t) / q_i(t))        (alpha_i = sum min(p_i, q_i) when r = q)

the pair (N accepted, emitted token x) has the law
    P(N = n, x) = (prod_{i<n} beta_i) * (1 - beta_n) * res_n(x)   for n < K,
    P(N = K, x) = (prod_{i<K} beta_i) * p_K(x),
res_n the normalised residual max(0, p_n - q_n) (p_n when that has no mass).

One-hot drafts (no draft rows): t_i is accepted with probability p_i(t_i) and on rejection
the token is drawn from p_i without t_i; with t_i ~ r_i and beta_i = sum_t r_i(t) p_i(t),
    P(N = n, x) = (prod_{i<n} beta_i) * p_n(x) * (1 - r_n(x))   for n < K,
    P(N = K, x) = (prod_{i<K} beta_i) * p_K(x).

Block verification (Sun et al., ICLR 2025): for fixed tokens a closed form (`block_law_fixed`),
mixed over every token tuple drawn from r (`block_joint_law`).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Optional, Sequence, Tuple

import torch

_F64 = torch.float64


def normalise(rows: torch.Tensor) -> torch.Tensor:
    """Rows in float64, each divided by its sum."""
    rows = rows.to(_F64)
    return rows / rows.sum(-1, keepdim=True)


def reach_probabilities(rates: torch.Tensor) -> torch.Tensor:
    """P(N >= n) = prod_{i<n} rate_i for n = 0..K."""
    return torch.cat([torch.ones(1, dtype=_F64), torch.cumprod(rates.to(_F64), 0)])


def acceptance_rates(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """alpha_i = sum_v min(p_i(v), q_i(v)) for i < K (tokens drawn from q)."""
    k = q.shape[0]
    return torch.minimum(normalise(p[:k]), normalise(q)).sum(-1)


def acceptance_probabilities(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[K, V]: min(1, p_i(t) / q_i(t)) per token t, with 1 where q = 0 < p and 0 where p = 0."""
    k = q.shape[0]
    pn, qn = normalise(p[:k]), normalise(q)
    ratio = torch.where(qn > 0, pn / qn.clamp(min=1e-300), torch.ones_like(pn))
    return torch.where(pn > 0, ratio.clamp(max=1.0), torch.zeros_like(pn))


def residual_rows(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[K, V]: the normalised residual max(0, p_i - q_i), p_i where it has no mass."""
    k = q.shape[0]
    pn = normalise(p[:k])
    res = (pn - normalise(q)).clamp(min=0)
    mass = res.sum(-1, keepdim=True)
    return torch.where(mass > 0, res / mass.clamp(min=1e-300), pn)


def joint_law(p: torch.Tensor, q: torch.Tensor, r: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[K+1, V] float64: P(N = n, x) for token-wise verification, tokens t_i ~ r_i (r = q if None)."""
    k = q.shape[0]
    pn = normalise(p)
    rn = normalise(q if r is None else r)
    beta = (rn * acceptance_probabilities(p, q)).sum(-1) if k else torch.empty(0, dtype=_F64)
    reach = reach_probabilities(beta)
    law = torch.empty_like(pn)
    if k:
        law[:k] = (reach[:k] * (1 - beta))[:, None] * residual_rows(p, q)
    law[k] = reach[k] * pn[k]
    return law


def one_hot_rates(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """beta_i = sum_t r_i(t) p_i(t) for i < K (one-hot drafts, t_i ~ r_i)."""
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


def accepted_length_law(rates: torch.Tensor) -> torch.Tensor:
    """P(N = n) for n = 0..K from the per-position acceptance rates."""
    reach = reach_probabilities(rates)
    law = reach.clone()
    law[:-1] = reach[:-1] * (1 - rates.to(_F64))
    return law


def expected_accepted(rates: torch.Tensor) -> float:
    """E[N] = sum_{n=1..K} prod_{i<n} rate_i."""
    return float(reach_probabilities(rates)[1:].sum())


def mean_accepted(law: torch.Tensor) -> float:
    """E[N] of a joint law [K+1, V] of (N, x)."""
    n = torch.arange(law.shape[0], dtype=_F64)
    return float((law.sum(1) * n).sum())


# Block verification ---------------------------------------------------------------------------

def block_weights(pn: torch.Tensor, qn: Optional[torch.Tensor], tokens: Sequence[int],
                  wrong_h: Optional[Callable[[int, float, float], float]] = None):
    """(rho [K+1], h [K+1] with h[0] unused) in float64 for normalised target rows pn and draft
    rows qn (None: one-hot drafts). `wrong_h(n, rho, z)` replaces h_n for n < K (power tests)."""
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
        z = float((rho[n] * pn[n] - _draft_row(pn, qn, tokens, n)).clamp(min=0).sum())
        d = z + 1.0 - rho[n]
        h[n] = wrong_h(n, rho[n], z) if wrong_h else (z / d if d > 0 else 1.0)
    h[k] = rho[k]
    return rho, h


def _draft_row(pn, qn, tokens, n):
    if qn is not None:
        return qn[n]
    row = torch.zeros_like(pn[n])
    row[tokens[n]] = 1.0
    return row


def block_law_fixed(pn: torch.Tensor, qn: Optional[torch.Tensor], tokens: Sequence[int],
                    wrong_h=None) -> torch.Tensor:
    """[K+1, V] float64: P(tau = n, x) of block verification for fixed draft tokens."""
    k = len(tokens)
    rho, h = block_weights(pn, qn, tokens, wrong_h)
    law = torch.zeros(k + 1, pn.shape[1], dtype=_F64)
    after = 1.0  # prod_{m>n} (1 - h_m)
    for n in range(k, -1, -1):
        p_tau = (h[n] if n > 0 else 1.0) * after
        if n == k:
            law[n] = p_tau * pn[k]
        elif p_tau > 0:
            res = (rho[n] * pn[n] - _draft_row(pn, qn, tokens, n)).clamp(min=0)
            # A zero residual has no law of its own: the verifier draws from p then.
            law[n] = p_tau * (res / res.sum() if float(res.sum()) > 0 else pn[n])
        if n > 0:
            after *= 1.0 - h[n]
    return law


def block_joint_law(p: torch.Tensor, q: Optional[torch.Tensor], r: torch.Tensor, wrong_h=None) -> torch.Tensor:
    """[K+1, V] float64: P(tau = n, x) of block verification with tokens t_i ~ r_i independently;
    q the draft rows the verifier is given (None: one-hot drafts). Mixes over every token tuple
    in r's support: keep K and the supports small."""
    k = r.shape[0]
    pn = normalise(p)
    qn = None if q is None else normalise(q)
    rn = normalise(r)
    law = torch.zeros(k + 1, p.shape[1], dtype=_F64)
    support = [torch.nonzero(rn[i]).flatten().tolist() for i in range(k)]
    for tokens in itertools.product(*support):
        weight = math.prod(float(rn[i, t]) for i, t in enumerate(tokens))
        law += weight * block_law_fixed(pn, qn, list(tokens), wrong_h)
    return law


# The G-test -----------------------------------------------------------------------------------

def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square(df)."""
    if df <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=_F64), torch.tensor(max(x, 0.0) / 2, dtype=_F64)))


def chi2_isf(p_value: float, df: int) -> float:
    """The x with P(X > x) = p_value for X ~ chi-square(df) (bisection)."""
    lo, hi = 0.0, float(df) + 10.0
    while chi2_sf(hi, df) > p_value:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, df) > p_value else (lo, mid)
    return hi


def g_test(observed: torch.Tensor, law: torch.Tensor, min_expected: float = 5.0) -> Tuple[float, int, float]:
    """G-test of counts against a law over the same cells: (G, df, p-value).

    Null hypothesis: the counts are a multinomial sample of size observed.sum() from `law`.
    A count in a cell the law gives probability exactly 0 fails outright (p-value 0). Cells
    expecting fewer than `min_expected` counts are pooled into one, so the chi-square
    approximation holds.
    """
    observed = observed.to(_F64).flatten()
    law = law.to(_F64).flatten()
    law = law / law.sum()
    if bool((observed[law == 0] > 0).any()):
        return math.inf, 0, 0.0
    expected = law * observed.sum()
    big = expected >= min_expected
    obs, exp = observed[big], expected[big]
    small = float(expected[~big].sum())
    if small > 0:
        obs = torch.cat([obs, observed[~big].sum().reshape(1)])
        exp = torch.cat([exp, torch.tensor([small], dtype=_F64)])
    nz = obs > 0
    g = 2.0 * float((obs[nz] * torch.log(obs[nz] / exp[nz])).sum())
    df = int(obs.numel()) - 1
    return g, df, chi2_sf(g, df) if df > 0 else 1.0


def noncentral_chi2_sf(x: float, df: int, noncentrality: float) -> float:
    """P(X > x) for X ~ noncentral chi-square(df, lambda), as a Poisson mixture of central ones."""
    half = noncentrality / 2
    if half == 0:
        return chi2_sf(x, df)
    j = torch.arange(int(half + 12 * math.sqrt(half) + 60), dtype=_F64)
    weights = torch.exp(-half + j * math.log(half) - torch.lgamma(j + 1))
    tails = torch.special.gammaincc((df + 2 * j) / 2, torch.full_like(j, max(x, 0.0) / 2))
    return min(float((weights * tails).sum()), 1.0)


def _pooled(law: torch.Tensor, alternative: torch.Tensor, rounds: int):
    """Both laws over the G-test's pooled cells (those the law gives positive mass)."""
    law = law.to(_F64).flatten() / law.sum()
    alternative = alternative.to(_F64).flatten() / alternative.sum()
    big = law * rounds >= 5.0
    lp, ap = law[big], alternative[big]
    if bool((~big).any()):
        lp = torch.cat([lp, law[~big].sum().reshape(1)])
        ap = torch.cat([ap, alternative[~big].sum().reshape(1)])
    keep = lp > 0
    return lp[keep], ap[keep]


def power(law: torch.Tensor, alternative: torch.Tensor, rounds: int, p_min: float, critical=None) -> float:
    """The probability that the G-test of `rounds` counts drawn from `alternative` rejects `law`
    at p < p_min: noncentral chi-square with lambda = rounds * sum (alt - law)^2 / law over the
    pooled cells (the usual large-sample approximation; an alternative putting mass on a cell
    the law forbids is rejected as soon as one count lands there, which this ignores).
    `critical` is chi2_isf(p_min, df) if already known."""
    lp, ap = _pooled(law, alternative, rounds)
    df = lp.numel() - 1
    if df <= 0:
        return 0.0
    lam = rounds * float(((ap - lp) ** 2 / lp).sum())
    return noncentral_chi2_sf(chi2_isf(p_min, df) if critical is None else critical, df, lam)


def biased_acceptance(law: torch.Tensor, delta: float) -> Optional[torch.Tensor]:
    """The law with position 0's acceptance probability raised by delta (delta < 0: lowered):
    the rows n >= 1 scaled together, row 0 scaled the other way. None if the law has no room."""
    stop0 = float(law[0].sum() / law.sum()) if law.shape[0] > 1 else 0.0
    if law.shape[0] < 2 or stop0 in (0.0, 1.0) or not (0.0 < stop0 - delta < 1.0):
        return None
    out = law.to(_F64) / law.sum()
    out[0] *= (stop0 - delta) / stop0
    out[1:] *= (1 - stop0 + delta) / (1 - stop0)
    return out


def detectable_bias(law: torch.Tensor, rounds: int, p_min: float, target_power: float = 0.99) -> Optional[float]:
    """The smallest |delta| such that a bias of position 0's acceptance probability by delta,
    up or down, is detected by the G-test with `target_power`; None where that probability is
    0 or 1 (a bias there makes a forbidden cell occur: caught outright)."""
    if biased_acceptance(law, 0.0) is None:
        return None
    lp, _ = _pooled(law, law, rounds)
    critical = chi2_isf(p_min, lp.numel() - 1)
    best = None
    for sign in (1.0, -1.0):
        lo, hi = 0.0, 1.0
        for _ in range(22):  # |delta| to within 2.4e-7
            mid = (lo + hi) / 2
            alt = biased_acceptance(law, sign * mid)
            if alt is None or power(law, alt, rounds, p_min, critical) >= target_power:
                hi = mid
            else:
                lo = mid
        if biased_acceptance(law, sign * hi) is not None:
            best = hi if best is None else max(best, hi)
    return best
