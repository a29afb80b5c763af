"""Small prefix-dependent language models for decoder tests: the next-token distribution
depends on the last two tokens and the position, through fixed seeded tables."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch


class ToyLM:
    def __init__(self, vocab: int, seed: int, sharpness: float = 2.0, base: "ToyLM | None" = None,
                 noise: float = 0.0):
        g = torch.Generator().manual_seed(seed)
        if base is None:
            self.bigram = torch.randn(vocab, vocab, generator=g) * sharpness
            self.skip = torch.randn(vocab, vocab, generator=g) * sharpness * 0.5
            self.position = torch.randn(5, vocab, generator=g)
        else:  # a perturbed copy: a draft that mostly agrees with its target
            self.bigram = base.bigram + torch.randn(vocab, vocab, generator=g) * noise
            self.skip = base.skip + torch.randn(vocab, vocab, generator=g) * noise
            self.position = base.position.clone()
        self.vocab = vocab
        # The rows depend on three small ints only: memoising them makes the law tests,
        # which decode tens of thousands of short sequences, several times faster.
        self._probs: Dict[Tuple[int, int, int], torch.Tensor] = {}

    @staticmethod
    def _state(prefix: Sequence[int]) -> Tuple[int, int, int]:
        last = prefix[-1] if prefix else 0
        before = prefix[-2] if len(prefix) > 1 else 0
        return last, before, len(prefix) % 5

    def logits(self, prefix: List[int]) -> torch.Tensor:
        last, before, pos = self._state(prefix)
        return self.bigram[last] + self.skip[before] + self.position[pos]

    def probs(self, prefix: List[int]) -> torch.Tensor:
        key = self._state(prefix)
        row = self._probs.get(key)
        if row is None:
            row = self._probs[key] = torch.softmax(self.logits(prefix).double(), -1).float()
        return row

    # SpeculativeDecoder callbacks ------------------------------------------------------
    def greedy_draft(self, prefix, k):
        seq, out = list(prefix), []
        for _ in range(k):
            seq.append(int(self.logits(seq).argmax()))
            out.append(seq[-1])
        return torch.tensor(out, dtype=torch.int64), None

    def sampling_draft(self, generator):
        def step(prefix, k):
            seq, out, rows = list(prefix), [], []
            for _ in range(k):
                row = self.probs(seq)
                seq.append(int(torch.multinomial(row, 1, generator=generator)))
                out.append(seq[-1])
                rows.append(row)
            probs = torch.stack(rows) if rows else torch.empty(0, self.vocab)
            return torch.tensor(out, dtype=torch.int64), probs
        return step

    def target_rows(self, prefix, proposed, logits=False):
        seq, rows = list(prefix), []
        for t in list(proposed.tolist()) + [None]:
            rows.append(self.logits(seq) if logits else self.probs(seq))
            if t is not None:
                seq.append(int(t))
        return torch.stack(rows)

    def greedy_decode(self, prompt, max_new):
        seq = list(prompt)
        for _ in range(max_new):
            seq.append(int(self.logits(seq).argmax()))
        return seq


def sequence_law(model: ToyLM, prompt: List[int], length: int,
                 stop: Optional[set] = None) -> Dict[Tuple[int, ...], float]:
    """The exact law of the tokens `model` samples autoregressively after `prompt`: every
    sequence of `length` tokens, or shorter ones ending at the first token in `stop`.
    Each row is normalised by its float64 mass, as the verification op does."""
    stop = stop or set()
    law: Dict[Tuple[int, ...], float] = {}

    def walk(seq: List[int], mass: float) -> None:
        new = tuple(seq[len(prompt):])
        if len(new) == length or (new and new[-1] in stop):
            law[new] = mass
            return
        row = model.probs(seq).double()
        row = row / row.sum()
        for v, pv in enumerate(row.tolist()):
            walk(seq + [v], mass * pv)

    walk(list(prompt), 1.0)
    return law
