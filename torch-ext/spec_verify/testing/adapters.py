"""Adapters from the interfaces verifiers have to the one the suite calls, and an exact
float64 reference verifier written in torch alone.

The suite calls `verify(target_probs, draft_probs, draft_tokens, generator) -> (n_accepted,
next_token)`: rows `[K+1, V]` and `[K, V]` (draft_probs None for one-hot drafts), tokens an
int64 tensor `[K]`, a `torch.Generator`. Examples:

    # A verifier that takes its uniforms (K+1 float64 values in [0, 1)):
    report = check_verifier(with_uniforms(lambda p, q, t, u: my_verify(p, q, t, u)))

    # A verifier that takes logits: give it the log of the suite's rows.
    report = check_verifier(lambda p, q, t, g: my_verify_logits(p.float().log(), q.float().log(), t, g),
                            draft_rows=True, one_hot=False)

    # A batch verifier over [B, K+1, V] / [B, K, V] / [B, K] returning ([B], [B]):
    report = check_verifier(from_batch(my_batch_verify))

    # A verifier that uses torch's global generator (torch.rand, torch.multinomial without generator=):
    report = check_verifier(seeding_global_rng(my_verify))

Logits with warping parameters have their own entry, `check_logits_verifier` (logits.py).
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

from . import law as _law


def with_uniforms(verify_uniforms: Callable) -> Callable:
    """A verifier that takes its uniforms, `verify_uniforms(target, draft, tokens, uniforms)`
    with `uniforms` float64 `[K+1]`, as the suite's interface: K+1 uniforms are drawn from the
    generator each call, as `torch.rand(K+1, dtype=torch.float64, generator=g)`.

    Returns:
        `Callable`: `verify(target, draft, tokens, generator)`.
    """
    if not callable(verify_uniforms):
        raise TypeError(f"verify_uniforms must be callable, got {type(verify_uniforms).__name__}")

    def verify(target, draft, tokens, generator):
        uniforms = torch.rand(target.shape[0], dtype=torch.float64, generator=generator)
        return verify_uniforms(target, draft, tokens, uniforms)

    verify.__name__ = getattr(verify_uniforms, "__name__", "verify_uniforms")
    return verify


def seeding_global_rng(verify_global: Callable) -> Callable:
    """A verifier that draws from torch's global generator, `verify_global(target, draft, tokens)`,
    as the suite's interface: each call seeds the global generator from the suite's generator
    inside `torch.random.fork_rng`, so runs are repeatable and the caller's state is kept.

    Returns:
        `Callable`: `verify(target, draft, tokens, generator)`.
    """
    if not callable(verify_global):
        raise TypeError(f"verify_global must be callable, got {type(verify_global).__name__}")

    def verify(target, draft, tokens, generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return verify_global(target, draft, tokens)

    verify.__name__ = getattr(verify_global, "__name__", "verify_global")
    return verify


def from_batch(verify_batch: Callable, neighbours: int = 1) -> Callable:
    """A batch verifier, `verify_batch(target [B, K+1, V], draft [B, K, V] or None, tokens [B, K],
    generator) -> (n_accepted [B], next_token [B])`, as the suite's interface: each call puts
    the suite's round between `neighbours` other sequences on each side (the rows reversed
    along V, tokens mirrored), so a batch verifier that mixes up sequences changes the law.

    Returns:
        `Callable`: `verify(target, draft, tokens, generator)` returning the middle sequence's outcome.
    """
    if not callable(verify_batch):
        raise TypeError(f"verify_batch must be callable, got {type(verify_batch).__name__}")
    if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 0:
        raise ValueError(f"neighbours must be an int >= 0, got {neighbours!r}")

    def verify(target, draft, tokens, generator):
        vocab = target.shape[1]
        mirrored = (target.flip(-1), None if draft is None else draft.flip(-1), vocab - 1 - tokens)
        side = [mirrored] * neighbours
        rounds = side + [(target, draft, tokens)] + side
        targets = torch.stack([r[0] for r in rounds])
        drafts = None if draft is None else torch.stack([r[1] for r in rounds])
        n, x = verify_batch(targets, drafts, torch.stack([r[2] for r in rounds]), generator)
        return n[neighbours], x[neighbours]

    verify.__name__ = getattr(verify_batch, "__name__", "verify_batch")
    return verify


def _inverse_cdf(weights: torch.Tensor, u: float) -> int:
    """The smallest index whose running float64 mass exceeds u times the total."""
    csum = torch.cumsum(weights.to(torch.float64), 0)
    index = int(torch.searchsorted(csum, torch.tensor([u * float(csum[-1])], dtype=torch.float64), right=True)[0])
    positive = torch.nonzero(weights > 0).flatten()
    return min(index, int(positive[-1]))  # rounding past the end: the last index with mass


def reference_accept_with_uniforms(target: torch.Tensor, draft: Optional[torch.Tensor], tokens,
                                   uniforms: torch.Tensor) -> Tuple[int, int]:
    """Token-wise speculative sampling in float64, from the rows alone (no op of spec-verify).

    Position i accepts t_i iff u_i * q_i(t_i) < p_i(t_i) on normalised rows (one-hot drafts:
    iff u_i < p_i(t_i)); at the first rejection the token is drawn with u_K from
    max(0, p_i - q_i) (p_i without t_i for one-hot drafts; p_i if that has no mass), else from
    p_K.

    Returns:
        `Tuple[int, int]`: (n_accepted, next_token).
    """
    p = _law.normalise(target)
    k = p.shape[0] - 1
    q = None if draft is None else _law.normalise(draft)
    for i in range(k):
        t = int(tokens[i])
        q_t = 1.0 if q is None else float(q[i, t])
        if not float(uniforms[i]) * q_t < float(p[i, t]):
            if q is None:
                residual = p[i].clone()
                residual[t] = 0.0
            else:
                residual = (p[i] - q[i]).clamp(min=0)
            if float(residual.sum()) <= 0.0:
                residual = p[i]
            return i, _inverse_cdf(residual, float(uniforms[k]))
    return k, _inverse_cdf(p[k], float(uniforms[k]))


reference_accept = with_uniforms(reference_accept_with_uniforms)
reference_accept.__name__ = "reference_accept"
reference_accept.__doc__ = ("`reference_accept_with_uniforms` with K+1 float64 uniforms drawn from the generator: "
                            "the exact verifier the suite's own tests pass, and the CLI's `--verifier reference`.")
