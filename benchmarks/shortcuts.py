"""What each shortcut saves on a whole verification round, against a real model's round.

Every shortcut of the kernels (DESIGN.md, "Shortcuts and what they buy") rests on an optional
kernel; SPEC_VERIFY_EXACT takes kernels out (csrc/dispatch.cpp), "1" all of them. This runs
the rounds a decoder calls (a plain step's draw, a prompt-lookup round, a drafted round, a
probability-row round) once per setting, each setting in its own process (the switch is read
once), repeats interleaved, and prints per round the time with every shortcut in, with all of
them out, and what taking out each group costs, as microseconds and as a share of a real
round of Gemma 3 270M on llama.cpp (its one-position and K+1-position calls, measured here).

Rows: Gemma 3's own logits (V = 262144, from the code-edit task, greedy, cached in
~/.cache/spec-verify/rows) where llama-cpp-python and the model are there (`make llama-env`,
scripts/real_models.py), and at V = 32000 and 128256 synthetic rows shaped like a model's
(a few dominant tokens over a wide low tail).

    PYTHONPATH=$(scripts/llama_env.sh site) .venv/bin/python benchmarks/shortcuts.py [--markdown FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SPEC_VERIFY_CACHE", Path.home() / ".cache" / "spec-verify"))
K = 8
SAMPLED = dict(temperature=0.8, top_p=0.9)

# Setting -> the kernels taken out, with the notes that rest on them.
SETTINGS = {
    "all in": None,
    "probability-row bounds": "row_sum_f32,row_block_sums,residual_block_sums,row_mass_pair_guess,pair_block_sums",
    "pair masses": "row_mass_pair",
    "bounded warping": "row_weight_sums",
    "upper weight sums": "row_upper_weight_sums,row_upper_weight_sums_above,row_argmax_upper_weight_sums",
    "top-p upper sums": "row_upper_weight_sums_above",
    "argmax with upper sums": "row_argmax_upper_weight_sums",
    "rules alone": "1",
}
ABOUT = {
    "probability-row bounds": "Mass bounds, Bounded sampling, Bounded rejection, Bounded blocks",
    "pair masses": "row_mass_pair (two rows' exact masses in one pass)",
    "bounded warping": "Bounded warping, Refined mass range, draft-bound ranges",
    "upper weight sums": "Weight upper bounds, Top-p upper bounds, Coarse draws, Argmax with upper sums",
    "top-p upper sums": "Top-p upper bounds alone",
    "argmax with upper sums": "Argmax with upper sums / Shifted upper bounds alone",
}

# One process's measurements: each round's median seconds over `calls` calls.
CHILD = r"""
import json, statistics, sys, time, torch
sys.path.insert(0, sys.argv[1])
import conftest
sv = conftest.load_kernel()
rows = torch.load(sys.argv[2])
K, calls = int(sys.argv[3]), int(sys.argv[4])
sampled = dict(temperature=0.8, top_p=0.9)
out = {}
for name, x in rows.items():
    V = x.shape[1]
    g = torch.Generator().manual_seed(0)
    target = x[: K + 1].contiguous()
    best = target.argmax(-1)
    # A lookup round whose drafts are the target's greedy tokens for 5 positions, then a miss.
    lookup = best[:K].clone()
    lookup[5:] = (lookup[5:] + 12345) % V
    draft = (target[:K] + 0.5 * torch.randn(K, V, generator=torch.Generator().manual_seed(1))).contiguous()
    dtok, bounds = sv.sample(draft, generator=torch.Generator().manual_seed(2), return_bounds=True, **sampled)
    p = torch.softmax(target, -1).contiguous()
    q = torch.softmax(draft, -1).contiguous()
    rounds = {
        "plain step, T 0.8 top-p 0.9": lambda: sv.accept_logits(target[:1], None, [], generator=g, **sampled),
        "lookup K=8, T 0.8 top-p 0.9": lambda: sv.accept_logits(target, None, lookup, generator=g, **sampled),
        "lookup K=8, T 0.8": lambda: sv.accept_logits(target, None, lookup, generator=g, temperature=0.8),
        "draft K=8, T 0.8 top-p 0.9 (sample + accept)": lambda: (
            sv.sample(draft, generator=g, return_bounds=True, **sampled),
            sv.accept_logits(target, draft, dtok, generator=g, draft_bounds=bounds, **sampled)),
        "probabilities K=8": lambda: sv.accept(p, q, dtok, g),
    }
    for label, call in rounds.items():
        for _ in range(3):
            call()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter(); call(); times.append(time.perf_counter() - t0)
        out[f"{name}|{label}"] = statistics.median(times)
print(json.dumps(out))
"""


def synthetic(vocab: int, n: int, seed: int):
    """Rows shaped like a model's logits: a wide low tail and a few tokens far above it."""
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, vocab, generator=g) * 1.5
    head = torch.randint(0, vocab, (n, 8), generator=g)
    x.scatter_(1, head, 8.0 + 6.0 * torch.rand(n, 8, generator=g))
    return x


def gemma_rows(n: int):
    """Gemma 3's logits over n greedy positions of the code-edit task, with the time of a
    one-position and a K+1-position call at that context (None if llama.cpp or the model is
    not there)."""
    try:
        import torch
        from llama_cpp import Llama
        sys.path.insert(0, str(ROOT / "scripts"))
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import real_models
        from e2e_tasks import prompt_ids
        from kernels import get_kernel
        CachedLlama = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True).llama_cpp.CachedLlama
    except ImportError as e:
        print(f"(no real rows: {e})", file=sys.stderr)
        return None, None
    path = real_models.ensure("gemma3", quiet=True)
    llm = Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=1, n_threads_batch=1, verbose=False)
    cached = CachedLlama(llm, "gemma3")
    prompt = prompt_ids(llm, "code edit", chat=False)
    seq = list(prompt)
    rows = []
    for _ in range(n):
        row = cached.logits(seq, len(seq) - 1)[-1].clone()
        rows.append(row)
        seq.append(int(row.argmax()))
    costs, base = {}, len(seq) - K - 1
    for width in (1, K + 1):
        times = []
        for _ in range(5):  # each call drops what the last one added past `base`, then evaluates `width`
            t0 = time.perf_counter()
            cached.logits(seq[:base + width], base)
            times.append(time.perf_counter() - t0)
        costs[width] = statistics.median(times)
    return torch.stack(rows), costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    import torch
    rows = {f"synthetic V={v}": synthetic(v, K + 1, v) for v in (32000, 128256)}
    real, costs = gemma_rows(K + 1)
    if real is not None:
        rows["Gemma 3 V=262144"] = real
    else:
        rows["synthetic V=262144"] = synthetic(262144, K + 1, 262144)
    rows_file = CACHE / "rows" / "shortcut-rows.pt"
    rows_file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(rows, rows_file)

    got = {s: [] for s in SETTINGS}
    for _ in range(args.repeats):
        for setting, value in SETTINGS.items():
            env = dict(os.environ)
            env.pop("SPEC_VERIFY_EXACT", None)
            if value is not None:
                env["SPEC_VERIFY_EXACT"] = value
            out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "tests"), str(rows_file), str(K),
                                  str(args.calls)], env=env, capture_output=True, text=True, check=True)
            got[setting].append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = {s: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for s, runs in got.items()}

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    lines = [f"# What each shortcut saves on a round ({cpu}, {os.uname().machine}, one thread)", ""]
    if costs:
        lines += [f"A real round here: Gemma 3 270M on llama.cpp, one position {costs[1] * 1e3:.1f} ms, "
                  f"{K + 1} positions {costs[K + 1] * 1e3:.1f} ms (a plain step's draw is measured against the "
                  f"first, the rest against the second).", ""]
    lines += ["Cost of taking a group out = its round's time without it minus with every shortcut in "
              "(median of medians over interleaved processes); the share is of the real round.", ""]
    groups = [s for s in SETTINGS if s != "all in"]
    lines.append("| rows | round | all in (us) | " + " | ".join(groups) + " |")
    lines.append("|" + " --- |" * (3 + len(groups)))
    for key in median["all in"]:
        name, label = key.split("|")
        base = median["all in"][key]
        real_round = None if not costs else (costs[1] if label.startswith("plain") else costs[K + 1])
        cells = []
        for s in groups:
            d = (median[s][key] - base) * 1e6
            share = f" ({d / (real_round * 1e6) * 100:+.1f}%)" if real_round else ""
            cells.append(f"{d:+.0f}{share}")
        lines.append(f"| {name} | {label} | {base * 1e6:.0f} | " + " | ".join(cells) + " |")
    lines += ["", "Groups: " + "; ".join(f"**{s}**: {ABOUT[s]}" for s in ABOUT) + "."]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
