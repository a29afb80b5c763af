#!/usr/bin/env python3
"""verify_batch side by side: threads, single calls and the batched PyTorch way.

For B = 1, 8, 64 sequences of K draft tokens at (V, K) = (32000, 4) and (128256, 5), and
three kinds of batch (greedy: temperature 0; sampled: temperature 0.8 and top-p 0.9 with
the draft's logits; mixed: every other sequence greedy), one run times, interleaved block
by block (paired_timing.py, the machinery of compare.py):
  batch@1  sv.verify_batch on 1 thread (torch.set_num_threads(1)),
  batch@2  the same on 2 threads,
  loop     one sv.accept_logits call per sequence, on 1 thread (the single-sequence op),
  ref      torch_reference.verify_batch: vLLM's way in pure PyTorch, sorting for top-p,
           vectorised over the batch, on 1 thread.
Every column replays the same generator state each chunk, so it repeats the same rounds.
The draft tokens are drawn from the draft's warped rows (sv.sample), and the target's
logits are the draft's plus noise, so rounds end at every position.

    python benchmarks/batch.py [--quick] [--out PATH]

Reported: batch@1 / loop (the issue's target: at most 1.15), batch@1 / batch@2 (at least
1.8 at B >= 8) and ref / batch@1 (at least 30 at B = 64 with top-p; greedy reported).
Targets are printed as met or missed, never enforced. On a shared machine the 2-thread
column competes with whatever else runs: read it with the load average printed beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import paired_timing  # noqa: E402  (Column, run_blocks, paired ratios)
import results_markdown  # noqa: E402
import torch_reference  # noqa: E402

SHAPES = [(32000, 4), (128256, 5)]
BATCHES = [1, 8, 64]
KINDS = ["greedy", "sampled", "mixed"]
TEMPERATURE, TOP_P = 0.8, 0.9
# The target's logits are the draft's plus this much Gaussian noise (the draft's logits have
# scale 3): at V = 32000 the argmax agrees on about 73% of rows and sum min(p, q) of the
# warped rows is about 0.76, so rounds end at every position.
NOISE = 0.5
# B = 1 times eight different one-sequence batches in turn, so that its time is not that of
# one particular round (B = 8 and 64 hold enough rounds in one batch).
SEQUENCES_PER_CHUNK = 8

TARGET_PER_SEQUENCE = 1.15   # batch@1 / loop, at most
TARGET_THREADS = 1.8         # batch@1 / batch@2 at B >= 8, at least
TARGET_VS_REF = 30.0         # ref / batch@1 at B = 64 with top-p, at least


cpu_name = results_markdown.cpu_name


def make_batch(sv, batch: int, vocab: int, k: int, kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    n = batch * k
    draft = torch.randn(n, vocab, generator=g) * 3
    target = torch.empty(n + batch, vocab)
    for b in range(batch):
        t0 = b * (k + 1)
        target[t0:t0 + k] = draft[b * k:(b + 1) * k] + torch.randn(k, vocab, generator=g) * NOISE
        target[t0 + k] = torch.randn(vocab, generator=g) * 3
    greedy = torch.tensor([kind == "greedy" or (kind == "mixed" and b % 2 == 0) for b in range(batch)])
    temperature = torch.where(greedy, 0.0, TEMPERATURE)
    top_p = torch.full((batch,), TOP_P, dtype=torch.float64)  # the loop passes the same 0.9
    tokens = torch.empty(n, dtype=torch.int64)
    for b in range(batch):
        rows = draft[b * k:(b + 1) * k]
        if greedy[b]:
            tokens[b * k:(b + 1) * k] = rows.argmax(-1)
        else:
            tokens[b * k:(b + 1) * k] = sv.sample(rows, temperature=TEMPERATURE, top_p=TOP_P, generator=g)
    cu = torch.arange(1, batch + 1) * k
    return target, draft, tokens, cu, temperature, top_p


def batch_case(sv, vocab: int, k: int, batch: int, kind: str, seed: int):
    """The columns for one case: max(1, 8 // B) different batches, each column running all of
    them in turn per chunk, from the same generator state."""
    instances = [make_batch(sv, batch, vocab, k, kind, seed + i) for i in range(max(1, SEQUENCES_PER_CHUNK // batch))]
    gens = {name: torch.Generator() for name in ("batch@1", "batch@2", "loop", "ref")}

    def prepare(name, threads):
        def go():
            torch.set_num_threads(threads)
            gens[name].manual_seed(seed)
        return go

    def ours(inst, g):
        target, draft, tokens, cu, temperature, top_p = inst
        return sv.verify_batch(target, tokens, cu, draft_logits=draft, temperature=temperature, top_p=top_p,
                               generator=g)

    def singles(inst):
        target, draft, tokens, cu, temperature, top_p = inst
        return [(target[b * (k + 1):(b + 1) * (k + 1)], draft[b * k:(b + 1) * k], tokens[b * k:(b + 1) * k],
                 float(temperature[b])) for b in range(batch)]

    def loop(single, g):
        return [sv.accept_logits(t, d, tk, temperature=temp, top_p=TOP_P, generator=g) for t, d, tk, temp in single]

    def ref(inst, g):
        target, draft, tokens, cu, temperature, top_p = inst
        return torch_reference.verify_batch(target, tokens, cu, draft, temperature, None, top_p, g)

    # The batch is the single-sequence op, bit for bit; the reference agrees on greedy rows.
    accepted_ours, accepted_ref = [], []
    for inst in instances:
        want = loop(singles(inst), torch.Generator().manual_seed(seed))
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out, accepted = ours(inst, torch.Generator().manual_seed(seed))
            got = [(int(accepted[b]), int(out[b, accepted[b]])) for b in range(batch)]
            if got != [tuple(w) for w in want]:
                raise RuntimeError(f"verify_batch on {threads} threads differs from the single-sequence op")
        torch.set_num_threads(1)
        r_out, r_acc = ref(inst, torch.Generator().manual_seed(seed))
        temperature = inst[4]
        for b in range(batch):
            if temperature[b] == 0 and (int(r_acc[b]), int(r_out[b, r_acc[b]])) != tuple(want[b]):
                raise RuntimeError(f"the PyTorch reference differs from verify_greedy on sequence {b}")
        accepted_ours += [n for n, _ in want]
        accepted_ref += r_acc.tolist()

    single = [(singles(inst), gens["loop"]) for inst in instances]
    cols = {
        "batch@1": paired_timing.Column("batch@1", ours, [(inst, gens["batch@1"]) for inst in instances],
                                        prepare=prepare("batch@1", 1), fixed=True),
        "batch@2": paired_timing.Column("batch@2", ours, [(inst, gens["batch@2"]) for inst in instances],
                                        prepare=prepare("batch@2", 2), fixed=True),
        "loop": paired_timing.Column("loop", loop, single, prepare=prepare("loop", 1), fixed=True),
        "ref": paired_timing.Column("ref", ref, [(inst, gens["ref"]) for inst in instances],
                                    prepare=prepare("ref", 1), fixed=True),
    }
    extra = {"batches_per_chunk": len(instances),
             "mean_accepted": sum(accepted_ours) / len(accepted_ours),
             "ref_mean_accepted": sum(accepted_ref) / len(accepted_ref)}
    return cols, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few blocks (about a minute)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "batch.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)), help="comma-separated B values")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    ap.add_argument("--shapes", default="all", help="'all', or one V to run only that shape")
    ap.add_argument("--markdown", nargs="?", type=Path, const=results_markdown.default_path(), default=None,
                    metavar="PATH", help="also write the table into PATH (default: "
                    "benchmarks/results/<cpu-slug>.md), replacing its batch section")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    kinds = args.kinds.split(",")
    shapes = SHAPES if args.shapes == "all" else [s for s in SHAPES if s[0] == int(args.shapes)]
    from kernels import get_kernel

    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    threads_before = torch.get_num_threads()
    overhead = paired_timing.clock_overhead_ns()
    started = time.perf_counter()
    load_before = os.getloadavg()
    print(f"kernel {sv.__name__}, path {sv.isa()}, torch {torch.__version__}, {cpu_name()}, "
          f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f}", file=sys.stderr)
    lines = ["| V | K | B | kind | mean accepted (ref) | batch@1 us/seq | loop us/seq | batch@1/loop [IQR] | "
             "batch@1/batch@2 [IQR] | ref/batch@1 [IQR] |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows, targets = [], []
    try:
        for v, k in shapes:
            for batch in batches:
                for kind in kinds:
                    cols, extra = batch_case(sv, v, k, batch, kind, args.seed)
                    heavy = batch * v * k > 8 * 32000 * 4
                    blocks = (5 if heavy else 9) if args.quick else (15 if heavy else 31)
                    paired_timing.run_blocks(list(cols.values()), blocks, 5e6, overhead)
                    per_seq, threads = (paired_timing.paired_ratio(cols["batch@1"], cols["loop"]),
                                        paired_timing.paired_ratio(cols["batch@1"], cols["batch@2"]))
                    vs_ref = paired_timing.paired_ratio(cols["ref"], cols["batch@1"])
                    s1, sl = paired_timing.summary_us(cols["batch@1"]), paired_timing.summary_us(cols["loop"])
                    lines.append(f"| {v} | {k} | {batch} | {kind} | {extra['mean_accepted']:.2f} "
                                 f"({extra['ref_mean_accepted']:.2f}) | {s1['median_us'] / batch:.1f} | "
                                 f"{sl['median_us'] / batch:.1f} | {paired_timing.fmt_iqr(per_seq)} | "
                                 f"{paired_timing.fmt_iqr(threads)} | {paired_timing.fmt_iqr(vs_ref, 1)} |")
                    print(f"  timed V={v} K={k} B={batch} {kind} ({blocks} blocks)", file=sys.stderr)
                    rows.append({"V": v, "K": k, "B": batch, "kind": kind, "blocks": blocks, **extra,
                                 **{f"{name}_time": paired_timing.summary_us(c) for name, c in cols.items()},
                                 "batch1_over_loop": per_seq, "batch1_over_batch2": threads,
                                 "ref_over_batch1": vs_ref})
                    where = f"V={v} K={k} B={batch} {kind}"
                    targets.append((where, "batch@1/loop", per_seq, TARGET_PER_SEQUENCE, True))
                    if batch >= 8:
                        targets.append((where, "batch@1/batch@2", threads, TARGET_THREADS, False))
                    if batch == 64 and kind != "greedy":
                        targets.append((where, "ref/batch@1", vs_ref, TARGET_VS_REF, False))
    finally:
        torch.set_num_threads(threads_before)
    load_after = os.getloadavg()
    elapsed = time.perf_counter() - started
    print("\n".join(lines))
    target_lines = []
    for where, what, ratio, bar, at_most in targets:
        v = paired_timing.verdict(ratio, bar, at_most).replace("PASS", "meets").replace("FAIL", "misses")
        target_lines.append(f"{v:<6}  {where}: {what} {paired_timing.fmt_iqr(ratio)} "
                            f"(target {'<=' if at_most else '>='} {bar:g})")
    print("\nTargets of the batch issue (reported, not enforced):")
    print("\n".join(target_lines))
    if args.markdown is not None:
        options = [f"--{name} {getattr(args, name)}" for name, default in
                   (("batches", ",".join(map(str, BATCHES))), ("kinds", ",".join(KINDS)), ("shapes", "all"))
                   if getattr(args, name) != default]
        command = " ".join(["batch.py", *options, *(["--quick"] if args.quick else [])])
        run = results_markdown.run_line(command, sv.isa(), threads="1 and 2 threads")
        where = results_markdown.write_section(
            "batch", "Batches (`verify_batch`)",
            [run, "", *lines, "", "Targets of the batch issue (reported, not enforced):", "",
             *("- " + t for t in target_lines)], args.markdown)
        print(f"wrote section batch of {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}")
    print(f"\nload average {load_before[0]:.2f} before, {load_after[0]:.2f} after; {elapsed:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "kernel": sv.__name__, "path": sv.isa(), "torch": torch.__version__, "cpu": cpu_name(),
        "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": load_after,
        "quick": args.quick, "seconds": elapsed, "cases": rows,
    }, indent=2))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
