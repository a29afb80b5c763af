"""The batch ops: verify_batch (logits) and verify_batch_probs (probabilities), a ragged batch of
sequences in vLLM's layout in one call (DESIGN.md, "Batches"; see `verify_batch`).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from ._api import Tokens, _Tensor, _check_generator, _check_method, _check_on_cpu, _token_tensor, _uint64
from ._calls import VERIFY_BATCH, VERIFY_BATCH_PROBS, _call, _Generator
from ._warping import Warping

def _cpu_or_none(t) -> bool:
    return t is None or (type(t) is _Tensor and t.is_cpu)


def _per_sequence(op: str, name: str, value, batch: int, integer: bool):
    """A per-sequence parameter as the op takes it: None (the default for every sequence), a
    tensor (checked by the op), a list or tuple (a tensor made from it), or one number for
    every sequence (checked here by `Warping`, as the single-sequence ops check it)."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return torch.tensor(value, dtype=torch.int64 if integer else torch.float64).reshape(len(value))
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"spec_verify.{op}: {name} must be a tensor, a list of numbers or one number, "
                            f"got a list torch cannot convert ({e})") from None
    # The other fields at their defaults, positionally: torch 2.12's Dynamo fails on the
    # keyword form (Warping(**{name: value})) under torch.compile.
    fields = [1.0, 0, 1.0, 0.0]
    at = Warping._fields.index(name)
    fields[at] = value
    number = Warping(fields[0], fields[1], fields[2], fields[3], what=f"spec_verify.{op}")[at]
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
            and (generator is None or type(generator) is _Generator)):
        # The common case: tensors on the CPU, the op checks the rest.
        return _call(VERIFY_BATCH, True, generator, target_logits, draft_tokens, cu_num_draft_tokens, draft_logits,
                     temperature, top_k, top_p, min_p, method, generator, None)
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
    return _call(VERIFY_BATCH, False, generator, target_logits, draft_tokens, cu_num_draft_tokens, draft_logits,
                 temperature, top_k, top_p, min_p, method, generator, generators)


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
        return _call(VERIFY_BATCH_PROBS, True, generator, target_probs, draft_tokens, cu_num_draft_tokens,
                     draft_probs, greedy, method, generator, None)
    op = "verify_batch_probs"
    if isinstance(greedy, (list, tuple)):
        for i, x in enumerate(greedy):
            if not (isinstance(x, bool) or type(x).__name__ == "bool_"):
                raise TypeError(f"spec_verify.{op}: greedy[{i}] must be a bool, got {type(x).__name__}")
        greedy = torch.tensor([bool(x) for x in greedy], dtype=torch.bool).reshape(len(greedy))
    draft_tokens, cu_num_draft_tokens, generators = _batch_args(
        op, draft_tokens, cu_num_draft_tokens, method, generator, generators, target_probs=target_probs,
        draft_probs=draft_probs, greedy=greedy)
    return _call(VERIFY_BATCH_PROBS, False, generator, target_probs, draft_tokens, cu_num_draft_tokens, draft_probs,
                 greedy, method, generator, generators)
