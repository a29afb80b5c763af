"""spec-verify: the verification step of speculative decoding, as CPU kernels.

verify_greedy  temperature 0: the accepted prefix and the target's argmax after it.
accept         speculative (rejection) sampling; the emitted tokens have the target's law.
SpeculativeDecoder  the draft/verify loop over user callbacks.

Rows are float32 [*, V] tensors on the CPU, one row per position; they need not be
normalised. Every function returns plain Python ints (SymInts under torch.compile).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from ._ops import add_op_namespace_prefix, ops
from .decoder import SpeculativeDecoder

__all__ = [
    "verify_greedy",
    "accept",
    "accept_with_uniforms",
    "SpeculativeDecoder",
    "isa",
    "available_isas",
]

Tokens = Union[torch.Tensor, Sequence[int]]


def _tokens(draft_tokens: Tokens) -> torch.Tensor:
    if isinstance(draft_tokens, torch.Tensor):
        return draft_tokens
    if isinstance(draft_tokens, (list, tuple)) and all(isinstance(t, int) for t in draft_tokens):
        return torch.tensor(draft_tokens, dtype=torch.int64).reshape(len(draft_tokens))
    raise TypeError(
        "draft_tokens must be a 1-D integer tensor or a list of ints, "
        f"got {type(draft_tokens).__name__}"
    )


def _check_on_cpu(op: str, **tensors) -> None:
    # Checked here, not in C++: a tensor on another device (meta included) would make the
    # dispatcher skip the CPU kernel altogether. Callers test the common case inline first,
    # so that a call with good arguments pays a few attribute reads and nothing more.
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"spec_verify.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"spec_verify.{op}: {name} must be on the CPU, got a tensor on {t.device}")


_Tensor = torch.Tensor
# The overloads themselves: calling them skips the overload resolution of ops.<name>.
_verify_greedy = ops.verify_greedy.default
_accept = ops.accept.default
_accept_with_uniforms = ops.accept_with_uniforms.default


def verify_greedy(target_probs: torch.Tensor, draft_tokens: Tokens) -> Tuple[int, int]:
    """Greedy (temperature 0) verification of K draft tokens.

    target_probs: float32 [K+1, V]; only the argmax of each row is used, so logits work too.
    draft_tokens: K integer ids in [0, V).
    Returns (n_accepted, next_token): the draft tokens are accepted while each equals the
    argmax of its row (ties to the lowest index); next_token is the argmax of row
    n_accepted. Rows after n_accepted are never read. The emitted stream equals plain
    greedy decoding of the target.
    """
    if type(draft_tokens) is not _Tensor:
        draft_tokens = _tokens(draft_tokens)
    if not (type(target_probs) is _Tensor and target_probs.is_cpu and draft_tokens.is_cpu):
        _check_on_cpu("verify_greedy", target_probs=target_probs, draft_tokens=draft_tokens)
    return _verify_greedy(target_probs, draft_tokens)


def accept(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: Tokens,
    generator: Optional[torch.Generator] = None,
) -> Tuple[int, int]:
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

    target_probs: float32 [K+1, V], the target's probabilities at the K+1 positions.
    draft_probs:  float32 [K, V], the draft's probabilities the draft tokens were drawn from.
    draft_tokens: K integer ids in [0, V).
    Rows need not be normalised (each is divided by its own float64 mass).
    Draws exactly K+1 float64 uniforms from `generator` (torch.rand), whatever the outcome.
    Returns (n_accepted, next_token); the accepted tokens followed by next_token have the
    target's distribution. A call that raises leaves the generator as it was.
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if type(draft_tokens) is not _Tensor:
        draft_tokens = _tokens(draft_tokens)
    if not (type(target_probs) is _Tensor and type(draft_probs) is _Tensor and target_probs.is_cpu
            and draft_probs.is_cpu and draft_tokens.is_cpu):
        _check_on_cpu("accept", target_probs=target_probs, draft_probs=draft_probs, draft_tokens=draft_tokens)
    return _accept(target_probs, draft_probs, draft_tokens, generator)


def accept_with_uniforms(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: Tokens,
    uniforms: torch.Tensor,
) -> Tuple[int, int]:
    """accept() with its K+1 uniforms given: float64 [K+1] in [0, 1). A pure function.

    uniforms[i] decides position i (accept iff u_i * q_i(t_i) * P_i < p_i(t_i) * Q_i);
    uniforms[K] samples next_token.
    """
    if type(draft_tokens) is not _Tensor:
        draft_tokens = _tokens(draft_tokens)
    _check_on_cpu("accept_with_uniforms", target_probs=target_probs, draft_probs=draft_probs,
                  draft_tokens=draft_tokens, uniforms=uniforms)
    return _accept_with_uniforms(target_probs, draft_probs, draft_tokens, uniforms)


def isa() -> str:
    """The instruction-set path in use: "neon", "avx2" or "scalar".

    Chosen once: SPEC_VERIFY_ISA if set (an unknown or unavailable name raises ValueError
    at the first call), else the best path this CPU can run.
    """
    return ops.isa()


def available_isas() -> list:
    """The paths this build can run on this CPU, best first."""
    return list(ops.available_isas())


def _force_isa(name: str) -> None:
    """Switch path for this process ("" restores the default). For tests and benchmarks."""
    ops._force_isa(name)


@torch.library.register_fake(add_op_namespace_prefix("verify_greedy"))
def _verify_greedy_fake(target_probs, draft_tokens):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept"))
def _accept_fake(target_probs, draft_probs, draft_tokens, generator=None):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept_with_uniforms"))
def _accept_with_uniforms_fake(target_probs, draft_probs, draft_tokens, uniforms):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("_row_masses"))
def _row_masses_fake(rows):
    return rows.new_empty((rows.shape[0],), dtype=torch.float64)
