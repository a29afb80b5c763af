"""Cases for verifiers that take logits and warping parameters (temperature, top-k, top-p, min-p).

The suite draws the draft tokens from the draft's warped rows (the float64 warp of warp.py)
and holds the verifier to the law of the warped rows: the target's and the draft's rows both
warped with the same parameters. The rows are built so that every top-p and min-p decision
lies clear of float32 rounding, so the kept sets are the same in any correct implementation
(transformers' warpers included; a tie at a top-p cutoff is avoided).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import torch

from . import law as _law
from . import warp as _warp
from .cases import Case

K, V = 3, 8
WARPS = ("temperature", "top_k", "top_p", "min_p")


def _family(name: str):
    """(target logits [K+1, V], draft logits [K, V], params)."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    p = torch.randn(K + 1, V, generator=g) * 0.7
    q = p[:K] + torch.randn(K, V, generator=g) * 0.5
    if name == "plain":
        params: Dict = {}
    elif name == "temperature":
        params = dict(temperature=0.7)
    elif name == "top_k":
        params = dict(top_k=3)
    elif name == "top_p_cuts_the_draft_token":
        # The draft's favourite token (5) is outside the target's top-p set at every position.
        p[:, :3] += 1.0
        p[:, 5] -= 1.0
        q[:, 5] += 2.0
        params = dict(top_p=0.7)
    elif name == "min_p":
        params = dict(temperature=1.2, min_p=0.4)
    elif name == "kept_sets_differ":
        p[:, :4] += 1.0
        q[:, 4:] += 1.0
        params = dict(temperature=0.9, top_p=0.6)
    elif name == "masked":
        p[:, 1::3] = float("-inf")
        q[:, 2::3] = float("-inf")
        params = dict(temperature=0.8)
    elif name == "everything":
        params = dict(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05)
    else:
        raise KeyError(name)
    return p.float().contiguous(), q.float().contiguous(), params


FAMILIES = ["plain", "temperature", "top_k", "top_p_cuts_the_draft_token", "min_p", "kept_sets_differ", "masked",
            "everything"]


class LogitsCase(Case):
    """A `Case` whose rows are logits, verified with `params`; its law is that of the warped rows."""

    def __init__(self, name, what, target, draft, params, tokens_from=None, method="token"):
        self.params = dict(params)
        self.warped_target = warped(target, self.params)
        self.warped_draft = warped(draft, self.params)
        super().__init__(name, what, target, draft, self.warped_draft if tokens_from is None else tokens_from, method)

    def exact_law(self) -> torch.Tensor:
        p, q = self.warped_target, self.warped_draft
        if self.method == "block":
            return _law.block_joint_law(p, q, self.tokens_from)
        return _law.joint_law(p, q, self.tokens_from)

    def prefix(self, k: int) -> "LogitsCase":
        return LogitsCase(f"{self.name}[:K={k}]", self.what, self.target[: k + 1].clone(), self.draft[:k].clone(),
                          self.params, self.tokens_from[:k].clone(), self.method)


def warped(logits: torch.Tensor, params: Dict) -> torch.Tensor:
    """Rows warped in float64 (warp.py) with `params` (missing ones off), normalised.

    Raises:
        ValueError: a top-p or min-p decision lies within float32 rounding of its boundary.
    """
    if logits.shape[0] == 0:
        return torch.empty(0, logits.shape[-1], dtype=torch.float64)
    full = {**dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), **params}
    w = _warp.warp(logits, full["temperature"], full["top_k"], full["top_p"], full["min_p"])
    if w.margin.numel() and float(w.margin.min()) <= _warp.CLEAR:
        raise ValueError("a cutoff lies within rounding of its boundary: the kept set is not defined by the rows")
    return w.probs


def logits_cases(warps: Sequence[str] = WARPS, method: str = "token") -> List[LogitsCase]:
    """The law cases whose parameters use only `warps` (a subset of WARPS; "plain" always runs).

    Returns:
        `list` of `LogitsCase`.
    """
    out = []
    for name in FAMILIES:
        p, q, params = _family(name)
        if set(params) <= set(warps):
            what = ", ".join(f"{k}={v}" for k, v in params.items()) or "softmax of the logits, no warping"
            out.append(LogitsCase(name, what, p, q, params, method=method))
    return out


def greedy_logits_rounds(seed: int = 0, rounds: int = 300):
    """Rounds at temperature 0 with ties at the top: the argmax stream, ties to the lowest index.

    Returns:
        `list` of (target logits [K+1, V], draft logits [K, V], tokens [K], want (n, x)).
    """
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rounds):
        k = int(torch.randint(0, 5, (1,), generator=g))
        vocab = int(torch.randint(1, 20, (1,), generator=g))
        target = torch.randint(-3, 3, (k + 1, vocab), generator=g).float()  # small integers: many ties
        draft = torch.randn(k, vocab, generator=g)
        best = target.argmax(-1)
        matching = int(torch.randint(0, k + 1, (1,), generator=g))
        tokens = best[:k].clone()
        n = k
        if matching < k:
            others = (torch.arange(vocab) != best[matching]).nonzero().flatten()  # a tied token at a higher index too
            if others.numel():
                tokens[matching] = others[int(torch.randint(others.numel(), (1,), generator=g))]
                n = matching
        out.append((target, draft, tokens, (n, int(best[n]))))
    return out
