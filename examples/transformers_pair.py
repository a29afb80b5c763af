#!/usr/bin/env python3
"""Speculative decoding with two Hugging Face causal LMs through `sv.transformers`.

    .venv/bin/python examples/transformers_pair.py                      # a tiny random pair
    .venv/bin/python examples/transformers_pair.py DRAFT_ID TARGET_ID   # two Hub models

With no arguments the pair is built from a config (nothing is downloaded): a 2-layer Llama
with a 32000-token vocabulary as the target, and as the draft the same weights perturbed by
3% noise. With two model ids (same tokenizer), the prompt is tokenized and the output shown
as text. Runs greedy (checked against transformers' own greedy generate) and sampling at
temperature 0.8 with top-p 0.9.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")


def tiny_pair():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.03 * p.std())
    return draft, target, None, [1, 500, 1200, 7, 99, 3000]


def hub_pair(draft_id: str, target_id: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_id)
    draft = AutoModelForCausalLM.from_pretrained(draft_id, dtype=torch.float32)
    target = AutoModelForCausalLM.from_pretrained(target_id, dtype=torch.float32)
    return draft, target, tok, tok("def fibonacci(n):").input_ids


def main() -> None:
    from kernels import get_kernel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True)
    draft, target, tok, prompt = hub_pair(*sys.argv[1:3]) if len(sys.argv) >= 3 else tiny_pair()
    show = (lambda ids: repr(tok.decode(ids))) if tok else (lambda ids: str(ids))
    eos = tok.eos_token_id if tok else None

    dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0, schedule="constant")
    out = dec.generate(prompt, max_new=48, eos_token_id=eos)
    ref = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                          max_new_tokens=48, do_sample=False, eos_token_id=eos, pad_token_id=eos or 0)[0].tolist()
    print(f"greedy:  {show(out[len(prompt):])}\n         {dec.stats.summary()}")
    print(f"         equal to transformers' greedy generate: {out == ref}")

    g = torch.Generator().manual_seed(0)
    dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0.8, top_p=0.9, generator=g, schedule="constant")
    out = dec.generate(prompt, max_new=48, eos_token_id=eos)
    print(f"sampled: {show(out[len(prompt):])}\n         {dec.stats.summary()}")


if __name__ == "__main__":
    main()
