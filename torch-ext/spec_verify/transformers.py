"""Speculative decoding with two Hugging Face transformers causal LMs, with KV caches.

    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(...)   # the same tokenizer and vocabulary
    draft = AutoModelForCausalLM.from_pretrained(...)
    dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0.8, top_p=0.9,
                                              generator=torch.Generator().manual_seed(0))
    ids = dec.generate(tokenizer(prompt).input_ids, max_new=64, eos_token_id=tokenizer.eos_token_id)

`speculative_decoder` is `SpeculativeDecoder.from_logits` over the two models' logits: the
decoder samples the draft tokens from the draft's warped rows and verifies with
`accept_logits`, so the output has the law of the target sampled with those parameters
(temperature 0: exactly the target's greedy decoding). `logits_steps` gives the two logits
callbacks alone.

Each model keeps one KV cache and the token ids it holds. A call keeps the longest common
prefix of those ids and the new sequence and feeds only the rest. The decoder's contract
(each prefix extends the last verified prefix) makes that the whole verified prefix plus
the accepted draft tokens, so a round feeds the target k+1 tokens and the draft k (the last
draft token is never fed). Needs a cache that can be cropped (`DynamicCache`, i.e. full
attention); otherwise the adapter falls back to recomputing the prefix.

transformers is imported only inside these functions: the package itself needs only torch.
"""
from __future__ import annotations

import inspect
from typing import Callable, List, Optional, Tuple

import torch

from .decoder import SpeculativeDecoder


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


class CachedCausalLM:
    """One causal LM and its KV cache, following the sequences it is asked about.

    Args:
        model (`transformers.PreTrainedModel`): a causal LM (`AutoModelForCausalLM`); it is
            put in eval mode.

    Attributes:
        model: the model.
        ids (`List[int]`): the tokens whose keys and values the cache holds.
        fed (`int`): tokens fed to the model so far, a measure of the work done.
    """

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model.eval()
        self._new_cache = lambda: DynamicCache(config=model.config)
        # transformers 5 renamed the forward argument `past_key_values` to `cache`.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.cache = None
        self.ids: List[int] = []
        self.fed = 0

    def reset(self) -> None:
        """Drops the cache (the next call feeds its whole sequence)."""
        self.cache, self.ids = None, []

    @torch.no_grad()
    def logits(self, seq: List[int], first: int) -> torch.Tensor:
        """The next-token logits after `seq[:first+1]`, ..., after `seq`.

        Args:
            seq (`List[int]`): token ids.
            first (`int`): the first position whose output is returned, `0 <= first < len(seq)`.

        Returns:
            `torch.Tensor`: float32 `[len(seq) - first, V]`: the model's outputs at positions
            `first .. len(seq)-1`.

        Raises:
            ValueError: `first` out of range.
        """
        if not 0 <= first < len(seq):
            raise ValueError(f"need 0 <= first < len(seq), got first = {first}, len(seq) = {len(seq)}")
        start = min(_common_prefix(self.ids, seq), first)
        if self.cache is None or start == 0:
            self.cache, start = self._new_cache(), 0
        elif len(self.ids) > start:
            try:
                self.cache.crop(start - len(self.ids))  # negative: how many tokens to drop
            except (ValueError, RuntimeError, NotImplementedError):
                self.cache, start = self._new_cache(), 0  # e.g. a full sliding window
        feed = torch.tensor([seq[start:]], dtype=torch.int64)
        out = self.model(input_ids=feed, use_cache=True, **{self._cache_arg: self.cache})
        self.ids = list(seq)
        self.fed += feed.shape[1]
        return out.logits[0, first - start:].float()


def logits_steps(draft_model, target_model) -> Tuple[Callable, Callable]:
    """The two logits callbacks of `SpeculativeDecoder.from_logits` for two causal LMs.

    Args:
        draft_model (`transformers.PreTrainedModel`): the draft causal LM.
        target_model (`transformers.PreTrainedModel`): the target causal LM, with the same
            vocabulary (the same number of logits).

    Returns:
        `Tuple[Callable, Callable]`: `(draft_logits_step, target_logits_step)`:
        `draft_logits_step(seq)` -> float32 `[V]`, `target_logits_step(prefix, proposed)` ->
        float32 `[k+1, V]`. Each has a `.model` attribute, its `CachedCausalLM` (tokens fed,
        `reset()`).
    """
    draft, target = CachedCausalLM(draft_model), CachedCausalLM(target_model)

    def draft_logits_step(seq: List[int]) -> torch.Tensor:
        return draft.logits(seq, len(seq) - 1)[0]

    def target_logits_step(prefix: List[int], proposed: torch.Tensor) -> torch.Tensor:
        return target.logits(list(prefix) + proposed.tolist(), len(prefix) - 1)

    draft_logits_step.model, target_logits_step.model = draft, target
    return draft_logits_step, target_logits_step


def speculative_decoder(
    draft_model,
    target_model,
    k: int = 4,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
) -> SpeculativeDecoder:
    """A `SpeculativeDecoder` over two Hugging Face causal LMs, each with a KV cache.

    The decoder warps both models' logits with the same parameters, samples the draft
    tokens (`sample`) and verifies them (`accept_logits`): the output has the law of the
    target sampled with `temperature`, `top_k`, `top_p` and `min_p` (transformers' warpers,
    except that a tie group at the top-p cutoff is kept whole). `temperature` 0 gives the
    target's greedy decoding, token for token.

    Args:
        draft_model (`transformers.PreTrainedModel`): the draft causal LM.
        target_model (`transformers.PreTrainedModel`): the target causal LM, with the draft's
            vocabulary.
        k (`int`, *optional*, defaults to 4): draft tokens per round.
        temperature (`float`, *optional*, defaults to 1.0): >= 0; 0 = greedy.
        top_k (`int`, *optional*, defaults to 0): >= 0; 0 = off.
        top_p (`float`, *optional*, defaults to 1.0): in (0, 1]; 1 = off.
        min_p (`float`, *optional*, defaults to 0.0): in [0, 1); 0 = off.
        generator (`torch.Generator`, *optional*): the generator of every draw.

    Returns:
        `SpeculativeDecoder`: call `generate(prompt_ids, max_new, eos_token_id)` or `stream`.
        Its attributes `draft_cache` and `target_cache` are the two `CachedCausalLM`s (tokens
        fed, `reset()`).

    Raises:
        TypeError, ValueError: as `SpeculativeDecoder.from_logits`.
    """
    draft_logits_step, target_logits_step = logits_steps(draft_model, target_model)
    dec = SpeculativeDecoder.from_logits(draft_logits_step, target_logits_step, k, temperature=temperature,
                                         top_k=top_k, top_p=top_p, min_p=min_p, generator=generator)
    dec.draft_cache, dec.target_cache = draft_logits_step.model, target_logits_step.model
    return dec
