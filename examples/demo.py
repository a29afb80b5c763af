#!/usr/bin/env python3
"""`make demo`, first part: load the kernel as users do, check 600 rounds against the
analytic law, and time both ops beside the pure-PyTorch way of doing the same verification.
The main job, a real model through llama.cpp, follows (examples/demo_real.py)."""
from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import torch_reference  # noqa: E402
from law import accepted_length_law, acceptance_rates, expected_accepted, g_test, normalise  # noqa: E402

K, V, ROUNDS = 4, 32000, 600


def imperfect_pair(seed: int):
    """A target and a draft that sees the target's logits through noise: alpha_i ~ 0.5-0.8."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(K + 1, V, generator=g) * 3
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits[:K] * torch.linspace(1.0, 0.6, K)[:, None]
                          + torch.randn(K, V, generator=g) * 1.2, -1)
    return target, draft


def median_us(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    from kernels import get_kernel

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True)
    variant = Path(sv.__file__).parent.name
    print(f"kernel   {sv.__name__} from build/{variant}")
    print(f"path     {sv.isa()} (available: {', '.join(sv.available_isas())}; force one with SPEC_VERIFY_ISA)")

    target, draft = imperfect_pair(seed=0)
    alpha = acceptance_rates(target, draft)
    g = torch.Generator().manual_seed(1)
    qn = normalise(draft)
    tokens = torch.stack([torch.multinomial(qn[i], ROUNDS, replacement=True, generator=g) for i in range(K)], 1)
    accepted = [sv.accept(target, draft, tokens[r], g)[0] for r in range(ROUNDS)]

    law = accepted_length_law(alpha)
    counts = torch.bincount(torch.tensor(accepted), minlength=K + 1)
    mean = sum(accepted) / ROUNDS
    se = statistics.stdev(accepted) / math.sqrt(ROUNDS)
    _, df, pval = g_test(counts, law)
    print(f"\n{ROUNDS} rounds of accept at K = {K}, V = {V}; draft acceptance rates alpha_i = "
          + ", ".join(f"{a:.3f}" for a in alpha.tolist()))
    print(" accepted   count   expected   ")
    scale = 50 / max(float(counts.max()), float(law.max()) * ROUNDS)
    for n in range(K + 1):
        exp = float(law[n]) * ROUNDS
        bar = "#" * round(int(counts[n]) * scale)
        print(f" {n:>8} {int(counts[n]):>7} {exp:>10.1f}   {bar}")
    print(f" mean accepted length {mean:.3f} +- {se:.3f} (analytic {expected_accepted(alpha):.3f}); "
          f"G-test against the law: p = {pval:.3f} (df = {df})")

    # Timings: one round, same inputs, interleaved so drift hits all columns alike.
    all_match = target[:K].argmax(-1)
    g_op, g_ref = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    cases = [
        ("verify_greedy, all K drafts match",
         lambda: sv.verify_greedy(target, all_match), lambda: torch_reference.verify_greedy(target, all_match)),
        ("accept, imperfect draft (mixed outcomes)",
         lambda: sv.accept(target, draft, tokens[0], g_op),
         lambda: torch_reference.accept(target, draft, tokens[0], g_ref)),
    ]
    print(f"\nper-round time, median of interleaved runs, 1 thread, K = {K}, V = {V}:")
    print(f" {'case':<42} {'spec_verify':>12} {'pure PyTorch':>13} {'ratio':>7}")
    for name, op, ref in cases:
        for f in (op, ref):
            f()
        ops, refs = [], []
        for _ in range(15):
            ops.append(median_us(op, 20))
            refs.append(median_us(ref, 20))
        o, r = statistics.median(ops), statistics.median(refs)
        print(f" {name:<42} {o:>10.1f}us {r:>11.1f}us {r / o:>6.1f}x")

    import demo_decoder  # examples/, beside this file: the decoder on a real model pair
    demo_decoder.run(sv)

    print("\nnext: a real model through llama.cpp (examples/demo_real.py)")


if __name__ == "__main__":
    main()
