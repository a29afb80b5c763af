"""The pure-PyTorch way to verify a draft: what a user writes without this kernel.

Greedy takes the argmax of every row; sampling follows transformers' speculative sampling
(normalise, gather, ratio, compare, clamp and renormalise the residual, multinomial).
Used as the baseline by the demo and the benchmarks.
"""
from __future__ import annotations

import torch


def verify_greedy(target_probs: torch.Tensor, draft_tokens: torch.Tensor):
    k = draft_tokens.shape[0]
    best = target_probs.argmax(-1)
    misses = (best[:k] != draft_tokens).nonzero()
    n = int(misses[0]) if misses.numel() else k
    return n, int(best[n])


def accept(target_probs, draft_probs, draft_tokens, generator=None):
    k = draft_tokens.shape[0]
    p = target_probs / target_probs.sum(-1, keepdim=True)
    q = draft_probs / draft_probs.sum(-1, keepdim=True)
    rows = torch.arange(k)
    ratio = p[rows, draft_tokens] / q[rows, draft_tokens]
    u = torch.rand(k, dtype=torch.float64, generator=generator)
    rejected = (u >= ratio).nonzero()
    if rejected.numel():
        n = int(rejected[0])
        residual = (p[n] - q[n]).clamp(min=0)
        residual = residual / residual.sum()
        return n, int(torch.multinomial(residual, 1, generator=generator))
    return k, int(torch.multinomial(p[k], 1, generator=generator))
