"""Workloads for `kernels benchmark ./` (the Hugging Face `kernels` benchmark runner).

Each class is one shape; each benchmark_<name> method times one round of one op, on the
default instruction-set path (SPEC_VERIFY_ISA=scalar selects the reference path), and its
verify_<name> returns what benchmarks/torch_reference.py (the pure-PyTorch way) gives for
the same round, which the runner compares with self.out and times as "Ref".

The runner times calls one by one, without interleaving; benchmarks/compare.py is the
side-by-side comparison (floor, reference, every path) that the performance bar uses.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from kernels.benchmark import Benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_reference  # noqa: E402


class _Rounds:
    """The workloads, shared by the shape classes below.

    Not a Benchmark subclass itself: the runner runs every Benchmark subclass defined in
    this file, and this one has no shape.
    """

    V = 0
    K = 0
    seed = 0

    # The runner compares self.out (a tensor) with verify_*'s result. Building a tensor in
    # every timed call would add about a microsecond to a call that is a few microseconds
    # long, so the timed call keeps the (n_accepted, next_token) pair and the tensor is
    # made only when the runner reads it.
    @property
    def out(self):
        return None if self._last is None else torch.tensor(self._last)

    @out.setter
    def out(self, value):
        self._last = value

    def setup(self):
        torch.set_num_threads(1)
        k, v = self.K, self.V
        g = torch.Generator().manual_seed(self.seed)
        logits = torch.randn(k + 1, v, generator=g) * 3
        self.target = torch.softmax(logits, -1)
        noise = torch.randn(k, v, generator=g) * 1.2
        self.draft = torch.softmax(logits[:k] * 0.8 + noise, -1)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.ref_gen = torch.Generator().manual_seed(self.seed)

        best = self.target.argmax(-1)
        self.match = best[:k].clone()
        self.miss0 = self.match.clone()
        if k:
            self.miss0[0] = (int(best[0]) + 1) % v

        # Accept with a known outcome, so that the result can be checked exactly whatever
        # the uniforms: every row is still read in full, only its values are arranged.
        # All accepted: p = q on rows 0..K-1; row K puts all its mass on one token.
        self.all_t = self.target.clone()
        self.all_d = self.all_t[:k].clone()
        self.all_tok = self.all_d.argmax(-1)
        self.all_t[k] = 0.0
        self.all_t[k, v // 3] = 1.0
        # Rejected at 0: p_0 is one-hot on a token other than t_0, so p_0(t_0) = 0 (always
        # rejected) and the residual max(0, p_0 Q - q_0 P) is positive on that token only.
        self.rej_t = self.target.clone()
        self.rej_d = self.draft.clone()
        self.rej_tok = self.rej_d.argmax(-1)
        if k:
            s = (int(self.rej_tok[0]) + 1) % v
            self.rej_t[0] = 0.0
            self.rej_t[0, s] = 1.0

        # The realistic round: draft tokens drawn from the draft rows; the outcome varies
        # from call to call as the generator advances.
        self.mix_tok = torch.multinomial(self.draft, 1, generator=g)[:, 0].contiguous() if k else self.match
        self._last = None

    def benchmark_greedy_all_match(self):
        self._last = self.kernel.verify_greedy(self.target, self.match)

    def verify_greedy_all_match(self):
        return torch.tensor(torch_reference.verify_greedy(self.target, self.match))

    def benchmark_greedy_miss_at_0(self):
        self._last = self.kernel.verify_greedy(self.target, self.miss0)

    def verify_greedy_miss_at_0(self):
        return torch.tensor(torch_reference.verify_greedy(self.target, self.miss0))

    def benchmark_accept_all_accepted(self):
        self._last = self.kernel.accept(self.all_t, self.all_d, self.all_tok, self.gen)

    def verify_accept_all_accepted(self):
        return torch.tensor(torch_reference.accept(self.all_t, self.all_d, self.all_tok, self.ref_gen))

    def benchmark_accept_rejected_at_0(self):
        self._last = self.kernel.accept(self.rej_t, self.rej_d, self.rej_tok, self.gen)

    def verify_accept_rejected_at_0(self):
        return torch.tensor(torch_reference.accept(self.rej_t, self.rej_d, self.rej_tok, self.ref_gen))

    # No verify_accept_mixed: its outcome is random, and the reference consumes its
    # generator differently, so no single reference result can match. The law of the
    # outcomes is what the test suite checks.
    def benchmark_accept_mixed(self):
        self._last = self.kernel.accept(self.target, self.draft, self.mix_tok, self.gen)


class V32000K4(_Rounds, Benchmark):
    V, K = 32000, 4


class V128256K5(_Rounds, Benchmark):
    V, K = 128256, 5


class V64K4FixedCost(_Rounds, Benchmark):
    """At V = 64 the time is all per-call cost (wrapper, dispatch, the uniforms' draw)."""
    V, K = 64, 4
