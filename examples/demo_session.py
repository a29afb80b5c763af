#!/usr/bin/env python3
"""The second part of `make demo`: a short multi-request session, as a batch job sends it.

Several requests of one kind (JSON extraction from short customer messages, after a shared
head with the schema and two examples) go one after another to one decoder. The suffix
decoder (`sv.transformers.suffix_decoder`) drafts from the current request and from a cache
of everything the process generated before, so the later requests are drafted from the
earlier answers and run faster as the cache fills. Plain decoding is transformers' own
`generate`; both keep the shared head's KV cache from one request to the next, as a user's
process would.

Why through transformers (bfloat16, one thread) and not through llama.cpp here: on one or
two cores of this kind of CPU llama.cpp's quantized matmuls are compute-bound, so scoring 9
positions costs 6-10 one-token steps and a short drafted JSON answer gains little; a
bfloat16 model through PyTorch is memory-bound, 9 positions cost ~1.2 steps, and every
accepted draft token is nearly free (the table printed at the end shows the curve measured
during the session).

    .venv/bin/python examples/demo_session.py [--requests 4]
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
from e2e import cpu_name  # noqa: E402
from e2e_multi import HFGenerate, hf_load, shared_lengths, sv_request  # noqa: E402
from e2e_tasks import workload_texts  # noqa: E402

MODEL = "qwen-coder-0.5b"
MAX_NEW = 80


def speculative(sv, model):
    """The suffix decoder with its process-wide cache; the prompt-lookup default where the
    package has no suffix decoder (then the label says so)."""
    if hasattr(sv.transformers, "suffix_decoder"):
        cache = sv.SuffixCache()
        return sv.transformers.suffix_decoder(model, temperature=0.0, cache=cache), "suffix decoding", cache
    return sv.transformers.prompt_lookup_decoder(model, temperature=0.0), "prompt lookup (default)", None


def run(sv, requests: int = 4) -> None:
    path = real_models.ensure(MODEL)
    print(f"\n=== A multi-request session: {real_models.MODELS[MODEL].about}")
    print(f"through transformers, bfloat16, 1 thread of {cpu_name()} (loading and converting the GGUF file...)")
    print("why transformers here: through llama.cpp on one or two cores scoring n positions costs nearly n steps "
          "(the curve above), through a bfloat16 model it costs little more than one (the curve below), so every "
          "accepted draft token is nearly free")
    model, tokenizer = hf_load(path)
    stop = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    prompts = [tokenizer(t).input_ids for t in workload_texts("extraction", True)][:requests]
    shared = shared_lengths(prompts)
    plain = HFGenerate(model, tokenizer, "greedy", stop, MAX_NEW, 0)
    dec, label, cache = speculative(sv, model)
    plain(tokenizer("Hello, world.").input_ids)  # touches the weights before anything is timed
    plain.hold(0)
    print(f"{requests} extraction requests (JSON from a customer message), greedy, at most {MAX_NEW} new tokens; "
          f"the {shared[1]}-token shared head stays in each method's KV cache from one request to the next\n")
    print(f" {'request':<8} {'tokens':>6} {'plain tok/s':>12} {label + ' tok/s':>28} {'speed-up':>9} "
          f"{'cache (requests)':>17}  answer")
    totals = {"plain": [0, 0.0], "spec": [0, 0.0]}
    for r, prompt in enumerate(prompts):
        plain.hold(shared[r])
        base = plain(prompt)
        held = len(cache) if cache is not None else 0
        spec = sv_request(dec, prompt, MAX_NEW, stop)
        for key, res in (("plain", base), ("spec", spec)):
            totals[key][0] += len(res["tokens"])
            totals[key][1] += res["seconds"]
        rate_p, rate_s = len(base["tokens"]) / base["seconds"], len(spec["tokens"]) / spec["seconds"]
        answer = tokenizer.decode([t for t in spec["tokens"] if t not in stop]).strip()
        same = "" if spec["tokens"] == base["tokens"] else " (differs from plain's)"
        print(f" {r + 1:<8} {len(spec['tokens']):>6} {rate_p:>12.1f} {rate_s:>28.1f} {rate_p and rate_s / rate_p:>8.2f}x "
              f"{held:>17}  {answer[:120]}{same}")
    overall = (totals["spec"][0] / totals["spec"][1]) / (totals["plain"][0] / totals["plain"][1])
    print(f" over the session: {overall:.2f}x plain generate's tokens/s "
          f"({totals['spec'][0] / totals['spec'][1]:.1f} against {totals['plain'][0] / totals['plain'][1]:.1f})")
    costs = dec.stats.costs.get("target_seconds_by_positions", {})
    if costs.get(1):
        print(" the cost curve the schedule measured (target seconds by positions scored, in one-position steps): "
              + ", ".join(f"{n}: {t / costs[1]:.2f}" for n, t in costs.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=4)
    args = ap.parse_args()
    from kernels import get_kernel

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    sv = get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True)
    run(sv, args.requests)
    print(f"\n(the session: {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
