"""The drafting half of `SpeculativeDecoder.from_logits`: the draft_step that samples each
draft token from the draft's warped logits row, keeping the rows for the verifier.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import torch

from ._api import _kind
from ._calls import SAMPLE
from ._decoding import _dense, _from_array
from ._warping import Warping

_Tensor = torch.Tensor
_int64 = torch.int64
_float32 = torch.float32


def _check_draft_logits(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"draft_logits_step returned {_kind(x)}, expected a float32 tensor [V]")
    _dense(x, "draft_logits_step returned", "a float32 tensor [V]")
    if x.dtype != torch.float32:
        raise TypeError(f"draft_logits_step returned logits of dtype {x.dtype}, expected torch.float32")
    if x.dim() != 1:
        raise ValueError(f"draft_logits_step returned logits of shape {list(x.shape)}, expected [V]")
    if not x.is_cpu:
        raise ValueError(f"draft_logits_step returned logits on {x.device}, expected a tensor on the CPU")


def sampling_draft_step(draft_logits_step: Callable, known_vocab: Callable[[], Optional[int]], warping: Warping,
                        generator: Optional[torch.Generator]) -> Callable:
    """The draft_step of `from_logits` over `draft_logits_step`, with the decoder's `warping`:
    each token sampled (argmax at temperature 0) from the draft's warped row, one uniform each
    from `generator`. `known_vocab()` is V of the target's rows once the generation has had
    them."""
    greedy = warping.greedy

    def draft_step(prefix: List[int], k: int):
        seq, start, rows = prefix, len(prefix), None  # prefix: the loop's own fresh copy
        vocab = None  # the round's first V: rows of another V could not be stacked
        for i in range(k):
            x = draft_logits_step(seq[:])
            if not (type(x) is _Tensor and x.dtype is _float32 and x.dim() == 1 and x.is_cpu):
                x = _from_array(x, "draft_logits_step returned")
                _check_draft_logits(x)
            if vocab is None:
                vocab = x.shape[0]
                known = known_vocab()  # greedy too: argmax tokens of a wider row could not fit
                if known is not None and vocab != known:
                    raise ValueError(f"draft_logits_step returned logits with V = {vocab} columns but "
                                     f"target_logits_step returned rows with V = {known}")
            elif x.shape[0] != vocab:
                raise ValueError(f"draft_logits_step returned logits of shape [{x.shape[0]}] after {len(seq)} "
                                 f"tokens, but of shape [{vocab}] after {start} in the same round: V must "
                                 f"not change")
            if not greedy:
                # Copied at once: a callback may hand out a view of a buffer that its next
                # call overwrites (the llama.cpp adapter does).
                if rows is None:
                    rows = torch.empty((k, vocab), dtype=_float32)
                rows[i].copy_(x)
            try:
                t = int(SAMPLE.overload(x, *warping, generator))
            except (ValueError, TypeError) as e:
                raise type(e)(f"SpeculativeDecoder: the sampling op rejected draft_logits_step's "
                              f"logits after {len(seq)} tokens: {e}") from e
            seq.append(t)
        return torch.tensor(seq[start:], dtype=_int64), rows

    return draft_step
