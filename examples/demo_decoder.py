#!/usr/bin/env python3
"""The end of `make demo`: SpeculativeDecoder on a real model pair, trained in about a second.

The pair: byte-level n-gram language models of Python source, counted over the standard
library's own modules (text every machine with Python has). The target sees the last 5
bytes, the draft only the last 3 (the same counts, cut short), so the draft guesses the
easy continuations (the rest of an identifier, indentation) and misses the rest. Both are smoothed by interpolating
every shorter context down to the uniform row, so no byte ever has probability 0.

Three runs: greedy (checked against plain greedy decoding), sampling from the probability
rows, and sampling from logits with temperature 0.9 and top-p 0.95 through
SpeculativeDecoder.from_logits (the n-gram rows' logarithms as logits).

    run(sv)   what examples/demo.py calls; standalone: .venv/bin/python examples/demo_decoder.py
"""
from __future__ import annotations

import os
import sysconfig
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

V = 256
TARGET_ORDER, DRAFT_ORDER = 6, 4  # n-gram orders: context = order - 1 bytes
CORPUS_BYTES = 3_000_000
PROMPT = b"    def __init__(self, "
K, MAX_NEW = 4, 400


def stdlib_corpus(limit: int = CORPUS_BYTES) -> bytes:
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(root.glob("*.py")):  # sorted: the same corpus on every run
        data = path.read_bytes()
        parts.append(data)
        size += len(data)
        if size >= limit:
            break
    return b"\n".join(parts)[:limit]


class NGram:
    """Byte n-gram model with interpolated smoothing:
    p_c(x) = (count(ctx_c, x) + beta * p_{c-1}(x)) / (count(ctx_c) + beta), p_{-1} uniform,
    where ctx_c is the last c bytes."""

    def __init__(self, data: np.ndarray, order: int, beta: float = 2.0):
        self.order, self.beta = order, beta
        self.tables = []  # per context length c: sorted keys ctx*256 + next, and their counts
        for c in range(order):
            key = np.zeros(len(data) - c, dtype=np.int64)
            for j in range(c + 1):  # the c context bytes, then the next byte
                key = key * V + data[j:len(data) - c + j]
            keys, counts = np.unique(key, return_counts=True)
            self.tables.append((keys, counts.astype(np.float64)))
        self._rows: Dict[Tuple[int, ...], torch.Tensor] = {}

    def lower(self, order: int) -> "NGram":
        """The model of a lower order from the same counts."""
        low = object.__new__(NGram)
        low.order, low.beta, low.tables, low._rows = order, self.beta, self.tables[:order], {}
        return low

    def probs(self, seq: List[int]) -> torch.Tensor:
        ctx = tuple(seq[len(seq) - self.order + 1:]) if self.order > 1 else ()
        row = self._rows.get(ctx)
        if row is None:
            p = np.full(V, 1.0 / V)
            for c, (keys, counts) in enumerate(self.tables):
                if c > len(ctx):
                    break
                code = 0
                for b in ctx[len(ctx) - c:]:
                    code = code * V + b
                lo, hi = np.searchsorted(keys, [code * V, code * V + V])
                if hi > lo:
                    n = np.zeros(V)
                    n[keys[lo:hi] - code * V] = counts[lo:hi]
                    p = (n + self.beta * p) / (n.sum() + self.beta)
            row = self._rows[ctx] = torch.from_numpy(p).float()
        return row

    # SpeculativeDecoder callbacks ---------------------------------------------------------
    def draft(self, greedy: bool, generator=None):
        def step(prefix, k):
            seq, rows = list(prefix), []
            for _ in range(k):
                row = self.probs(seq)
                rows.append(row)
                seq.append(int(row.argmax()) if greedy else int(torch.multinomial(row, 1, generator=generator)))
            return torch.tensor(seq[len(prefix):], dtype=torch.int64), torch.stack(rows)
        return step

    def target(self, prefix, proposed):
        seq, rows = list(prefix), []
        for t in proposed.tolist() + [None]:
            rows.append(self.probs(seq))
            if t is not None:
                seq.append(t)
        return torch.stack(rows)

    def greedy_decode(self, prompt: List[int], max_new: int) -> List[int]:
        seq = list(prompt)
        for _ in range(max_new):
            seq.append(int(self.probs(seq).argmax()))
        return seq


def show(tokens: List[int], width: int = 88) -> str:
    text = bytes(tokens).decode("utf-8", "replace").rstrip()
    lines = text.splitlines()[:9]
    return "\n".join("   | " + line[:width] for line in lines)


def stats_lines(s) -> str:
    by_pos = "  ".join(f"{i}: {a:.2f}" for i, a in enumerate(s.acceptance_by_position))
    return (f"   {s.new_tokens} tokens in {s.rounds} rounds = {s.tokens_per_target_call:.2f} tokens per "
            f"target call (plain decoding: 1.00)\n"
            f"   accepted {s.accepted} of {s.proposed} drafts ({s.acceptance_rate:.1%}), "
            f"{s.mean_accepted:.2f} per round; acceptance by position  {by_pos}\n"
            f"   time in draft {s.draft_seconds * 1e3:.0f} ms, target {s.target_seconds * 1e3:.0f} ms, "
            f"verification {s.verify_seconds * 1e3:.1f} ms")


def run(sv) -> None:
    t0 = time.perf_counter()
    corpus = stdlib_corpus()
    data = np.frombuffer(corpus, dtype=np.uint8).astype(np.int64)
    target = NGram(data, TARGET_ORDER)
    draft = target.lower(DRAFT_ORDER)
    print(f"\nSpeculativeDecoder on a real pair: byte n-gram models of Python source, trained in "
          f"{time.perf_counter() - t0:.1f} s on {len(corpus) / 1e6:.1f} MB of the standard library")
    print(f"(target: {TARGET_ORDER - 1} bytes of context; draft: {DRAFT_ORDER - 1}; V = {V}; K = {K})")
    prompt = list(PROMPT)

    dec = sv.SpeculativeDecoder(draft.draft(greedy=True), target.target, k=K, greedy=True)
    out = dec.generate(prompt, max_new=MAX_NEW)
    plain = target.greedy_decode(prompt, MAX_NEW)
    print(f"\n greedy, {MAX_NEW} new bytes after {PROMPT.decode()!r}:")
    print(show(out))
    print(stats_lines(dec.stats))
    same = out == plain
    print(f"   output equals plain greedy decoding of the target: {'yes' if same else 'NO'} "
          f"({len(out) - len(prompt)} tokens compared)")
    if not same:
        raise SystemExit("SpeculativeDecoder's greedy output differs from plain greedy decoding")

    g = torch.Generator().manual_seed(0)
    dec = sv.SpeculativeDecoder(draft.draft(greedy=False, generator=g), target.target, k=K,
                                greedy=False, generator=g)
    out = dec.generate(prompt, max_new=MAX_NEW)
    print("\n sampling (the output follows the target's law), seed 0:")
    print(show(out))
    print(stats_lines(dec.stats))

    # From logits: the decoder samples the drafts (sample) and verifies (accept_logits),
    # both models warped alike; no sampling code here. (Below temperature 0.9 this byte
    # model falls into runs of spaces, its likeliest continuation of a space.)
    g = torch.Generator().manual_seed(0)
    dec = sv.SpeculativeDecoder.from_logits(
        lambda seq: draft.probs(seq).log(), lambda prefix, proposed: target.target(prefix, proposed).log(),
        k=K, temperature=0.9, top_p=0.95, generator=g)
    out = dec.generate(prompt, max_new=MAX_NEW)
    print("\n sampling from logits, temperature 0.9, top-p 0.95 (SpeculativeDecoder.from_logits), seed 0:")
    print(show(out))
    print(stats_lines(dec.stats))


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parent.parent
    os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={root / 'build'}")
    from kernels import get_kernel

    torch.set_num_threads(1)
    run(get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True))
    sys.exit(0)
