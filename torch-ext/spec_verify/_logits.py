"""The ops on logits rows: warp, sample and sample_with_uniforms, accept_logits and
accept_logits_with_uniforms (DESIGN.md, "Warping").

The warping parameters are keyword-only; each public function builds one `Warping` of them
(`_warping.py`: type and range checked, the message naming the function and the parameter)
and unpacks it into the op's arguments at the call. The decoders hand their own `Warping`,
built once, to `_accept_logits`. `_WARP_ARGS` is the parameters' part of the docstrings,
shared with the tree ops (`_trees.py`).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ._api import Tokens, _Tensor, _check_generator, _check_method, _check_on_cpu, _token_tensor, _uint64, _vocab
from ._calls import ACCEPT_LOGITS, SAMPLE, WARP, _call
from ._warping import Warping

_WARP_ARGS = """
        temperature (`float`, *optional*, defaults to 1.0): z = logits / temperature, a float32
            division; >= 0 and finite. 0 means greedy: the argmax (ties to the lowest index),
            and no uniform is drawn; the rows read are checked as at any temperature.
        top_k (`int`, *optional*, defaults to 0): keep the tokens that fewer than `top_k`
            tokens beat (ties at the k-th value kept); 0 = off.
        top_p (`float`, *optional*, defaults to 1.0): in (0, 1]; among the kept, keep a token
            iff the mass of the kept tokens strictly more probable than it is below
            `top_p` times the kept mass (a tie group at the cutoff is kept whole); 1 = off.
        min_p (`float`, *optional*, defaults to 0.0): in [0, 1); keep a token iff its
            probability is at least `min_p` times the largest; 0 = off."""


def warp(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> torch.Tensor:
    """The warped distribution of logits rows: temperature, then top-k, top-p and min-p.

    Per row: z = x / T; w = exp(z - max z) in float32 by the one exp routine every path
    shares; the cuts keep a set of tokens (DESIGN.md, "Warping"); the row is w on that set,
    0 elsewhere, normalised to sum 1. It is the distribution `sample` draws from and that
    `accept_logits` verifies against, bit for bit the same on every instruction-set path.

    Args:
        logits (`torch.Tensor`): float32, float16 or bfloat16 `[V]` or `[R, V]` on the CPU. -inf masks a token;
            NaN and +inf are errors.{args}

    Returns:
        `torch.Tensor`: float32 of the shape of `logits`, each row summing to 1 (one-hot at
        the argmax when `temperature` is 0).

    Raises:
        TypeError: `logits` not a float32, float16 or bfloat16 tensor; a parameter of the wrong type (bool is not
            a number).
        ValueError: a parameter out of range; a wrong shape or V = 0; a tensor not on the
            CPU; in a row, NaN, +inf, no finite value, or a logit the temperature makes
            overflow (the message names the row and column).
    """
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.warp")
    fast = type(logits) is _Tensor and logits.is_cpu
    if not fast:
        _check_on_cpu("warp", logits=logits)
    return _call(WARP, fast, None, logits, *warping)


def sample(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
):
    """One token per logits row, drawn from the row's warped distribution (see `warp`).

    Exactly one float64 uniform is drawn per row, in row order (the stream
    `torch.rand(R, dtype=torch.float64, generator=generator)` gives); the token is the
    smallest index whose running mass exceeds u times the row's mass, found by the blocked
    scan of every op. With `temperature` 0 the token is the argmax and nothing is drawn.

    Args:
        logits (`torch.Tensor`): float32, float16 or bfloat16 `[V]` or `[R, V]` on the CPU, as for `warp`.{args}
        generator (`torch.Generator`, *optional*): a CPU generator; the default generator
            when None.

    Returns:
        `torch.Tensor`: int64 tokens of shape `logits.shape[:-1]` (0-d for a `[V]` row).

    Raises:
        TypeError, ValueError: as for `warp`; `generator` not a `torch.Generator`. A call
            that raises leaves the generator as it was.
    """
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.sample")
    _check_generator("spec_verify.sample", generator)
    fast = type(logits) is _Tensor and logits.is_cpu
    if not fast:
        _check_on_cpu("sample", logits=logits)
    return _call(SAMPLE, fast, generator, logits, *warping, generator)


def sample_with_uniforms(
    logits: torch.Tensor,
    uniforms: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
):
    """`sample` with its uniforms given: a pure function.

    Args:
        logits (`torch.Tensor`): float32, float16 or bfloat16 `[V]` or `[R, V]` on the CPU, as for `warp`.
        uniforms (`torch.Tensor`): float64 on the CPU, `[R]` (`[]` for a `[V]` row), each
            in `[0, 1)`; `uniforms[r]` draws row r's token (unused when `temperature` is 0,
            but still checked).{args}

    Returns:
        `torch.Tensor`: int64 tokens of shape `logits.shape[:-1]`.

    Raises:
        TypeError, ValueError: as for `warp`; `uniforms` not float64, of the wrong shape, or
            holding a value outside `[0, 1)`.
    """
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.sample_with_uniforms")
    fast = type(logits) is _Tensor and type(uniforms) is _Tensor and logits.is_cpu and uniforms.is_cpu
    if not fast:
        _check_on_cpu("sample_with_uniforms", logits=logits, uniforms=uniforms)
    return _call(SAMPLE, fast, None, logits, *warping, None, uniforms)


def _accept_logits(op: str, target_logits, draft_logits, draft_tokens, warping: Warping, generator, method: str,
                   uniforms: Optional[torch.Tensor] = None) -> Tuple[int, int]:
    """The round of `accept_logits` (`uniforms` None: drawn from `generator`) or of
    `accept_logits_with_uniforms` (`op` names which), for a `warping` already built: the
    decoders call it with theirs, checked once when they were made."""
    if method != "token":
        _check_method(op, method)
    if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
        draft_tokens = _token_tensor(draft_tokens, f"spec_verify.{op}: draft_tokens", _vocab(target_logits))
    if not (type(target_logits) is _Tensor and target_logits.is_cpu):
        _check_on_cpu(op, target_logits=target_logits)
    if draft_logits is not None and not (type(draft_logits) is _Tensor and draft_logits.is_cpu):
        _check_on_cpu(op, draft_logits=draft_logits)
    fast = (type(target_logits) is _Tensor and type(draft_tokens) is _Tensor
            and (draft_logits is None or type(draft_logits) is _Tensor))
    if uniforms is None:
        _check_generator(f"spec_verify.{op}", generator)
        return _call(ACCEPT_LOGITS, fast, generator, target_logits, draft_logits, draft_tokens, *warping, generator,
                     method)
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu(op, uniforms=uniforms)
    fast = fast and type(uniforms) is _Tensor
    return _call(ACCEPT_LOGITS, fast, None, target_logits, draft_logits, draft_tokens, *warping, None, method,
                 uniforms)


def accept_logits(
    target_logits: torch.Tensor,
    draft_logits: Optional[torch.Tensor],
    draft_tokens: Tokens,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
    method: str = "token",
) -> Tuple[int, int]:
    """Speculative sampling of one round from logits: `accept` on the warped rows.

    Every row the round reads, target and draft alike, is warped with the same parameters
    (see `warp`), so the draft tokens must have been drawn from the draft's warped rows
    (`sample` with the same parameters does that); the accepted tokens followed by the
    emitted one then have the law of the target's warped rows. Exactly K+1 float64
    uniforms are drawn, whatever the outcome. With `temperature` 0 this is `verify_greedy`
    on `target_logits` (with the logits rules: +inf and rows with no finite value raise;
    `draft_logits` unread, may be None, checked when given) and nothing is drawn. Token by
    token, rows after the deciding position are never read. `draft_logits` None means
    one-hot drafts (drafts proposed without a distribution), as `accept` with
    `draft_probs` None: only the target's rows are read.

    Args:
        target_logits (`torch.Tensor`): float32, float16 or bfloat16 `[K+1, V]` on the CPU, the target's logits
            at the K+1 positions.
        draft_logits (`torch.Tensor`, *optional*): float32, float16 or bfloat16 `[K, V]` on the CPU, the draft's
            logits the draft tokens were sampled from (warped with the same parameters);
            None for one-hot drafts.
        draft_tokens (`torch.Tensor` or `list` of `int`): the K draft token ids, as for
            `verify_greedy`.{args}
        generator (`torch.Generator`, *optional*): a CPU generator; the default generator
            when None.
        method (`str`, *optional*, defaults to `"token"`): `"token"` or `"block"` (block
            verification), as for `accept`.

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError: an argument or parameter of the wrong type or dtype.
        ValueError: a parameter out of range; a method other than "token" and "block"; a
            wrong shape; a tensor not on the CPU; a token outside `[0, V)`; in a row that is
            read, NaN, +inf, no finite value, or a logit the temperature makes overflow. A
            call that raises leaves the generator as it was.
    """
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.accept_logits")
    return _accept_logits("accept_logits", target_logits, draft_logits, draft_tokens, warping, generator, method)


def accept_logits_with_uniforms(
    target_logits: torch.Tensor,
    draft_logits: Optional[torch.Tensor],
    draft_tokens: Tokens,
    uniforms: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    method: str = "token",
) -> Tuple[int, int]:
    """`accept_logits` with its K+1 uniforms given: a pure function.

    Args:
        target_logits (`torch.Tensor`): float32, float16 or bfloat16 `[K+1, V]` on the CPU, as for `accept_logits`.
        draft_logits (`torch.Tensor`, *optional*): float32, float16 or bfloat16 `[K, V]` on the CPU, as for
            `accept_logits`.
        draft_tokens (`torch.Tensor` or `list` of `int`): the K draft token ids.
        uniforms (`torch.Tensor`): float64 `[K+1]` on the CPU, each in `[0, 1)`:
            `uniforms[i]` decides position i, `uniforms[K]` draws the emitted token
            (unused when `temperature` is 0, but still checked).{args}
        method (`str`, *optional*, defaults to `"token"`): as for `accept_logits`.

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError, ValueError: as for `accept_logits`, and `uniforms` not float64, of the
            wrong shape, or holding a value outside `[0, 1)`.
    """
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.accept_logits_with_uniforms")
    return _accept_logits("accept_logits_with_uniforms", target_logits, draft_logits, draft_tokens, warping, None,
                          method, uniforms)


for _f in (warp, sample, sample_with_uniforms, accept_logits, accept_logits_with_uniforms):
    _f.__doc__ = _f.__doc__.replace("{args}", _WARP_ARGS)
del _f

