"""The argument handling every op wrapper shares, and that the decoders use too.

The op wrappers live by purpose in `_chains.py` (verify_greedy, accept), `_logits.py` (warp,
sample, accept_logits), `_trees.py` and `_batches.py`; they call the ops through `_calls.py`.
`decoder.py` and `tree_decoder.py` use the same token checks (`_token_tensor`, `_int_list`,
`_index`), so a token is handled one way everywhere: ints, NumPy integer scalars and 0-d
integer tensors (anything with `__index__`) and integer tensors of any integer dtype are
accepted; bool is a flag, not an id, and is a TypeError in a list as in a tensor; a value
that does not fit in int64 (a uint64 above 2^63 - 1, a Python int beyond the int64 range) is
a ValueError that shows the value as given. Values are checked against the vocabulary by the
ops themselves.
"""
from __future__ import annotations

import operator
from array import array
from typing import List, Optional, Sequence, Union

import torch

from ._layouts import refusal

Tokens = Union[torch.Tensor, Sequence[int]]

_Tensor = torch.Tensor
_uint64 = torch.uint64
_INTEGER_DTYPES = frozenset([torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                             torch.uint16, torch.uint32, torch.uint64])
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_is_compiling = torch.compiler.is_compiling


# Argument checks ----------------------------------------------------------------------------

def _kind(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {list(x.shape)}"
    return f"a {type(x).__name__}"


def _flag(value, what: str) -> bool:
    """`value` as a bool: a bool, or a NumPy bool scalar (as transformers users pass them);
    anything else is a TypeError naming `what` and the type with its module."""
    if type(value) is bool:
        return value
    t = type(value)
    if t.__module__ == "numpy" and t.__name__ in ("bool_", "bool"):
        return bool(value)
    name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
    raise TypeError(f"{what} must be a bool, got {name}")


def _index(value, what: str) -> int:
    """`value` as a Python int, with `operator.index` semantics (ints, NumPy integer scalars,
    0-d integer tensors); a bool is a TypeError. `what` names the argument in messages."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got bool")
    if isinstance(value, torch.Tensor):
        # Checked here rather than by Tensor.__index__, which takes a bool tensor as 0 or 1
        # and cannot give the value of a uint64 above 2^63 - 1.
        if value.dim() != 0 or value.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"{what} must be an int, got {_kind(value)}")
        if value.device.type == "meta":
            raise ValueError(f"{what} must hold a value, got a tensor on meta")
        return value.item()
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}") from None


def _outside(what: str, where: str, value: int, vocab: Optional[int]) -> str:
    if vocab is None:
        return f"{what}[{where}] = {value} is outside the range of token ids [0, 2^63)"
    return f"{what}[{where}] = {value} is outside the vocabulary [0, {vocab})"


def _int_list(seq: Sequence, what: str, vocab: Optional[int] = None) -> List[int]:
    """The elements of a list or tuple as Python ints that fit in int64 (see `_index`)."""
    values = [t if type(t) is int else _index(t, f"{what}[{i}]") for i, t in enumerate(seq)]
    if values and (min(values) < _INT64_MIN or max(values) > _INT64_MAX):
        i = next(i for i, t in enumerate(values) if not _INT64_MIN <= t <= _INT64_MAX)
        raise ValueError(_outside(what, str(i), values[i], vocab))
    return values


def _int64_tensor(values: List[int]) -> torch.Tensor:
    """A 1-D int64 tensor of Python ints already known to fit in int64. Through an
    `array.array` and `torch.frombuffer` rather than `torch.tensor(list)`, which costs most of
    a small tree call's fixed cost; under torch.compile, and for an empty list (frombuffer
    refuses an empty buffer), `torch.tensor`."""
    if not values or torch.compiler.is_compiling():
        return torch.tensor(values, dtype=torch.int64).reshape(len(values))
    return torch.frombuffer(array("q", values), dtype=torch.int64)


def _token_tensor(tokens, what: str, vocab: Optional[int] = None) -> torch.Tensor:
    """Token ids as an integer tensor on the CPU: the tensor itself if it is one (a uint64
    tensor viewed as int64 once its values are known to fit), else an int64 tensor made
    from a list or tuple of ints (see `_index`) or from a NumPy-like array.

    Shapes and the vocabulary are left to the caller (the ops check both). `what` names the
    argument in messages ("spec_verify.accept: draft_tokens", "draft_step's tokens");
    `vocab`, when known, is quoted in the message for a value beyond int64.

    Raises:
        TypeError: not a tensor, list, tuple or array; a non-integer (bool included) dtype
            or element.
        ValueError: a tensor not on the CPU; a value that does not fit in int64.
    """
    if not isinstance(tokens, torch.Tensor):
        if isinstance(tokens, (list, tuple)):
            if tokens and all(type(t) is int for t in tokens) and not _is_compiling():
                # Plain ints, eager: packed by array("q") (int64; an OverflowError for a value
                # beyond int64, reported below as given) and viewed without a copy, faster
                # than torch.tensor's way.
                try:
                    return torch.frombuffer(array("q", tokens), dtype=torch.int64)
                except OverflowError:
                    pass
            return _int64_tensor(_int_list(tokens, what, vocab))
        if hasattr(tokens, "__array__") and not isinstance(tokens, (str, bytes)):
            # NumPy arrays (and other array-likes), without importing NumPy.
            try:
                tokens = torch.as_tensor(tokens)
            except (TypeError, ValueError, RuntimeError) as e:
                raise TypeError(f"{what} must be a 1-D integer tensor or a list of ints, got "
                                f"{type(tokens).__name__} that torch cannot convert ({e})") from None
        else:
            raise TypeError(f"{what} must be a 1-D integer tensor or a list of ints, got {type(tokens).__name__}")
    if tokens.dtype not in _INTEGER_DTYPES:
        raise TypeError(f"{what} must have an integer dtype, got {tokens.dtype}")
    if tokens.device.type != "cpu":
        raise ValueError(f"{what} must be on the CPU, got a tensor on {tokens.device}")
    if tokens.dtype is _uint64:
        # torch has no comparison for uint64; the same bits read as int64 are negative
        # exactly for the values >= 2^63, which no conversion to int64 could keep.
        signed = tokens.view(torch.int64)
        bad = (signed < 0).nonzero()
        if bad.shape[0]:
            at = tuple(bad[0].tolist())
            raise ValueError(_outside(what, ", ".join(map(str, at)), tokens[at].item(), vocab))
        tokens = signed
    return tokens


def _vocab(rows) -> Optional[int]:
    # A nested tensor has no sizes to read: the op refuses it (_layouts.py).
    return rows.shape[1] if isinstance(rows, torch.Tensor) and rows.dim() == 2 and not rows.is_nested else None


def _check_on_cpu(op: str, **tensors) -> None:
    # Checked here, not in C++: a tensor on another device (meta included) would make the
    # dispatcher skip the CPU kernel altogether. Callers test the common case inline first,
    # so that a call with good arguments pays a few attribute reads and nothing more.
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"spec_verify.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"spec_verify.{op}: {name} must be on the CPU, got a tensor on {t.device}")
        message = refusal(op, name, t)  # a nested subclass would reach its own dispatch (_layouts.py)
        if message is not None:
            raise TypeError(message)


def _float(value, what: str) -> float:
    """`value` as a Python float: floats, ints, NumPy scalars (anything with `__float__`) and
    0-d real tensors; a bool (Python or NumPy) is a TypeError, as is a string."""
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool"):
        raise TypeError(f"{what} must be a float, got bool")
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype is torch.bool or value.is_complex():
            raise TypeError(f"{what} must be a float, got {_kind(value)}")
        if value.device.type == "meta":
            raise ValueError(f"{what} must hold a value, got a tensor on meta")
        return float(value.item())
    if isinstance(value, (str, bytes, complex)) or not (
            hasattr(type(value), "__float__") or hasattr(type(value), "__index__")):
        raise TypeError(f"{what} must be a float, got {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{what} must be a float, got {type(value).__name__} ({e})") from None


_METHODS = ("token", "block")


def _check_method(op: str, method) -> None:
    if type(method) is not str or method not in _METHODS:
        raise ValueError(f'spec_verify.{op}: method must be "token" or "block", got {method!r}')


def _type_name(x) -> str:
    """The type of `x` as a message names it: with its module unless a builtin (a NumPy
    Generator is "numpy.random._generator.Generator", not "Generator")."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _check_generator(op: str, generator, what: str = "generator") -> None:
    """`generator` None or a torch.Generator; `op` prefixes the message as it is given
    ("spec_verify.sample", "SpeculativeDecoder")."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{op}: {what} must be a torch.Generator or None, got {_type_name(generator)}")

