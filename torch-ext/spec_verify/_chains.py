"""The chain ops: verify_greedy, accept and accept_with_uniforms on probability rows, and the
instruction-set queries (isa, available_isas, _force_isa).

Every wrapper starts with one inline test of the common case (tensors of the right type on the
CPU, tokens not uint64), so a call with good tensor arguments costs a few attribute reads
before the op (`_calls._call`); anything else goes through the checks of `_api.py` first.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from ._api import (Tokens, _Tensor, _check_generator, _check_method, _check_on_cpu, _token_tensor, _uint64,
                   _vocab)
from . import _errors
from ._calls import ACCEPT, VERIFY_GREEDY, _call, _Generator
from ._ops import ops

# The path queries raise ValueErrors on every torch (_errors.typed: torch 2.15 hands a stable
# kernel's errors to Python as RuntimeErrors).
_isa, _force = _errors.typed(ops.isa), _errors.typed(ops._force_isa)

def verify_greedy(target_probs: torch.Tensor, draft_tokens: Tokens) -> Tuple[int, int]:
    """Greedy (temperature 0) verification of K draft tokens.

    The draft tokens are accepted while each equals the argmax of its row (ties to the
    lowest index, as `torch.argmax`); the emitted token is the argmax of the first row that
    misses, or of row K when all match. Rows after that one are never read. The emitted
    stream equals plain greedy decoding of the target.

    Args:
        target_probs (`torch.Tensor`): float32, float16 or bfloat16 `[K+1, V]` on the CPU, one row per position.
            Only the argmax of each row is used, so logits work as well as probabilities.
        draft_tokens (`torch.Tensor` or `list` of `int`): the K draft token ids, in `[0, V)`:
            a 1-D tensor of any integer dtype, or a list of ints (NumPy integers and 0-d
            integer tensors included).

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError: an argument of the wrong type or dtype (bool tokens included).
        ValueError: a wrong shape, a tensor not on the CPU, a token outside `[0, V)`, or NaN
            in a row that is read.
    """
    fast = (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor and target_probs.is_cpu
            and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64)
    if not fast:
        if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
            draft_tokens = _token_tensor(draft_tokens, "spec_verify.verify_greedy: draft_tokens",
                                         _vocab(target_probs))
        if not (type(target_probs) is _Tensor and target_probs.is_cpu):
            _check_on_cpu("verify_greedy", target_probs=target_probs)
    return _call(VERIFY_GREEDY, fast, None, target_probs, draft_tokens)


def accept(
    target_probs: torch.Tensor,
    draft_probs: Optional[torch.Tensor],
    draft_tokens: Tokens,
    generator: Optional[torch.Generator] = None,
    *,
    method: str = "token",
) -> Tuple[int, int]:
    """Speculative (rejection) sampling of one round (Leviathan et al. 2023, Chen et al. 2023).

    Token i is accepted iff `u_i * q_i(t_i) * P_i < p_i(t_i) * Q_i` (P_i, Q_i the float64
    masses of the rows, so rows need not be normalised); on the first rejection the emitted
    token is drawn from the residual `max(0, p_i * Q_i - q_i * P_i)`, and when every draft
    token is accepted, from `p_K`. The accepted tokens followed by the emitted one have the
    target's distribution.

    With `draft_probs` None the drafts are one-hot (n-gram and prompt-lookup drafts, greedy
    draft models: any drafter that proposes tokens without a distribution): token i is
    accepted iff `u_i * P_i < p_i(t_i)`, and on rejection the emitted token is drawn from
    `p_i` without `t_i`. Only target rows are read, once each.

    With `method="block"`, block verification (Sun et al., ICLR 2025): the same inputs, the
    same uniforms and the same output law, never fewer accepted tokens on average than
    token by token, but every row is read (no early exit). See the README.

    Args:
        target_probs (`torch.Tensor`): float32, float16 or bfloat16 `[K+1, V]` on the CPU, the target's
            probabilities (unnormalised is fine) at the K+1 positions.
        draft_probs (`torch.Tensor`, *optional*): float32, float16 or bfloat16 `[K, V]` on the CPU, the draft's
            probabilities the draft tokens were drawn from; None for one-hot drafts.
        draft_tokens (`torch.Tensor` or `list` of `int`): the K draft token ids, as for
            `verify_greedy`.
        generator (`torch.Generator`, *optional*): a CPU generator; exactly K+1 float64
            uniforms are drawn from it (as `torch.rand` would), whatever the outcome. The
            default generator when None.
        method (`str`, *optional*, defaults to `"token"`): `"token"` (token by token) or
            `"block"` (block verification).

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: a wrong shape, a tensor not on the CPU, a token outside `[0, V)`, or in
            a row that is read a NaN, negative or infinite value or zero mass. A call that
            raises leaves the generator as it was.
    """
    fast = (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor
            and (draft_probs is None or type(draft_probs) is _Tensor) and method == "token"
            and target_probs.is_cpu and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64
            and (draft_probs is None or draft_probs.is_cpu)
            and (generator is None or type(generator) is _Generator))
    if not fast:
        _check_generator("spec_verify.accept", generator)
        if method != "token":
            _check_method("accept", method)
        if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
            draft_tokens = _token_tensor(draft_tokens, "spec_verify.accept: draft_tokens", _vocab(target_probs))
        if not (type(target_probs) is _Tensor and target_probs.is_cpu
                and (draft_probs is None or (type(draft_probs) is _Tensor and draft_probs.is_cpu))):
            _check_on_cpu("accept", target_probs=target_probs,
                          **({} if draft_probs is None else {"draft_probs": draft_probs}))
    return _call(ACCEPT, fast, generator, target_probs, draft_probs, draft_tokens, generator, method)


def accept_with_uniforms(
    target_probs: torch.Tensor,
    draft_probs: Optional[torch.Tensor],
    draft_tokens: Tokens,
    uniforms: torch.Tensor,
    *,
    method: str = "token",
) -> Tuple[int, int]:
    """`accept` with its K+1 uniforms given: a pure function.

    Token by token, `uniforms[i]` decides position i (accept iff
    `u_i * q_i(t_i) * P_i < p_i(t_i) * Q_i`); `uniforms[K]` samples the emitted token.

    Args:
        target_probs (`torch.Tensor`): float32, float16 or bfloat16 `[K+1, V]` on the CPU, as for `accept`.
        draft_probs (`torch.Tensor`, *optional*): float32, float16 or bfloat16 `[K, V]` on the CPU, or None for
            one-hot drafts, as for `accept`.
        draft_tokens (`torch.Tensor` or `list` of `int`): the K draft token ids, as for
            `verify_greedy`.
        uniforms (`torch.Tensor`): float64 `[K+1]` on the CPU, each in `[0, 1)`.
        method (`str`, *optional*, defaults to `"token"`): as for `accept`.

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: as for `accept`, and a uniform outside `[0, 1)`.
    """
    if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
        draft_tokens = _token_tensor(draft_tokens, "spec_verify.accept_with_uniforms: draft_tokens",
                                     _vocab(target_probs))
    _check_method("accept_with_uniforms", method)
    _check_on_cpu("accept_with_uniforms", target_probs=target_probs, uniforms=uniforms,
                  **({} if draft_probs is None else {"draft_probs": draft_probs}))
    fast = (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor and type(uniforms) is _Tensor
            and (draft_probs is None or type(draft_probs) is _Tensor))
    return _call(ACCEPT, fast, None, target_probs, draft_probs, draft_tokens, None, method, uniforms)


def isa() -> str:
    """The instruction-set path in use.

    Chosen once: `SPEC_VERIFY_ISA` if set, else the best path this CPU can run.

    Returns:
        `str`: `"neon"`, `"avx512"`, `"avx2"` or `"scalar"`.

    Raises:
        ValueError: `SPEC_VERIFY_ISA` names an unknown path or one this CPU cannot run.
    """
    return _isa()


def available_isas() -> List[str]:
    """The instruction-set paths this build can run on this CPU.

    Returns:
        `List[str]`: path names, best first; `"scalar"` is always last.
    """
    return list(ops.available_isas())


def _force_isa(name: str) -> None:
    """Switch path for this process ("" restores the default). For tests and benchmarks."""
    _force(name)

