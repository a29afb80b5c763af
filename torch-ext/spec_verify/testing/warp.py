"""The warp of spec-verify's DESIGN.md ("Warping") in float64: the rows a logits verifier must
sample from, and the oracle the package's own tests hold its logits ops to.

    z(v) = x(v) / T                        float32 division, as the kernel does it
    d(v) = z(v) - max z                    float32 subtraction, as the kernel does it
    w(v) = exp(d(v))                       here in float64 (the kernel: float32, one shared
                                           exp within a few ulps of this); -inf -> 0
    top_k:  keep v iff #{u : z(u) > z(v)} < top_k                     (0 = off)
    top_p:  among the kept, keep v iff sum_{kept u, w(u) > w(v)} w(u) < top_p * sum_kept w
            (a tie group at the cutoff is kept whole)                  (1 = off)
    min_p:  among the kept, keep v iff w(v) >= min_p                   (0 = off)
    r(v)  = w(v) on the kept set, 0 elsewhere; the warped row is r / sum r.
    T = 0:  one-hot at the argmax of x (ties to the lowest index).

Because w here is float64 while the kernel's is float32, a decision that lies within
rounding of its boundary may go either way; `Warped.margin` is, per row, the smallest
relative distance of any top-p or min-p decision from its boundary, so that tests compare
kept sets exactly only on rows whose margin is clear of float32 rounding (see `CLEAR`).
top-k decisions compare float32 z values, which the kernel computes identically: no margin.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# A decision this far (relative) from its boundary cannot be flipped by the kernel's float32
# weights (within 2 ulp, 2.4e-7 relative, of these) nor by the order of its float64 sums.
CLEAR = 1e-5


@dataclass
class Warped:
    probs: torch.Tensor    # float64 [R, V]: the warped rows, normalised
    kept: torch.Tensor     # bool [R, V]: the kept set (support of probs, plus kept zero weights)
    weights: torch.Tensor  # float64 [R, V]: w before the cuts
    margin: torch.Tensor   # float64 [R]: smallest relative distance of a decision to its boundary


def _mass_strictly_greater(w: torch.Tensor) -> torch.Tensor:
    """For each entry of a float64 vector of weights, the sum of the weights strictly greater
    (ties excluded), summed largest first."""
    n = w.numel()
    desc, _ = torch.sort(w, descending=True)
    csum = torch.cumsum(desc, 0)  # csum[j] = sum of the j+1 largest
    asc = desc.flip(0)
    # greater(v) = the number of entries > w(v) = n - (number <= w(v)).
    greater = n - torch.searchsorted(asc, w, right=True)
    padded = torch.cat([torch.zeros(1, dtype=torch.float64), csum])
    return padded[greater]


def warp_row(x: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
             min_p: float = 0.0):
    """One float32 row -> (probs float64, kept bool, weights float64, margin float)."""
    x = x.float()
    vocab = x.numel()
    if temperature == 0:
        probs = torch.zeros(vocab, dtype=torch.float64)
        probs[int(torch.argmax(x))] = 1.0
        return probs, probs > 0, probs.clone(), float("inf")
    z = x / torch.tensor(temperature, dtype=torch.float32)
    finite = torch.isfinite(z)
    if bool(torch.isnan(z).any()) or bool((z == float("inf")).any()) or not bool(finite.any()):
        raise ValueError("a row with NaN, +inf or no finite value")
    d = z - z.max()  # float32
    w = torch.exp(d.double())
    w[~finite] = 0.0
    kept = torch.ones(vocab, dtype=torch.bool)
    margin = float("inf")
    if top_k > 0 and top_k < vocab:
        kth = torch.topk(z, top_k).values[-1]
        kept &= z >= kth
    if top_p < 1.0:
        wk = torch.where(kept, w, torch.zeros_like(w))
        total = float(wk.sum())
        target = top_p * total
        above = _mass_strictly_greater(wk)
        keep_p = above < target
        # Margins: every kept-by-top-k token with positive weight decides against `target`.
        cand = kept & (w > 0)
        if bool(cand.any()):
            margin = min(margin, float(((above[cand] - target).abs() / total).min()))
            # Distinct float64 weights that float32 might merge into one tie group: the
            # smallest weight kept and the largest dropped must be clearly apart.
            kw, dw = w[cand & keep_p], w[cand & ~keep_p]
            if kw.numel() and dw.numel():
                margin = min(margin, float((kw.min() - dw.max()) / kw.min()))
        kept &= keep_p
    if min_p > 0.0:
        cand = kept & (w > 0)
        margin = min(margin, float(((w[cand] - min_p).abs() / min_p).min()))
        kept &= w >= min_p
    r = torch.where(kept, w, torch.zeros_like(w))
    return r / r.sum(), kept, w, margin


def warp(x: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
         min_p: float = 0.0) -> Warped:
    """`warp_row` over every row of a [V] or [R, V] float32 tensor (a [V] input gives R = 1)."""
    rows = x.reshape(-1, x.shape[-1])
    out = [warp_row(r, temperature, top_k, top_p, min_p) for r in rows]
    return Warped(torch.stack([o[0] for o in out]), torch.stack([o[1] for o in out]),
                  torch.stack([o[2] for o in out]),
                  torch.tensor([o[3] for o in out], dtype=torch.float64))


def sample_index(probs: torch.Tensor, u: float):
    """The smallest index whose running float64 mass exceeds u * total, and the relative
    distance of u * total from the nearest running mass (a draw that close to a boundary may
    go either way in the kernel's blocked order)."""
    csum = torch.cumsum(probs.double(), 0)
    total = float(csum[-1])
    t = u * total
    idx = int(torch.searchsorted(csum, torch.tensor([t], dtype=torch.float64), right=True)[0])
    idx = min(idx, probs.numel() - 1)
    gap = float((csum - t).abs().min()) / total
    return idx, gap


def accept_reference(p: torch.Tensor, q: torch.Tensor, tokens, uniforms):
    """`accept` in float64 on warped rows p [K+1, V] and q [K, V] (normalised or not) with
    given uniforms: (n_accepted, next_token, margin), margin the smallest relative distance
    of an acceptance test or of the final draw from its boundary."""
    p, q = p.double(), q.double()
    k = q.shape[0]
    margin = float("inf")
    for i in range(k):
        t = int(tokens[i])
        pn, qn = p[i] / p[i].sum(), q[i] / q[i].sum()
        lhs, rhs = float(uniforms[i]) * float(qn[t]), float(pn[t])
        if rhs > 0 and qn[t] > 0:
            margin = min(margin, abs(lhs - rhs) / rhs)
        if not lhs < rhs:
            residual = (pn - qn).clamp(min=0)
            if float(residual.sum()) == 0.0:
                residual = pn
            x, gap = sample_index(residual, float(uniforms[k]))
            return i, x, min(margin, gap)
    x, gap = sample_index(p[k], float(uniforms[k]))
    return k, x, min(margin, gap)
