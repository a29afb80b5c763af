#!/usr/bin/env python3
"""The live decoder simulated over recorded outputs: which drafter settings pay on which cost curve.

    python benchmarks/e2e_simulate.py --record        # once: plain greedy outputs through llama.cpp
    python benchmarks/e2e_simulate.py                 # the table (a minute or two, no model run)
    python benchmarks/e2e_simulate.py --slopes 0.05,0.2  # on straight curves instead

1. `--record`: the two multi-request workloads of benchmarks/e2e_tasks.py (every request,
   the caps of benchmarks/e2e_multi.py) and the single-request "open question" are decoded
   greedily by plain llama.cpp (one thread) with Qwen2.5-Coder 0.5B and 1.5B (ChatML) and
   Gemma 3 270M (base); the control, "passage", is human text that repeats no phrase (the
   summary task's passage, tokenized) after the open question's prompt. Prompts and outputs
   go to ~/.cache/spec-verify/recorded/<model>.json (not the repository).
2. The simulation: the real `sv.SpeculativeDecoder`, with the real `AdaptiveSchedule` and the
   real drafter, over a fake target whose rows are one-hot at the recorded tokens. Under
   greedy verification that is exact: rows are read only up to the first rejected position,
   and every row read is the recorded target's choice there. Time is a simulated clock (the
   schedule's `clock=`): a target call scoring n positions spends c(n) of a cost curve
   (linear between the measured n; k <= 16 stays inside them), the prompt's call a tenth of
   a step per token (two-core llama.cpp measured 0.11), and a draft call `DRAFT` (its real
   time is reported beside). A request that stopped before its cap ends with an end token
   (plain pays its step too). One decoder serves a workload's requests in order, as in a
   user's process: its suffix cache fills, its costs and calibration carry over.
   Tree settings (`sv.SuffixTreeDrafter`, its `TreeSchedule` on the same clock) run through
   `sv.TreeDecoder`: a tree of n nodes costs c(n + 1), and the fake
   target's row after a node is the recorded token there when the node's path is the
   recorded continuation (the accepted path is the longest one the recording follows; the
   other rows are never read by greedy verification).
3. A setting's speed-up is plain decoding's simulated time (a step per token) over the
   decoder's, the prompt's call (which emits the first token) left out on both sides. With `--oracle`, beside it in brackets: the
   oracle's ceiling for the same drafter (benchmarks/e2e_oracle.py's replay: every round's
   length chosen with hindsight on the same curve).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "benchmarks")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import e2e_oracle as oracle  # noqa: E402  (the cost curve read between its points; the replay)

RECORDED = Path(os.environ.get("SPEC_VERIFY_CACHE", Path.home() / ".cache" / "spec-verify")) / "recorded"
MODELS = {"qwen-coder-0.5b": True, "gemma3": False, "qwen-coder-1.5b": True}  # name -> chat template
CAPS = {"extraction": 80, "agent loop": 160, "open question": 160, "passage": 160}
# Cost curves measured on the AMD EPYC (2-core VM, one thread; benchmarks/results/e2e-multi-amd-epyc.md):
# c(n) / c(1) of one target call scoring n positions with logits at every one.
CURVES = {
    "llama.cpp Gemma 3 270M": {1: 1.0, 2: 2.18, 3: 2.63, 5: 4.54, 9: 5.99, 17: 8.46},
    "llama.cpp Qwen2.5-Coder 1.5B": {1: 1.0, 2: 1.76, 3: 2.43, 5: 3.86, 9: 9.92, 17: 10.64},
    "transformers bf16 Qwen2.5-Coder 0.5B": {1: 1.0, 2: 0.94, 3: 1.02, 5: 1.15, 9: 1.32, 17: 1.58},
}
STEP = 0.1  # seconds of c(1) on the simulated clock (the curves are ratios; llama.cpp: 78-130 ms)
DRAFT = 50e-6  # seconds charged per draft call (measured: 6-15 us a round for both drafters, under load)


def record(threads: int = 1) -> None:
    """Decodes every workload's requests and the control greedily with plain llama.cpp."""
    import real_models
    from e2e import load
    from e2e_tasks import PASSAGE, prompt_ids, workload_prompts

    RECORDED.mkdir(parents=True, exist_ok=True)
    for name, chat in MODELS.items():
        path = RECORDED / f"{name}.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        if all(w in data for w in CAPS):
            continue
        llm = load(real_models.ensure(name), threads)
        stop = {llm.token_eos()} | (set(llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[:1]) if chat else set())
        for workload, cap in CAPS.items():
            if workload in data:
                continue
            if workload == "passage":  # human text after an unrelated prompt: no decoding
                prompt = prompt_ids(llm, "open question", chat)
                data[workload] = dict(prompts=[prompt], outputs=[llm.tokenize(PASSAGE.encode(), add_bos=False)[:cap]])
                continue
            prompts = [prompt_ids(llm, workload, chat)] if workload == "open question" else \
                workload_prompts(llm, workload, chat)
            outputs = []
            for prompt in prompts:
                llm.reset()
                out = []
                for token in llm.generate(prompt, temp=0.0, repeat_penalty=1.0):
                    if token in stop:
                        break
                    out.append(int(token))
                    if len(out) == cap:
                        break
                outputs.append(out)
                print(f"{name} {workload}: {len(out)} tokens", flush=True)
            data[workload] = dict(prompts=[list(map(int, p)) for p in prompts], outputs=outputs)
        path.write_text(json.dumps(data))


class Clock:
    """Simulated nanoseconds (an `AdaptiveSchedule` clock); `spent` sums them by kind."""

    def __init__(self):
        self.ns, self.spent = 0, dict(prefill=0.0, target=0.0, draft=0.0)

    def __call__(self) -> int:
        return self.ns

    def spend(self, kind: str, seconds: float) -> None:
        self.ns += int(round(seconds * 1e9))
        self.spent[kind] += seconds


class TimedDrafter:
    """The drafter under test, charged DRAFT seconds a call on the clock (its real time is
    kept in `real`); every attribute the decoder reads (`confidences`, `shadowable`,
    `end_generation`) or sets (`position_cost`) is the drafter's own."""

    def __init__(self, drafter, clock: Clock, seconds: float):
        self.drafter, self.clock, self.seconds, self.real, self.calls = drafter, clock, seconds, 0.0, 0

    def __call__(self, prefix, k):
        t0 = time.perf_counter()
        out = self.drafter(prefix, k)
        self.real += time.perf_counter() - t0
        self.calls += 1
        self.clock.spend("draft", self.seconds)
        return out

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def __setattr__(self, name, value):
        if name == "position_cost":
            setattr(self.drafter, name, value)
        else:
            super().__setattr__(name, value)


def recorded_target(torch, clock: Clock, curve, vocab: int, request: dict):
    """target_step whose rows are one-hot at the recorded tokens (exact for greedy verification)."""
    def step(prefix, proposed):
        n = proposed.numel() + 1
        at = len(prefix) - request["prompt_len"]
        if at == 0:
            clock.spend("prefill", STEP * min(0.1, curve[17] / 17) * len(prefix))
        else:
            clock.spend("target", STEP * oracle.cost_at(curve, n))
        rows = torch.zeros(n, vocab)
        out = request["output"]
        for i in range(n):
            rows[i, out[at + i] if at + i < len(out) else request["eos"]] = 1.0
        return rows
    return step


class TimedTree(TimedDrafter):
    """A `draft_tree` under test, charged as `TimedDrafter` charges a `draft_step`."""

    def __call__(self, prefix):
        t0 = time.perf_counter()
        out = self.drafter(prefix)
        self.real += time.perf_counter() - t0
        self.calls += 1
        self.clock.spend("draft", self.seconds)
        return out


def recorded_tree_target(torch, clock: Clock, curve, vocab: int, request: dict):
    """target_tree_step whose row after a node is one-hot at the recorded token there if the
    node's path is the recorded continuation (exact for greedy verification: only the rows of
    the accepted path are read), the end token otherwise; n nodes cost c(n + 1)."""
    def step(prefix, tokens, parents):
        toks, pars = tokens.tolist(), parents.tolist()
        n = len(toks) + 1
        at = len(prefix) - request["prompt_len"]
        if at == 0:
            clock.spend("prefill", STEP * min(0.1, curve[17] / 17) * len(prefix))
        else:
            clock.spend("target", STEP * oracle.cost_at(curve, n))
        out = request["output"]
        recorded = (lambda i: out[i] if i < len(out) else request["eos"])
        rows = torch.zeros(n, vocab)
        rows[0, recorded(at)] = 1.0
        depth, on_path = [], []
        for j, (t, p) in enumerate(zip(toks, pars)):
            depth.append(1 if p < 0 else depth[p] + 1)
            on_path.append((p < 0 or on_path[p]) and t == recorded(at + depth[j] - 1))
            rows[j + 1, recorded(at + depth[j]) if on_path[j] else request["eos"]] = 1.0
        return rows
    return step


def simulate(sv, torch, make_drafter, k: int, curve, requests, vocab: int, eos: int) -> dict:
    """One decoder over a workload's requests in order; plain's simulated time over its own.
    `make_drafter()` a draft_step (chain rounds of at most k), or `make_drafter(clock)` with
    `k = 0` a tree drafter with its schedule on the clock (tree rounds)."""
    clock = Clock()
    request = {}
    if k:
        drafter = TimedDrafter(make_drafter(), clock, DRAFT)
        dec = sv.SpeculativeDecoder(drafter, recorded_target(torch, clock, curve, vocab, request), k=k,
                                    schedule=sv.AdaptiveSchedule(clock=clock))
    else:
        drafter = TimedTree(make_drafter(clock), clock, DRAFT)
        dec = sv.TreeDecoder(drafter, recorded_tree_target(torch, clock, curve, vocab, request), greedy=True)
    plain_steps = 0
    for prompt, output, capped in requests:
        request.update(prompt_len=len(prompt), output=output, eos=eos)
        max_new, stop = (len(output), None) if capped else (len(output) + 1, eos)
        got = dec.generate(list(prompt), max_new, eos_token_id=stop)[len(prompt):]
        assert got == output + ([] if capped else [eos]), "greedy output differs from the recording"
        plain_steps += len(got) - 1  # the first token comes with the prompt's call, on both sides
    spent = clock.spent["target"] + clock.spent["draft"]
    return dict(speedup=plain_steps * STEP / spent, draft_us=1e6 * drafter.real / max(drafter.calls, 1),
                rounds=dict(getattr(drafter.drafter, "rounds", {})))


def dense(data: dict):
    """Token ids renumbered 0..V-1 over everything recorded (rows stay small; drafters only
    compare ids), plus an end token V - 1 for requests that stopped before their cap."""
    ids = sorted({t for w in data.values() for seq in w["prompts"] + w["outputs"] for t in seq})
    index = {t: i for i, t in enumerate(ids)}
    eos = len(ids)
    workloads = {}
    for name, w in data.items():
        workloads[name] = [([index[t] for t in p], [index[t] for t in o], len(o) >= CAPS[name])
                           for p, o in zip(w["prompts"], w["outputs"])]
    return workloads, eos + 1, eos


def tree_settings(sv):
    """name -> factory(clock) of tree drafters (the suffix default's counts, trees of at most
    n nodes, depth capped as the chain's length), each with a TreeSchedule on the clock."""
    out = {}
    for factor, nodes in ((4.0, 16), (4.0, 8), (1.0, 16)):  # the tree's default first
        out[f"suffix tree f={factor:g} n={nodes}"] = lambda clock, f=factor, n=nodes: sv.SuffixTreeDrafter(
            sv.SuffixCache(max_requests=64), max_spec_factor=f, max_nodes=n,
            schedule=sv.TreeSchedule(clock=clock))
    return out


def settings(sv):
    """name -> drafter factory: the prompt-lookup and suffix defaults and a grid of suffix drafters."""
    out = {"lookup (default)": sv.PromptLookup,
           "suffix (default)": lambda: sv.SuffixDrafter(sv.SuffixCache(max_requests=64))}
    grid = [(1.0, 0, 0.1), (1.0, 0, 0.0), (1.0, 0, 0.3), (1.0, -1, 0.1), (1.0, -2, 0.1), (1.0, 4, 0.1),
            (1.5, 0, 0.1), (2.0, 0, 0.1), (2.0, -2, 0.1), (2.0, 4, 0.1), (4.0, 0, 0.1), (4.0, -2, 0.1),
            (1e9, 0, 0.1), (1e9, 0, 0.0)]  # (factor, offset, min_token_prob)
    for factor, offset, prob in grid:
        name = f"suffix f={'inf' if factor > 1e6 else f'{factor:g}'} o={offset} p={prob:g}"
        out[name] = lambda f=factor, o=offset, p=prob: sv.SuffixDrafter(
            sv.SuffixCache(max_requests=64), max_spec_factor=f, max_spec_offset=o, min_token_prob=p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", action="store_true", help="record the plain greedy outputs (llama.cpp, one thread)")
    ap.add_argument("--ks", default="8,16", help="k of every setting (the adapters' default: 16)")
    ap.add_argument("--only", default="", help="run only the settings whose name contains this")
    ap.add_argument("--oracle", action="store_true", help="also the oracle's ceiling for every chain setting")
    ap.add_argument("--trees", action="store_true", help="also the tree settings (tree rounds, k = 0 in the table)")
    ap.add_argument("--markdown", help="write the tables to this file too")
    ap.add_argument("--slopes", help="straight curves c(n) = 1 + s (n - 1) for these s, comma-separated, "
                                     "instead of the measured ones")
    args = ap.parse_args()
    if args.record:
        return record()
    import torch
    from kernels import get_kernel

    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    recorded = {m: dense(json.loads((RECORDED / f"{m}.json").read_text())) for m in MODELS
                if (RECORDED / f"{m}.json").exists()}
    cells = [(m, w) for m in recorded for w in CAPS]
    lines, summary = [], {}
    curves = CURVES if not args.slopes else {
        f"straight s={s}": {n: 1.0 + float(s) * (n - 1) for n in (1, 2, 3, 5, 9, 17)} for s in args.slopes.split(",")}
    for curve_name, curve in curves.items():
        runs = [(name, make, k) for k in map(int, args.ks.split(",")) for name, make in settings(sv).items()
                if args.only in name or name.endswith("(default)")]
        if args.trees:
            runs += [(name, make, 0) for name, make in tree_settings(sv).items()]
        head = " | ".join(f"{m} {w}" for m, w in cells)
        lines += ["", f"### {curve_name}: c(n) = " + ", ".join(f"{n}: {c:g}" for n, c in curve.items()), "",
                  f"| setting | k | {head} | geomean, workloads | control, min | drafter us a call, median cell |",
                  "|---|---|" + "---|" * len(cells) + "---|---|---|"]
        for name, make, k in runs:
            got, draft_us, tree_rounds = {}, [], []
            for m, w in cells:
                workloads, vocab, eos = recorded[m]
                res = simulate(sv, torch, make, k, curve, workloads[w], vocab, eos)
                cell = f"{res['speedup']:.2f}"
                draft_us.append(res["draft_us"])
                if res["rounds"]:
                    rounds = res["rounds"]
                    tree_rounds.append((rounds["tree"], rounds["chain"], rounds["none"]))
                if args.oracle and k:
                    seconds = {n: STEP * c for n, c in curve.items()}
                    step = make()
                    if hasattr(step, "position_cost"):  # the cap the live default reaches on this curve
                        step.position_cost = oracle.position_cost(curve)
                    rep = oracle.replay(oracle.StepDrafter(name, step, getattr(step, "end_generation", None) and (
                        lambda p, o, s=step: s.end_generation(p + o, len(p)))),
                        [p for p, _, _ in workloads[w]], [o + ([] if c else [eos]) for _, o, c in workloads[w]],
                        seconds, k_max=k)
                    cell += f" ({rep['decode']:.2f})"
                got[(m, w)] = (res["speedup"], cell)
            repeating = statistics.geometric_mean([got[c][0] for c in cells if c[1] in ("extraction", "agent loop")])
            control = min(got[c][0] for c in cells if c[1] == "passage")
            lines.append(f"| {name} | {k or 'tree'} | " + " | ".join(got[c][1] for c in cells) +
                         f" | {repeating:.3f} | {control:.2f} | {sorted(draft_us)[len(draft_us) // 2]:.0f} |")
            if tree_rounds:  # tree / chain / nothing proposed, over every cell
                lines[-1] += " rounds tree/chain/none: " + "/".join(str(sum(r[i] for r in tree_rounds))
                                                                     for i in range(3))
            summary.setdefault((name, k), []).append(f"{repeating:.2f} / {control:.2f}")
            print(curve_name, lines[-1], flush=True)
    short = ["Gemma 3 curve (llama.cpp)", "Qwen 1.5B curve (llama.cpp)", "Qwen 0.5B curve (transformers bf16)"] \
        if not args.slopes else list(curves)
    lines = ["Geometric mean over the two workloads and the models / the control's lowest:", "",
             "| setting | k | " + " | ".join(short) + " |", "|---|---|" + "---|" * len(curves)] + \
        [f"| {name} | {k or 'tree'} | " + " | ".join(row) + " |" for (name, k), row in summary.items()] + lines
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
