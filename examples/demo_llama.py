#!/usr/bin/env python3
"""The llama.cpp part of `make demo` (when llama-cpp-python is installed: `make llama-env`).

Two GGUF models written on the spot with the `gguf` package (tests/tiny_gguf.py: Llama
architecture, vocabulary 512, hidden 64, 3 layers, random weights from a fixed seed; the
draft is the target with 6% weight noise), loaded by llama.cpp, decoded by
`sv.llama_cpp`: greedy against llama.cpp's own greedy generation, sampled with warping, and
prompt lookup without the draft. Random weights write gibberish; what to look at is the
agreement, the tokens per target call and what each KV cache was fed.

    run(sv)   what examples/demo.py calls; standalone (with llama_cpp on PYTHONPATH):
              PYTHONPATH=$(scripts/llama_env.sh site) .venv/bin/python examples/demo_llama.py
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPT = b"there were many people and"
MAX_NEW, K = 48, 4


def run(sv) -> None:
    from llama_cpp import Llama

    import tiny_gguf

    with tempfile.TemporaryDirectory(prefix="spec-verify-gguf-") as folder:
        _run(sv, Llama, *tiny_gguf.write_pair(folder))


def _run(sv, Llama, target_path, draft_path) -> None:

    def load(path):
        # One thread each; logits_all=True: the verifier reads k+1 rows per target call.
        return Llama(model_path=str(path), n_ctx=512, n_threads=1, n_threads_batch=1, logits_all=True,
                     verbose=False)

    target, draft, reference = load(target_path), load(draft_path), load(target_path)
    prompt = target.tokenize(PROMPT)
    print("\nllama.cpp (llama-cpp-python): two tiny GGUF models written with gguf, random weights")

    expect = []
    for t in reference.generate(prompt, temp=0.0, repeat_penalty=1.0):
        expect.append(int(t))
        if len(expect) == MAX_NEW:
            break

    dec = sv.llama_cpp.speculative_decoder(draft, target, k=K, temperature=0)
    out = dec.generate(prompt, max_new=MAX_NEW)
    same = out[len(prompt):] == expect
    print(f" greedy, k = {K}: {dec.stats.tokens_per_target_call:.2f} tokens per target call, "
          f"{'identical to' if same else 'DIFFERENT from'} llama.cpp's own greedy generation "
          f"({MAX_NEW} tokens)")
    print(f"   tokens fed: target {dec.target_cache.fed} in {dec.target_cache.evals} evaluations, "
          f"draft {dec.draft_cache.fed} in {dec.draft_cache.evals} (prompt {len(prompt)} tokens)")
    print(f"   text: {target.detokenize(out[len(prompt):]).decode('utf-8', 'replace')[:70]!r}")

    g = torch.Generator().manual_seed(0)
    dec = sv.llama_cpp.speculative_decoder(draft, target, k=K, temperature=0.8, top_p=0.95, generator=g)
    out = dec.generate(prompt, max_new=MAX_NEW)
    print(f" sampled, temperature 0.8, top-p 0.95: {dec.stats.tokens_per_target_call:.2f} tokens per target "
          f"call, {dec.stats.acceptance_rate:.0%} of drafts accepted")

    dec = sv.llama_cpp.prompt_lookup_decoder(target, k=K, temperature=0)
    out = dec.generate(prompt, max_new=MAX_NEW)
    print(f" prompt lookup (no draft model), greedy: {dec.stats.tokens_per_target_call:.2f} tokens per target "
          f"call, {'identical to' if out[len(prompt):] == expect else 'DIFFERENT from'} llama.cpp's greedy "
          f"(random weights rarely repeat themselves)")
    print(" benchmarks/llama_cpp_speculative.py (make bench-llama) compares with llama-cpp-python's own "
          "speculative decoding")


if __name__ == "__main__":
    from kernels import get_kernel

    os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")
    run(get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True))
