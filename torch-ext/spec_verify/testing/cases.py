"""The rows the suite verifies: one `Case` per situation where verifiers go wrong.

Each case fixes position-dependent target rows p (K+1) and draft rows q (K, or None for
one-hot drafts) and the rows r the draft tokens are drawn from (r = q for an ordinary draft),
all built from a fixed seed, so a case is the same on every run and machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from . import law as _law

K, V = 3, 8


@dataclass
class Case:
    """One situation to verify.

    Attributes:
        name: short identifier (used in `checks=` and in the report).
        what: one line on what the case exercises.
        target: `[K+1, V]` rows given to the verifier (float32, float16 or bfloat16).
        draft: `[K, V]` rows given to the verifier, or None (one-hot drafts).
        tokens_from: `[K, V]` rows the draft tokens are drawn from (float64; need not be normalised).
    """

    name: str
    what: str
    target: torch.Tensor
    draft: Optional[torch.Tensor]
    tokens_from: torch.Tensor
    method: str = "token"

    @property
    def law(self) -> torch.Tensor:
        """[K+1, V] float64: the exact law of (N, x) (computed once, when first asked)."""
        if not hasattr(self, "_law"):
            self._law = self.exact_law()
        return self._law

    def exact_law(self) -> torch.Tensor:
        return case_law(self.target, self.draft, self.tokens_from, self.method)

    @property
    def k(self) -> int:
        return self.target.shape[0] - 1

    @property
    def vocab(self) -> int:
        return self.target.shape[1]

    def prefix(self, k: int) -> "Case":
        """The same rows cut to k draft positions (for shrinking a failure)."""
        return Case(f"{self.name}[:K={k}]", self.what, self.target[: k + 1].clone(),
                    None if self.draft is None else self.draft[:k].clone(), self.tokens_from[:k].clone(), self.method)


def case_law(target, draft, tokens_from, method="token") -> torch.Tensor:
    """[K+1, V] float64: the exact law of (N, x) for these rows (law.py), from the rows as given
    (half rows widened exactly)."""
    p = target.to(torch.float64)
    if method == "block":
        return _law.block_joint_law(p, None if draft is None else draft.to(torch.float64), tokens_from)
    if draft is None:
        return _law.one_hot_joint_law(p, tokens_from)
    return _law.joint_law(p, draft.to(torch.float64), tokens_from)


def _smooth(g, rows, vocab=V, scale=1.0):
    return torch.softmax(torch.randn(rows, vocab, generator=g) * scale, -1).float()


def _seeded(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(sum(map(ord, name)))


def probability_cases(draft_rows: bool = True, one_hot: bool = True, half: bool = True,
                      method: str = "token") -> List[Case]:
    """The law cases for a verifier of probability rows.

    Args:
        draft_rows: include cases with draft rows (an ordinary draft model).
        one_hot: include cases with `draft_probs=None` (drafts without probabilities).
        half: include float16 and bfloat16 rows.
        method: "token" (token-wise verification, the usual rule) or "block" (Sun et al.).

    Returns:
        `list` of `Case`.
    """
    cases = []

    def add(name, what, p, q, r=None):
        cases.append(Case(name, what, p.contiguous(), None if q is None else q.contiguous(),
                          (q if r is None else r).double(), method))

    if draft_rows:
        g = _seeded("smooth")
        add("smooth", "softmax rows of moderate spread", _smooth(g, K + 1), _smooth(g, K))
        g = _seeded("spiky")
        add("spiky", "peaked rows: most mass on one or two tokens", _smooth(g, K + 1, scale=4.0), _smooth(g, K, scale=4.0))
        g = _seeded("unnormalised")
        p, q = _smooth(g, K + 1), _smooth(g, K)
        scale_p = torch.tensor([[50.0], [1e-20], [3.0], [1e20]])
        scale_q = torch.tensor([[0.01], [1e20], [7.0]])
        add("unnormalised", "rows not summing to 1, scaled 1e-20 to 1e20 (p/q must use normalised rows)",
            p * scale_p, q * scale_q)
        g = _seeded("zero_draft_at_token")
        p, q = _smooth(g, K + 1), _smooth(g, K)
        q[:, 5:] = 0
        r = q.double() / q.sum(-1, keepdim=True) * 0.7
        r[:, 5:] = 0.1  # tokens the draft row gives probability 0 are still proposed
        add("zero_draft_at_token", "a drafted token the draft row gives probability 0 (must be accepted)", p, q, r)
        g = _seeded("masked")
        p, q = _smooth(g, K + 1), _smooth(g, K)
        p[:, ::3] = 0  # the draft proposes tokens the target masks
        q[:, 1::4] = 0
        add("masked", "masked tokens (probability 0) in the target where the draft proposes them", p, q)
        g = _seeded("ties_at_top")
        p, q = _smooth(g, K + 1), _smooth(g, K)
        p[:, 2] = p[:, 6] = p.max(-1).values * 1.5
        q[:, 1] = q[:, 2] = q.max(-1).values * 1.5
        add("ties_at_top", "two tokens tied for the largest probability", p, q)
        g = _seeded("identical")
        p = _smooth(g, K + 1, scale=2.0)
        add("identical", "draft rows equal to the target's (every draft accepted)", p, p[:K].clone())
        g = _seeded("disjoint")
        p, q = _smooth(g, K + 1), _smooth(g, K)
        p[:, V // 2:] = 0
        q[:, : V // 2] = 0
        add("disjoint", "draft and target supports disjoint (every draft rejected)", p, q)
        g = _seeded("k0")
        add("k0", "K = 0: no draft, one token from the target row", _smooth(g, 1), torch.empty(0, V))
        g = _seeded("odd_vocab")
        add("odd_vocab", "V = 263, not a multiple of any vector width, K = 2",
            _smooth(g, 3, vocab=263, scale=3.0), _smooth(g, 2, vocab=263, scale=3.0))
        if half:
            for dtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16")):
                g = _seeded(name)
                add(name, f"{name} rows (the law of the rows widened exactly)",
                    _smooth(g, K + 1, scale=2.0).to(dtype), _smooth(g, K, scale=2.0).to(dtype))
    if one_hot:
        g = _seeded("one_hot_drafted")
        p, r = _smooth(g, K + 1, scale=2.0), _smooth(g, K, scale=2.0)
        add("one_hot_drafted", "draft_probs=None, tokens from a draft the verifier does not see", p, None, r)
        g = _seeded("one_hot_fixed")
        r = torch.zeros(K, V)
        r[torch.arange(K), torch.tensor([1, 5, 2])] = 1.0
        add("one_hot_fixed", "draft_probs=None, the same proposals every round", _smooth(g, K + 1, scale=2.0), None, r)
        g = _seeded("one_hot_masked")
        p, r = _smooth(g, K + 1), _smooth(g, K)
        p[:, 1::2] = 0
        add("one_hot_masked", "draft_probs=None, proposals the target masks (always rejected)", p, None, r)
    return cases


def greedy_rows(seed: int = 0, rounds: int = 300):
    """Rounds whose target rows are one-hot (temperature 0): the outcome is certain.

    Returns:
        `list` of (target [K+1, V], draft [K, V] or None, tokens [K], want (n, x)), mixing draft
        rows and one-hot drafts, K from 0 to 4, V from 1 to 33, drafts matching the argmax
        stream for a random prefix.
    """
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(rounds):
        k = int(torch.randint(0, 5, (1,), generator=g))
        vocab = int(torch.randint(1, 34, (1,), generator=g))
        best = torch.randint(vocab, (k + 1,), generator=g)
        target = torch.zeros(k + 1, vocab)
        target[torch.arange(k + 1), best] = 1.0
        matching = int(torch.randint(0, k + 1, (1,), generator=g))
        tokens = best[:k].clone()
        if matching < k and vocab > 1:
            tokens[matching] = (best[matching] + 1 + int(torch.randint(vocab - 1, (1,), generator=g))) % vocab
        n = matching if (matching < k and vocab > 1) else k
        if i % 2:
            draft = None
        else:
            draft = torch.softmax(torch.randn(k, vocab, generator=g), -1)
        out.append((target, draft, tokens, (n, int(best[n]))))
    return out
