#!/usr/bin/env python3
"""Multi-request end to end: a workload's requests (benchmarks/e2e_tasks.py's WORKLOADS) sent
one after another by one process, every method against plain decoding, through llama.cpp
and through transformers, with the oracle replay's ceiling (benchmarks/e2e_oracle.py) beside.

    python benchmarks/e2e_multi.py                                   # everything, one thread
    python benchmarks/e2e_multi.py --engines llama --llama-models gemma3 --modes greedy
    python benchmarks/e2e_multi.py --markdown 'benchmarks/results/e2e-multi-{cpu}.md'

Methods, on each engine: plain decoding, the prompt-lookup default
(`sv.*.prompt_lookup_decoder`), the suffix decoder (`sv.*.suffix_decoder`, when the package
has it) with a process-wide cache filled by the earlier requests, through transformers the
suffix tree decoder (`sv.transformers.suffix_decoder(..., tree=True)`: the tree decoder over a
`sv.SuffixTreeDrafter` with a cache of its own, when the package has it), and the engine's own lookup
(llama-cpp-python's `LlamaPromptLookupDecoding`; transformers' `prompt_lookup_num_tokens`).
What every method keeps between requests is what a user's process keeps: the KV cache of the
prefix a request shares with the one before (llama.cpp: each run starts with the model's
cache holding exactly that prefix, evaluated untimed; transformers: plain `generate` and its
lookup are passed their `DynamicCache` cropped to it, spec-verify's decoders keep theirs).
A repeat runs the whole workload from a cold process state (new decoders, an empty suffix
cache, no cached prefix), request by request, every method on a request before the next
request: interleaved, so that a load change on the shared machine falls on every method.
Runs stop at the model's end token or the workload's --max-new cap.

Reported per workload: tokens/s over the workload and its ratio to plain's in the same repeat
(median over repeats); the decoding ratio (tokens after the first over the time after the
first, the ratio that compares sampled runs of different lengths) and per request (how the
speed grows as the cache fills); the first token's time against plain's (summed over the
requests), target calls, and for greedy runs how many requests equal plain's output. The
oracle replay uses plain's greedy outputs.
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "benchmarks")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import e2e_oracle as oracle  # noqa: E402
import real_models  # noqa: E402
from e2e import CHAT, MODES, cpu_name, fresh, load, report  # noqa: E402
from e2e_tasks import WORKLOADS, workload_prompts, workload_texts  # noqa: E402

MAX_NEW = {"extraction": 80, "agent loop": 160}
SKIP: set = set()  # methods left out of a run (--skip)
SUFFIX_CACHE = dict(max_requests=64)


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def shared_lengths(prompts):
    """Per request, the tokens its prompt shares with the previous request's (0 for the first)."""
    out = [0]
    for a, b in zip(prompts, prompts[1:]):
        out.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
    return out


def has_suffix(sv, engine: str) -> bool:
    return hasattr(sv, "SuffixCache") and hasattr(getattr(sv, engine), "suffix_decoder")


# llama.cpp --------------------------------------------------------------------------------

def hold_prefix(llm, prompt, n: int) -> None:
    """Leaves `llm`'s KV cache holding exactly prompt[:n] (untimed): what a process that ran
    the previous request keeps for this one."""
    from llama_cpp import llama_cpp as lib

    if n == 0:
        fresh(llm)
        return
    mem = lib.llama_get_memory(llm.ctx)
    if llm.n_tokens >= n and llm.input_ids[:n].tolist() == prompt[:n] and lib.llama_memory_seq_rm(mem, -1, n, -1):
        llm.n_tokens = n
        return
    fresh(llm)
    llm.eval(prompt[:n])


def llama_request(llm, prompt, max_new: int, mode: str, stop) -> dict:
    """llama.cpp's own loop from the held prefix (`Llama.generate` keeps the cached prefix
    that matches the prompt): plain decoding, or its lookup with a draft_model."""
    kw = dict(temp=0.0) if mode == "greedy" else dict(temp=0.8, top_p=0.9, top_k=0, min_p=0.0)
    out, first = [], None
    t0 = time.perf_counter()
    for token in llm.generate(prompt, repeat_penalty=1.0, **kw):
        if first is None:
            first = time.perf_counter() - t0
        out.append(int(token))
        if len(out) == max_new or token in stop:
            break
    return dict(seconds=time.perf_counter() - t0, first=first, tokens=out)


def sv_request(dec, prompt, max_new: int, stop) -> dict:
    """A spec-verify decoder's generation (its cache as the previous request left it)."""
    out, first = [], None
    t0 = time.perf_counter()
    for chunk in dec.stream(prompt, max_new, eos_token_id=list(stop)):
        if first is None:
            first = time.perf_counter() - t0
        out.extend(chunk)
    s = dec.stats
    return dict(seconds=time.perf_counter() - t0, first=first, tokens=out, calls=s.target_calls,
                draft_calls=s.draft_calls, draft_s=s.draft_seconds)


def llama_methods(sv, plain, peer, mode: str, stop, max_new: int):
    """A repeat's methods on one llama.cpp model: name -> (Llama whose cache to set, run)."""
    params = MODES[mode]
    gen = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    out = {"plain": (plain, lambda p: llama_request(plain, p, max_new, mode, stop))}
    look = sv.llama_cpp.prompt_lookup_decoder(plain, generator=gen(0), **params)
    out["lookup (default)"] = (plain, lambda p: sv_request(look, p, max_new, stop))
    if has_suffix(sv, "llama_cpp"):
        suf = sv.llama_cpp.suffix_decoder(plain, generator=gen(1), cache=sv.SuffixCache(**SUFFIX_CACHE), **params)
        out["suffix (default)"] = (plain, lambda p: sv_request(suf, p, max_new, stop))
    out["llama.cpp lookup"] = (peer, lambda p: llama_request(peer, p, max_new, mode, stop))
    return out


def run_llama(sv, name: str, workloads, modes, repeats: int, requests: int, log):
    """Every cell of one llama.cpp model; returns (rows, oracle rows)."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    path = real_models.ensure(name)
    plain = load(path, 1)
    peer = load(path, 1, logits_all=True, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    for llm in (plain, peer):  # touch the weights before anything is timed
        hold_prefix(llm, [], 0)
        llama_request(llm, llm.tokenize(b"Hello, world."), 8, "greedy", ())
    stop = {plain.token_eos()} | set(plain.tokenize(b"<|im_end|>", add_bos=False, special=True)[:1] if CHAT[name] else [])
    rows, oracles, curve = [], [], None
    for workload in workloads:
        prompts = workload_prompts(plain, workload, CHAT[name])[:requests]
        shared = shared_lengths(prompts)
        for mode in modes:
            load0 = load_average()
            runs = []
            for rep in range(repeats):
                methods = llama_methods(sv, plain, peer, mode, stop, MAX_NEW[workload])
                runs.append(run_repeat(methods, prompts, shared, lambda llm, p, n: hold_prefix(llm, p, n), log,
                                       f"{name} {workload} {mode} repeat {rep}"))
            cell = dict(engine="llama.cpp", model=name, workload=workload, mode=mode, load=f"{load0} / {load_average()}")
            rows += summarize(cell, runs)
            if mode == "greedy":
                if curve is None:
                    fresh(plain)
                    curve = oracle.measure_llama(sv, plain, prompts[0])
                    log(f"{name} llama.cpp cost curve c(n)/c(1): {fmt_curve(curve)}")
                oracles += oracle_rows(sv, cell, prompts, runs, curve)
    return rows, oracles, curve


# transformers -----------------------------------------------------------------------------

class FirstToken:
    """A generate() streamer noting when the first new token arrives (the first put is the prompt)."""

    def __init__(self):
        self.puts, self.at = 0, None

    def put(self, value):
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self):
        pass


def hf_load(path):
    """The model in bfloat16 and its tokenizer, from the GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    folder, file = str(path.parent), path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.bfloat16).eval()
    return model, tokenizer


class HFGenerate:
    """transformers' `generate` (plain, or with its lookup) keeping a `DynamicCache` between
    requests, cropped to the prefix the next prompt shares."""

    def __init__(self, model, tokenizer, mode: str, stop, max_new: int, seed: int, **extra):
        from transformers import DynamicCache

        self.model, self.cache = model, DynamicCache(config=model.config)
        self.kw = dict(max_new_tokens=max_new, eos_token_id=list(stop), pad_token_id=tokenizer.pad_token_id or 0,
                       **extra)
        self.kw.update(dict(do_sample=False) if mode == "greedy" else
                       dict(do_sample=True, temperature=0.8, top_p=0.9, top_k=0))
        self.seed = seed

    def hold(self, n: int) -> None:
        held = self.cache.get_seq_length()
        if held > n:
            self.cache.crop(n - held)  # transformers 5: a negative count removes that many

    def __call__(self, prompt) -> dict:
        torch.manual_seed(self.seed)
        self.seed += 1
        streamer = FirstToken()
        ids = torch.tensor([prompt])
        t0 = time.perf_counter()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=self.cache,
                                      streamer=streamer, **self.kw)
        seconds = time.perf_counter() - t0
        return dict(seconds=seconds, first=streamer.at - t0, tokens=out[0, len(prompt):].tolist())


def hf_methods(sv, model, tokenizer, mode: str, stop, max_new: int):
    """A repeat's methods on one transformers model: name -> (state to set, run)."""
    params = MODES[mode]
    gen = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    plain = HFGenerate(model, tokenizer, mode, stop, max_new, 0)
    peer = HFGenerate(model, tokenizer, mode, stop, max_new, 10_000, prompt_lookup_num_tokens=10)
    out = {"plain": (plain, plain)}
    look = sv.transformers.prompt_lookup_decoder(model, generator=gen(0), **params)
    out["lookup (default)"] = (None, lambda p: sv_request(look, p, max_new, stop))
    if has_suffix(sv, "transformers"):
        suf = sv.transformers.suffix_decoder(model, generator=gen(1), cache=sv.SuffixCache(**SUFFIX_CACHE), **params)
        out["suffix (default)"] = (None, lambda p: sv_request(suf, p, max_new, stop))
    if has_suffix(sv, "transformers") and "tree" in inspect.signature(sv.transformers.suffix_decoder).parameters:
        # Tree rounds: the tree decoder over a SuffixTreeDrafter, its schedule on the wall clock.
        tree = sv.transformers.suffix_decoder(model, generator=gen(2), cache=sv.SuffixCache(**SUFFIX_CACHE),
                                              tree=True, **params)
        out["suffix tree"] = (None, lambda p: sv_request(tree, p, max_new, stop))
    out["transformers lookup"] = (peer, peer)
    return out


def run_hf(sv, name: str, workloads, modes, repeats: int, requests: int, log):
    """Every cell of one transformers model (bfloat16, from the GGUF file)."""
    model, tokenizer = hf_load(real_models.ensure(name))
    stop = {tokenizer.eos_token_id} | ({tokenizer.convert_tokens_to_ids("<|im_end|>")} if CHAT[name] else set())
    warm = tokenizer("Hello, world.").input_ids
    HFGenerate(model, tokenizer, "greedy", stop, 4, 0)(warm)
    rows, oracles, curve = [], [], None

    def hold(state, prompt, n):
        if state is not None:
            state.hold(n)

    for workload in workloads:
        prompts = [tokenizer(t).input_ids for t in workload_texts(workload, CHAT[name])][:requests]
        shared = shared_lengths(prompts)
        for mode in modes:
            load0 = load_average()
            runs = []
            for rep in range(repeats):
                methods = hf_methods(sv, model, tokenizer, mode, stop, MAX_NEW[workload])
                runs.append(run_repeat(methods, prompts, shared, hold, log, f"{name} {workload} {mode} repeat {rep}"))
            cell = dict(engine="transformers", model=name, workload=workload, mode=mode,
                        load=f"{load0} / {load_average()}")
            rows += summarize(cell, runs)
            if mode == "greedy":
                if curve is None:
                    curve = oracle.measure_hf(sv, model, prompts[0])
                    log(f"{name} transformers cost curve c(n)/c(1): {fmt_curve(curve)}")
                oracles += oracle_rows(sv, cell, prompts, runs, curve)
    return rows, oracles, curve


# Both engines -----------------------------------------------------------------------------

def run_repeat(methods, prompts, shared, hold, log, what: str):
    """One pass over the workload, every method on each request in turn: name -> results."""
    methods = {m: v for m, v in methods.items() if m not in SKIP}
    results = {m: [] for m in methods}
    for r, prompt in enumerate(prompts):
        for m, (state, go) in methods.items():
            hold(state, prompt, shared[r])
            results[m].append(go(prompt))
        log(f"  {what} request {r}: " + ", ".join(
            f"{m} {len(rs[-1]['tokens']) / rs[-1]['seconds']:.1f}" for m, rs in results.items()) + " tok/s")
    return results


def summarize(cell: dict, runs):
    """One row per method: workload tokens/s and ratios to plain, medians over repeats.

    Two rates: over whole requests (every token over every second), and decoding (the tokens
    after the first over the time after the first token, which comes out of the prompt's
    evaluation and is compared on its own). Sampled outputs differ in length from method to
    method (the agent loop's answers are a 20-token tool call or a 130-token file), and the
    whole-request rate of a run that stops early is mostly its prompt's evaluation: the
    decoding rate is the one that compares methods there."""
    rows = []

    def whole(rs):
        return sum(len(r["tokens"]) for r in rs) / sum(r["seconds"] for r in rs)

    def decoding(rs):
        return sum(len(r["tokens"]) - 1 for r in rs) / sum(r["seconds"] - r["first"] for r in rs)

    for m in runs[0]:
        ratio = statistics.median(whole(run[m]) / whole(run["plain"]) for run in runs)
        decode = statistics.median(decoding(run[m]) / decoding(run["plain"]) for run in runs)
        first = statistics.median(sum(r["first"] for r in run[m]) / sum(r["first"] for r in run["plain"])
                                  for run in runs)
        per_request = [statistics.median(decoding([run[m][i]]) / decoding([run["plain"][i]]) for run in runs)
                       for i in range(len(runs[0][m]))]
        calls = sum(r.get("calls", 0) for run in runs for r in run[m])
        tokens = sum(len(r["tokens"]) for run in runs for r in run[m])
        draft = [r["draft_s"] / r["draft_calls"] for run in runs for r in run[m] if r.get("draft_calls")]
        same = (sum(a["tokens"] == b["tokens"] for a, b in zip(runs[0][m], runs[0]["plain"]))
                if cell["mode"] == "greedy" else None)
        rows.append(dict(cell, method=m, tok_s=statistics.median(whole(run[m]) for run in runs), ratio=ratio,
                         decode_ratio=decode, first_ratio=first, per_request=per_request,
                         per_call=tokens / calls if calls else None,
                         draft_ms=1e3 * statistics.mean(draft) if draft else None, same=same,
                         requests=len(runs[0][m]), tokens=tokens // len(runs), repeats=len(runs)))
        print(f"  {cell['engine']:<12} {cell['model']:<16} {cell['workload']:<11} {cell['mode']:<8} {m:<20} "
              f"{rows[-1]['tok_s']:6.1f} tok/s {ratio:5.2f}x decoding {decode:5.2f}x first {first:4.2f}x "
              "per request " + " ".join(f"{x:.2f}" for x in per_request), file=sys.stderr, flush=True)
    return rows


def replay_drafters(sv, curve):
    """The drafters the oracle replays: name -> a fresh drafter (`curve`: the measured c(n))."""
    out = {"lookup": lambda: oracle.CurrentLookup(sv), "lookup + earlier outputs": lambda: oracle.HistoryLookup(sv)}
    if hasattr(sv, "SuffixDrafter"):
        out["suffix"] = lambda: suffix_replay_drafter(sv, curve)
        # Its candidates without its cuts (no confidence threshold, up to 16 tokens after a
        # match of one): what the cuts give up, since the oracle never pays for a long proposal.
        out["suffix, uncut"] = lambda: suffix_replay_drafter(sv, curve, min_token_prob=0.0, max_spec_factor=16.0)
    return out


def suffix_replay_drafter(sv, curve, **knobs):
    """The package's suffix drafter with its own process-wide cache, told each finished request,
    and told what a scored position costs on the measured curve (its default length cap then
    is the one the live decoder reaches once it has measured the curve)."""
    cache = sv.SuffixCache(**SUFFIX_CACHE)
    drafter = sv.SuffixDrafter(cache, **knobs)
    drafter.position_cost = oracle.position_cost(curve)
    return oracle.StepDrafter("suffix", drafter,
                              finish=lambda prompt, output: drafter.end_generation(prompt + output, len(prompt)))


def oracle_rows(sv, cell: dict, prompts, runs, curve):
    """The ceilings of each replayed drafter on plain's greedy outputs of the first repeat."""
    outputs = [r["tokens"] for r in runs[0]["plain"]]
    # Plain's prefill: the first token's time less one step, over the workload.
    prefill = sum(max(r["first"] - curve[1], 0.0) for r in runs[0]["plain"])
    rows = []
    for name, make in replay_drafters(sv, curve).items():
        res = oracle.replay(make(), prompts, outputs, curve)
        rows.append(dict(cell, drafter=name, decode=res["decode"], whole=oracle.whole_run_ceiling(res, prefill),
                         per_request=res["per_request"], draft_ms=1e3 * res["draft_seconds"],
                         draft_share=res["draft_seconds"] / curve[1]))
        print(f"  oracle {cell['engine']} {cell['model']} {cell['workload']}: {name}: decoding {res['decode']:.2f}x, "
              f"whole runs {rows[-1]['whole']:.2f}x, drafter {rows[-1]['draft_ms']:.3f} ms/round "
              f"({100 * rows[-1]['draft_share']:.2f}% of a step)", file=sys.stderr, flush=True)
    return rows


def fmt_curve(curve) -> str:
    return f"c(1) = {1e3 * curve[1]:.1f} ms; " + ", ".join(f"{n}: {c:.2f}" for n, c in oracle.relative(curve).items())


def markdown(rows, oracles, curves, title: str) -> str:
    ceiling = {(o["engine"], o["model"], o["workload"], o["drafter"]): o["decode"] for o in oracles}
    drafter_of = {"lookup (default)": "lookup", "suffix (default)": "suffix"}
    lines = [f"### {title}", ""]
    if curves:
        lines += ["Cost curves measured in this run (one target call scoring n positions with logits at all n, in "
                  "one-position steps):", ""]
        lines += [f"- {engine}, {model}: {fmt_curve(curve)}" for (engine, model), curve in curves.items()] + [""]
    lines += ["| engine | model | workload | mode | method | tok/s | vs plain | decoding vs plain | "
              "per request, decoding | first token vs plain's | tokens per target call | greedy = plain | "
              "oracle ceiling, decoding | load (1/5/15 min) |", "|" + "---|" * 14]
    for r in rows:
        c = ceiling.get((r["engine"], r["model"], r["workload"], drafter_of.get(r["method"])))
        lines.append(f"| {r['engine']} | {r['model']} | {r['workload']} | {r['mode']} | {r['method']} | "
                     f"{r['tok_s']:.1f} | {r['ratio']:.2f}x | {r['decode_ratio']:.2f}x | " + " ".join(f"{x:.2f}" for x in r["per_request"])
                     + f" | {r['first_ratio']:.2f}x | " + (f"{r['per_call']:.2f}" if r["per_call"] else "")
                     + " | " + ("" if r["same"] is None or r["method"] == "plain" else f"{r['same']}/{r['requests']}")
                     + " | " + (f"{c:.2f}x" if c and r["mode"] == "greedy" else "") + f" | {r['load']} |")
    if not oracles:
        return "\n".join(lines) + "\n"
    lines += ["", "Oracle replay of plain's greedy outputs (each round's length chosen by dynamic programming "
              "against the measured curve; whole runs include plain's prefill):", "",
              "| engine | model | workload | drafter | ceiling, whole runs | ceiling, decoding | per request | "
              "drafter ms per round | share of a target step |", "|" + "---|" * 9]
    for o in oracles:
        lines.append(f"| {o['engine']} | {o['model']} | {o['workload']} | {o['drafter']} | {o['whole']:.2f}x | "
                     f"{o['decode']:.2f}x | " + " ".join(f"{x:.2f}" for x in o["per_request"])
                     + f" | {o['draft_ms']:.3f} | {100 * o['draft_share']:.2f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="llama,transformers")
    ap.add_argument("--llama-models", default="gemma3,qwen-coder-1.5b")
    ap.add_argument("--hf-models", default="qwen-coder-0.5b")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default="greedy,sampled")
    ap.add_argument("--hf-modes", default=None, help="modes through transformers (default: --modes)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=8, help="the first N requests of each workload")
    ap.add_argument("--skip", default="", help="methods to leave out, comma-separated (e.g. 'llama.cpp lookup')")
    ap.add_argument("--markdown", help="write the tables to this file ({cpu}: the CPU's name, as amd-epyc)")
    args = ap.parse_args()
    SKIP.update(filter(None, args.skip.split(",")))

    from kernels import get_kernel

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    workloads, modes = args.workloads.split(","), args.modes.split(",")
    engines = args.engines.split(",")
    rows, oracles, curves = [], [], {}
    load0 = load_average()
    if "llama" in engines:
        for name in filter(None, args.llama_models.split(",")):
            r, o, c = run_llama(sv, name, workloads, modes, args.repeats, args.requests, log)
            rows, oracles, curves[("llama.cpp", name)] = rows + r, oracles + o, c
    if "transformers" in engines:
        for name in filter(None, args.hf_models.split(",")):
            r, o, c = run_hf(sv, name, workloads, (args.hf_modes or args.modes).split(","), args.repeats,
                             args.requests, log)
            rows, oracles, curves[("transformers", name)] = rows + r, oracles + o, c
    title = (f"Multi-request workloads on {cpu_name()} ({os.cpu_count()} cores), one thread, "
             f"{args.requests} requests each, {args.repeats} interleaved repeats, spec-verify on the `{sv.isa()}` path; "
             f"load average {load0} at the start, {load_average()} at the end")
    text = markdown(rows, oracles, {k: v for k, v in curves.items() if v}, title)
    report(text, args.markdown)


if __name__ == "__main__":
    main()
