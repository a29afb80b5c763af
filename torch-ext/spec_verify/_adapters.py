"""What the two model adapters (`transformers.py`, `llama_cpp.py`) share: the common-prefix
search each cache uses to keep what it already holds, and the decoder of their
`prompt_lookup_decoder` and `suffix_decoder`.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import torch

from .decoder import SpeculativeDecoder
from .prompt_lookup import PromptLookup
from .suffix import SuffixDrafter


def _common_prefix(a: List[int], b: List[int]) -> int:
    # Binary search over slice comparisons: O(len) element compares in C, log(len) steps
    # in Python, where a plain loop would cost a Python step per token every round.
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _lookup_decoder(target_logits_step: Callable, k: int, *, max_ngram, min_ngram, temperature, top_k, top_p,
                    min_p, generator: Optional[torch.Generator], method: str, schedule) -> SpeculativeDecoder:
    """Both adapters' `prompt_lookup_decoder`: `PromptLookup` proposes, `target_logits_step`
    (whose `.model` is the adapter's cache) verifies one-hot drafts through
    `SpeculativeDecoder.from_logits`; the decoder has `target_cache` and `drafter`."""
    lookup = PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)
    dec = SpeculativeDecoder.from_logits(None, target_logits_step, k, temperature=temperature, top_k=top_k,
                                         top_p=top_p, min_p=min_p, generator=generator, draft_step=lookup,
                                         method=method, schedule=schedule)
    dec.target_cache, dec.drafter = target_logits_step.model, lookup
    return dec


def _suffix_decoder(target_logits_step: Callable, k: int, *, cache, max_depth, min_token_prob, max_spec_factor,
                    max_spec_offset, temperature, top_k, top_p, min_p, generator: Optional[torch.Generator],
                    method: str, schedule) -> SpeculativeDecoder:
    """Both adapters' `suffix_decoder`: as `_lookup_decoder`, with a `SuffixDrafter` proposing."""
    drafter = SuffixDrafter(cache, max_depth=max_depth, min_token_prob=min_token_prob,
                            max_spec_factor=max_spec_factor, max_spec_offset=max_spec_offset)
    dec = SpeculativeDecoder.from_logits(None, target_logits_step, k, temperature=temperature, top_k=top_k,
                                         top_p=top_p, min_p=min_p, generator=generator, draft_step=drafter,
                                         method=method, schedule=schedule)
    dec.target_cache, dec.drafter = target_logits_step.model, drafter
    return dec
