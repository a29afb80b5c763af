"""How the op wrappers call an op: its two handles, and the one eager fast path all of them take.

Every op is an `_Op`: its `OpOverload` (what torch.compile traces, and what a call whose
arguments needed converting or checking goes to) and its builtin (`OpOverload._op`, the
callable the OpOverload's own `__call__` forwards to). `_call` is the only place that
chooses between them. The builtin skips two costs of a Python call into an op
(benchmarks/compare.py's fixed-cost breakdown measures them):
 - OpOverload.__call__, a Python frame around the builtin that parses the arguments;
 - torch's search for `__torch_function__` on every argument that is neither an exact Tensor
   nor a basic Python type: on a torch.Generator it is an attribute lookup that fails, with an
   AttributeError formatted and discarded on every call. Inside DisableTorchFunctionSubclass
   that search is skipped; it changes nothing else for these arguments (exact Tensors and a
   torch.Generator have no override; torch function modes still apply).
Under torch.compile the wrappers call the OpOverload, which Dynamo traces.

The ops that sample take uniforms, not a generator: their handles are `_uniforms`' adapters
around the builtin and the OpOverload, which draw from the generator the wrappers pass. Every
handle raises the ops' errors as the Python API raises them (`_errors`).
"""
from __future__ import annotations

import torch

from . import _errors, _uniforms
from ._ops import ops

_Generator = torch.Generator
_no_subclass_torch_function = torch._C.DisableTorchFunctionSubclass
_is_compiling = torch.compiler.is_compiling


class _Op:
    """An op's two handles: `overload` (the OpOverload) and `builtin` (called by `_call`)."""

    __slots__ = ("overload", "builtin")

    def __init__(self, overload, builtin):
        self.overload = overload
        self.builtin = builtin


def _call(op: _Op, fast: bool, generator, *args):
    """`op(*args)`. Through the builtin when `fast` (the caller's inline test: every tensor
    argument an exact torch.Tensor on the CPU, every argument in the form the op takes),
    eager, and `generator` (the one among `args`, or None for an op without one) None or an
    exact torch.Generator, which is then passed inside DisableTorchFunctionSubclass (see the
    module docstring); else through the OpOverload."""
    if fast and not _is_compiling():
        if generator is None:
            return op.builtin(*args)
        if type(generator) is _Generator:
            with _no_subclass_torch_function():
                return op.builtin(*args)
    return op.overload(*args)


# Every op the wrappers call, by its name in the op namespace.
# The ops that draw take `uniforms=None` last: the *_with_uniforms wrappers pass theirs there.
_NAMES = ("verify_greedy", "accept", "warp", "sample", "accept_logits", "verify_tree",
          "verify_tree_probs", "_verify_tree_ints", "_verify_tree_probs_ints", "verify_batch", "verify_batch_probs")


def _handles() -> dict:
    found = {}
    for name in _NAMES:
        overload = getattr(ops, name).default
        adapter = _uniforms.ADAPTERS.get(name)
        if adapter is None:
            found[name] = _Op(_errors.typed(overload), _errors.typed(overload._op))
        else:
            found[name] = _Op(adapter(overload), adapter(overload._op))
    return found


_OPS = _handles()
VERIFY_GREEDY = _OPS["verify_greedy"]
ACCEPT = _OPS["accept"]
WARP = _OPS["warp"]
SAMPLE = _OPS["sample"]
ACCEPT_LOGITS = _OPS["accept_logits"]
VERIFY_TREE = _OPS["verify_tree"]
VERIFY_TREE_PROBS = _OPS["verify_tree_probs"]
# The tree ops' _ints twins take `parents` as int[]: a list of Python ints goes in as it is,
# without a tensor made of it (called only through their builtins: see `_trees._tree_args`).
VERIFY_TREE_INTS = _OPS["_verify_tree_ints"]
VERIFY_TREE_PROBS_INTS = _OPS["_verify_tree_probs_ints"]
VERIFY_BATCH = _OPS["verify_batch"]
VERIFY_BATCH_PROBS = _OPS["verify_batch_probs"]
