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

def hf_warpers(temperature: float, top_p: float = 1.0, min_p: float = 0.0):
    """transformers' warpers for these parameters, in its order (temperature, top-p, min-p)."""
    from transformers.generation.logits_process import MinPLogitsWarper, TemperatureLogitsWarper, TopPLogitsWarper

    warpers = [TemperatureLogitsWarper(temperature)]
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    if min_p > 0.0:
        warpers.append(MinPLogitsWarper(min_p))
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


# Batches: vLLM's way, vectorised over a ragged batch ------------------------------------------

def _warped_probs(logits, temperature, top_k=None, top_p=None):
    """Per-row temperature, then top-k and top-p by sorting each row (ascending), then
    softmax: the batched warping of serving engines, all rows at once."""
    x = logits / temperature[:, None]
    vocab = x.shape[-1]
    cut_k = top_k is not None and bool((top_k > 0).any())
    cut_p = top_p is not None and bool((top_p < 1).any())
    if cut_k or cut_p:
        sorted_x, order = x.sort(-1)
        if cut_k:
            k = torch.where(top_k > 0, top_k, vocab).clamp(max=vocab)
            kth = sorted_x.gather(1, (vocab - k)[:, None])
            sorted_x.masked_fill_(sorted_x < kth, float("-inf"))
        if cut_p:
            cumulative = sorted_x.softmax(-1).cumsum(-1)
            drop = cumulative <= (1 - top_p)[:, None]
            drop[:, -1] = False  # the most probable token always stays
            sorted_x.masked_fill_(drop, float("-inf"))
        x = torch.empty_like(x).scatter_(-1, order, sorted_x)
    return x.softmax(-1)


def verify_batch(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, temperature, top_k=None,
                 top_p=None, generator=None):
    """A ragged batch in vLLM's layout verified in pure PyTorch, vectorised over the batch:
    greedy sequences (temperature 0) by argmax; sampled ones by warping every row (sorting for
    top-k/top-p), accepting where u < p(t) / q(t), and drawing the emitted token from the
    residual max(0, p - q) at the first rejection (from p when all are accepted) by the
    exponential race argmax(r / E), E ~ Exp(1). Returns (output_token_ids [B, max_k + 1]
    padded with -1, num_accepted [B])."""
    cu = cu_num_draft_tokens
    batch, n = cu.shape[0], draft_tokens.shape[0]
    num_draft = torch.diff(cu, prepend=cu.new_zeros(1))
    max_k = int(num_draft.max()) if batch else 0
    first_draft = cu - num_draft
    seq = torch.repeat_interleave(torch.arange(batch), num_draft)  # sequence of each draft token
    pos = torch.arange(n) - first_draft[seq]                        # its position in the sequence
    target_row = torch.arange(n) + seq                              # cu[b-1] + b + pos
    greedy = temperature == 0
    argmax = target_logits.argmax(-1)
    accept = torch.ones(batch, max_k, dtype=torch.bool)  # padding accepts: cumprod runs through it
    all_greedy = bool(greedy.all())
    if all_greedy:
        accept[seq, pos] = draft_tokens == argmax[target_row]
    else:
        temp = torch.where(greedy, torch.ones_like(temperature), temperature)
        rows = num_draft + 1
        p = _warped_probs(target_logits, temp.repeat_interleave(rows),
                          None if top_k is None else top_k.repeat_interleave(rows),
                          None if top_p is None else top_p.repeat_interleave(rows))
        q = _warped_probs(draft_logits, temp[seq], None if top_k is None else top_k[seq],
                          None if top_p is None else top_p[seq])
        pt = p[target_row, draft_tokens]
        qt = q[torch.arange(n), draft_tokens]
        u = torch.rand(n, generator=generator)
        sampled = (qt > 0) & (pt / qt >= u)
        accept[seq, pos] = torch.where(greedy[seq], draft_tokens == argmax[target_row], sampled)
    accepted = torch.minimum(accept.long().cumprod(1).sum(1), num_draft)
    decide_row = first_draft + torch.arange(batch) + accepted
    emitted = argmax[decide_row]
    if not all_greedy:
        rejected = accepted < num_draft
        dist = p[decide_row]
        if n:
            residual = (dist - q[(first_draft + accepted).clamp(max=n - 1)]).clamp(min=0)
            dist = torch.where(rejected[:, None], residual, dist)
        race = torch.empty_like(dist).exponential_(generator=generator)
        emitted = torch.where(greedy, emitted, (dist / race).argmax(-1))
    out = torch.full((batch, max_k + 1), -1, dtype=torch.int64)
    keep = pos < accepted[seq]
    out[seq[keep], pos[keep]] = draft_tokens[keep]
    out[torch.arange(batch), accepted] = emitted
    return out, accepted
