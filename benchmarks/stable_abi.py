#!/usr/bin/env python3
"""Per-call cost of the ops through the stable-ABI build against the versioned (ATen) build.

    python benchmarks/stable_abi.py STABLE_BUILD_DIR VERSIONED_BUILD_DIR

Each directory holds one variant for the running torch (e.g. `scripts/build.py --out
build-stable` and `scripts/build.py --versioned --out build-versioned`: both load on torch
2.13). Both carry the same module name, so each is timed in its own process (LOCAL_KERNELS),
alternately, several times; the report is the median of each case's per-call minimum.

Cases, at V = 32000 and K = 4 (rows as the README's benchmarks make them):
  verify_greedy          sv.verify_greedy(target, tokens): the native op, no generator
  accept (generator)     sv.accept(target, draft, tokens, g): both draw in Python (_uniforms.py)
  decoder round greedy   one round of SpeculativeDecoder.generate (k = 4, the rows given),
  decoder round sampled  per round, less the callbacks (the same in both builds)
The bar: verify_greedy and a decoder round within 2 us a call of the versioned build's.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time, torch
from kernels import get_kernel
sv = get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)
V, K = 32000, 4
g = torch.Generator().manual_seed(0)
target = torch.softmax(torch.randn(K + 1, V, generator=g) * 3, -1)
draft = torch.softmax(torch.randn(K, V, generator=g) * 3, -1)
tokens = target[:K].argmax(-1)
gen = torch.Generator().manual_seed(1)

def per_call(fn, n):
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / n)
    return best / 1000.0

def decoder(greedy):
    rows, probs = target, draft
    def draft_step(prefix, k):
        return tokens[:k], (None if greedy else probs[:k])
    def target_step(prefix, proposed):
        return rows[: proposed.shape[0] + 1]
    dec = sv.SpeculativeDecoder(draft_step, target_step, k=K, greedy=greedy, generator=gen)
    def run():
        dec.generate([1, 2, 3], max_new=200)
        return dec.stats.rounds
    rounds = run()
    callbacks = lambda: (draft_step(None, K), target_step(None, tokens))
    return per_call(run, 20) / rounds - per_call(callbacks, 2000)

out = {
    "variant": sys.modules[sv.__name__].__file__.split("/")[-2],
    "verify_greedy": per_call(lambda: sv.verify_greedy(target, tokens), 2000),
    "accept (generator)": per_call(lambda: sv.accept(target, draft, tokens, gen), 2000),
    "decoder round greedy": decoder(True),
    "decoder round sampled": decoder(False),
}
print(json.dumps(out))
"""


def measure(build: Path) -> dict:
    env = dict(os.environ, LOCAL_KERNELS=f"phanerozoic/spec-verify={build.resolve()}")
    env.pop("SPEC_VERIFY_ISA", None)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, cwd="/")
    if r.returncode != 0:
        raise SystemExit(f"{build}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    stable, versioned = Path(sys.argv[1]), Path(sys.argv[2])
    runs = {"stable": [], "versioned": []}
    for _ in range(3):
        runs["stable"].append(measure(stable))
        runs["versioned"].append(measure(versioned))
    names = [k for k in runs["stable"][0] if k != "variant"]
    print(f"{'case (us a call)':24} {runs['versioned'][0]['variant']:>34} {runs['stable'][0]['variant']:>38} {'diff':>7}")
    for name in names:
        s = statistics.median(r[name] for r in runs["stable"])
        v = statistics.median(r[name] for r in runs["versioned"])
        print(f"{name:24} {v:34.2f} {s:38.2f} {s - v:+7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
