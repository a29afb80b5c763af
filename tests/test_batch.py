"""verify_batch and verify_batch_probs: a ragged batch in vLLM's layout (DESIGN.md, "Batches").

What the tests hold the batch ops to:
- every sequence's result equals the single-sequence op (accept_logits / accept /
  verify_greedy) on that sequence's rows with the same generator state, bit for bit, on
  random ragged batches, with 1 and 2 threads, and the generators end in the same state;
- the layout and the padding, on vLLM's own worked example;
- a sequence with its own generator does not depend on its neighbours;
- every malformed batch raises naming what is wrong, with nothing drawn and nothing written;
- opcheck and torch.compile(fullgraph=True).
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import List, Optional

import pytest
import torch
from conftest import compile_fullgraph

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def threads():
    """Sets torch's intra-op thread count for a test and restores it afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


# ---------------------------------------------------------------- random ragged batches

@dataclass
class Batch:
    target: torch.Tensor            # [N + B, V]
    draft: Optional[torch.Tensor]   # [N, V] or None
    tokens: torch.Tensor            # [N]
    cu: torch.Tensor                # [B]
    ks: List[int]
    temperature: torch.Tensor       # [B] (probs form: 0 marks the greedy sequences)
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor

    def starts(self):
        """(first draft row, first target row) of each sequence."""
        out, before = [], 0
        for b, k in enumerate(self.ks):
            out.append((before, before + b))
            before += k
        return out

    def sequence(self, b):
        d0, t0 = self.starts()[b]
        k = self.ks[b]
        draft = None if self.draft is None else self.draft[d0:d0 + k]
        return self.target[t0:t0 + k + 1], draft, self.tokens[d0:d0 + k]


def random_batch(seed: int, batch: int, vocab: int, with_draft: bool, probs: bool, strided: bool = False,
                 max_k: int = 8) -> Batch:
    """B sequences with K_b in [0, max_k], mixed greedy/sampled and mixed parameters. Target
    logits are the draft's plus noise, and each draft token is the draft row's argmax or a
    random token, so rounds end at every position. `probs`: rows are softmaxed (positive)."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    ks = [rng.randint(0, max_k) for _ in range(batch)]
    n = sum(ks)
    rows_t = n + batch
    draft = torch.randn(max(n, 1), vocab, generator=g)[:n] * 2
    target = torch.empty(rows_t, vocab)
    tokens = torch.empty(n, dtype=torch.int64)
    before = 0
    for b, k in enumerate(ks):
        t0 = before + b
        noise = torch.randn(k + 1, vocab, generator=g) * rng.choice([0.1, 0.5, 2.0])
        target[t0:t0 + k] = draft[before:before + k] + noise[:k]
        target[t0 + k] = torch.randn(vocab, generator=g) * 2
        for i in range(k):
            tokens[before + i] = int(draft[before + i].argmax()) if rng.random() < 0.6 else rng.randrange(vocab)
        before += k
    if probs:
        target, draft = torch.softmax(target, -1), torch.softmax(draft, -1)
    if strided:  # rows further apart than V, as views of wider tensors
        wide_t = torch.full((rows_t, vocab + 3), NAN)
        wide_t[:, :vocab] = target
        wide_d = torch.full((n, vocab + 5), NAN)
        wide_d[:, :vocab] = draft
        target, draft = wide_t[:, :vocab], wide_d[:, :vocab]
    temperature = torch.tensor([rng.choice([0.0, 0.5, 0.8, 1.0, 1.3]) for _ in range(batch)])
    top_k = torch.tensor([rng.choice([0, 0, 3, 50]) for _ in range(batch)], dtype=torch.int64)
    top_p = torch.tensor([rng.choice([1.0, 1.0, 0.9, 0.5]) for _ in range(batch)], dtype=torch.float64)
    min_p = torch.tensor([rng.choice([0.0, 0.0, 0.05]) for _ in range(batch)], dtype=torch.float64)
    cu = torch.tensor(ks, dtype=torch.int64).cumsum(0) if batch else torch.zeros(0, dtype=torch.int64)
    return Batch(target, draft if with_draft else None, tokens, cu, ks, temperature, top_k, top_p, min_p)


def expected(sv, bt: Batch, probs: bool, method: str, generator, generators=None):
    """The single-sequence ops, one call per sequence in batch order, drawing from the
    generator each sequence would use. Returns [(n_accepted, token)]."""
    out = []
    for b in range(len(bt.ks)):
        target, draft, tokens = bt.sequence(b)
        g = generators[b] if generators is not None and generators[b] is not None else generator
        if probs:
            if bt.temperature[b] == 0:
                out.append(sv.verify_greedy(target, tokens))
            else:
                out.append(sv.accept(target, draft, tokens, g, method=method))
        else:
            out.append(sv.accept_logits(target, draft, tokens, temperature=float(bt.temperature[b]),
                                        top_k=int(bt.top_k[b]), top_p=float(bt.top_p[b]),
                                        min_p=float(bt.min_p[b]), generator=g, method=method))
    return out


def batched(sv, bt: Batch, probs: bool, method: str, generator, generators=None):
    if probs:
        return sv.verify_batch_probs(bt.target, bt.tokens, bt.cu, draft_probs=bt.draft, greedy=bt.temperature == 0,
                                     method=method, generator=generator, generators=generators)
    return sv.verify_batch(bt.target, bt.tokens, bt.cu, draft_logits=bt.draft, temperature=bt.temperature,
                           top_k=bt.top_k, top_p=bt.top_p, min_p=bt.min_p, method=method, generator=generator,
                           generators=generators)


def assert_rows(bt: Batch, out, accepted, want):
    """Output row b is the accepted draft tokens, the emitted token, then -1, width max K + 1."""
    width = max(bt.ks, default=0) + 1
    assert out.dtype == torch.int64 and accepted.dtype == torch.int64
    assert out.shape == (len(bt.ks), width) and accepted.shape == (len(bt.ks),)
    for b, (n, token) in enumerate(want):
        _, _, tokens = bt.sequence(b)
        row = tokens[:n].tolist() + [token] + [-1] * (width - n - 1)
        assert out[b].tolist() == row, f"sequence {b}: {out[b].tolist()} != {row} (single-sequence op)"
        assert int(accepted[b]) == n, f"sequence {b}"


SIZES = [1, 2, 3, 8, 17, 64]


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("probs", [False, True], ids=["logits", "probs"])
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft-rows", "one-hot"])
@pytest.mark.parametrize("method", ["token", "block"])
def test_equals_single_sequence_ops(sv, threads, n_threads, probs, with_draft, method):
    """Random ragged batches (B 1..64, K_b 0..8, greedy and sampled mixed, mixed parameters):
    every row of the output and the generator's final state equal those of the
    single-sequence ops called in batch order on a generator with the same seed."""
    threads(n_threads)
    for i, batch in enumerate(SIZES):
        for vocab in (37, 3000):
            seed = 1000 * i + vocab + 7 * with_draft + 3 * probs
            bt = random_batch(seed, batch, vocab, with_draft, probs, strided=(i % 2 == 1))
            g_batch, g_single = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            out, accepted = batched(sv, bt, probs, method, g_batch)
            want = expected(sv, bt, probs, method, g_single)
            assert_rows(bt, out, accepted, want)
            assert torch.equal(g_batch.get_state(), g_single.get_state()), "a different number of uniforms drawn"


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("probs", [False, True], ids=["logits", "probs"])
def test_per_sequence_generators_equal_single_sequence_ops(sv, threads, n_threads, probs):
    """generators[b] given for some sequences (None for the others, which share `generator`):
    each sequence equals the single-sequence op drawing from the generator it was given."""
    threads(n_threads)
    for i, batch in enumerate([1, 5, 33, 64]):
        bt = random_batch(50 + i, batch, 2000, True, probs)
        own = [None if b % 3 == 0 else 100 + b for b in range(batch)]  # seeds; None: the shared one

        def gens():
            return [None if s is None else torch.Generator().manual_seed(s) for s in own]

        shared_b, shared_s = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
        gb, gs = gens(), gens()
        out, accepted = batched(sv, bt, probs, "token", shared_b, gb)
        assert_rows(bt, out, accepted, expected(sv, bt, probs, "token", shared_s, gs))
        assert torch.equal(shared_b.get_state(), shared_s.get_state())
        for a, b in zip(gb, gs):
            assert a is None or torch.equal(a.get_state(), b.get_state())


def test_default_generator_is_used_in_batch_order(sv):
    """generator None: the default generator, in batch order, as the single-sequence ops."""
    bt = random_batch(3, 20, 500, True, False)
    torch.manual_seed(11)
    out, accepted = batched(sv, bt, False, "token", None)
    after = torch.get_rng_state()
    torch.manual_seed(11)
    assert_rows(bt, out, accepted, expected(sv, bt, False, "token", None))
    assert torch.equal(torch.get_rng_state(), after)


def test_every_path_equals_single_sequence_ops(sv, isa):
    """On each instruction-set path (the autouse fixture forces `isa` for both sides)."""
    for probs in (False, True):
        bt = random_batch(77, 24, 700, True, probs)
        out, accepted = batched(sv, bt, probs, "token", torch.Generator().manual_seed(5))
        assert_rows(bt, out, accepted, expected(sv, bt, probs, "token", torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("probs", [False, True], ids=["logits", "probs"])
def test_half_rows_equal_single_sequence_ops(sv, probs):
    """bfloat16 target rows and float16 draft rows (Note [Half rows]): the batch equals the
    single-sequence ops on the same half rows."""
    for i, batch in enumerate([1, 9, 40]):
        bt = random_batch(300 + i, batch, 1500, True, probs, strided=i == 1)
        bt.target, bt.draft = bt.target.bfloat16(), bt.draft.half()
        for method in ("token", "block"):
            out, accepted = batched(sv, bt, probs, method, torch.Generator().manual_seed(i))
            assert_rows(bt, out, accepted, expected(sv, bt, probs, method, torch.Generator().manual_seed(i)))


def test_thread_counts_agree_on_a_large_batch(sv, threads):
    """A batch large enough to be cut into parts: 1, 2 and 3 threads give the same bits."""
    bt = random_batch(8, 64, 32000, True, False, max_k=5)
    results = []
    for n in (1, 2, 3):
        threads(n)
        results.append(batched(sv, bt, False, "token", torch.Generator().manual_seed(1)))
    for out, accepted in results[1:]:
        assert torch.equal(out, results[0][0]) and torch.equal(accepted, results[0][1])


# ---------------------------------------------------------------- the layout

def test_vllm_worked_example():
    """vLLM's ragged example: num_draft = [3, 0, 2, 0, 1] gives cu = [3, 3, 5, 5, 6], and the
    sequences' target rows start at 0, 4, 5, 8, 9."""
    num_draft = torch.tensor([3, 0, 2, 0, 1])
    cu = num_draft.cumsum(0)
    assert cu.tolist() == [3, 3, 5, 5, 6]
    starts = [int(c - k) + b for b, (c, k) in enumerate(zip(cu, num_draft))]
    assert starts == [0, 4, 5, 8, 9]


@pytest.mark.parametrize("form", ["greedy-logits", "sampled-logits", "greedy-probs", "sampled-probs"])
def test_layout_and_padding(sv, form):
    """Target row r puts all its mass (or its maximum) on token r, and each sequence's draft
    tokens are its rows' tokens, so every draft token is accepted and the output row shows
    exactly which target rows the sequence read: [s, s+1, .., s+K_b] with s its first row,
    then -1 up to width max K + 1 = 4."""
    cu = torch.tensor([3, 3, 5, 5, 6])
    rows, vocab = 11, 16
    logits = torch.full((rows, vocab), -INF)
    logits[torch.arange(rows), torch.arange(rows)] = 0.0
    probs = torch.zeros(rows, vocab)
    probs[torch.arange(rows), torch.arange(rows)] = 1.0
    tokens = torch.tensor([0, 1, 2, 5, 6, 9])  # rows 0-2 (sequence 0), 5-6 (2), 9 (4)
    temperature = torch.full((5,), 0.0 if form.startswith("greedy") else 0.7)
    g = torch.Generator().manual_seed(0)
    if form.endswith("logits"):
        # the draft rows equal the target rows they stand for: every token is accepted
        draft = logits[[0, 1, 2, 5, 6, 9]]
        out, accepted = sv.verify_batch(logits, tokens, cu, draft_logits=draft, temperature=temperature, generator=g)
    else:
        draft = probs[[0, 1, 2, 5, 6, 9]]
        out, accepted = sv.verify_batch_probs(probs, tokens, cu, draft_probs=draft, greedy=temperature == 0,
                                              generator=g)
    assert out.tolist() == [[0, 1, 2, 3], [4, -1, -1, -1], [5, 6, 7, -1], [8, -1, -1, -1], [9, 10, -1, -1]]
    assert accepted.tolist() == [3, 0, 2, 0, 1]


def test_empty_batch_and_all_k_zero(sv):
    """B = 0: outputs [0, 1] and [0]. Every K_b = 0: each sequence samples its next token
    from its one row, width 1."""
    out, accepted = sv.verify_batch(torch.zeros(0, 5), torch.zeros(0, dtype=torch.int64),
                                    torch.zeros(0, dtype=torch.int64))
    assert out.shape == (0, 1) and accepted.shape == (0,)
    bt = random_batch(4, 6, 100, True, False, max_k=0)
    g1, g2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    out, accepted = batched(sv, bt, False, "token", g1)
    assert out.shape == (6, 1)
    assert_rows(bt, out, accepted, expected(sv, bt, False, "token", g2))


def test_wrapper_takes_lists_and_numbers(sv):
    """Parameters as lists, or one number for every sequence, equal the same as tensors;
    tokens and running totals as lists equal tensors."""
    bt = random_batch(6, 7, 300, True, False)
    base = sv.verify_batch(bt.target, bt.tokens, bt.cu, draft_logits=bt.draft, temperature=bt.temperature,
                           top_p=torch.full((7,), 0.9), generator=torch.Generator().manual_seed(1))
    again = sv.verify_batch(bt.target, bt.tokens.tolist(), bt.cu.tolist(), draft_logits=bt.draft,
                            temperature=bt.temperature.tolist(), top_p=0.9,
                            generator=torch.Generator().manual_seed(1))
    assert torch.equal(base[0], again[0]) and torch.equal(base[1], again[1])
    flags = (bt.temperature == 0)
    p = torch.softmax(bt.target, -1)
    one = sv.verify_batch_probs(p, bt.tokens, bt.cu, greedy=flags, generator=torch.Generator().manual_seed(1))
    two = sv.verify_batch_probs(p, bt.tokens, bt.cu, greedy=flags.tolist(), generator=torch.Generator().manual_seed(1))
    assert torch.equal(one[0], two[0])


# ---------------------------------------------------------------- generators

def test_a_sequence_depends_only_on_its_own_generator(sv):
    """Sequence 2 keeps its generator's seed while everything else changes: its neighbours'
    rows, draft counts, parameters, their generators, their number and its position. Its
    output is the same each time, and the shared generator, used by nobody, never moves."""
    vocab = 400
    mine = random_batch(21, 1, vocab, True, False)
    mine.temperature[0] = 0.9
    target, draft, tokens = mine.sequence(0)
    k = mine.ks[0]
    want = sv.accept_logits(target, draft, tokens, temperature=0.9, generator=torch.Generator().manual_seed(42))
    shared = torch.Generator().manual_seed(0)
    state = shared.get_state()
    for seed in range(6):
        rng = random.Random(seed)
        others = random_batch(200 + seed, rng.randint(1, 12), vocab, True, False)
        at = rng.randint(0, len(others.ks))
        ks = others.ks[:at] + [k] + others.ks[at:]
        d_at = sum(others.ks[:at])
        t_at = d_at + at
        full_target = torch.cat([others.target[:t_at], target, others.target[t_at:]])
        full_draft = torch.cat([others.draft[:d_at], draft, others.draft[d_at:]])
        full_tokens = torch.cat([others.tokens[:d_at], tokens, others.tokens[d_at:]])
        temps = torch.cat([others.temperature[:at], torch.tensor([0.9]), others.temperature[at:]])
        gens = [torch.Generator().manual_seed(1000 * seed + b) for b in range(len(ks))]
        gens[at] = torch.Generator().manual_seed(42)
        out, accepted = sv.verify_batch(full_target, full_tokens, torch.tensor(ks).cumsum(0),
                                        draft_logits=full_draft, temperature=temps, generator=shared,
                                        generators=gens)
        n = int(accepted[at])
        assert (n, int(out[at, n])) == tuple(want), f"seed {seed}, position {at}"
        assert out[at, :n].tolist() == tokens[:n].tolist()
    assert torch.equal(shared.get_state(), state)


# ---------------------------------------------------------------- malformed batches

def good():
    bt = random_batch(31, 5, 20, True, False)
    return dict(target=bt.target, tokens=bt.tokens, cu=bt.cu, draft=bt.draft, temperature=torch.full((5,), 0.8),
                top_k=torch.zeros(5, dtype=torch.int64), top_p=torch.full((5,), 0.9), min_p=torch.zeros(5))


G = good()
N, B = G["tokens"].shape[0], G["cu"].shape[0]


def call(sv, form, args, generator, generators):
    a = dict(G)
    a.update(args)
    method = a.pop("method", "token")
    if form == "probs":
        greedy = a.pop("greedy", None)
        target = a["target"] if "target" in args else torch.softmax(a["target"], -1)
        draft = a["draft"] if "draft" in args else torch.softmax(a["draft"], -1)
        return sv.verify_batch_probs(target, a["tokens"], a["cu"], draft_probs=draft, greedy=greedy, method=method,
                                     generator=generator, generators=generators)
    return sv.verify_batch(a["target"], a["tokens"], a["cu"], draft_logits=a["draft"], temperature=a["temperature"],
                           top_k=a["top_k"], top_p=a["top_p"], min_p=a["min_p"], method=method,
                           generator=generator, generators=generators)


def with_value(t, index, value):
    t = t.clone()
    t[index] = value
    return t


LAYOUT_CASES = [
    # (args, exception, message pattern); for both forms
    (dict(cu=torch.tensor([3, 2, 5, 5, N])), ValueError,
     r"cu_num_draft_tokens\[1\] = 2 is less than cu_num_draft_tokens\[0\] = 3; running totals .* never decrease"),
    (dict(cu=torch.tensor([-1, 2, 5, 5, N])), ValueError, r"cu_num_draft_tokens\[0\] = -1 is negative"),
    (dict(cu=torch.tensor([1, 2, 3, 4, N - 1])), ValueError,
     rf"cu_num_draft_tokens ends at {N - 1} but draft_tokens holds N = {N} tokens"),
    (dict(cu=torch.tensor([1, 2, 3, 4, N + 1])), ValueError, rf"cu_num_draft_tokens ends at {N + 1}"),
    (dict(cu=G["cu"].float()), TypeError, r"cu_num_draft_tokens must have an integer dtype, got torch.float32"),
    (dict(cu=G["cu"][None]), ValueError, r"cu_num_draft_tokens must be 1-D \[B\], got shape \[1, 5\]"),
    (dict(cu=[1, True, 3]), TypeError, r"cu_num_draft_tokens\[1\] must be an int, got bool"),
    (dict(tokens=G["tokens"][None]), ValueError, r"draft_tokens must be 1-D \[N\]"),
    (dict(tokens=with_value(G["tokens"], 2, 20)), ValueError, r"draft_tokens\[2\] = 20 is outside the vocabulary \[0, 20\)"),
    (dict(tokens=with_value(G["tokens"], 0, -1)), ValueError, r"draft_tokens\[0\] = -1 is outside the vocabulary"),
    (dict(tokens=G["tokens"].float()), TypeError, r"draft_tokens must have an integer dtype"),
    (dict(method="blocks"), ValueError, r"method must be \"token\" or \"block\", got 'blocks'"),
]


def form_cases(form):
    t, d = ("target_probs", "draft_probs") if form == "probs" else ("target_logits", "draft_logits")
    rows = G["target"] if form == "logits" else torch.softmax(G["target"], -1)
    drows = G["draft"] if form == "logits" else torch.softmax(G["draft"], -1)
    cases = [
        (dict(target=rows[:-1]), ValueError,
         rf"{t} must have N \+ B = {N + B} rows \(N = {N} draft tokens, B = {B} sequences"),
        (dict(target=torch.cat([rows, rows[:1]])), ValueError, rf"{t} must have N \+ B = {N + B} rows"),
        (dict(target=rows[0]), ValueError, rf"{t} must be 2-D \[N \+ B, V\] with V >= 1"),
        (dict(target=rows.double()), TypeError, rf"{t} must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
        (dict(target=rows.to("meta")), ValueError, rf"{t} must be on the CPU"),
        (dict(draft=drows[:-1]), ValueError, rf"{d} must have N = {N} rows, one per draft token"),
        (dict(draft=drows[:, :-1]), ValueError, rf"{d} must have shape \[N, V\] = \[{N}, 20\], got \[{N}, 19\]"),
    ]
    if form == "logits":
        cases += [
            (dict(temperature=torch.full((B - 1,), 0.8)), ValueError,
             rf"temperature must have shape \[B\] = \[{B}\], one value per sequence, got \[{B - 1}\]"),
            (dict(top_k=torch.zeros(B + 1, dtype=torch.int64)), ValueError, r"top_k must have shape \[B\] = \[5\]"),
            (dict(top_p=torch.ones(B, 1)), ValueError, r"top_p must have shape \[B\]"),
            (dict(min_p=torch.zeros(2)), ValueError, r"min_p must have shape \[B\] = \[5\]"),
            (dict(temperature=with_value(torch.full((B,), 0.8), 3, -1.0)), ValueError,
             r"sequence 3: temperature must be a finite number >= 0 \(0 = greedy\), got -1"),
            (dict(temperature=with_value(torch.full((B,), 0.8), 1, NAN)), ValueError, r"sequence 1: temperature"),
            (dict(temperature=with_value(torch.full((B,), 0.8, dtype=torch.float64), 1, 1e39)), ValueError,
             r"sequence 1: temperature = 1e\+39 overflows float32"),
            (dict(top_k=with_value(torch.zeros(B, dtype=torch.int64), 4, -2)), ValueError,
             r"sequence 4: top_k must be >= 0 \(0 = off\), got -2"),
            (dict(top_k=torch.zeros(B)), TypeError, r"top_k must have an integer dtype, got torch.float32"),
            (dict(top_p=with_value(torch.ones(B), 0, 0.0)), ValueError, r"sequence 0: top_p must be in \(0, 1\]"),
            (dict(top_p=with_value(torch.ones(B), 2, 1.5)), ValueError, r"sequence 2: top_p must be in \(0, 1\]"),
            (dict(min_p=with_value(torch.zeros(B), 1, 1.0)), ValueError, r"sequence 1: min_p must be in \[0, 1\)"),
            (dict(temperature=torch.ones(B, dtype=torch.bool)), TypeError,
             r"temperature must have a real \(not bool\) dtype, got torch.bool"),
            (dict(temperature=torch.ones(B).to("meta")), ValueError, r"temperature must be on the CPU"),
            (dict(temperature=-1.0), ValueError, r"temperature must be a float >= 0"),
            (dict(top_k=-1), ValueError, r"top_k must be an int >= 0"),
            (dict(top_p=True), TypeError, r"top_p must be a float, got bool"),
            (dict(temperature=["a"] * B), TypeError, r"temperature must be a tensor, a list of numbers or one number"),
        ]
    else:
        cases += [
            (dict(greedy=torch.zeros(B, dtype=torch.int64)), TypeError, r"greedy must have dtype torch.bool, got torch.int64"),
            (dict(greedy=torch.zeros(B - 1, dtype=torch.bool)), ValueError, r"greedy must have shape \[B\] = \[5\]"),
            (dict(greedy=[True, 0, True, True, True]), TypeError, r"greedy\[1\] must be a bool, got int"),
        ]
    return cases


def run_time_cases(form):
    """Rows found malformed as they are read, after every uniform was drawn. Sequence b's
    rows start at target row cu[b-1] + b; every sequence reads its first target row."""
    t, d = ("target_probs", "draft_probs") if form == "probs" else ("target_logits", "draft_logits")
    starts = [int(c - k) + b for b, (c, k) in enumerate(zip(G["cu"], torch.diff(G["cu"], prepend=torch.zeros(1, dtype=torch.int64))))]
    rows = G["target"] if form == "logits" else torch.softmax(G["target"], -1)
    drows = G["draft"] if form == "logits" else torch.softmax(G["draft"], -1)
    s3 = starts[3]
    d3 = int(G["cu"][2])
    cases = [
        (dict(target=with_value(rows, (s3, 5), NAN)), ValueError, rf"sequence 3: {t}\[{s3}, 5\] = nan is NaN"),
    ]
    if int(G["cu"][3]) > d3:  # sequence 3 has a draft row
        cases.append((dict(draft=with_value(drows, (d3, 2), NAN)), ValueError, rf"sequence 3: {d}\[{d3}, 2\] = nan is NaN"))
    if form == "probs":
        cases += [
            (dict(target=with_value(rows, (s3, 1), -0.5)), ValueError, rf"sequence 3: {t}\[{s3}, 1\] = -0.5 is negative"),
            (dict(target=with_value(rows, s3, 0.0)), ValueError, rf"sequence 3: {t}\[{s3}\] has zero mass"),
            (dict(target=with_value(rows, (s3, 0), INF)), ValueError, rf"sequence 3: {t}\[{s3}, 0\] = inf is infinite"),
        ]
    else:
        cases += [
            (dict(target=with_value(rows, s3, -INF)), ValueError, rf"sequence 3: {t}\[{s3}\] has no finite value"),
            (dict(target=with_value(rows, (s3, 0), INF)), ValueError, rf"sequence 3: {t}\[{s3}, 0\] = inf is infinite"),
        ]
    # Two bad sequences: the message names the first, whatever the thread count.
    both = with_value(with_value(rows, (starts[1], 3), NAN), (s3, 5), NAN)
    cases.append((dict(target=both), ValueError, rf"sequence 1: {t}\[{starts[1]}, 3\] = nan"))
    return cases


CASES = [(form, c) for form in ("logits", "probs") for c in LAYOUT_CASES + form_cases(form) + run_time_cases(form)]


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[f"{f}-{c[1].__name__}-{i}" for i, (f, c) in enumerate(CASES)])
def test_malformed_batch_raises_and_changes_nothing(sv, threads, n_threads, case):
    """Each malformed batch raises the exception named, its message naming the argument (and
    the sequence and row); the shared generator, every per-sequence generator and the
    default generator keep their states, and no input is written."""
    threads(n_threads)
    form, (args, exc, pattern) = case
    op = "verify_batch_probs" if form == "probs" else "verify_batch"
    shared = torch.Generator().manual_seed(1)
    gens = [torch.Generator().manual_seed(10 + b) if b % 2 else None for b in range(B)]
    states = [shared.get_state()] + [g.get_state() for g in gens if g is not None]
    default = torch.get_rng_state()
    before = {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor) and v.device.type == "cpu"}
    with pytest.raises(exc, match=rf"^spec_verify\.{op}: " + pattern):
        call(sv, form, args, shared, gens)
    after = [shared.get_state()] + [g.get_state() for g in gens if g is not None]
    assert all(torch.equal(a, b) for a, b in zip(states, after)), "a generator moved on a call that raised"
    assert torch.equal(torch.get_rng_state(), default)
    for k, v in before.items():
        assert torch.equal(args[k].view(torch.uint8), v.view(torch.uint8)), f"{k} was written by a call that raised"


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_first_malformed_sequence_is_named_whatever_the_threads(sv, threads, n_threads):
    """A batch large enough to be shared among threads, with NaN in the first target row of
    sequences 5, 6 and 40 (rows every sequence reads): the message names sequence 5 on any
    number of threads, and every generator is put back."""
    threads(n_threads)
    bt = random_batch(16, 48, 3000, True, False)
    starts = bt.starts()
    target = bt.target.clone()
    for b in (40, 6, 5):
        target[starts[b][1], 7] = NAN
    shared = torch.Generator().manual_seed(3)
    gens = [torch.Generator().manual_seed(b) if b % 2 else None for b in range(48)]
    states = [g.get_state() for g in [shared] + gens if g is not None]
    for _ in range(5):
        with pytest.raises(ValueError, match=rf"^spec_verify\.verify_batch: sequence 5: target_logits\[{starts[5][1]}, 7\] = nan"):
            sv.verify_batch(target, bt.tokens, bt.cu, draft_logits=bt.draft, temperature=bt.temperature,
                            generator=shared, generators=gens)
        assert all(torch.equal(g.get_state(), s) for g, s in zip([x for x in [shared] + gens if x is not None], states))


def test_malformed_generators(sv):
    bt = random_batch(1, 3, 10, True, False)
    for gens, exc, pattern in (
        ([torch.Generator()] * 2, ValueError, r"generators must hold B = 3 entries \(one per sequence, None for `generator`\), got 2"),
        ([None, 3, None], TypeError, r"generators\[1\] must be a torch.Generator or None, got int"),
        (torch.Generator(), TypeError, r"generators must be a list of torch.Generator"),
    ):
        with pytest.raises(exc, match=r"^spec_verify\.verify_batch: " + pattern):
            sv.verify_batch(bt.target, bt.tokens, bt.cu, generators=gens)
    with pytest.raises(TypeError, match=r"^spec_verify\.verify_batch_probs: generator must be a torch.Generator"):
        sv.verify_batch_probs(bt.target.softmax(-1), bt.tokens, bt.cu, generator=1)


def test_rows_after_the_deciding_one_are_never_read(sv):
    """A NaN in a row a sequence never reads (a greedy sequence that misses at position 0, a
    token-wise sampled one rejected at 0) raises nothing, in the batch as alone."""
    vocab = 30
    cu = torch.tensor([3, 6])
    target = torch.randn(8, vocab, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([(int(target[0].argmax()) + 1) % vocab, 0, 0, 1, 1, 1])
    target[1:4] = NAN                      # sequence 0 (greedy) misses at row 0
    target[4, 1] = -INF                    # sequence 1: token 1 has target probability 0: rejected
    target[5:8] = NAN
    out, accepted = sv.verify_batch(target, tokens, cu, temperature=torch.tensor([0.0, 1.0]),
                                    generator=torch.Generator().manual_seed(0))
    assert accepted.tolist() == [0, 0] and out[0, 0] == target[0].argmax()


def test_example_batch_loop_equals_the_decoder(sv):
    """examples/batch_loop.py: several prompts, one verify_batch call per round, each with its
    own generator; it raises unless every output equals SpeculativeDecoder.from_logits on
    that request alone (and greedy ones plain greedy decoding)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "batch_loop.py"
    spec = importlib.util.spec_from_file_location("batch_loop", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["batch_loop"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    outputs = module.run(sv, verbose=False)
    assert [len(s) - len(r.prompt) for s, r in zip(outputs, module.REQUESTS)] == [r.max_new for r in module.REQUESTS]


# ---------------------------------------------------------------- torch integration

def test_opcheck(sv):
    bt = random_batch(12, 6, 50, True, False)
    p, q = torch.softmax(bt.target, -1), torch.softmax(bt.draft, -1)
    ks = (bt.cu - torch.cat([bt.cu.new_zeros(1), bt.cu[:-1]])).tolist()
    # The uniforms of the sampled sequences, K_b + 1 each, in batch order (the Python layer draws them).
    u = torch.rand(sum(k + 1 for k, t in zip(ks, bt.temperature.tolist()) if t != 0), dtype=torch.float64)
    for method in ("token", "block"):
        for draft in (bt.draft, None):
            torch.library.opcheck(sv.ops.verify_batch, (bt.target, bt.tokens, bt.cu, draft, bt.temperature, bt.top_k,
                                                        bt.top_p, bt.min_p.float(), method, u))
        for draft in (q, None):
            torch.library.opcheck(sv.ops.verify_batch_probs, (p, bt.tokens, bt.cu, draft, bt.temperature == 0,
                                                              method, u))
    every = torch.rand(sum(k + 1 for k in ks), dtype=torch.float64)  # every sequence sampled
    torch.library.opcheck(sv.ops.verify_batch, (bt.target, bt.tokens, bt.cu, None, None, None, None, None, "token",
                                                every))
    torch.library.opcheck(sv.ops.verify_batch_probs, (p, bt.tokens, bt.cu, None, None, "token", every))


def test_compile_fullgraph(sv):
    bt = random_batch(13, 9, 64, True, False)
    p, q = torch.softmax(bt.target, -1), torch.softmax(bt.draft, -1)

    def verify(target, draft, tokens, cu, temperature, p, q):
        out, accepted = sv.verify_batch(target, tokens, cu, draft_logits=draft, temperature=temperature, top_p=0.9)
        out2, accepted2 = sv.verify_batch_probs(p, tokens, cu, draft_probs=q, greedy=temperature == 0)
        return out, accepted, out2, accepted2

    compiled = compile_fullgraph(verify)
    for seed in range(3):
        args = (bt.target, bt.draft, bt.tokens, bt.cu, bt.temperature, p, q)
        torch.manual_seed(seed)
        want = verify(*args)
        torch.manual_seed(seed)
        got = compiled(*args)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        bt = random_batch(14 + seed, 4 + seed, 64, True, False)
        p, q = torch.softmax(bt.target, -1), torch.softmax(bt.draft, -1)


def test_sparse_and_nested_tensors_are_named(sv):
    bt = random_batch(15, 3, 16, True, False)
    with pytest.raises(TypeError, match=r"^spec_verify\.verify_batch: target_logits must be a dense \(strided\) tensor"):
        sv.verify_batch(bt.target.to_sparse(), bt.tokens, bt.cu)
    with pytest.raises(TypeError, match=r"^spec_verify\.verify_batch_probs: draft_probs must be a dense"):
        sv.verify_batch_probs(bt.target.softmax(-1), bt.tokens, bt.cu, draft_probs=bt.draft.softmax(-1).to_sparse())
