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


# Logits in: the warping pipeline a transformers user runs ------------------------------------

def hf_warpers(temperature: float, top_p: float = 1.0):
    """transformers' warpers for these parameters, in its order (temperature, then top-p)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    warpers = [TemperatureLogitsWarper(temperature)]
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


_NO_IDS = torch.zeros(1, 1, dtype=torch.int64)


def hf_probs(logits: torch.Tensor, warpers) -> torch.Tensor:
    """Warped probabilities of logits rows [R, V]: the warpers, then softmax."""
    scores = logits
    for w in warpers:
        scores = w(_NO_IDS, scores)
    return torch.softmax(scores, -1)


def hf_sample(logits: torch.Tensor, warpers, generator=None) -> int:
    """One token from one row [V]: warpers + softmax + torch.multinomial."""
    return int(torch.multinomial(hf_probs(logits[None], warpers)[0], 1, generator=generator))


def hf_sampled_round(target_logits, draft_logits, warpers, accept, generator=None):
    """A whole sampled round from logits, the transformers way: each of the K draft rows is
    warped, softmaxed and sampled as it comes (torch.multinomial), then the K+1 target rows
    are warped and softmaxed and `accept` (spec_verify's op, passed in) verifies on the
    softmaxed warped rows."""
    k = draft_logits.shape[0]
    rows = [hf_probs(draft_logits[i:i + 1], warpers)[0] for i in range(k)]
    tokens = torch.tensor([int(torch.multinomial(r, 1, generator=generator)) for r in rows])
    target = hf_probs(target_logits, warpers)
    return accept(target, torch.stack(rows), tokens, generator)


# Trees: the rules of spec_verify.verify_tree_probs, the way EAGLE's evaluate_posterior and
# SpecInfer's verifier are written in PyTorch (a softmax-free residual per tried child).

def verify_tree(target_probs, tokens, parents, draft_probs, uniforms):
    """Independent children drawn from draft_probs (SpecInfer's multi-round rule), with the
    N+1 uniforms given: (path, next_token)."""
    n = len(parents)
    children = [[] for _ in range(n + 1)]
    for j, p in enumerate(parents):
        children[p + 1].append(j)
    node, path = -1, []
    while True:
        row = node + 1
        r = target_probs[row] / target_probs[row].sum()
        q = draft_probs[row] / draft_probs[row].sum()
        accepted = None
        for c in children[row]:
            t = int(tokens[c])
            if uniforms[c] * q[t] < r[t]:
                accepted = c
                break
            residual = (r - q).clamp(min=0)
            mass = residual.sum()
            if mass <= 0:
                break
            r = residual / mass
        if accepted is None:
            # Inverse-CDF draw with the last uniform, as the kernel draws.
            cdf = torch.cumsum(r.double(), 0)
            x = int(torch.searchsorted(cdf, uniforms[n] * cdf[-1], right=True).clamp(max=r.numel() - 1))
            return path, x
        path.append(accepted)
        node = accepted
