#!/usr/bin/env python3
"""spec-verify's decoding loop beside llama-cpp-python's own speculative decoding, on one GGUF
pair, greedy (temperature 0), both drafting with the same drafter:

  plain           Llama.generate, no draft: one token per target evaluation
  lookup          llama-cpp-python: Llama(draft_model=LlamaPromptLookupDecoding(...)).generate
                  spec-verify:      sv.llama_cpp.prompt_lookup_decoder(target, k)
  draft model     llama-cpp-python: Llama(draft_model=<the draft Llama drafting k greedy
                                    tokens, through a CachedLlama so it keeps its KV cache>)
                  spec-verify:      sv.llama_cpp.speculative_decoder(draft, target, k)

Measured per method, over the prompts: tokens per target evaluation (Llama.eval calls on the
target, the prompt's included, for both loops alike) and wall time per generated token
(prompt evaluation included), the median of `--repeats` interleaved repeats. Every method's
output is checked against plain greedy decoding (a difference can only come from a near-tie;
see the README).

    make bench-llama                                          # the tests' tiny pair
    ... benchmarks/llama_cpp_speculative.py --size medium     # 18M parameters, a Q4_0 draft
    PYTHONPATH=$(scripts/llama_env.sh site) .venv/bin/python benchmarks/llama_cpp_speculative.py \\
        --target target.gguf --draft draft.gguf --threads 2   # your own pair

On the tiny pair (tests/tiny_gguf.py: 3 layers, hidden 64) an evaluation costs a fraction of
a millisecond, so wall time measures mostly each loop's own per-round cost; on a real model
the target's evaluations dominate and tokens per target call is what carries over.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

PROMPTS = [b"the time of day", b"we can make a long way", b"one two three four one two three four one two",
           b"water is", b"there were many people and"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=["tiny", "medium"], default="tiny",
                    help="without --target: the tests' tiny pair, or the medium pair of tests/tiny_gguf.py "
                         "(about 18M parameters, float32 target, its Q4_0 quantization as the draft)")
    ap.add_argument("--target", help="target GGUF (default: a pair written by tests/tiny_gguf.py, see --size)")
    ap.add_argument("--draft", help="draft GGUF, same vocabulary")
    ap.add_argument("--k", type=int, default=4, help="draft tokens per round")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="n_threads and n_threads_batch of every model")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llama_cpp.json"))
    args = ap.parse_args()

    import torch
    from kernels import get_kernel
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    if args.target is None:
        import tiny_gguf
        folder = tempfile.TemporaryDirectory(prefix="spec-verify-gguf-")
        target_path, draft_path = map(str, tiny_gguf.write_pair(folder.name, args.size))
        pair = {"tiny": "the tests' tiny pair (tests/tiny_gguf.py)",
                "medium": "tests/tiny_gguf.py's medium pair (18M parameters; draft: the target in Q4_0)"}[args.size]
    else:
        target_path, draft_path = args.target, args.draft
        pair = f"{target_path} / {draft_path}"

    def load(path, **kw):
        return Llama(model_path=path, n_ctx=args.n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                     logits_all=True, verbose=False, **kw)

    class CountedEvals:
        """Counts a Llama's eval calls (each a forward pass over a block of tokens)."""
        def __init__(self, llm):
            self.calls, inner = 0, llm.eval

            def counted(tokens):
                self.calls += 1
                return inner(tokens)
            llm.eval = counted

    class GreedyDraft(LlamaDraftModel):
        """llama-cpp-python's draft-model interface over a draft Llama: k greedy tokens,
        the draft's KV cache kept across calls by a CachedLlama (as spec-verify's own)."""
        def __init__(self, llm, k):
            self.cache, self.k = sv.llama_cpp.CachedLlama(llm, "draft"), k

        def __call__(self, input_ids, **kwargs):
            seq, out = input_ids.tolist(), []
            for _ in range(self.k):
                t = int(self.cache.logits(seq, len(seq) - 1)[0].argmax())
                seq.append(t)
                out.append(t)
            return np.array(out, dtype=np.intc)

    def llama_cpp_runner(draft_model):
        llm = load(target_path, draft_model=draft_model)
        counter = CountedEvals(llm)

        def run(prompt):
            llm.reset()
            out = []
            for t in llm.generate(prompt, temp=0.0, repeat_penalty=1.0, reset=True):
                out.append(int(t))
                if len(out) == args.max_new:
                    break
            return list(prompt) + out
        return run, counter

    def spec_verify_runner(make):
        target = load(target_path)
        counter = CountedEvals(target)
        dec = make(target)

        def run(prompt):
            return dec.generate(prompt, max_new=args.max_new)
        return run, counter

    runners = {
        "plain (llama-cpp-python generate)": llama_cpp_runner(None),
        "lookup: llama-cpp-python": llama_cpp_runner(
            LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=args.k)),
        "lookup: spec-verify": spec_verify_runner(
            lambda t: sv.llama_cpp.prompt_lookup_decoder(t, args.k, max_ngram=3, temperature=0)),
        "draft model: llama-cpp-python": llama_cpp_runner(GreedyDraft(load(draft_path), args.k)),
        "draft model: spec-verify": spec_verify_runner(
            lambda t: sv.llama_cpp.speculative_decoder(load(draft_path), t, args.k, temperature=0)),
    }
    tokenizer = load(target_path)
    prompts = [tokenizer.tokenize(p) for p in PROMPTS]

    reference = [runners["plain (llama-cpp-python generate)"][0](p) for p in prompts]
    times = {name: [] for name in runners}
    calls = {}
    agree = {}
    for rep in range(args.repeats + 1):  # the first pass warms up and is not timed
        for name, (run, counter) in runners.items():
            before = counter.calls
            t0 = time.perf_counter_ns()
            outs = [run(p) for p in prompts]
            elapsed = time.perf_counter_ns() - t0
            if rep == 0:
                calls[name] = counter.calls - before
                agree[name] = sum(o == r for o, r in zip(outs, reference))
            else:
                times[name].append(elapsed)

    new = len(prompts) * args.max_new
    plain = statistics.median(times["plain (llama-cpp-python generate)"])
    print(f"pair: {pair}; k = {args.k}, {len(prompts)} prompts x {args.max_new} new tokens, greedy, "
          f"{args.threads} thread(s) per model; median of {args.repeats} interleaved repeats")
    print(f"{'method':<36} {'tokens/target call':>18} {'ms/token':>9} {'vs plain':>9} {'= greedy':>9}")
    results = {}
    for name in runners:
        med = statistics.median(times[name])
        tpc = new / calls[name]
        print(f"{name:<36} {tpc:>18.2f} {med / new / 1e6:>9.3f} {plain / med:>8.2f}x "
              f"{agree[name]:>5}/{len(prompts)}")
        results[name] = {"tokens_per_target_call": tpc, "ms_per_token": med / new / 1e6,
                         "speedup_vs_plain": plain / med, "equal_to_greedy": agree[name],
                         "times_ns": times[name], "target_calls": calls[name]}
    for kind in ("lookup", "draft model"):
        a, b = results[f"{kind}: llama-cpp-python"], results[f"{kind}: spec-verify"]
        print(f"{kind}: spec-verify's wall time per token is {a['ms_per_token'] / b['ms_per_token']:.2f}x "
              f"smaller than llama-cpp-python's ({b['tokens_per_target_call']:.2f} vs "
              f"{a['tokens_per_target_call']:.2f} tokens per target call)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"pair": pair, "k": args.k, "max_new": args.max_new, "threads": args.threads,
                               "prompts": len(prompts), "results": results}, indent=1))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
