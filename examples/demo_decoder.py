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

Then prompt lookup, no draft model: the task is to write out again a source file of the
standard library given in the prompt, and the target is the n-gram model with a copy
component over the prompt (`CopyTarget`), the way a language model's attention copies from
its context. `PromptLookup` drafts by copying from the prefix; greedy (checked against plain
greedy decoding) and sampled (one-hot drafts), each timed against plain decoding; then
`PromptLookupTree` through TreeDecoder: the continuations of the two most
recent occurrences merged into a tree, tokens per target call against the chain's.

    run(sv)   what examples/demo.py calls; standalone: .venv/bin/python examples/demo_decoder.py
"""
from __future__ import annotations

import difflib
import os
import statistics
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
# Prompt lookup: rewrite this file; the copy component's contexts; the forward-pass stand-in.
REWRITE_FILE, REWRITE_NEW = "colorsys.py", 2000
COPY_MIN, COPY_MAX, COPY_BETA = 4, 64, 0.02
WEIGHT_DIM = 2048  # a 2048 x 2048 float32 matrix: 16 MB read per target call
LOOKUP_K, LOOKUP_MAX_NGRAM, LOOKUP_MIN_NGRAM = 8, 8, 2


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


class CopyTarget:
    """The target of the rewriting task: the byte n-gram model mixed with a copy component.

    copy(x) = the share of the document's occurrences of the current context followed by x,
    for the longest context of COPY_MIN..COPY_MAX bytes that occurs in the document;
    p = lam * copy + (1 - lam) * ngram with lam = n / (n + COPY_BETA), n those occurrences
    (lam = 0 when no context of COPY_MIN bytes occurs). A cache model (Kuhn and De Mori,
    1990) over the prompt: it reproduces the document where its contexts are unambiguous.

    Each call also runs `weights` (a [d, d] float32 matrix) over its j+1 positions, a stand-in
    for the forward pass of a real model: on a CPU a forward pass reads every weight once per
    call, whether it scores 1 position or 9, which is what speculative decoding exploits; the
    n-gram rows alone cost a dictionary lookup and would hide that.
    """

    def __init__(self, ngram: "NGram", document: bytes, weight_dim: int):
        self.ngram = ngram
        self.tables = {}
        for c in range(COPY_MIN, COPY_MAX + 1):
            table: Dict[bytes, Dict[int, int]] = {}
            for i in range(c, len(document)):
                nxt = table.setdefault(document[i - c:i], {})
                nxt[document[i]] = nxt.get(document[i], 0) + 1
            self.tables[c] = table
        g = torch.Generator().manual_seed(0)
        self.weights = torch.randn(weight_dim, weight_dim, generator=g) / weight_dim ** 0.5 if weight_dim else None
        self._rows: Dict[bytes, torch.Tensor] = {}

    def probs(self, seq: List[int]) -> torch.Tensor:
        ctx = bytes(seq[-COPY_MAX:])
        row = self._rows.get(ctx)
        if row is None:
            row = self.ngram.probs(seq)
            for c in range(min(COPY_MAX, len(ctx)), COPY_MIN - 1, -1):
                follow = self.tables[c].get(ctx[len(ctx) - c:])
                if follow:
                    n = sum(follow.values())
                    copy = torch.zeros(V)
                    copy[list(follow)] = torch.tensor(list(follow.values()), dtype=torch.float32) / n
                    lam = n / (n + COPY_BETA)
                    row = lam * copy + (1 - lam) * row
                    break
            self._rows[ctx] = row
        return row

    def forward_stand_in(self, positions: int) -> None:
        if self.weights is not None:
            torch.ones(positions, self.weights.shape[0]) @ self.weights

    def target(self, prefix, proposed):
        self.forward_stand_in(len(proposed) + 1)
        seq, rows = list(prefix), []
        for t in proposed.tolist() + [None]:
            rows.append(self.probs(seq))
            if t is not None:
                seq.append(t)
        return torch.stack(rows)

    def tree_target(self, prefix, tokens, parents):
        """target_tree_step: row 0 after prefix, row j+1 after prefix + the path to node j."""
        self.forward_stand_in(len(tokens) + 1)
        contexts = [list(prefix)]
        for t, p in zip(tokens.tolist(), parents.tolist()):
            contexts.append(contexts[p + 1] + [t])
        return torch.stack([self.probs(c) for c in contexts])

    def plain_decode(self, prompt: List[int], max_new: int, generator=None) -> List[int]:
        """Plain decoding: one call (one position) per token; greedy when generator is None."""
        seq = list(prompt)
        for _ in range(max_new):
            self.forward_stand_in(1)
            row = self.probs(seq)
            seq.append(int(row.argmax()) if generator is None else int(torch.multinomial(row, 1, generator=generator)))
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

    dec = sv.SpeculativeDecoder(draft.draft(greedy=True), target.target, k=K, greedy=True, schedule="constant")
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
                                greedy=False, generator=g, schedule="constant")
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
        k=K, temperature=0.9, top_p=0.95, generator=g, schedule="constant")
    out = dec.generate(prompt, max_new=MAX_NEW)
    print("\n sampling from logits, temperature 0.9, top-p 0.95 (SpeculativeDecoder.from_logits), seed 0:")
    print(show(out))
    print(stats_lines(dec.stats))

    prompt_lookup_run(sv, target)


def similarity(out: List[int], document: bytes) -> str:
    written = bytes(out)
    ratio = difflib.SequenceMatcher(None, written, document[80:80 + len(written)], autojunk=False).ratio()
    return f"the output is {ratio:.0%} the same as the file (difflib's ratio)"


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def prompt_lookup_run(sv, ngram: NGram) -> None:
    document = (Path(sysconfig.get_paths()["stdlib"]) / REWRITE_FILE).read_bytes()
    # The prompt: the file, then the start of its copy; the output is the rest of the copy.
    prompt = list(document + b"\n\n" + document[:80])
    target = CopyTarget(ngram, document, WEIGHT_DIM)
    lookup = sv.PromptLookup(max_ngram=LOOKUP_MAX_NGRAM, min_ngram=LOOKUP_MIN_NGRAM)
    print(f"\nPrompt lookup, no draft model: write out {REWRITE_FILE} ({len(document)} bytes) again, given it in "
          f"the prompt ({len(prompt)} bytes)")
    print(f"(target: the {TARGET_ORDER - 1}-byte n-gram model plus a copy component over the prompt; each call "
          f"also reads a {WEIGHT_DIM} x {WEIGHT_DIM} float32 matrix, {WEIGHT_DIM ** 2 * 4 / 2 ** 20:.0f} MB, as a "
          f"stand-in for a forward pass; {lookup!r}, K = {LOOKUP_K}, {REWRITE_NEW} new bytes)")
    target.plain_decode(prompt, REWRITE_NEW)  # warm-up: rows memoised, as both runs below find them
    one = statistics.median(timed(lambda: target.forward_stand_in(1))[1] for _ in range(30))
    nine = statistics.median(timed(lambda: target.forward_stand_in(LOOKUP_K + 1))[1] for _ in range(30))
    print(f"(the stand-in costs {one * 1e3:.2f} ms for 1 position, {nine * 1e3:.2f} ms for {LOOKUP_K + 1})")

    plain, plain_s = timed(lambda: target.plain_decode(prompt, REWRITE_NEW))
    dec = sv.SpeculativeDecoder(lookup, target.target, k=LOOKUP_K, greedy=True, schedule="constant")
    out, spec_s = timed(lambda: dec.generate(prompt, max_new=REWRITE_NEW))
    same = out == plain
    print("\n greedy:")
    print(show(out[len(prompt):]))
    print(stats_lines(dec.stats))
    print(f"   rounds without a proposal: {dec.stats.proposed_length_counts[0]}; {similarity(out[len(prompt):], document)}")
    print(f"   wall time: {spec_s:.2f} s against {plain_s:.2f} s for plain greedy decoding of the same output: "
          f"{plain_s / spec_s:.2f}x")
    print(f"   output equals plain greedy decoding of the target: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("greedy output with PromptLookup differs from plain greedy decoding")
    default = sv.PromptLookup()  # n-grams of 1 to 3 bytes: short matches, often the wrong occurrence
    dec_default = sv.SpeculativeDecoder(default, target.target, k=LOOKUP_K, greedy=True, schedule="constant")
    out, default_s = timed(lambda: dec_default.generate(prompt, max_new=REWRITE_NEW))
    print(f"   with {default!r}: {dec_default.stats.tokens_per_target_call:.2f} tokens per target call, "
          f"{plain_s / default_s:.2f}x (same output: {'yes' if out == plain else 'NO'})")

    # Trees: the continuations of the two most recent occurrences, merged (TreeDecoder).
    tree = sv.PromptLookupTree(max_ngram=LOOKUP_MAX_NGRAM, min_ngram=LOOKUP_MIN_NGRAM, branches=2, depth=LOOKUP_K)
    dec_tree = sv.TreeDecoder(tree, target.tree_target, greedy=True)
    out, tree_s = timed(lambda: dec_tree.generate(prompt, max_new=REWRITE_NEW))
    s = dec_tree.stats
    print(f"\n greedy tree drafts, {tree!r} (TreeDecoder):")
    print(f"   {s.tokens_per_target_call:.2f} tokens per target call against {dec.stats.tokens_per_target_call:.2f} "
          f"for the chain; {s.mean_nodes:.1f} nodes and an accepted path of {s.mean_accepted:.2f} a round; "
          f"same output: {'yes' if out == plain else 'NO'}")
    print(f"   wall time {tree_s:.2f} s ({plain_s / tree_s:.2f}x): here every node's row is the copy model's Python "
          f"lookup, new for\n   the branches not taken, and the stand-in's cost grows with positions; a real "
          f"forward pass scores a few\n   more positions almost for free")
    if out != plain:
        raise SystemExit("greedy output with PromptLookupTree differs from plain greedy decoding")

    g = torch.Generator().manual_seed(0)
    _, plain_s = timed(lambda: target.plain_decode(prompt, REWRITE_NEW, generator=g))
    g = torch.Generator().manual_seed(0)
    dec = sv.SpeculativeDecoder(lookup, target.target, k=LOOKUP_K, greedy=False, generator=g, schedule="constant")
    out, spec_s = timed(lambda: dec.generate(prompt, max_new=REWRITE_NEW))
    print("\n sampling (one-hot drafts: accept(target_rows, None, tokens); the output follows the target's law), "
          "seed 0:")
    print(show(out[len(prompt):]))
    print(stats_lines(dec.stats))
    print(f"   rounds without a proposal: {dec.stats.proposed_length_counts[0]}; {similarity(out[len(prompt):], document)}")
    print(f"   wall time: {spec_s:.2f} s against {plain_s:.2f} s for plain sampling of as many bytes: "
          f"{plain_s / spec_s:.2f}x")


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parent.parent
    os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={root / 'build'}")
    from kernels import get_kernel

    torch.set_num_threads(1)
    run(get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True))
    sys.exit(0)
