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


# SpeculativeDecoder test callbacks (test_decoder_output.py, _stats.py, _arguments.py) -----

def pair(vocab=50, noise=0.7):
    """A target ToyLM and a draft that is its copy perturbed by `noise` (the decoder tests)."""
    target = ToyLM(vocab, seed=1)
    draft = ToyLM(vocab, seed=2, base=target, noise=noise)
    return target, draft


def recording(draft, target, greedy=True, generator=None):
    """Callbacks that log every call: ("draft", prefix, k) and ("target", prefix, proposed)."""
    log = []
    inner = draft.greedy_draft if greedy else draft.sampling_draft(generator)

    def draft_step(prefix, k):
        log.append(("draft", list(prefix), k))
        return inner(prefix, k)

    def target_step(prefix, proposed):
        log.append(("target", list(prefix), proposed.tolist()))
        return target.target_rows(prefix, proposed)
    return draft_step, target_step, log


def truncate_at(seq, prompt_len, stops):
    """seq cut after its first token in `stops` past the prompt (the whole seq if none)."""
    for i in range(prompt_len, len(seq)):
        if seq[i] in stops:
            return seq[:i + 1]
    return seq


def scripted(draft, counts, greedy=True, generator=None, with_probs=True):
    """A draft_step that proposes counts[r % len(counts)] tokens in round r (capped at the k
    it is given), from draft's greedy or sampled tokens; probs [j, V] or None."""
    inner = draft.greedy_draft if greedy else draft.sampling_draft(generator)
    calls = []

    def step(prefix, k):
        j = min(k, counts[len(calls) % len(counts)])
        calls.append((len(prefix), k, j))
        tokens, probs = inner(prefix, j)
        return tokens, (probs if with_probs else None)
    return step, calls


# Trees (the decoder's tree mode) --------------------------------------------------------------

def tree_shape(widths: Sequence[int]) -> List[int]:
    """The parents of a tree in depth-first order where every node at depth d has widths[d]
    children: (2, 1) gives [-1, 0, -1, 2] (two branches of two nodes)."""
    parents: List[int] = []

    def grow(node: int, depth: int) -> None:
        if depth == len(widths):
            return
        for _ in range(widths[depth]):
            parents.append(node)
            grow(len(parents) - 1, depth + 1)

    grow(-1, 0)
    return parents


def paths_of(prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> List[List[int]]:
    """prefix + the tokens on the path to node j, for every node j (the context of row j+1)."""
    ctx: List[List[int]] = []
    for t, p in zip(tokens, parents):
        ctx.append((list(prefix) if p < 0 else ctx[p]) + [int(t)])
    return ctx


def target_tree_rows(model: ToyLM, logits: bool = False):
    """A target_tree_step: row 0 after prefix, row j+1 after prefix + the path to node j."""
    def step(prefix, tokens, parents):
        seqs = [list(prefix)] + paths_of(prefix, tokens.tolist(), parents.tolist())
        return torch.stack([model.logits(s) if logits else model.probs(s) for s in seqs])
    return step


def topk_tree_draft(model: ToyLM, widths: Sequence[int]):
    """A draft_tree of deterministic children: the children of a node are the widths[d] most
    probable tokens of the draft's row there (distinct), the most probable first."""
    parents = tree_shape(widths)
    depth = [0] * len(parents)
    for j, p in enumerate(parents):
        depth[j] = 0 if p < 0 else depth[p] + 1

    def draft(prefix):
        tokens: List[int] = []
        ctx: List[List[int]] = []
        rank: Dict[int, int] = {}  # how many children each node has been given so far
        for j, p in enumerate(parents):
            base = list(prefix) if p < 0 else ctx[p]
            r = rank.get(p, 0)
            rank[p] = r + 1
            t = int(torch.topk(model.logits(base), widths[depth[j]]).indices[r])
            tokens.append(t)
            ctx.append(base + [t])
        return torch.tensor(tokens, dtype=torch.int64), torch.tensor(parents, dtype=torch.int64), None
    return draft


def sampling_tree_draft(model: ToyLM, widths: Sequence[int], generator: torch.Generator):
    """A draft_tree whose children are drawn independently from the draft's row at their parent
    (repeats allowed), with the draft rows [N+1, V] (rows of leaves included)."""
    parents = tree_shape(widths)

    def draft(prefix):
        tokens: List[int] = []
        ctx: List[List[int]] = []
        for p in parents:
            base = list(prefix) if p < 0 else ctx[p]
            t = int(torch.multinomial(model.probs(base), 1, generator=generator))
            tokens.append(t)
            ctx.append(base + [t])
        rows = torch.stack([model.probs(s) for s in [list(prefix)] + ctx])
        return torch.tensor(tokens, dtype=torch.int64), torch.tensor(parents, dtype=torch.int64), rows
    return draft
