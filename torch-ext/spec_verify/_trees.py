"""The tree ops: verify_tree and verify_tree_probs, with their _with_uniforms forms (DESIGN.md,
"Trees").

A list of plain ints as `parents` goes to the ops' _ints twins as it is (`_tree_args`);
anything else becomes a tensor.
"""
from __future__ import annotations

from array import array
from typing import Optional

import torch

from ._api import Tokens, _Tensor, _check_generator, _check_on_cpu, _is_compiling, _token_tensor, _uint64, _vocab
from ._calls import VERIFY_TREE, VERIFY_TREE_INTS, VERIFY_TREE_PROBS, VERIFY_TREE_PROBS_INTS, _call, _Generator
from ._logits import _WARP_ARGS
from ._warping import Warping

_INT_ONLY = frozenset((int,))

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


def _tree_args(op: str, target, tokens, parents, draft, names, generator=None, uniforms=None):
    """The tokens and parents as the ops take them, every tensor checked to be on the CPU, and
    whether the call may take the builtin (`_calls._call`): every tensor an exact Tensor, the
    generator None or an exact torch.Generator. Only then is a list of plain ints within int64
    kept as `parents`, for the op's _ints twin; else it becomes a tensor here."""
    # The common case (tensors on the CPU) tested inline: a call with good arguments pays a
    # few attribute reads here.
    if not (type(tokens) is _Tensor and tokens.is_cpu and tokens.dtype is not _uint64):
        tokens = _token_tensor(tokens, f"spec_verify.{op}: tokens", _vocab(target))
    if not (type(parents) is _Tensor and parents.is_cpu and parents.dtype is not _uint64):
        # Type and range checked in C: set(map(type)) and array("q").
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
    fast = (type(target) is _Tensor and type(tokens) is _Tensor and (type(parents) is _Tensor or type(parents) is list)
            and (draft is None or type(draft) is _Tensor) and (uniforms is None or type(uniforms) is _Tensor)
            and (generator is None or type(generator) is _Generator))
    if type(parents) is list and not fast:
        parents = _token_tensor(parents, f"spec_verify.{op}: parents")
    return tokens, parents, fast


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
    warping = Warping(temperature, top_k, top_p, min_p, what="spec_verify.verify_tree")
    return _verify_tree(target_logits, tokens, parents, draft_logits, warping, generator)


def _verify_tree(target_logits, tokens, parents, draft_logits, warping: Warping, generator):
    """`verify_tree` with its parameters already checked (a `Warping`): the tree decoder's rounds."""
    _check_generator("spec_verify.verify_tree", generator)
    tokens, parents, fast = _tree_args("verify_tree", target_logits, tokens, parents, draft_logits,
                                       ("target_logits", "draft_logits"), generator)
    return _call(VERIFY_TREE_INTS if type(parents) is list else VERIFY_TREE, fast, generator, target_logits, tokens,
                 parents, draft_logits, *warping, generator)


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
    temperature, top_k, top_p, min_p = Warping(temperature, top_k, top_p, min_p,
                                               what="spec_verify.verify_tree_with_uniforms")
    tokens, parents, fast = _tree_args("verify_tree_with_uniforms", target_logits, tokens, parents, draft_logits,
                                       ("target_logits", "draft_logits"), uniforms=uniforms)
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu("verify_tree_with_uniforms", uniforms=uniforms)
    return _call(VERIFY_TREE_INTS if type(parents) is list else VERIFY_TREE, fast, None, target_logits, tokens,
                 parents, draft_logits, temperature, top_k, top_p, min_p, None, uniforms)


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
    tokens, parents, fast = _tree_args("verify_tree_probs", target_probs, tokens, parents, draft_probs,
                                       ("target_probs", "draft_probs"), generator)
    return _call(VERIFY_TREE_PROBS_INTS if type(parents) is list else VERIFY_TREE_PROBS, fast, generator, target_probs,
                 tokens, parents, draft_probs, greedy, generator)


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
    tokens, parents, fast = _tree_args("verify_tree_probs_with_uniforms", target_probs, tokens, parents,
                                       draft_probs, ("target_probs", "draft_probs"), uniforms=uniforms)
    if not (type(uniforms) is _Tensor and uniforms.is_cpu):
        _check_on_cpu("verify_tree_probs_with_uniforms", uniforms=uniforms)
    return _call(VERIFY_TREE_PROBS_INTS if type(parents) is list else VERIFY_TREE_PROBS, fast, None, target_probs,
                 tokens, parents, draft_probs, greedy, None, uniforms)


for _f in (verify_tree, verify_tree_probs):
    _f.__doc__ = _f.__doc__.replace("{tree}", _TREE_DOC)

verify_tree.__doc__ = verify_tree.__doc__.replace("{args}", _WARP_ARGS)
del _f
