#!/usr/bin/env python3
"""Makes media/hero.gif: 600 rounds of `accept` at K = 4 (V = 32000) with a deliberately
imperfect draft; the histogram of accepted lengths grows frame by frame and settles on the
analytic law's bars, and the running mean closes in on the analytic mean.

    .venv/bin/python examples/make_hero.py [--out media/hero.gif] [--png-dir /tmp/hero]

--png-dir also writes a few frames as PNG, to look at them. Needs matplotlib and pillow
(dev dependencies, requirements.txt) and the local build (`make build`).
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")

from law import accepted_length_law, acceptance_rates, expected_accepted  # noqa: E402

K, V, ROUNDS = 4, 32000, 600
ANALYTIC, OBSERVED, MEAN = "#9aa5b1", "#2b6cb0", "#c05621"


def imperfect_pair(seed: int):
    """Target rows and a draft that sees the target's logits through noise, blurrier at
    later positions: acceptance rates alpha_i fall from about 0.83 to 0.66."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(K + 1, V, generator=g) * 3
    target = torch.softmax(logits, -1)
    blur = torch.linspace(1.0, 0.7, K)[:, None]
    draft = torch.softmax(logits[:K] * blur + torch.randn(K, V, generator=g) * 0.4, -1)
    return target, draft


def run_rounds(sv, target, draft, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    accepted = []
    for _ in range(ROUNDS):
        tokens = torch.multinomial(draft, 1, generator=g).reshape(K)  # t_i ~ q_i
        accepted.append(sv.accept(target, draft, tokens, g)[0])
    return accepted


def frame_schedule() -> list:
    # Round by round at first, where every draw visibly moves the bars, then faster.
    shown, r = [], 1
    while r < ROUNDS:
        shown.append(r)
        r += 1 if r < 12 else max(2, round(r * 0.07))
    return shown + [ROUNDS] * 12  # hold the final picture


def render(accepted: list, law: torch.Tensor, mean: float, alpha: list):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    plt.rcParams.update({"font.size": 10, "axes.spines.top": False, "axes.spines.right": False})
    fig, (ax, ay) = plt.subplots(1, 2, figsize=(8.0, 3.5), dpi=100, gridspec_kw={"width_ratios": [1.15, 1]})
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.15, top=0.80, wspace=0.25)
    ns = list(range(K + 1))
    running = torch.tensor(accepted, dtype=torch.float64).cumsum(0) / torch.arange(1, ROUNDS + 1)
    ymax = max(float(law.max()) * 1.45, 0.1)
    title = fig.text(0.5, 0.93, "", ha="center", fontsize=13, fontweight="bold")
    fig.text(0.5, 0.855, "spec_verify.accept, K = 4, V = 32000, imperfect draft with alpha_i = "
             + ", ".join(f"{a:.2f}" for a in alpha), ha="center", fontsize=9, color="#4a5568")
    frames = []
    for r in frame_schedule():
        counts = torch.bincount(torch.tensor(accepted[:r]), minlength=K + 1).double()
        ax.clear()
        ay.clear()
        ax.bar(ns, law.tolist(), width=0.8, color="none", edgecolor=ANALYTIC, linewidth=2,
               linestyle="--", label="analytic law", zorder=3)
        ax.bar(ns, (counts / r).tolist(), width=0.56, color=OBSERVED, label="observed", zorder=2)
        ax.set_xticks(ns)
        ax.set_ylim(0, ymax)
        ax.set_xlabel("draft tokens accepted in a round (N)")
        ax.set_ylabel("fraction of rounds")
        ax.legend(loc="upper left", frameon=False, fontsize=9)
        ay.axhline(mean, color=ANALYTIC, linestyle="--", linewidth=2, label=f"analytic E[N] = {mean:.2f}")
        ay.plot(range(1, r + 1), running[:r].tolist(), color=MEAN, linewidth=1.8, label="running mean")
        ay.set_xlim(0, ROUNDS)
        ay.set_ylim(0, K)
        ay.set_xlabel("round")
        ay.set_ylabel("mean accepted length")
        ay.legend(loc="upper right", frameon=False, fontsize=9)
        title.set_text(f"round {r:>3}/{ROUNDS}:  running mean {float(running[r - 1]):.2f}"
                       f"  vs  analytic {mean:.2f}")
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        frames.append((r, Image.open(buf).convert("RGB")))
    plt.close(fig)
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "media" / "hero.gif"))
    parser.add_argument("--png-dir", default=None)
    args = parser.parse_args()

    from kernels import get_kernel
    from PIL import Image

    torch.set_num_threads(1)
    sv = get_kernel("phanerozoic/spec-verify", version=1, backend="cpu", trust_remote_code=True)
    target, draft = imperfect_pair(seed=0)
    alpha = acceptance_rates(target, draft)
    law, mean = accepted_length_law(alpha), expected_accepted(alpha)
    accepted = run_rounds(sv, target, draft, seed=1)
    frames = render(accepted, law, mean, alpha.tolist())

    # One palette for every frame (taken from the fullest one) keeps colours steady and
    # lets the GIF encoder store only what changes between frames.
    palette = frames[-1][1].quantize(colors=32, method=Image.Quantize.MEDIANCUT)
    images = [im.quantize(palette=palette, dither=Image.Dither.NONE) for _, im in frames]
    durations = [250 if r <= 12 else 90 for r, _ in frames]
    durations[-1] = 2500
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(out, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=True)
    if args.png_dir:
        png_dir = Path(args.png_dir)
        png_dir.mkdir(parents=True, exist_ok=True)
        for i in (0, 11, len(frames) // 2, len(frames) - 1):
            frames[i][1].save(png_dir / f"frame_{frames[i][0]:03d}_{i:03d}.png")
    final = torch.tensor(accepted, dtype=torch.float64)
    print(f"{out}: {len(images)} frames, {out.stat().st_size / 1e3:.0f} kB; alpha = "
          + ", ".join(f"{a:.3f}" for a in alpha.tolist())
          + f"; mean accepted {float(final.mean()):.3f} (analytic {mean:.3f})")


if __name__ == "__main__":
    main()
