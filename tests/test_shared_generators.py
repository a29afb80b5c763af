"""The generator contract under threads and absurd batch totals (DESIGN.md, "Uniforms budget"
and "Batches").

A call that raises puts its generator back; with the generator shared between threads that
put-back must undo only the raising call's own draws, never another thread's (else later calls
reuse those uniforms). Deterministic check: every good call draws exactly K+1 float64 uniforms
(one 64-bit engine step each), so after any interleaving the shared generator's state must be
the seed's advanced by (good calls) x (K+1) steps, whatever the raising calls did.

A batch's running totals decide how many uniforms it draws: totals the op refuses
(2**62, 2**31 - 1 in int32, 50,000,000 with three draft tokens) raise the op's ValueError
naming cu_num_draft_tokens before anything is drawn or allocated: generators untouched, the
process's peak resident memory (VmHWM, reset first) not above its start by more than 16 MB
(the 50,000,000 total used to draw 400 MB of uniforms first).
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

K, V = 4, 32


def _rows(seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(K + 1, V, generator=g) + 0.01
    q = torch.rand(K, V, generator=g) + 0.01
    toks = torch.randint(0, V, (K,), generator=g)
    return p, q, toks


def _advanced(seed: int, uniforms: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    torch.rand(uniforms, dtype=torch.float64, generator=g)
    return g.get_state()


def _hammer(calls_per_thread, good, bad, threads=4):
    """Runs `threads` threads of `good()` and as many of `bad()` (which must raise ValueError),
    `calls_per_thread` calls each, all released at once."""
    start = threading.Barrier(2 * threads)
    failures = []

    def run(fn, must_raise):
        start.wait()
        for _ in range(calls_per_thread):
            try:
                fn()
            except ValueError:
                if not must_raise:
                    failures.append("a good call raised")
                continue
            if must_raise:
                failures.append("a bad call did not raise")

    workers = [threading.Thread(target=run, args=(good, False)) for _ in range(threads)]
    workers += [threading.Thread(target=run, args=(bad, True)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures[:3]


@pytest.mark.parametrize("op", ["accept", "accept block", "accept mixed", "accept_logits", "verify_batch_probs"])
def test_raising_calls_never_undo_other_threads_draws(sv, op):
    p, q, toks = _rows(1)
    bad = p.clone()
    bad[0, 0] = float("nan")  # read by every call (row 0): raises after the draw
    g = torch.Generator().manual_seed(123)
    calls = 150
    if op == "accept mixed":  # good calls on the fast path, raising ones through the dispatcher
        good = lambda: sv.accept(p, q, toks, g)  # noqa: E731
        raising = lambda: sv.accept(bad, q, toks.tolist(), g, method="block")  # noqa: E731
        per_call = K + 1
    elif op.startswith("accept") and op != "accept_logits":
        method = "block" if op.endswith("block") else "token"
        good = lambda: sv.accept(p, q, toks, g, method=method)  # noqa: E731
        raising = lambda: sv.accept(bad, q, toks, g, method=method)  # noqa: E731
        per_call = K + 1
    elif op == "accept_logits":
        good = lambda: sv.accept_logits(p.log(), q.log(), toks, temperature=0.9, generator=g)  # noqa: E731
        raising = lambda: sv.accept_logits(bad.log(), q.log(), toks, temperature=0.9, generator=g)  # noqa: E731
        per_call = K + 1
    else:  # two sampled sequences of K drafts each, their rows stacked
        target = torch.cat([p, p])
        drafts, cu = torch.cat([toks, toks]), torch.tensor([K, 2 * K])
        bad_target = torch.cat([p, bad])  # the second sequence fails, after both drew
        good = lambda: sv.verify_batch_probs(target, drafts, cu, draft_probs=torch.cat([q, q]),  # noqa: E731
                                             generators=[g, g])
        raising = lambda: sv.verify_batch_probs(bad_target, drafts, cu,  # noqa: E731
                                                draft_probs=torch.cat([q, q]), generators=[g, g])
        per_call = 2 * (K + 1)
    _hammer(calls, good, raising)
    assert torch.equal(g.get_state(), _advanced(123, 4 * calls * per_call)), \
        "the shared generator is not where exactly the good calls' draws leave it"


def test_a_raising_call_alone_leaves_its_generator(sv):
    p, q, toks = _rows(2)
    bad = p.clone()
    bad[0, 0] = float("nan")
    g = torch.Generator().manual_seed(5)
    before = g.get_state()
    with pytest.raises(ValueError, match="NaN"):
        sv.accept(bad, q, toks, g)
    assert torch.equal(g.get_state(), before)


def _reset_peak() -> int:
    """Resets this process's peak resident memory (VmHWM) to its current one and returns it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _peak()


def _peak() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:"))


def _raw_value_error(sv):
    """What a raw op's value error arrives as: a ValueError, but from the stable build under
    torch 2.15 a RuntimeError with the same text (DESIGN.md, "The stable-ABI binding")."""
    stable = Path(sv.__file__).parent.name.startswith("torch-stable-abi")
    torch_215 = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 15)
    return RuntimeError if stable and torch_215 else ValueError


TOTALS = [
    pytest.param(torch.tensor([3, 2 ** 62]), id="2**62"),
    pytest.param(torch.tensor([3, 2 ** 31 - 1], dtype=torch.int32), id="2**31-1 int32"),
    pytest.param(torch.tensor([3, 50_000_000]), id="50_000_000"),
    pytest.param(torch.tensor([2 ** 62, 2 ** 62 + 3]), id="first 2**62"),
    pytest.param(torch.tensor([-(2 ** 62), 3]), id="negative"),
]


@pytest.mark.parametrize("cu", TOTALS)
@pytest.mark.parametrize("op", ["verify_batch", "verify_batch_probs"])
def test_absurd_totals_are_refused_before_any_draw(sv, op, cu):
    rows = torch.rand(5, 8) + 0.01
    tokens = torch.tensor([1, 2, 3])
    gens = [torch.Generator().manual_seed(10 + i) for i in range(2)]
    shared = torch.Generator().manual_seed(20)
    default_state = torch.default_generator.get_state()
    states = [g.get_state() for g in gens + [shared]]
    fn = getattr(sv, op)
    rss = _reset_peak()
    for kwargs in ({"generators": gens}, {"generator": shared}, {}):
        with pytest.raises(ValueError, match="cu_num_draft_tokens"):
            fn(rows, tokens, cu, **kwargs)
    with pytest.raises(_raw_value_error(sv), match="cu_num_draft_tokens"):  # the raw op (no generator): the same check
        getattr(sv.ops, op)(rows, tokens, cu)
    assert _peak() - rss < 16 << 20, "memory was allocated before the totals were refused"
    assert all(torch.equal(g.get_state(), s) for g, s in zip(gens + [shared], states)), "a generator was drawn from"
    assert torch.equal(torch.default_generator.get_state(), default_state)
