"""The draft/verify loop of speculative decoding, over user callbacks."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import torch

DraftStep = Callable[[List[int], int], Tuple[torch.Tensor, Optional[torch.Tensor]]]
TargetStep = Callable[[List[int], torch.Tensor], torch.Tensor]


class SpeculativeDecoder:
    """Speculative decoding with any draft and target model.

    draft_step(prefix, k) -> (tokens, probs): k proposed token ids ([k] integer tensor) and,
        when sampling, the draft's probabilities each token was drawn from ([k, V] float32;
        may be None when greedy=True).
    target_step(prefix, proposed) -> target_probs [k+1, V] float32: the target's
        probabilities (or logits, when greedy=True) at the k+1 positions after prefix,
        i.e. for prefix, prefix+proposed[:1], ..., prefix+proposed.
    k: draft tokens per round. greedy: temperature-0 verification (output identical to
    greedy decoding of the target); otherwise speculative sampling with `generator`.
    """

    def __init__(
        self,
        draft_step: DraftStep,
        target_step: TargetStep,
        k: int = 4,
        greedy: bool = True,
        generator: Optional[torch.Generator] = None,
    ):
        if not callable(draft_step) or not callable(target_step):
            raise TypeError("draft_step and target_step must be callables")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.draft_step = draft_step
        self.target_step = target_step
        self.k = k
        self.greedy = bool(greedy)
        self.generator = generator

    def generate(self, prompt_ids: Sequence[int], max_new: int = 128) -> List[int]:
        """Generates exactly max_new tokens after prompt_ids; returns prompt + new tokens."""
        from . import accept, verify_greedy

        if not isinstance(max_new, int) or max_new < 0:
            raise ValueError(f"max_new must be an int >= 0, got {max_new!r}")
        seq = [int(t) for t in prompt_ids]
        end = len(seq) + max_new
        while len(seq) < end:
            k = min(self.k, end - len(seq) - 1)
            tokens, probs = self.draft_step(list(seq), k) if k > 0 else (torch.empty(0, dtype=torch.int64), None)
            tokens = torch.as_tensor(tokens).reshape(-1)
            if tokens.numel() != k:
                raise ValueError(f"draft_step returned {tokens.numel()} tokens, expected k = {k}")
            target_probs = self.target_step(list(seq), tokens)
            if self.greedy:
                n, nxt = verify_greedy(target_probs, tokens)
            else:
                if probs is None and k == 0:
                    probs = target_probs.new_empty((0, target_probs.shape[-1]))
                if probs is None:
                    raise ValueError("draft_step must return the draft probabilities when greedy=False")
                n, nxt = accept(target_probs, probs, tokens, self.generator)
            seq.extend(int(t) for t in tokens[:n].tolist())
            seq.append(int(nxt))
        return seq
