"""The verification ops as Python functions, and the argument checks they share with the decoder.

The package's `__init__` re-exports the public functions; `decoder.py` calls them and uses
the same token checks (`_token_tensor`, `_int_list`, `_index`), so a token is handled one
way everywhere: ints, NumPy integer scalars and 0-d integer tensors (anything with
`__index__`) and integer tensors of any integer dtype are accepted; bool is a flag, not an
id, and is a TypeError in a list as in a tensor; a value that does not fit in int64 (a
uint64 above 2^63 - 1, a Python int beyond the int64 range) is a ValueError that shows the
value as given. Values are checked against the vocabulary by the ops themselves.

The fake (meta) implementations of the ops, used by torch.compile and opcheck, are
registered here too.
"""
from __future__ import annotations

import operator
from array import array
from typing import List, Optional, Sequence, Tuple, Union

import torch

from . import _stable
from ._layouts import refusal
from ._ops import add_op_namespace_prefix, ops

Tokens = Union[torch.Tensor, Sequence[int]]

_Tensor = torch.Tensor
_uint64 = torch.uint64
_INTEGER_DTYPES = frozenset([torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                             torch.uint16, torch.uint32, torch.uint64])
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# The overloads themselves: calling them skips the overload resolution of ops.<name>.
_verify_greedy = ops.verify_greedy.default
_accept = ops.accept.default
_accept_with_uniforms = ops.accept_with_uniforms.default
_warp = ops.warp.default
_sample = ops.sample.default
_sample_with_uniforms = ops.sample_with_uniforms.default
_sample_with_bounds = ops.sample_with_bounds.default
_accept_logits = ops.accept_logits.default
_accept_logits_with_uniforms = ops.accept_logits_with_uniforms.default
_verify_tree = ops.verify_tree.default
_verify_tree_with_uniforms = ops.verify_tree_with_uniforms.default
_verify_tree_probs = ops.verify_tree_probs.default
_verify_tree_probs_with_uniforms = ops.verify_tree_probs_with_uniforms.default
_verify_batch = ops.verify_batch.default
_verify_batch_probs = ops.verify_batch_probs.default

# The eager fast path of `accept` (and `verify_greedy`, `sample`, `accept_logits`) skips two costs of a Python call into
# an op, together about 1.1 us of a call that costs 3-4 us at small V (benchmarks/compare.py's
# fixed-cost breakdown; README, "Measured"):
#  - OpOverload.__call__, a Python frame around the builtin that parses the arguments
#    (`_op`); its own `__call__` is just `return self._op(*args, **kwargs)`.
#  - torch's search for `__torch_function__` on every argument that is neither an exact
#    Tensor nor a basic Python type: on a torch.Generator it is an attribute lookup that
#    fails, with an AttributeError formatted and discarded on every call (about 0.6 us).
#    Inside DisableTorchFunctionSubclass that search is skipped; it changes nothing else for
#    these arguments (exact Tensors and a torch.Generator, which have no override; torch
#    function modes still apply).
# Under torch.compile the wrappers call the OpOverload, as before, which Dynamo traces.
_accept_op = _accept._op
_verify_greedy_op = _verify_greedy._op
_sample_op = _sample._op
_sample_with_bounds_op = _sample_with_bounds._op
_accept_logits_op = _accept_logits._op
_verify_tree_op = _verify_tree._op
_verify_tree_with_uniforms_op = _verify_tree_with_uniforms._op
_verify_tree_probs_op = _verify_tree_probs._op
_verify_tree_probs_with_uniforms_op = _verify_tree_probs_with_uniforms._op
# The tree ops' _ints twins take `parents` as int[]: a list of Python ints goes in as it is
# (the argument parser reads it, about 1.2 us more than a tensor), where making a tensor of it
# costs about 2.5 us.
_verify_tree_ints_op = ops._verify_tree_ints.default._op
_verify_tree_with_uniforms_ints_op = ops._verify_tree_with_uniforms_ints.default._op
_verify_tree_probs_ints_op = ops._verify_tree_probs_ints.default._op
_verify_tree_probs_with_uniforms_ints_op = ops._verify_tree_probs_with_uniforms_ints.default._op
# The stable-ABI build (torch-stable-abi213-*): the ops that take a generator run their Python
# kernels (_stable.py), called directly on the eager fast paths; every native op's type
# errors become TypeErrors again. The OpOverloads stay what torch.compile traces.
if _stable.is_stable(ops):
    _drawn_kernels = _stable.register(ops, add_op_namespace_prefix)
    _accept_op = _drawn_kernels["accept"]
    _sample_op = _drawn_kernels["sample"]
    _sample_with_bounds_op = _drawn_kernels["sample_with_bounds"]
    _accept_logits_op = _drawn_kernels["accept_logits"]
    _verify_tree_op = _drawn_kernels["verify_tree"]
    _verify_tree_probs_op = _drawn_kernels["verify_tree_probs"]
    _verify_tree_ints_op = _drawn_kernels["_verify_tree_ints"]
    _verify_tree_probs_ints_op = _drawn_kernels["_verify_tree_probs_ints"]
    _verify_greedy_op = _stable.typed(_verify_greedy_op)
    _verify_tree_with_uniforms_op = _stable.typed(_verify_tree_with_uniforms_op)
    _verify_tree_probs_with_uniforms_op = _stable.typed(_verify_tree_probs_with_uniforms_op)
    _verify_tree_with_uniforms_ints_op = _stable.typed(_verify_tree_with_uniforms_ints_op)
    _verify_tree_probs_with_uniforms_ints_op = _stable.typed(_verify_tree_probs_with_uniforms_ints_op)
    _verify_greedy = _stable.typed(_verify_greedy)
    _accept_with_uniforms = _stable.typed(_accept_with_uniforms)
    _warp = _stable.typed(_warp)
    _sample_with_uniforms = _stable.typed(_sample_with_uniforms)
    _accept_logits_with_uniforms = _stable.typed(_accept_logits_with_uniforms)
    _verify_tree_with_uniforms = _stable.typed(_verify_tree_with_uniforms)
    _verify_tree_probs_with_uniforms = _stable.typed(_verify_tree_probs_with_uniforms)
_Generator = torch.Generator
_INT_ONLY = frozenset((int,))
_no_subclass_torch_function = torch._C.DisableTorchFunctionSubclass
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
    `array.array` and `torch.frombuffer` (about 2 us) rather than `torch.tensor(list)` (6 to
    10 us for a list of 8 to 32 ints, most of a small tree call's fixed cost); under
    torch.compile, and for an empty list (frombuffer refuses an empty buffer), `torch.tensor`."""
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
                # beyond int64, reported below as given) and viewed without a copy: four
                # tokens with the checks cost 1.4 us where torch.tensor's way cost 5.4.
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


_F32_MAX = 3.4028234663852886e38  # the largest finite float32: a temperature is used as one


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


def _warp_params(op: str, temperature, top_k, top_p, min_p) -> Tuple[float, int, float, float]:
    """The warping parameters, checked, as (float, int, float, float). `op` prefixes messages
    ("spec_verify.warp", "SpeculativeDecoder.from_logits")."""
    # The common case (Python numbers in range) costs a few type and range tests.
    if (type(temperature) is float and type(top_k) is int and type(top_p) is float
            and type(min_p) is float and 0.0 <= temperature <= _F32_MAX and 0 <= top_k <= _INT64_MAX
            and 0.0 < top_p <= 1.0 and 0.0 <= min_p < 1.0):
        return temperature, top_k, top_p, min_p
    temperature = _float(temperature, f"{op}: temperature")
    top_k = _index(top_k, f"{op}: top_k")
    top_p = _float(top_p, f"{op}: top_p")
    min_p = _float(min_p, f"{op}: min_p")
    if not 0.0 <= temperature <= _F32_MAX:
        raise ValueError(f"{op}: temperature must be a float >= 0 (0 = greedy), finite in float32, "
                         f"got {temperature}")
    if not 0 <= top_k <= _INT64_MAX:
        raise ValueError(f"{op}: top_k must be an int >= 0 (0 = off), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"{op}: top_p must be a float in (0, 1] (1 = off), got {top_p}")
    if not 0.0 <= min_p < 1.0:
        raise ValueError(f"{op}: min_p must be a float in [0, 1) (0 = off), got {min_p}")
    return temperature, top_k, top_p, min_p


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


# The ops ------------------------------------------------------------------------------------
#
# Every wrapper starts with one inline test of the common case (tensors of the right type on
# the CPU, tokens not uint64), so a call with good tensor arguments costs a few attribute
# reads before the op; anything else goes through the checks above.

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
    if (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor and target_probs.is_cpu
            and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64 and not _is_compiling()):
        return _verify_greedy_op(target_probs, draft_tokens)  # eager, see `_accept_op`
    if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
        draft_tokens = _token_tensor(draft_tokens, "spec_verify.verify_greedy: draft_tokens", _vocab(target_probs))
    if not (type(target_probs) is _Tensor and target_probs.is_cpu):
        _check_on_cpu("verify_greedy", target_probs=target_probs)
    return _verify_greedy(target_probs, draft_tokens)


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
    if (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor
            and (draft_probs is None or type(draft_probs) is _Tensor) and method == "token"
            and target_probs.is_cpu and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64
            and (draft_probs is None or draft_probs.is_cpu) and not _is_compiling()):
        # The common case, eager: tensors on the CPU, the op checks the rest (see `_accept_op`).
        if generator is None:
            return _accept_op(target_probs, draft_probs, draft_tokens)
        if type(generator) is _Generator:
            with _no_subclass_torch_function():
                return _accept_op(target_probs, draft_probs, draft_tokens, generator)
    _check_generator("spec_verify.accept", generator)
    if method != "token":
        _check_method("accept", method)
    if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
        draft_tokens = _token_tensor(draft_tokens, "spec_verify.accept: draft_tokens", _vocab(target_probs))
    if not (type(target_probs) is _Tensor and target_probs.is_cpu
            and (draft_probs is None or (type(draft_probs) is _Tensor and draft_probs.is_cpu))):
        _check_on_cpu("accept", target_probs=target_probs,
                      **({} if draft_probs is None else {"draft_probs": draft_probs}))
    return _accept(target_probs, draft_probs, draft_tokens, generator, method)


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
    return _accept_with_uniforms(target_probs, draft_probs, draft_tokens, uniforms, method)


# Logits in: the warp (DESIGN.md, "Warping") ------------------------------------------------
#
# Shared by the five ops below. The parameters are keyword-only; each is checked here (type
# and range, the message naming it) before the op checks it again.

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
    temperature, top_k, top_p, min_p = _warp_params("spec_verify.warp", temperature, top_k, top_p, min_p)
    if not (type(logits) is _Tensor and logits.is_cpu):
        _check_on_cpu("warp", logits=logits)
    return _warp(logits, temperature, top_k, top_p, min_p)


def sample(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
    return_bounds: bool = False,
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
        return_bounds (`bool`, *optional*, defaults to False): also return each row's draft
            bounds, for `accept_logits(..., draft_bounds=...)` (the same tokens either way).

    Returns:
        `torch.Tensor`: int64 tokens of shape `logits.shape[:-1]` (0-d for a `[V]` row). With
        `return_bounds`, `(tokens, bounds)`: `bounds` float64 of shape `logits.shape[:-1] + (3,)`,
        per row the warped weight of its token and a range `[lo, hi]` holding the warped
        row's mass (`lo == hi` where the row was warped exactly). `accept_logits` given them
        for these rows tests an acceptance without warping the draft row again. The one
        output that is not the same bits on every instruction-set path: where `lo < hi`,
        `lo` and `hi` come from float32 sums each path adds in its own lane order, so they
        may differ in the last bits between paths (the tokens, the weights and which rows
        have `lo == hi` do not). Each path's range holds the same exact mass, and
        `accept_logits` decides from it only where that is certain, else from the draft row
        itself, so its outcome is the same with bounds made on any path, on any path.

    Raises:
        TypeError, ValueError: as for `warp`; `generator` not a `torch.Generator`. A call
            that raises leaves the generator as it was.
    """
    temperature, top_k, top_p, min_p = _warp_params("spec_verify.sample", temperature, top_k, top_p, min_p)
    _check_generator("spec_verify.sample", generator)
    if not (type(logits) is _Tensor and logits.is_cpu):
        _check_on_cpu("sample", logits=logits)
    if return_bounds is not False and _flag(return_bounds, "spec_verify.sample: return_bounds"):
        if not _is_compiling() and (generator is None or type(generator) is _Generator):
            with _no_subclass_torch_function():
                return _sample_with_bounds_op(logits, None, temperature, top_k, top_p, min_p, generator)
        return _sample_with_bounds(logits, None, temperature, top_k, top_p, min_p, generator)
    if not _is_compiling():  # eager: the builtin, see `_accept_op`
        if generator is None:
            return _sample_op(logits, temperature, top_k, top_p, min_p)
        if type(generator) is _Generator:
            with _no_subclass_torch_function():
                return _sample_op(logits, temperature, top_k, top_p, min_p, generator)
    return _sample(logits, temperature, top_k, top_p, min_p, generator)


def sample_with_uniforms(
    logits: torch.Tensor,
    uniforms: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    return_bounds: bool = False,
):
    """`sample` with its uniforms given: a pure function.

    Args:
        logits (`torch.Tensor`): float32, float16 or bfloat16 `[V]` or `[R, V]` on the CPU, as for `warp`.
        uniforms (`torch.Tensor`): float64 on the CPU, `[R]` (`[]` for a `[V]` row), each
            in `[0, 1)`; `uniforms[r]` draws row r's token (unused when `temperature` is 0,
            but still checked).{args}
        return_bounds (`bool`, *optional*, defaults to False): as for `sample`.

    Returns:
        `torch.Tensor`: int64 tokens of shape `logits.shape[:-1]`; with `return_bounds`,
        `(tokens, bounds)` as `sample` returns them.

    Raises:
        TypeError, ValueError: as for `warp`; `uniforms` not float64, of the wrong shape, or
            holding a value outside `[0, 1)`.
    """
    temperature, top_k, top_p, min_p = _warp_params("spec_verify.sample_with_uniforms", temperature, top_k,
                                                    top_p, min_p)
    if not (type(logits) is _Tensor and type(uniforms) is _Tensor and logits.is_cpu and uniforms.is_cpu):
        _check_on_cpu("sample_with_uniforms", logits=logits, uniforms=uniforms)
    if return_bounds is not False and _flag(return_bounds, "spec_verify.sample_with_uniforms: return_bounds"):
        return _sample_with_bounds(logits, uniforms, temperature, top_k, top_p, min_p)
    return _sample_with_uniforms(logits, uniforms, temperature, top_k, top_p, min_p)


def _logits_args(op: str, target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p,
                 method):
    params = _warp_params(f"spec_verify.{op}", temperature, top_k, top_p, min_p)
    if method != "token":
        _check_method(op, method)
    if not (type(draft_tokens) is _Tensor and draft_tokens.is_cpu and draft_tokens.dtype is not _uint64):
        draft_tokens = _token_tensor(draft_tokens, f"spec_verify.{op}: draft_tokens", _vocab(target_logits))
    if not (type(target_logits) is _Tensor and target_logits.is_cpu):
        _check_on_cpu(op, target_logits=target_logits)
    if draft_logits is not None and not (type(draft_logits) is _Tensor and draft_logits.is_cpu):
        _check_on_cpu(op, draft_logits=draft_logits)
    return draft_tokens, params


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
    draft_bounds: Optional[torch.Tensor] = None,
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
        draft_bounds (`torch.Tensor`, *optional*): float64 `[K, 3]`, what
            `sample(draft_logits[i], ..., return_bounds=True)` returned for each draft row
            (stacked), with these warping parameters. A position is then accepted from its
            bounds and the target row alone where that is certain, so the draft rows of
            accepted positions are not warped again; the outcome is the same as without
            them. A position that is not is decided as without them, and its bounds are
            checked against its draft row (ValueError if they cannot be that row's). Bounds
            not from `sample` on these rows are the caller's error and may go unnoticed on
            accepted positions. Token-wise only: block verification reads every row and
            leaves them unused.

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError: an argument or parameter of the wrong type or dtype.
        ValueError: a parameter out of range; a method other than "token" and "block"; a
            wrong shape; a tensor not on the CPU; a token outside `[0, V)`; in a row that is
            read, NaN, +inf, no finite value, or a logit the temperature makes overflow;
            `draft_bounds` without `draft_logits`, malformed, or not holding for a draft row
            that is read. A call that raises leaves the generator as it was.
    """
    draft_tokens, (temperature, top_k, top_p, min_p) = _logits_args(
        "accept_logits", target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p, method)
    _check_generator("spec_verify.accept_logits", generator)
    if draft_bounds is not None and not (type(draft_bounds) is _Tensor and draft_bounds.is_cpu):
        _check_on_cpu("accept_logits", draft_bounds=draft_bounds)
    if not _is_compiling() and method == "token":  # eager: the builtin, see `_accept_op`
        if generator is None and draft_bounds is None:
            return _accept_logits_op(target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p)
        if generator is None or type(generator) is _Generator:
            with _no_subclass_torch_function():
                return _accept_logits_op(target_logits, draft_logits, draft_tokens, temperature, top_k, top_p,
                                         min_p, generator, "token", draft_bounds)
    return _accept_logits(target_logits, draft_logits, draft_tokens, temperature, top_k, top_p, min_p,
                          generator, method, draft_bounds)


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
    draft_bounds: Optional[torch.Tensor] = None,
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
        draft_bounds (`torch.Tensor`, *optional*): as for `accept_logits`.

    Returns:
        `Tuple[int, int]`: `(n_accepted, next_token)`; SymInts under `torch.compile`.

    Raises:
        TypeError, ValueError: as for `accept_logits`, and `uniforms` not float64, of the
            wrong shape, or holding a value outside `[0, 1)`.
    """
    draft_tokens, (temperature, top_k, top_p, min_p) = _logits_args(
        "accept_logits_with_uniforms", target_logits, draft_logits, draft_tokens, temperature, top_k,
        top_p, min_p, method)
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu("accept_logits_with_uniforms", uniforms=uniforms)
    if draft_bounds is not None and not (type(draft_bounds) is _Tensor and draft_bounds.is_cpu):
        _check_on_cpu("accept_logits_with_uniforms", draft_bounds=draft_bounds)
    return _accept_logits_with_uniforms(target_logits, draft_logits, draft_tokens, uniforms, temperature,
                                        top_k, top_p, min_p, method, draft_bounds)


# Trees (DESIGN.md, "Trees") ------------------------------------------------------------------

_TREE_DOC = """
    A tree of N draft nodes in topological order: `tokens[j]` and `parents[j]` (in [-1, j):
    -1 for a child of the root). Row 0 of the target's rows is its distribution after the
    verified prefix, row j+1 after the path to node j; the draft's rows likewise (row j+1:
    the distribution node j's children were drawn from). Children are tried in index order:
    - greedy: follow the first child holding the argmax of the current row; emit the argmax
      where it stops (plain greedy decoding of the target, token for token);
    - without draft rows (deterministic children: candidates such as a draft's top-k or
      several prompt-lookup matches; sibling tokens must be distinct): child c is accepted
      with probability r(c) / mass(r), r the current row without the tokens of its children
      rejected so far; if all are rejected, the token is drawn from what is left of r;
    - with draft rows (children drawn independently from the draft row of their parent;
      repeats allowed): SpecInfer's rule, accept c with probability min(1, r(c) / q(c)) on
      normalised rows, else r = max(0, r - q) renormalised; if all are rejected, draw from r.
    Exactly N+1 float64 uniforms when sampling: node j's decides node j when it is tried, the
    last draws the emitted token. Only the rows of the nodes on the accepted path (and the
    root) are read. A chain (each node the only child of the one before) gives exactly the
    results of `verify_greedy` / `accept` / `accept_logits` with the same uniforms.

    Returns:
        `Tuple[torch.Tensor, int]`: `(path, next_token)`: the accepted nodes' indices from the
        root down (int64, possibly empty), and the token emitted after them.
"""


def _tree_args(op: str, target, tokens, parents, draft, names):
    # The common case (tensors on the CPU) tested inline: a call with good arguments pays a
    # few attribute reads here.
    if not (type(tokens) is _Tensor and tokens.is_cpu and tokens.dtype is not _uint64):
        tokens = _token_tensor(tokens, f"spec_verify.{op}: tokens", _vocab(target))
    if not (type(parents) is _Tensor and parents.is_cpu and parents.dtype is not _uint64):
        # A list of plain ints within int64, eager: kept as it is for the ops' _ints twins
        # (`_exact_tensors`, `_tree_parents`); anything else becomes a tensor (or an error) here.
        # (Type and range checked in C: set(map(type)) and array("q"), about 0.6 us for 8.)
        keep = type(parents) is list and set(map(type, parents)) == _INT_ONLY and not _is_compiling()
        if keep:
            try:
                array("q", parents)
            except OverflowError:
                keep = False
        if not keep:
            parents = _token_tensor(parents, f"spec_verify.{op}: parents")
    if not (type(target) is _Tensor and target.is_cpu and
            (draft is None or (type(draft) is _Tensor and draft.is_cpu))):
        cpu = {names[0]: target}
        if draft is not None:
            cpu[names[1]] = draft
        _check_on_cpu(op, **cpu)
    return tokens, parents


def _exact_tensors(target, tokens, parents, draft) -> bool:
    """Whether a tree op may be called through its builtin (see `_accept_op`: about 0.4 us a
    call, 0.6 more with a generator): eager, every tensor argument an exact Tensor (a
    subclass keeps its overrides through the OpOverload; torch.compile traces that), parents
    an exact Tensor or the list `_tree_args` kept (for the _ints op's builtin)."""
    return (type(target) is _Tensor and type(tokens) is _Tensor and
            (type(parents) is _Tensor or type(parents) is list)
            and (draft is None or type(draft) is _Tensor) and not _is_compiling())


def _tree_parents(op: str, parents):
    """`parents` as the OpOverloads take it: the list `_tree_args` kept, as a tensor."""
    return _token_tensor(parents, f"spec_verify.{op}: parents") if type(parents) is list else parents


def verify_tree(
    target_logits: torch.Tensor,
    tokens: Tokens,
    parents: Tokens,
    draft_logits: Optional[torch.Tensor] = None,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
):
    """Tree verification on logits rows, warped as `warp` warps them (temperature 0: greedy).
    {tree}
    Args:
        target_logits (`torch.Tensor`): float32, float16 or bfloat16 `[N+1, V]` on the CPU.
        tokens, parents: the N nodes' tokens (in `[0, V)`) and parents, as 1-D integer tensors
            or lists of ints.
        draft_logits (`torch.Tensor`, *optional*): `[N+1, V]`, the draft's logits the children
            were sampled from (with the same warping); None for deterministic children.{args}
        generator (`torch.Generator`, *optional*): a CPU generator; the default one when None.

    Raises:
        TypeError, ValueError: as for `accept_logits`; parents not in topological order
            (`parents[j]` outside `[-1, j)`); repeated sibling tokens without draft rows. A call
            that raises leaves the generator as it was.
    """
    temperature, top_k, top_p, min_p = _warp_params("spec_verify.verify_tree", temperature, top_k, top_p, min_p)
    _check_generator("spec_verify.verify_tree", generator)
    tokens, parents = _tree_args("verify_tree", target_logits, tokens, parents, draft_logits,
                                 ("target_logits", "draft_logits"))
    if _exact_tensors(target_logits, tokens, parents, draft_logits):
        verify = _verify_tree_ints_op if type(parents) is list else _verify_tree_op
        if generator is None:
            return verify(target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p)
        if type(generator) is _Generator:
            with _no_subclass_torch_function():
                return verify(target_logits, tokens, parents, draft_logits, temperature, top_k, top_p, min_p,
                              generator)
    return _verify_tree(target_logits, tokens, _tree_parents("verify_tree", parents), draft_logits, temperature,
                        top_k, top_p, min_p, generator)


def verify_tree_with_uniforms(
    target_logits: torch.Tensor,
    tokens: Tokens,
    parents: Tokens,
    draft_logits: Optional[torch.Tensor],
    uniforms: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
):
    """`verify_tree` with its N+1 uniforms given (float64 `[N+1]`, each in `[0, 1)`): a pure
    function."""
    temperature, top_k, top_p, min_p = _warp_params("spec_verify.verify_tree_with_uniforms", temperature, top_k,
                                                    top_p, min_p)
    tokens, parents = _tree_args("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                 ("target_logits", "draft_logits"))
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu("verify_tree_with_uniforms", uniforms=uniforms)
    if type(uniforms) is _Tensor and _exact_tensors(target_logits, tokens, parents, draft_logits):
        verify = _verify_tree_with_uniforms_ints_op if type(parents) is list else _verify_tree_with_uniforms_op
        return verify(target_logits, tokens, parents, draft_logits, uniforms, temperature, top_k, top_p, min_p)
    return _verify_tree_with_uniforms(target_logits, tokens, _tree_parents("verify_tree_with_uniforms", parents),
                                      draft_logits, uniforms, temperature, top_k, top_p, min_p)


def verify_tree_probs(
    target_probs: torch.Tensor,
    tokens: Tokens,
    parents: Tokens,
    draft_probs: Optional[torch.Tensor] = None,
    *,
    greedy: bool = False,
    generator: Optional[torch.Generator] = None,
):
    """Tree verification on probability rows (unnormalised is fine), as `accept` takes them.
    {tree}
    Args:
        target_probs (`torch.Tensor`): float32, float16 or bfloat16 `[N+1, V]` on the CPU.
        tokens, parents: the N nodes' tokens and parents, as for `verify_tree`.
        draft_probs (`torch.Tensor`, *optional*): `[N+1, V]`, the distributions the children
            were drawn from; None for deterministic children.
        greedy (`bool`, *optional*, defaults to False): greedy verification (argmax of each
            row; nothing drawn, draft rows unused).
        generator (`torch.Generator`, *optional*): a CPU generator; the default one when None.

    Raises:
        TypeError, ValueError: as for `accept`, and as for `verify_tree`.
    """
    if type(greedy) is not bool:
        raise TypeError(f"spec_verify.verify_tree_probs: greedy must be a bool, got {type(greedy).__name__}")
    _check_generator("spec_verify.verify_tree_probs", generator)
    tokens, parents = _tree_args("verify_tree_probs", target_probs, tokens, parents, draft_probs,
                                 ("target_probs", "draft_probs"))
    if _exact_tensors(target_probs, tokens, parents, draft_probs):
        verify = _verify_tree_probs_ints_op if type(parents) is list else _verify_tree_probs_op
        if generator is None:
            return verify(target_probs, tokens, parents, draft_probs, greedy)
        if type(generator) is _Generator:
            with _no_subclass_torch_function():
                return verify(target_probs, tokens, parents, draft_probs, greedy, generator)
    return _verify_tree_probs(target_probs, tokens, _tree_parents("verify_tree_probs", parents), draft_probs, greedy,
                              generator)


def verify_tree_probs_with_uniforms(
    target_probs: torch.Tensor,
    tokens: Tokens,
    parents: Tokens,
    draft_probs: Optional[torch.Tensor],
    uniforms: torch.Tensor,
    *,
    greedy: bool = False,
):
    """`verify_tree_probs` with its N+1 uniforms given: a pure function."""
    if type(greedy) is not bool:
        raise TypeError(f"spec_verify.verify_tree_probs_with_uniforms: greedy must be a bool, got "
                        f"{type(greedy).__name__}")
    tokens, parents = _tree_args("verify_tree_probs_with_uniforms", target_probs, tokens, parents, draft_probs,
                                 ("target_probs", "draft_probs"))
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu("verify_tree_probs_with_uniforms", uniforms=uniforms)
    if type(uniforms) is _Tensor and _exact_tensors(target_probs, tokens, parents, draft_probs):
        verify = (_verify_tree_probs_with_uniforms_ints_op if type(parents) is list
                  else _verify_tree_probs_with_uniforms_op)
        return verify(target_probs, tokens, parents, draft_probs, uniforms, greedy)
    return _verify_tree_probs_with_uniforms(target_probs, tokens,
                                            _tree_parents("verify_tree_probs_with_uniforms", parents), draft_probs,
                                            uniforms, greedy)


for _f in (verify_tree, verify_tree_probs):
    _f.__doc__ = _f.__doc__.replace("{tree}", _TREE_DOC)

for _f in (warp, sample, sample_with_uniforms, accept_logits, accept_logits_with_uniforms, verify_tree):
    _f.__doc__ = _f.__doc__.replace("{args}", _WARP_ARGS)
del _f


# Batches (DESIGN.md, "Batches") -------------------------------------------------------------
#
# Both ops take vLLM's ragged layout; see `verify_batch`.


def _cpu_or_none(t) -> bool:
    return t is None or (type(t) is _Tensor and t.is_cpu)


def _per_sequence(op: str, name: str, value, batch: int, integer: bool):
    """A per-sequence parameter as the op takes it: None (the default for every sequence), a
    tensor (checked by the op), a list or tuple (a tensor made from it), or one number for
    every sequence (checked here by `_warp_params`, as the single-sequence ops check it)."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return torch.tensor(value, dtype=torch.int64 if integer else torch.float64).reshape(len(value))
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"spec_verify.{op}: {name} must be a tensor, a list of numbers or one number, "
                            f"got a list torch cannot convert ({e})") from None
    params = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    params[name] = value
    number = _warp_params(f"spec_verify.{op}", **params)[list(params).index(name)]
    return torch.full((batch,), number, dtype=torch.int64 if integer else torch.float64)


def _batch_args(op: str, draft_tokens, cu_num_draft_tokens, method, generator, generators, **tensors):
    """The checks both batch ops share: tokens and running totals as integer tensors, the
    method, the generators, and every tensor on the CPU."""
    draft_tokens = _token_tensor(draft_tokens, f"spec_verify.{op}: draft_tokens")
    cu_num_draft_tokens = _token_tensor(cu_num_draft_tokens, f"spec_verify.{op}: cu_num_draft_tokens")
    if method != "token":
        _check_method(op, method)
    _check_generator(f"spec_verify.{op}", generator)
    if generators is not None:
        if not isinstance(generators, (list, tuple)):
            raise TypeError(f"spec_verify.{op}: generators must be a list of torch.Generator (or None) "
                            f"entries, one per sequence, got {type(generators).__name__}")
        for i, g in enumerate(generators):
            _check_generator(f"spec_verify.{op}", g, f"generators[{i}]")
        generators = list(generators)
    given = {name: t for name, t in tensors.items() if t is not None}
    if not all(type(t) is _Tensor and t.is_cpu for t in given.values()):
        _check_on_cpu(op, **given)
    return draft_tokens, cu_num_draft_tokens, generators


def verify_batch(
    target_logits: torch.Tensor,
    draft_tokens: Tokens,
    cu_num_draft_tokens: Tokens,
    *,
    draft_logits: Optional[torch.Tensor] = None,
    temperature=None,
    top_k=None,
    top_p=None,
    min_p=None,
    method: str = "token",
    generator: Optional[torch.Generator] = None,
    generators: Optional[Sequence[Optional[torch.Generator]]] = None,
    draft_bounds: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Verifies a batch of B sequences from logits in one call, in vLLM's ragged layout.

    Sequence b has `K_b = cu[b] - cu[b-1]` draft tokens (`cu = cu_num_draft_tokens`, running
    totals without a leading zero, `cu[-1] = 0`): `draft_tokens[cu[b-1]:cu[b]]`, with draft
    rows `draft_logits[cu[b-1]:cu[b]]`, and its `K_b + 1` target rows start at row
    `cu[b-1] + b` of `target_logits`. For example num_draft = [3, 0, 2, 0, 1] gives
    cu = [3, 3, 5, 5, 6] and target rows starting at 0, 4, 5, 8, 9. Each sequence is
    verified exactly as `accept_logits` (temperature > 0) or `verify_greedy` (temperature 0)
    would verify its rows alone, with its own warping parameters.

    Randomness: each sampled sequence draws its `K_b + 1` float64 uniforms, in batch order,
    from `generators[b]` when that is given and not None, else from `generator` (the default
    generator when None); a greedy sequence draws none. All are drawn before any sequence
    runs, so each result equals the single-sequence call on that sequence's rows with the same
    generator state, bit for bit, whatever the number of threads (`torch.set_num_threads`).

    Args:
        target_logits (`torch.Tensor`): float32 `[N + B, V]` on the CPU, N = `cu[B-1]`.
        draft_tokens (`torch.Tensor` or `list` of `int`): the N draft tokens, in `[0, V)`.
        cu_num_draft_tokens (`torch.Tensor` or `list` of `int`): `[B]` running totals of the
            draft counts, non-decreasing, ending at N (vLLM's `cu_num_draft_tokens`).
        draft_logits (`torch.Tensor`, *optional*): float32 `[N, V]`, the draft's logits the
            draft tokens were sampled from (warped with the sequence's parameters); None for
            one-hot drafts in every sequence.
        temperature, top_k, top_p, min_p (*optional*): per-sequence warping parameters, each
            a `[B]` tensor, a list, or one number for every sequence; None is the default for
            every sequence (temperature 1, the cuts off). Ranges as for `accept_logits`;
            temperature 0 makes a sequence greedy, so greedy and sampled sequences mix.
        method (`str`, *optional*, defaults to `"token"`): `"token"` or `"block"`, for every
            sampled sequence, as for `accept_logits`.
        generator (`torch.Generator`, *optional*): a CPU generator for the sequences without
            one of their own; the default generator when None.
        generators (`list`, *optional*): B entries, a CPU `torch.Generator` or None each.
        draft_bounds (`torch.Tensor`, *optional*): float64 `[N, 3]`, the draft bounds
            `sample(draft_logits, ..., return_bounds=True)` returned for the N draft rows
            (each with its sequence's parameters), as for `accept_logits`: the same results,
            accepted draft rows not warped again.

    Returns:
        `Tuple[torch.Tensor, torch.Tensor]`: `output_token_ids`, int64 `[B, max K_b + 1]`:
        row b holds the accepted draft tokens, then the emitted token, then -1 (vLLM's
        placeholder); and `num_accepted`, int64 `[B]`.

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: checked for the whole batch before anything is drawn: running totals that
            are negative, decrease or do not end at N; `target_logits` without N + B rows or
            `draft_logits` without N; a parameter tensor that is not `[B]` or a value out of
            range (the message names the sequence); `generators` without B entries; a
            token outside `[0, V)`; a tensor not on the CPU. Then, in a row that is read,
            NaN, +inf, no finite value, or a logit the temperature makes overflow (the
            message names the sequence and the row). A call that raises leaves every
            generator as it was.
    """
    if (type(target_logits) is _Tensor and type(draft_tokens) is _Tensor and type(cu_num_draft_tokens) is _Tensor
            and target_logits.is_cpu and draft_tokens.is_cpu and cu_num_draft_tokens.is_cpu
            and draft_tokens.dtype is not _uint64 and cu_num_draft_tokens.dtype is not _uint64
            and _cpu_or_none(draft_logits) and _cpu_or_none(temperature) and _cpu_or_none(top_k)
            and _cpu_or_none(top_p) and _cpu_or_none(min_p) and generators is None and method == "token"
            and (generator is None or type(generator) is _Generator) and _cpu_or_none(draft_bounds)):
        # The common case: tensors on the CPU, the op checks the rest.
        return _verify_batch(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, temperature, top_k,
                             top_p, min_p, method, generator, None, draft_bounds)
    op = "verify_batch"
    draft_tokens, cu_num_draft_tokens, generators = _batch_args(
        op, draft_tokens, cu_num_draft_tokens, method, generator, generators, target_logits=target_logits,
        draft_logits=draft_logits)
    batch = cu_num_draft_tokens.shape[0] if cu_num_draft_tokens.dim() == 1 else 0
    params = [_per_sequence(op, name, value, batch, name == "top_k")
              for name, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                                  ("min_p", min_p))]
    given = {name: t for name, t in zip(("temperature", "top_k", "top_p", "min_p"), params) if t is not None}
    if not all(type(t) is _Tensor and t.is_cpu for t in given.values()):
        _check_on_cpu(op, **given)
    temperature, top_k, top_p, min_p = params
    if not _cpu_or_none(draft_bounds):
        _check_on_cpu(op, draft_bounds=draft_bounds)
    return _verify_batch(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits, temperature, top_k,
                         top_p, min_p, method, generator, generators, draft_bounds)


def verify_batch_probs(
    target_probs: torch.Tensor,
    draft_tokens: Tokens,
    cu_num_draft_tokens: Tokens,
    *,
    draft_probs: Optional[torch.Tensor] = None,
    greedy: Optional[torch.Tensor] = None,
    method: str = "token",
    generator: Optional[torch.Generator] = None,
    generators: Optional[Sequence[Optional[torch.Generator]]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """`verify_batch` on probabilities already warped: the layout, randomness and results of
    `verify_batch`, each sequence verified as `accept` (or, when greedy, `verify_greedy`)
    would verify its rows alone.

    Args:
        target_probs (`torch.Tensor`): float32 `[N + B, V]` on the CPU (unnormalised is fine).
        draft_tokens (`torch.Tensor` or `list` of `int`): the N draft tokens, in `[0, V)`.
        cu_num_draft_tokens (`torch.Tensor` or `list` of `int`): `[B]` running totals, as for
            `verify_batch`.
        draft_probs (`torch.Tensor`, *optional*): float32 `[N, V]`; None for one-hot drafts.
        greedy (`torch.Tensor`, *optional*): bool `[B]`, True for a greedy sequence (the
            argmax of its target rows, nothing drawn); None: every sequence is sampled.
        method (`str`, *optional*, defaults to `"token"`): `"token"` or `"block"`.
        generator (`torch.Generator`, *optional*): as for `verify_batch`.
        generators (`list`, *optional*): as for `verify_batch`.

    Returns:
        `Tuple[torch.Tensor, torch.Tensor]`: `(output_token_ids [B, max K_b + 1],
        num_accepted [B])`, int64, as for `verify_batch`.

    Raises:
        TypeError, ValueError: as for `verify_batch`; in a row that is read, a NaN, negative
            or infinite value or zero mass. A call that raises leaves every generator as it
            was.
    """
    if (type(target_probs) is _Tensor and type(draft_tokens) is _Tensor and type(cu_num_draft_tokens) is _Tensor
            and target_probs.is_cpu and draft_tokens.is_cpu and cu_num_draft_tokens.is_cpu
            and draft_tokens.dtype is not _uint64 and cu_num_draft_tokens.dtype is not _uint64
            and _cpu_or_none(draft_probs) and _cpu_or_none(greedy) and generators is None and method == "token"
            and (generator is None or type(generator) is _Generator)):
        return _verify_batch_probs(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, greedy, method,
                                   generator, None)
    op = "verify_batch_probs"
    if isinstance(greedy, (list, tuple)):
        for i, x in enumerate(greedy):
            if not (isinstance(x, bool) or type(x).__name__ == "bool_"):
                raise TypeError(f"spec_verify.{op}: greedy[{i}] must be a bool, got {type(x).__name__}")
        greedy = torch.tensor([bool(x) for x in greedy], dtype=torch.bool).reshape(len(greedy))
    draft_tokens, cu_num_draft_tokens, generators = _batch_args(
        op, draft_tokens, cu_num_draft_tokens, method, generator, generators, target_probs=target_probs,
        draft_probs=draft_probs, greedy=greedy)
    return _verify_batch_probs(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs, greedy, method,
                               generator, generators)


def isa() -> str:
    """The instruction-set path in use.

    Chosen once: `SPEC_VERIFY_ISA` if set, else the best path this CPU can run.

    Returns:
        `str`: `"neon"`, `"avx512"`, `"avx2"` or `"scalar"`.

    Raises:
        ValueError: `SPEC_VERIFY_ISA` names an unknown path or one this CPU cannot run.
    """
    return ops.isa()


def available_isas() -> List[str]:
    """The instruction-set paths this build can run on this CPU.

    Returns:
        `List[str]`: path names, best first; `"scalar"` is always last.
    """
    return list(ops.available_isas())


def _force_isa(name: str) -> None:
    """Switch path for this process ("" restores the default). For tests and benchmarks."""
    ops._force_isa(name)


# Fake implementations (torch.compile, opcheck) ---------------------------------------------

@torch.library.register_fake(add_op_namespace_prefix("verify_greedy"))
def _verify_greedy_fake(target_probs, draft_tokens):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept"))
def _accept_fake(target_probs, draft_probs, draft_tokens, generator=None, method="token"):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept_with_uniforms"))
def _accept_with_uniforms_fake(target_probs, draft_probs, draft_tokens, uniforms, method="token"):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("_row_masses"))
def _row_masses_fake(rows):
    return rows.new_empty((rows.shape[0],), dtype=torch.float64)


@torch.library.register_fake(add_op_namespace_prefix("warp"))
def _warp_fake(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    return logits.new_empty(logits.shape, dtype=torch.float32)


@torch.library.register_fake(add_op_namespace_prefix("sample"))
def _sample_fake(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, generator=None):
    return logits.new_empty(logits.shape[:-1], dtype=torch.int64)


@torch.library.register_fake(add_op_namespace_prefix("sample_with_uniforms"))
def _sample_with_uniforms_fake(logits, uniforms, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    return logits.new_empty(logits.shape[:-1], dtype=torch.int64)


@torch.library.register_fake(add_op_namespace_prefix("sample_with_bounds"))
def _sample_with_bounds_fake(logits, uniforms=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                             generator=None):
    return (logits.new_empty(logits.shape[:-1], dtype=torch.int64),
            logits.new_empty((*logits.shape[:-1], 3), dtype=torch.float64))


@torch.library.register_fake(add_op_namespace_prefix("accept_logits"))
def _accept_logits_fake(target_logits, draft_logits, draft_tokens, temperature=1.0, top_k=0, top_p=1.0,
                        min_p=0.0, generator=None, method="token", draft_bounds=None):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


@torch.library.register_fake(add_op_namespace_prefix("accept_logits_with_uniforms"))
def _accept_logits_with_uniforms_fake(target_logits, draft_logits, draft_tokens, uniforms, temperature=1.0,
                                      top_k=0, top_p=1.0, min_p=0.0, method="token", draft_bounds=None):
    ctx = torch.library.get_ctx()
    return ctx.new_dynamic_size(), ctx.new_dynamic_size()


def _tree_fake(target, tokens, *args, **kwargs):
    ctx = torch.library.get_ctx()
    return tokens.new_empty((ctx.new_dynamic_size(),), dtype=torch.int64), ctx.new_dynamic_size()


for _name in ("verify_tree", "verify_tree_with_uniforms", "verify_tree_probs", "verify_tree_probs_with_uniforms"):
    torch.library.register_fake(add_op_namespace_prefix(_name))(_tree_fake)
    torch.library.register_fake(add_op_namespace_prefix(f"_{_name}_ints"))(_tree_fake)


@torch.library.register_fake(add_op_namespace_prefix("verify_batch"))
def _verify_batch_fake(target_logits, draft_tokens, cu_num_draft_tokens, draft_logits=None, temperature=None,
                       top_k=None, top_p=None, min_p=None, method="token", generator=None, generators=None,
                       draft_bounds=None):
    # The width, max K_b + 1, depends on the values of cu_num_draft_tokens.
    width = torch.library.get_ctx().new_dynamic_size(min=1)
    batch = cu_num_draft_tokens.shape[0]
    return (target_logits.new_empty((batch, width), dtype=torch.int64),
            target_logits.new_empty((batch,), dtype=torch.int64))


@torch.library.register_fake(add_op_namespace_prefix("verify_batch_probs"))
def _verify_batch_probs_fake(target_probs, draft_tokens, cu_num_draft_tokens, draft_probs=None, greedy=None,
                             method="token", generator=None, generators=None):
    width = torch.library.get_ctx().new_dynamic_size(min=1)
    batch = cu_num_draft_tokens.shape[0]
    return (target_probs.new_empty((batch, width), dtype=torch.int64),
            target_probs.new_empty((batch,), dtype=torch.int64))
