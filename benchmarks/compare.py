#!/usr/bin/env python3
"""Side-by-side timing of spec-verify against the pure-PyTorch reference and the floor.

For every case and every instruction-set path this CPU can run, one run times, interleaved:
  op     the spec_verify call as users make it (accept draws its uniforms from a generator),
  ref    the pure-PyTorch way to do the same round (benchmarks/torch_reference.py),
  floor  one torch.sum over a contiguous slice holding as many rows as the op must read.
It prints a Markdown table of ratios, checks the performance bar (best path only), and
writes benchmarks/results/compare.json. Single thread throughout. With --markdown it also
writes its tables into this machine's benchmarks/results/<cpu-slug>.md (results_markdown.py),
replacing the sections it measured.

    python benchmarks/compare.py [--quick] [--strict] [--out PATH] [--markdown [PATH]]

The cases and their columns are built in compare_cases.py and timed by paired_timing.py
(interleaved blocks, paired ratios with their interquartile range); this file holds the
bar and the targets, the tables and the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import results_markdown  # noqa: E402
from compare_cases import (SMALL_K, SMALL_V, accept_cases, block_cases, fixed_cost_case,  # noqa: E402
                           greedy_cases, half_cases, one_hot_cases, pipeline_cases, rows_buffer, tree_cases)
from paired_timing import CLIP, clock_overhead_ns, fmt_iqr, paired_ratio, run_blocks, summary_us, verdict  # noqa: E402

SHAPES = [(32000, 4), (128256, 5)]

# The performance bar of the issue, applied to the best path only.
BAR_GREEDY_FLOOR = 1.5     # verify_greedy time / floor time, at most
BAR_ACCEPT_FLOOR = 2.5     # accept time / floor time, at most
BAR_VS_REFERENCE = 15.0    # reference time / op time, at least
BAR_GREEDY_ARGMAX = 2.0    # verify_greedy / one torch.argmax at V = 64, at most
BAR_ACCEPT_ARGMAX = 3.0    # accept / one torch.argmax at V = 64, at most

# Targets of the logits issue, reported (not enforced): a sampled round from logits
# (sample for the K draft rows + accept_logits), and sample on one row, best path.
TARGET_ROUND_TOP_P_VS_HF = 100.0    # transformers' pipeline / ours, at least (T 0.8, top-p 0.9)
TARGET_ROUND_TOP_P_FLOOR = 6.0      # ours / one read pass over the 2K+1 rows, at most
TARGET_ROUND_TEMP_FLOOR = 4.0       # the same with temperature only
TARGET_SAMPLE_TOP_P_VS_HF = 50.0    # transformers' warpers + softmax + multinomial / sample
# Targets of the one-hot issue, reported (not enforced), best path.
TARGET_ONE_HOT_FLOOR = 1.6          # one-hot accept / one read pass over the target rows it reads
TARGET_ONE_HOT_VS_TORCH = 20.0      # one-hot rows + the PyTorch sampler / ours, at least
TARGET_HALF_OVER_F32 = 0.65         # verify_greedy on bfloat16 rows / on float32 rows, at most
TARGET_TREE_VS_TORCH = 20.0         # the PyTorch tree rules / verify_tree, at least


def tree_report(cases: list, path: str):
    lines = ["| V | tree | children tried | rows read | ours us [IQR] | PyTorch us | floor us | ours/floor [IQR] | "
             "PyTorch/ours [IQR] | ours per tried child / one row read |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    targets, rows = [], []
    for case in cases:
        o, r, f = case.columns["ours"], case.columns["ref"], case.columns["floor"]
        vs_floor, vs_ref = paired_ratio(o, f), paired_ratio(r, o)
        so, sr, sf = summary_us(o), summary_us(r), summary_us(f)
        tried = case.extra["tried"]
        per_child = (so["median_us"] / tried) / (sf["median_us"] / case.rows)
        lines.append(f"| {case.v} | {case.label}, depth {case.k} | {tried} | {case.rows:g} | {so['median_us']:.1f} "
                     f"[{so['q1_us']:.1f}-{so['q3_us']:.1f}] | {sr['median_us']:.0f} | {sf['median_us']:.1f} | "
                     f"{fmt_iqr(vs_floor)} | {fmt_iqr(vs_ref, 1)} | {per_child:.2f} |")
        rows.append({"op": "tree", "V": case.v, "case": case.label, "depth": case.k, "rows_read": case.rows,
                     "path": path, "op_time": so, "reference_time": sr, "floor_time": sf,
                     "op_over_floor": vs_floor, "reference_over_op": vs_ref, "per_tried_child_over_row": per_child,
                     **case.extra})
        targets.append((f"tree V={case.v} {case.label} [{path}]", "PyTorch/ours", vs_ref, TARGET_TREE_VS_TORCH, False))
    target_lines = []
    for where, what, ratio, bar, at_most in targets:
        v = verdict(ratio, bar, at_most).replace("PASS", "meets").replace("FAIL", "misses")
        target_lines.append(f"{v:<6}  {where}: {what} {fmt_iqr(ratio)} (target {'<=' if at_most else '>='} {bar:g})")
    return lines, target_lines, rows


def half_report(cases: list, path: str):
    lines = ["| V | K | type | verify_greedy us (f32) | half/f32 [IQR] | half/`.float()` [IQR] | accept us (f32) | "
             "half/f32 [IQR] |", "|---|---|---|---|---|---|---|---|"]
    targets, rows = [], []
    for case in cases:
        c = case.columns
        g_ratio, conv_ratio, a_ratio = (paired_ratio(c["greedy16"], c["greedy32"]),
                                        paired_ratio(c["greedy16"], c["convert"]),
                                        paired_ratio(c["acc16"], c["acc32"]))
        g32, a32 = summary_us(c["greedy32"]), summary_us(c["acc32"])
        lines.append(f"| {case.v} | {case.k} | {case.label} | {g32['median_us']:.1f} | {fmt_iqr(g_ratio)} | "
                     f"{fmt_iqr(conv_ratio)} | {a32['median_us']:.1f} | {fmt_iqr(a_ratio)} |")
        rows.append({"op": "half rows", "V": case.v, "K": case.k, "type": case.label, "path": path,
                     "verify_greedy_f32_time": g32, "verify_greedy_half_over_f32": g_ratio,
                     "verify_greedy_half_over_float_conversion": conv_ratio, "accept_f32_time": a32,
                     "accept_half_over_f32": a_ratio})
        if case.label == "bfloat16" and case.v == 128256:
            where = f"verify_greedy bfloat16 V={case.v} K={case.k} [{path}]"
            targets.append((where, "half/f32", g_ratio, TARGET_HALF_OVER_F32, True))
            targets.append((where, "half/.float()", conv_ratio, 1.0, True))
    target_lines = []
    for where, what, ratio, bar, at_most in targets:
        v = verdict(ratio, bar, at_most).replace("PASS", "meets").replace("FAIL", "misses")
        target_lines.append(f"{v:<6}  {where}: {what} {fmt_iqr(ratio)} (target {'<=' if at_most else '>='} {bar:g})")
    return lines, target_lines, rows


def one_hot_block_report(one_hot: list, blocks: list, path: str):
    lines = ["| V | K | case | rows read | ours us [IQR] | PyTorch us | floor us | ours/floor [IQR] | "
             "PyTorch/ours [IQR] |", "|---|---|---|---|---|---|---|---|---|"]
    targets, rows = [], []
    for case in one_hot:
        o, r, f = case.columns["ours"], case.columns["ref"], case.columns["floor"]
        vs_floor, vs_ref = paired_ratio(o, f), paired_ratio(r, o)
        so, sr, sf = summary_us(o), summary_us(r), summary_us(f)
        lines.append(f"| {case.v} | {case.k} | {case.label} | {case.rows:g} | {so['median_us']:.1f} "
                     f"[{so['q1_us']:.1f}-{so['q3_us']:.1f}] | {sr['median_us']:.0f} | {sf['median_us']:.1f} | "
                     f"{fmt_iqr(vs_floor)} | {fmt_iqr(vs_ref, 1)} |")
        rows.append({"op": case.op, "V": case.v, "K": case.k, "case": case.label, "rows_read": case.rows,
                     "path": path, "op_time": so, "reference_time": sr, "floor_time": sf,
                     "op_over_floor": vs_floor, "reference_over_op": vs_ref})
        where = f"one-hot accept V={case.v} K={case.k} {case.label} [{path}]"
        targets.append((where, "ours/floor", vs_floor, TARGET_ONE_HOT_FLOOR, True))
        targets.append((where, "PyTorch/ours", vs_ref, TARGET_ONE_HOT_VS_TORCH, False))
    block_lines = ["| V | K | token us | block us | floor (2K+1 rows) us | block/token [IQR] | "
                   "block/floor [IQR] | mean accepted token (analytic) | mean accepted block |",
                   "|---|---|---|---|---|---|---|---|---|"]
    for case in blocks:
        t, b, f = case.columns["token"], case.columns["block"], case.columns["floor"]
        bt, bf = paired_ratio(b, t), paired_ratio(b, f)
        st, sb, sf = summary_us(t), summary_us(b), summary_us(f)
        e = case.extra
        block_lines.append(f"| {case.v} | {case.k} | {st['median_us']:.1f} | {sb['median_us']:.1f} | "
                           f"{sf['median_us']:.1f} | {fmt_iqr(bt)} | {fmt_iqr(bf)} | "
                           f"{e['mean_accepted_token']:.3f} ({e['analytic_mean_accepted_token']:.3f}) | "
                           f"{e['mean_accepted_block']:.3f} |")
        rows.append({"op": case.op, "V": case.v, "K": case.k, "path": path, "token_time": st, "block_time": sb,
                     "floor_time": sf, "block_over_token": bt, "block_over_floor": bf, **e})
    target_lines = []
    for where, what, ratio, bar, at_most in targets:
        v = verdict(ratio, bar, at_most).replace("PASS", "meets").replace("FAIL", "misses")
        target_lines.append(f"{v:<6}  {where}: {what} {fmt_iqr(ratio)} (target {'<=' if at_most else '>='} {bar:g})")
    return lines, block_lines, target_lines, rows


def pipeline_report(cases: list, path: str):
    """The logits table, the issue's targets (reported, never enforced), and JSON rows."""
    lines = ["| V | K | case | rows | ours us [IQR] | transformers us | floor us | transformers/ours [IQR] | "
             "ours/floor [IQR] | torch.exp of the drawn rows/floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    targets, rows = [], []
    for case in cases:
        o, r, f, e = (case.columns[c] for c in ("ours", "ref", "floor", "exp"))
        vs_ref, vs_floor, exp_floor = paired_ratio(r, o), paired_ratio(o, f), paired_ratio(e, f)
        so, sr, sf, se = summary_us(o), summary_us(r), summary_us(f), summary_us(e)
        lines.append(f"| {case.v} | {case.k} | {case.label} | {case.rows:g} | {so['median_us']:.1f} "
                     f"[{so['q1_us']:.1f}-{so['q3_us']:.1f}] | {sr['median_us']:.0f} | {sf['median_us']:.1f} | "
                     f"{fmt_iqr(vs_ref, 1)} | {fmt_iqr(vs_floor)} | {fmt_iqr(exp_floor)} |")
        rows.append({"op": "pipeline", "V": case.v, "K": case.k, "case": case.label, "rows_read": case.rows,
                     "path": path, "op_time": so, "reference_time": sr, "floor_time": sf, "exp_time": se,
                     "reference_over_op": vs_ref, "op_over_floor": vs_floor, "exp_over_floor": exp_floor,
                     **case.extra})
        where = f"{case.label} V={case.v} K={case.k} [{path}]"
        exp_note = f"; torch.exp of its {case.k + 1} drawn rows alone: {fmt_iqr(exp_floor)}"
        if case.extra.get("min_p", 0.0) > 0.0:
            continue  # (not one of the rounds)
        if case.label.startswith("sample"):
            if case.extra["top_p"] < 1.0:
                targets.append((where, "transformers/ours", vs_ref, TARGET_SAMPLE_TOP_P_VS_HF, False))
        elif case.extra["top_p"] < 1.0:
            targets.append((where, "transformers/ours", vs_ref, TARGET_ROUND_TOP_P_VS_HF, False))
            targets.append((where + exp_note, "ours/floor", vs_floor, TARGET_ROUND_TOP_P_FLOOR, True))
        else:
            targets.append((where + exp_note, "ours/floor", vs_floor, TARGET_ROUND_TEMP_FLOOR, True))
    target_lines = []
    for where, what, ratio, bar, at_most in targets:
        v = verdict(ratio, bar, at_most).replace("PASS", "meets").replace("FAIL", "misses")
        target_lines.append(f"{v:<6}  {where}: {what} {fmt_iqr(ratio)} (target {'<=' if at_most else '>='} {bar:g})")
    return lines, target_lines, rows


def write_partial(out: Path, sv, paths: list, best: str, blocks: int, rows: list) -> int:
    """The JSON of a run limited to one section (--tree-only and the like): its rows only."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "kernel": sv.__name__, "paths": paths, "bar_path": best, "torch": torch.__version__,
        "machine": {"processor": platform.processor(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "threads": torch.get_num_threads(), "blocks": blocks, "cases": rows}, indent=2))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few blocks, short chunks (a few seconds)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if the best path misses the bar")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "compare.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--logits-only", action="store_true",
                    help="only the logits pipeline comparison (sampled rounds and sample)")
    ap.add_argument("--one-hot-only", action="store_true",
                    help="only one-hot drafts and block verification")
    ap.add_argument("--half-only", action="store_true", help="only half-type rows against float32 rows")
    ap.add_argument("--tree-only", action="store_true", help="only tree verification")
    ap.add_argument("--chain-only", action="store_true",
                    help="only the chain ops on probability rows (verify_greedy, accept) and the bar")
    ap.add_argument("--markdown", nargs="?", type=Path, const=results_markdown.default_path(), default=None,
                    metavar="PATH", help="also write the tables into PATH (default: "
                    "benchmarks/results/<cpu-slug>.md), replacing the sections this run measured")
    args = ap.parse_args()
    blocks, chunk_ns, n_mix = (11, 0.5e6, 20) if args.quick else (81, 1.5e6, 40)

    from kernels import get_kernel

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    overhead = clock_overhead_ns()
    paths = sv.available_isas()
    best = paths[0]
    started = time.perf_counter()
    print(f"kernel {sv.__name__}, paths {', '.join(paths)} (bar on {best}), torch {torch.__version__}, "
          f"1 thread, {blocks} interleaved blocks{' (quick)' if args.quick else ''}", file=sys.stderr)

    sv._force_isa(best)
    section_flag = ""  # the --X-only flag of the section being written, for its "Run:" line

    def markdown(key: str, title: str, body: list) -> None:
        if args.markdown is None:
            return
        command = "compare.py" + (f" --{section_flag}" if section_flag else "") + (" --quick" if args.quick else "")
        run = results_markdown.run_line(command, best, blocks)
        body = [("- " + line if line.split(" ", 1)[0] in ("PASS", "FAIL", "meets", "misses") else line)
                for line in body]
        where = results_markdown.write_section(key, title, [run, "", *body], args.markdown)
        print(f"wrote section {key} of {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}")

    # An --X-only run times its own section alone.
    only = [name for name in ("logits", "one_hot", "half", "tree", "chain") if getattr(args, f"{name}_only")]
    shapes_for = lambda name: SHAPES if not only or only == [name] else []  # noqa: E731
    trees = []
    for v, _ in shapes_for("tree"):
        for case in tree_cases(sv, v, args.seed):
            run_blocks(list(case.columns.values()), blocks, chunk_ns, overhead)
            print(f"  timed {case.op} V={case.v} {case.label}", file=sys.stderr)
            trees.append(case)
    tree_lines, tree_targets, tree_rows = tree_report(trees, best)
    tree_text = [f"\nTree verification (children drawn from the draft; siblings before the spine child "
                 f"rejected at every level), {best} path:\n", *tree_lines,
                 "\nTargets of the tree issue (reported, not enforced):", *tree_targets]
    if args.tree_only:
        section_flag = "tree-only"
        markdown("compare.tree", "Trees", tree_text)
        print("\n".join(tree_text))
        return write_partial(args.out, sv, paths, best, blocks, tree_rows)
    halves = []
    for v, k in shapes_for("half"):
        for case in half_cases(sv, v, k, args.seed):
            run_blocks(list(case.columns.values()), blocks, chunk_ns, overhead)
            print(f"  timed {case.op} V={case.v} K={case.k} {case.label}", file=sys.stderr)
            halves.append(case)
    half_lines, half_targets, half_rows = half_report(halves, best)
    half_text = [f"\nHalf-type rows against float32 rows (the same values), {best} path:\n", *half_lines,
                 "\nTargets of the half-types issue (reported, not enforced):", *half_targets]
    if args.half_only:
        section_flag = "half-only"
        markdown("compare.half", "Half rows", half_text)
        print("\n".join(half_text))
        return write_partial(args.out, sv, paths, best, blocks, half_rows)
    one_hot, block = [], []
    for v, k in shapes_for("one_hot"):
        for case in one_hot_cases(sv, v, k, args.seed) + [block_cases(sv, v, k, args.seed)]:
            run_blocks(list(case.columns.values()), blocks, chunk_ns, overhead)
            print(f"  timed {case.op} V={case.v} K={case.k} {case.label}", file=sys.stderr)
            (block if case.op.startswith("accept block") else one_hot).append(case)
    oh_lines, block_lines, oh_targets, oh_rows = one_hot_block_report(one_hot, block, best)
    oh_text = [f"\nOne-hot drafts (draft_probs None) against building one-hot rows for the PyTorch sampler, "
               f"{best} path:\n", *oh_lines,
               f"\nBlock verification against token-wise accept on the same rounds, {best} path:\n", *block_lines,
               "\nTargets of the one-hot issue (reported, not enforced):", *oh_targets]
    if args.one_hot_only:
        section_flag = "one-hot-only"
        markdown("compare.one_hot", "One-hot drafts and block verification", oh_text)
        print("\n".join(oh_text))
        return write_partial(args.out, sv, paths, best, blocks, oh_rows)

    pipe: list = []
    for v, k in shapes_for("logits"):
        for case in pipeline_cases(sv, v, k, args.seed):
            run_blocks(list(case.columns.values()), blocks, chunk_ns, overhead)
            print(f"  timed {case.op} V={case.v} K={case.k} {case.label}", file=sys.stderr)
            pipe.append(case)
    sv._force_isa("")
    pipe_lines, pipe_targets, pipe_rows = pipeline_report(pipe, best)
    pipe_text = [f"Logits in: a sampled round (K sample calls + accept_logits; every draft accepted, so "
                 f"2K+1 rows read) and sample on one row, against transformers' warpers + softmax + "
                 f"multinomial (+ accept on the warped rows), {best} path:\n", *pipe_lines,
                 "\nTargets of the logits issue (reported, not enforced):", *pipe_targets]
    if args.logits_only:
        section_flag = "logits-only"
        markdown("compare.logits", "Logits in: sampled rounds", pipe_text)
        print("\n".join(pipe_lines))
        print(f"\nTargets of the logits issue ({best} path; reported, not enforced):")
        print("\n".join(pipe_targets))
        return write_partial(args.out, sv, paths, best, blocks, pipe_rows)

    cases: list = []
    for v, k in SHAPES:
        mem, target, draft = rows_buffer(k, v, args.seed)
        for case in greedy_cases(sv, paths, v, k, mem, target) + \
                accept_cases(sv, paths, v, k, mem, target, draft, n_mix, args.seed):
            run_blocks(list(case.columns.values()), blocks, chunk_ns, overhead)
            print(f"  timed {case.op} V={case.v} K={case.k} {case.label}", file=sys.stderr)
            cases.append(case)
    small = fixed_cost_case(sv, paths, args.seed)
    run_blocks(list(small.values()), blocks, chunk_ns / 2, overhead)
    sv._force_isa("")

    results, bars = [], []
    lines = ["| V | K | op | case | rows read | path | op us [IQR] | floor us | reference us | "
             "op/floor [IQR] | reference/op [IQR] |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for case in cases:
        fl, rf = case.columns["floor"], case.columns["ref"]
        for p in paths:
            op = case.columns[f"op:{p}"]
            vs_floor, vs_ref = paired_ratio(op, fl), paired_ratio(rf, op)
            s, f, r = summary_us(op), summary_us(fl), summary_us(rf)
            lines.append(
                f"| {case.v} | {case.k} | {case.op} | {case.label} | {case.rows:g} | {p} | "
                f"{s['median_us']:.1f} [{s['q1_us']:.1f}-{s['q3_us']:.1f}] | {f['median_us']:.1f} | "
                f"{r['median_us']:.1f} | {fmt_iqr(vs_floor)} | {fmt_iqr(vs_ref, 1)} |")
            results.append({"op": case.op, "V": case.v, "K": case.k, "case": case.label,
                            "rows_read": case.rows, "path": p,
                            "op_time": s, "floor_time": f, "reference_time": r,
                            "op_over_floor": vs_floor, "reference_over_op": vs_ref, **case.extra})
            if p != best:
                continue
            floor_bar = BAR_GREEDY_FLOOR if case.op == "verify_greedy" else BAR_ACCEPT_FLOOR
            where = f"{case.op} V={case.v} K={case.k} {case.label} [{p}]"
            bars.append((where, "op/floor", vs_floor, floor_bar, True))
            bars.append((where, "reference/op", vs_ref, BAR_VS_REFERENCE, False))

    small_lines = ["| path | verify_greedy us | accept us | torch.argmax us | "
                   "verify_greedy/argmax [IQR] | accept/argmax [IQR] |",
                   "|---|---|---|---|---|---|"]
    am = small["argmax"]
    fixed = []
    for p in paths:
        vg, ac = small[f"verify_greedy:{p}"], small[f"accept:{p}"]
        rg, ra = paired_ratio(vg, am), paired_ratio(ac, am)
        small_lines.append(f"| {p} | {summary_us(vg)['median_us']:.2f} | {summary_us(ac)['median_us']:.2f} | "
                           f"{summary_us(am)['median_us']:.2f} | {fmt_iqr(rg)} | {fmt_iqr(ra)} |")
        fixed.append({"path": p, "verify_greedy_time": summary_us(vg), "accept_time": summary_us(ac),
                      "argmax_time": summary_us(am), "verify_greedy_over_argmax": rg,
                      "accept_over_argmax": ra})
        if p == best:
            bars.append((f"verify_greedy V={SMALL_V} K={SMALL_K} fixed cost [{p}]", "op/argmax", rg,
                         BAR_GREEDY_ARGMAX, True))
            bars.append((f"accept V={SMALL_V} K={SMALL_K} fixed cost [{p}]", "op/argmax", ra,
                         BAR_ACCEPT_ARGMAX, True))
    breakdown = {name: summary_us(col) for name, col in small.items()
                 if name == "argmax" or ":" not in name}
    breakdown["verify_greedy (default path)"] = summary_us(small[f"verify_greedy:{best}"])
    breakdown["accept (default path)"] = summary_us(small[f"accept:{best}"])

    bar_lines, failed = [], 0
    for where, what, ratio, bar, at_most in bars:
        v = verdict(ratio, bar, at_most)
        failed += v.startswith("FAIL")
        bar_lines.append(f"{v:<4}  {where}: {what} {fmt_iqr(ratio)} "
                         f"(bar {'<=' if at_most else '>='} {bar:g})")

    elapsed = time.perf_counter() - started
    section_flag = "chain-only" if args.chain_only else ""
    markdown("compare.chain", "verify_greedy and accept on probability rows",
             [f"Every path this CPU runs, beside one `torch.sum` over the rows the op must read (floor) and "
              f"the pure-PyTorch way (reference):\n", *lines,
              f"\nPerformance bar ({best} path):", *bar_lines, f"\n{len(bars) - failed} of {len(bars)} bar lines pass."])
    markdown("compare.fixed_cost", f"Fixed per-call cost (V = {SMALL_V}, K = {SMALL_K})",
             [*small_lines, "\nWhere a call goes (default path, median us per call):\n",
              "| piece | us |", "| --- | --- |",
              *(f"| {name} | {s_['median_us']:.2f} |" for name, s_ in breakdown.items())])
    if not args.chain_only:
        section_flag = ""
        markdown("compare.logits", "Logits in: sampled rounds", pipe_text)
        markdown("compare.one_hot", "One-hot drafts and block verification", oh_text)
        markdown("compare.half", "Half rows", half_text)
        markdown("compare.tree", "Trees", tree_text)
    print("\n".join(lines))
    print(f"\nFixed per-call cost, V = {SMALL_V}, K = {SMALL_K} (all drafts match / all accepted):\n")
    print("\n".join(small_lines))
    print("\nWhere a V = 64 call goes (default path, median us per call):")
    for name, s in breakdown.items():
        print(f"  {name:<32} {s['median_us']:6.2f}")
    print(f"\nPerformance bar ({best} path; ratios are medians of paired blocks, [IQR]):")
    print("\n".join(bar_lines))
    print(f"\n{len(bars) - failed} of {len(bars)} bar lines pass; {elapsed:.0f} s")
    print(f"\nLogits in: a sampled round (K sample calls + accept_logits; every draft accepted, so "
          f"2K+1 rows read) and sample on one row, against transformers' warpers + softmax + multinomial "
          f"(+ accept on the warped rows), {best} path:\n")
    print("\n".join(pipe_lines))
    print("\nTargets of the logits issue (reported, not enforced):")
    print("\n".join(pipe_targets))
    print("\n".join(oh_text))
    print("\n".join(half_text))
    print("\n".join(tree_text))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "kernel": sv.__name__, "paths": paths, "bar_path": best, "torch": torch.__version__,
        "machine": {"processor": platform.processor(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "threads": torch.get_num_threads(), "blocks": blocks, "chunk_ms": chunk_ns / 1e6,
        "clock_overhead_ns_subtracted": overhead, "call_cap_times_median": CLIP,
        "quick": args.quick, "seconds": elapsed,
        "cases": results + pipe_rows + oh_rows + half_rows + tree_rows, "fixed_cost": fixed, "fixed_cost_breakdown_us": breakdown,
        "bar": [{"where": w, "ratio": what, "value": r, "bar": b,
                 "at_most": am_, "verdict": verdict(r, b, am_)} for w, what, r, b, am_ in bars],
    }, indent=2))
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 1 if (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
