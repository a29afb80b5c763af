"""SpeculativeDecoder callbacks for two Hugging Face transformers causal LMs, with KV caches.

    from transformers import AutoModelForCausalLM
    from transformers_adapter import speculative_steps

    target = AutoModelForCausalLM.from_pretrained(...)   # same tokenizer / vocabulary
    draft = AutoModelForCausalLM.from_pretrained(...)
    draft_step, target_step = speculative_steps(draft, target)           # greedy
    dec = sv.SpeculativeDecoder(draft_step, target_step, k=4, greedy=True)
    out = dec.generate(tokenizer(prompt).input_ids, max_new=64, eos_token_id=tokenizer.eos_token_id)

For sampling, `speculative_steps(draft, target, temperature=0.8, generator=g)` and
`SpeculativeDecoder(..., greedy=False, generator=g)`: the draft samples from its softmax
at that temperature and returns those rows, the target returns its softmax rows at the same
temperature, so the output has the law of the target sampled at that temperature.

Each model keeps one KV cache and the token ids it holds. A call keeps the longest common
prefix of those ids and the new sequence and feeds only the rest. The decoder's contract
(each prefix extends the last verified prefix) makes that the whole verified prefix plus
the accepted draft tokens, so a round feeds the target k+1 tokens and the draft k (the
last draft token is never fed). Needs a cache that can be cropped (`DynamicCache`, i.e.
full attention); otherwise the adapter falls back to recomputing the prefix.

transformers is an example/test dependency only: the kernel package never imports it.
"""
from __future__ import annotations

import inspect
from typing import List, Optional, Tuple

import torch


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
    """One causal LM and its KV cache, following the sequences it is asked about."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model.eval()
        self._new_cache = lambda: DynamicCache(config=model.config)
        # transformers 5 renamed the forward argument `past_key_values` to `cache`.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.cache = None
        self.ids: List[int] = []  # the tokens whose keys and values self.cache holds
        self.fed = 0  # tokens fed to the model, a measure of the work done

    def reset(self) -> None:
        self.cache, self.ids = None, []

    @torch.no_grad()
    def logits(self, seq: List[int], first: int) -> torch.Tensor:
        """float32 [len(seq) - first, V]: the next-token logits after seq[:first+1], ...,
        after seq (the model's outputs at positions first .. len(seq)-1)."""
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


def speculative_steps(draft_model, target_model, temperature: float = 0.0,
                      generator: Optional[torch.Generator] = None):
    """(draft_step, target_step) for SpeculativeDecoder. temperature 0: greedy (use
    greedy=True; the draft proposes its argmax, the target returns raw logits); > 0:
    sampling at that temperature (use greedy=False with the same generator)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    draft, target = CachedCausalLM(draft_model), CachedCausalLM(target_model)

    def draft_step(prefix: List[int], k: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        seq, rows = list(prefix), []
        for _ in range(k):
            logits = draft.logits(seq, len(seq) - 1)[0]
            if temperature == 0:
                seq.append(int(logits.argmax()))
            else:
                row = torch.softmax(logits / temperature, -1)
                rows.append(row)
                seq.append(int(torch.multinomial(row, 1, generator=generator)))
        tokens = torch.tensor(seq[len(prefix):], dtype=torch.int64)
        return tokens, (torch.stack(rows) if rows else None)

    def target_step(prefix: List[int], proposed: torch.Tensor) -> torch.Tensor:
        logits = target.logits(list(prefix) + proposed.tolist(), len(prefix) - 1)
        return logits if temperature == 0 else torch.softmax(logits / temperature, -1)

    draft_step.model, target_step.model = draft, target  # for inspection (tokens fed, reset)
    return draft_step, target_step
