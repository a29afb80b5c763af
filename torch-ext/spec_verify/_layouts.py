"""Nested and quantized tensors in: the README's TypeError, not torch's dispatcher error.

The ops' C++ kernels refuse sparse, CSR, mkldnn and (under inference mode) nested tensors
themselves: they are registered for those dispatch keys too (torch_binding.cpp; check_cpu in
torch-ext/common/checks.cpp).
Two kinds of tensor never reach them: a nested tensor outside inference mode dispatches to
AutogradNestedTensor first, and a quantized tensor to QuantizedCPU, keys the ops have no
kernel for, so torch raised NotImplementedError ("Could not run ... with arguments from the
'QuantizedCPU' backend"). Here each op gets a kernel for those two keys that names the
argument and raises the TypeError. The dispatcher picks it only for a call with such a
tensor among its arguments, so calls with plain tensors pay nothing for it, and it runs
before the op reads anything: nothing is drawn or changed.

Tensor subclasses (a jagged nested tensor, `torch.nested.nested_tensor(..., layout=torch.jagged)`)
dispatch through their own `__torch_dispatch__` instead; the wrappers' slower path, which
every non-Tensor type takes, refuses them by `refusal` (in `_api._check_on_cpu`).
"""
from __future__ import annotations

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix, ops

# Every op that takes tensors (torch-ext/common/schemas.h).
_OPS = ("verify_greedy", "accept", "warp", "sample", "accept_logits", "verify_batch",
        "verify_batch_probs", "_row_masses", "verify_tree", "verify_tree_probs", "_verify_tree_ints",
        "_verify_tree_probs_ints")
_KEYS = ("AutogradNestedTensor", "QuantizedCPU")


def _public(op: str) -> str:
    """The name users call: the tree ops' _ints twins are internal."""
    if op.startswith("_verify_tree") and op.endswith("_ints"):
        return op[1:-len("_ints")]
    return op


def refusal(op: str, name: str, t: torch.Tensor) -> Optional[str]:
    """The TypeError message for tensor argument `name` of `spec_verify.<op>`, if `t` is nested
    or quantized; None for any other tensor."""
    if t.is_nested:
        return (f"spec_verify.{op}: {name} must be a dense (strided) tensor, got a nested tensor; "
                f"stack its rows first (torch.stack(t.unbind()) for rows of one length)")
    if t.is_quantized:
        return (f"spec_verify.{op}: {name} must be a dense tensor, not quantized, got a quantized "
                f"tensor of dtype {t.dtype}; convert with .dequantize()")
    return None


def _refusing_kernel(op: str, names):
    def kernel(*args, **kwargs):
        given = list(zip(names, args)) + list(kwargs.items())
        public = _public(op)  # a *_with_uniforms call's adapter renames it (_errors.api_error)
        for name, value in given:
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    message = refusal(public, name, t)
                    if message is not None:
                        raise TypeError(message)
        # Unreachable: only a nested or quantized argument selects these keys.
        raise TypeError(f"spec_verify.{public}: every tensor must be a dense, unquantized CPU tensor")

    return kernel


# The library must outlive the registrations: a module global. A second import of the
# package under another module name (the same extension, so the same op namespace) finds
# the kernels there and registers nothing: the dispatcher refuses a second kernel for a key.
_library = torch.library.Library(add_op_namespace_prefix("x").split("::")[0], "IMPL")
for _op in _OPS:
    _names = [a.name for a in getattr(ops, _op).default._schema.arguments]
    for _key in _KEYS:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(add_op_namespace_prefix(_op), _key):
            _library.impl(_op, _refusing_kernel(_op, _names), _key)
del _op, _names, _key
