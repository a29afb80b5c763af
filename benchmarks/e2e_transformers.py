#!/usr/bin/env python3
"""Prompt-lookup speculative decoding of a Hugging Face transformers model, end to end: Gemma 3
270M (loaded by transformers from its GGUF file, float32; sliding window 512 on five layers in
six) on a code-edit task, one thread, greedy, beside transformers' own two ways:

  generate               model.generate(max_new_tokens=N), plain greedy decoding
  generate lookup        model.generate(prompt_lookup_num_tokens=k): transformers' prompt lookup
  spec-verify lookup     sv.transformers.prompt_lookup_decoder(model, k, temperature=0)

The task: benchmarks/e2e_tasks.py's code edit (about 450 tokens asking to rewrite a Python
function with type hints), so the output repeats much of the prompt (where prompt lookup
pays). Measured per method, over `--repeats` interleaved repeats (the first pass warms up and
is not timed): new tokens per second (the median repeat, prompt processing included), its
ratio to plain `generate`, the target's forward passes and the tokens fed to them (counted by
a forward hook, the same for every method), and whether the output equals plain greedy
`generate`'s token for token.

    python benchmarks/e2e_transformers.py                     # ~/.cache/spec-verify/models/...
    python benchmarks/e2e_transformers.py --model PATH.gguf --markdown

`run(model_path, ...)` returns the rows as dicts, for benchmarks/e2e.py. Models are never
committed: the default is ~/.cache/spec-verify/models/gemma-3-270m-q4_k_m.gguf. Needs
transformers, gguf and accelerate (requirements.txt).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

DEFAULT_MODEL = Path.home() / ".cache" / "spec-verify" / "models" / "gemma-3-270m-q4_k_m.gguf"

sys.path.insert(0, str(ROOT / "benchmarks"))
from e2e_tasks import TASKS  # noqa: E402  (the code edit of benchmarks/e2e.py and the demo)

PROMPT = TASKS["code edit"]


class ForwardCounter:
    """Counts a model's forward passes and the tokens fed to them (a forward pre-hook)."""

    def __init__(self, model):
        self.forwards = self.fed = 0

        def hook(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None:
                self.forwards += 1
                self.fed += int(ids.shape[-1])
        self.handle = model.register_forward_pre_hook(hook, with_kwargs=True)


def load(model_path: Path):
    """The model (float32) and its tokenizer, both from the GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    model_path = Path(model_path).expanduser()
    folder, name = str(model_path.parent), model_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32").eval()
    return model, tokenizer


def run(model_path=DEFAULT_MODEL, *, k: int = 8, max_new: int = 160, repeats: int = 3, sv=None,
        model=None, tokenizer=None, log=None) -> List[Dict]:
    """The benchmark's rows, one dict per method: method, tokens_per_s, vs_generate,
    target_forwards, tokens_fed, equals_generate, and times_s (the timed repeats), plus
    prompt_tokens, k, max_new and, for the spec-verify row, fed_bound = prompt + rounds x
    (k + 1) with rounds its target forwards (None elsewhere): what a cache that feeds each
    round's tokens only may feed at most, about.

    Args:
        model_path: the GGUF file (ignored when `model` and `tokenizer` are given).
        k: the proposal length of both prompt-lookup methods (the maximum per round).
        max_new: new tokens per generation (no stop token: every method makes exactly these).
        repeats: timed repeats, interleaved method by method, after one untimed warm-up pass.
        sv: the loaded kernel module (default: `get_kernel` through LOCAL_KERNELS).
        log: a callable taking progress lines (default: none).
    """
    import torch

    if sv is None:
        from kernels import get_kernel
        sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
    if model is None or tokenizer is None:
        model, tokenizer = load(model_path)
    torch.set_num_threads(1)
    log = log or (lambda line: None)
    prompt = tokenizer(PROMPT).input_ids
    counter = ForwardCounter(model)
    eos = None  # exactly max_new tokens each: the methods do the same work

    def hf(**kw):
        def go():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                                     max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                                     eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, **kw)
            return out[0].tolist()
        return go

    if hasattr(sv.transformers, "prompt_lookup_decoder"):
        dec = sv.transformers.prompt_lookup_decoder(model, k, temperature=0)
    else:  # an adapter from before prompt_lookup_decoder: wired by hand, as its users did
        cache = sv.transformers.CachedCausalLM(model)
        dec = sv.SpeculativeDecoder.from_logits(
            None, lambda prefix, proposed: cache.logits(prefix + proposed.tolist(), len(prefix) - 1), k,
            temperature=0, draft_step=sv.PromptLookup())

    methods = {
        "generate": hf(),
        f"generate(prompt_lookup_num_tokens={k})": hf(prompt_lookup_num_tokens=k),
        "spec-verify prompt_lookup_decoder": lambda: dec.generate(prompt, max_new=max_new, eos_token_id=eos),
    }
    times = {name: [] for name in methods}
    outputs, forwards, fed = {}, {}, {}
    for rep in range(repeats + 1):
        for name, go in methods.items():
            f0, n0 = counter.forwards, counter.fed
            t0 = time.perf_counter()
            out = go()
            elapsed = time.perf_counter() - t0
            if rep == 0:
                outputs[name], forwards[name], fed[name] = out, counter.forwards - f0, counter.fed - n0
            else:
                times[name].append(elapsed)
            log(f"repeat {rep}{' (warm-up)' if rep == 0 else ''}: {name}: {elapsed:.1f} s")
    counter.handle.remove()
    reference = outputs["generate"]
    base = statistics.median(times["generate"]) if repeats else None
    rows = []
    for name in methods:
        med = statistics.median(times[name]) if repeats else None
        row = {"method": name, "tokens_per_s": max_new / med if med else None,
               "vs_generate": base / med if med else None, "target_forwards": forwards[name],
               "tokens_fed": fed[name], "equals_generate": outputs[name] == reference, "times_s": times[name],
               "prompt_tokens": len(prompt), "k": k, "max_new": max_new, "fed_bound": None}
        if name.startswith("spec-verify"):
            row["fed_bound"] = len(prompt) + forwards[name] * (k + 1)
        rows.append(row)
    return rows


def table(rows: List[Dict], markdown: bool = True) -> str:
    head = ["method", "tokens/s", "vs generate", "target forwards", "tokens fed", "= generate"]
    body = []
    for r in rows:
        fed = f"{r['tokens_fed']}"
        if r["fed_bound"]:
            fed += f" ({r['tokens_fed'] / r['fed_bound']:.2f}x prompt + rounds x (k+1))"
        body.append([r["method"], f"{r['tokens_per_s']:.2f}" if r["tokens_per_s"] else "-",
                     f"{r['vs_generate']:.2f}x" if r["vs_generate"] else "-", str(r["target_forwards"]), fed,
                     "yes" if r["equals_generate"] else "NO"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
        lines += ["| " + " | ".join(b) + " |" for b in body]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths)) for line in [head] + body]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL), help="the GGUF file (default: %(default)s)")
    ap.add_argument("--k", type=int, default=8, help="proposal length of both lookups")
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats, interleaved (plus one warm-up)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    path = Path(args.model).expanduser()
    if not path.is_file():
        sys.exit(f"no model at {path}: pass --model PATH (a GGUF file transformers can load)")
    rows = run(path, k=args.k, max_new=args.max_new, repeats=args.repeats,
               log=lambda line: print(line, file=sys.stderr, flush=True))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "unknown CPU") if os.path.exists("/proc/cpuinfo") else "unknown CPU"
    r = rows[0]
    print(f"{path.name}, {r['prompt_tokens']}-token code-edit prompt, {r['max_new']} new tokens, greedy, k = {r['k']}, "
          f"1 thread, {cpu}; median of {args.repeats} interleaved repeats\n")
    print(table(rows, markdown=args.markdown))


if __name__ == "__main__":
    main()
