#!/usr/bin/env python3
"""A batched speculative-decoding loop: several prompts, one verify_batch call per round.

This is the loop a serving engine runs, in miniature, with the small prefix-dependent toy
models of the tests (tests/toy_models.py: a target and a draft that mostly agrees with it).
Every request has its own prompt, length, sampling parameters and seeded generator; two are
greedy. Each round:
  1. every active request drafts K_b tokens, K_b = K except near its end (never past
     max_new), sampling each from the draft's logits with its own parameters and generator;
  2. the rounds are laid out the way vLLM lays them out: draft tokens flattened to [N],
     cu_num_draft_tokens the running totals, K_b + 1 target rows per request;
  3. one sv.verify_batch call verifies all of them (over torch's threads);
  4. each request appends its row of the output up to the first -1.

Because each request draws from its own generator, in the same order as the
single-sequence decoder does (its draft tokens, then its K_b + 1 verification uniforms),
every output is identical to SpeculativeDecoder.from_logits on that request alone; the
script checks this, and that the greedy requests equal plain greedy decoding of the target.

    .venv/bin/python examples/batch_loop.py
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

from toy_models import ToyLM  # noqa: E402

V, K = 48, 4


@dataclass
class Request:
    prompt: List[int]
    max_new: int
    temperature: float
    top_p: float
    seed: int
    seq: List[int] = field(default_factory=list)
    generator: torch.Generator = None

    def start(self):
        self.seq = list(self.prompt)
        self.generator = torch.Generator().manual_seed(self.seed)
        return self

    @property
    def remaining(self) -> int:
        return len(self.prompt) + self.max_new - len(self.seq)


REQUESTS = [
    Request([1, 2, 3], 40, 0.0, 1.0, 0),
    Request([7], 25, 0.8, 0.9, 1),
    Request([4, 4], 60, 1.0, 1.0, 2),
    Request([9, 0, 5], 13, 0.0, 1.0, 3),
    Request([11], 50, 0.7, 0.95, 4),
    Request([2, 30], 1, 1.2, 1.0, 5),
]


def batched_decode(sv, target: ToyLM, draft: ToyLM, requests: List[Request]):
    """Runs every request to its max_new tokens, one verify_batch call per round. Returns the
    number of rounds."""
    active = [r.start() for r in requests]
    rounds = 0
    while active:
        target_rows, draft_rows, tokens, counts = [], [], [], []
        for r in active:
            k = K if K < r.remaining else r.remaining - 1
            seq = list(r.seq)
            for _ in range(k):  # the draft proposes k tokens, each sampled from its warped row
                x = draft.logits(seq)
                seq.append(int(sv.sample(x, temperature=r.temperature, top_p=r.top_p, generator=r.generator)))
                draft_rows.append(x)
            proposed = seq[len(r.seq):]
            tokens += proposed
            counts.append(k)
            # The target's logits after the verified prefix and after each draft token: the
            # K_b + 1 rows a real target computes in one forward pass.
            target_rows.append(target.target_rows(r.seq, torch.tensor(proposed, dtype=torch.int64), logits=True))
        cu = torch.tensor(counts).cumsum(0)
        out, accepted = sv.verify_batch(
            torch.cat(target_rows), torch.tensor(tokens, dtype=torch.int64), cu,
            draft_logits=torch.stack(draft_rows) if draft_rows else torch.empty(0, V),
            temperature=[r.temperature for r in active], top_p=[r.top_p for r in active],
            generators=[r.generator for r in active])
        for b, r in enumerate(active):
            r.seq += out[b, :int(accepted[b]) + 1].tolist()  # accepted drafts and the emitted token
        active = [r for r in active if r.remaining > 0]
        rounds += 1
    return rounds


def run(sv, verbose: bool = True) -> List[List[int]]:
    target = ToyLM(V, seed=1)
    draft = ToyLM(V, seed=2, base=target, noise=0.6)
    rounds = batched_decode(sv, target, draft, REQUESTS)
    for i, r in enumerate(REQUESTS):
        alone = sv.SpeculativeDecoder.from_logits(
            draft.logits, lambda prefix, proposed: target.target_rows(prefix, proposed, logits=True), k=K,
            temperature=r.temperature, top_p=r.top_p, generator=torch.Generator().manual_seed(r.seed), schedule="constant")
        if alone.generate(r.prompt, max_new=r.max_new) != r.seq:
            raise RuntimeError(f"request {i}: the batched loop differs from SpeculativeDecoder on it alone")
        if r.temperature == 0 and r.seq != target.greedy_decode(r.prompt, r.max_new):
            raise RuntimeError(f"request {i}: greedy output differs from greedy decoding of the target")
    if verbose:
        new = sum(r.max_new for r in REQUESTS)
        print(f"{len(REQUESTS)} requests, {new} new tokens in {rounds} batched rounds "
              f"({sum(1 for r in REQUESTS if r.temperature == 0)} greedy); every output equals "
              f"SpeculativeDecoder on its request alone, greedy ones equal greedy decoding")
        for i, r in enumerate(REQUESTS):
            mode = "greedy" if r.temperature == 0 else f"T {r.temperature}, top-p {r.top_p}"
            new = r.seq[len(r.prompt):]
            print(f"  request {i} ({mode}): {r.prompt} -> {new[:12]}{' ...' if len(new) > 12 else ''}")
    return [r.seq for r in REQUESTS]


if __name__ == "__main__":
    from kernels import get_kernel

    run(get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True))
