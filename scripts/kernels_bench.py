#!/usr/bin/env python3
"""`kernels benchmark ./`: the kernels CLI's own runner over benchmarks/benchmark.py.

    PYTHON scripts/kernels_bench.py            run it (100 timed calls per workload), then
                                               write its results into benchmarks/results/
    PYTHON scripts/kernels_bench.py --check    a short run (5 calls), nothing written

PYTHON is a venv with torch and kernels 0.19 or later with its benchmark extra (`make
setup`'s .venv: requirements.txt); the runner is that venv's `kernels` command. It loads
the local build (`./` is taken as the repository: build/, no Hub access), runs every
Benchmark class of benchmarks/benchmark.py, and checks each deterministic round against
benchmarks/torch_reference.py, failing on a mismatch. The runner needs a CPU build of
torch: on a CUDA build it takes the backend for CUDA and asks the (absent) GPU its name.

Writes, on a full run: benchmarks/results/kernels-benchmark-<cpu>.json (the runner's JSON,
as `kernels benchmark --output` writes it) and the section "kernels.benchmark" of
benchmarks/results/<cpu>.md (the runner's table, with the run's line).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
MIN_KERNELS = (0, 19)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="5 timed calls per workload, nothing written")
    args = ap.parse_args()

    import kernels
    import torch

    version = tuple(int(x) for x in kernels.__version__.split(".")[:2])
    if version < MIN_KERNELS:
        print(f"kernels_bench: kernels {kernels.__version__} here; this runs kernels "
              f"{'.'.join(map(str, MIN_KERNELS))} or later (pip install -r requirements.txt)", file=sys.stderr)
        return 1
    if torch.version.cuda is not None:
        print("kernels_bench: the kernels runner needs a CPU build of torch (on a CUDA build it asks "
              "the GPU for its name)", file=sys.stderr)
        return 1
    cli = Path(sys.executable).parent / "kernels"
    calls = ["--iterations", "5", "--warmup", "1"] if args.check else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        env = dict(os.environ)
        env.pop("SPEC_VERIFY_ISA", None)
        r = subprocess.run([str(cli), "benchmark", "./", *calls, "--output", str(out)], cwd=ROOT, env=env,
                           stderr=subprocess.PIPE, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            print(f"kernels_bench: `kernels benchmark ./` failed (exit {r.returncode})", file=sys.stderr)
            return 1
        if args.check:
            print(f"kernels_bench: `kernels benchmark ./` ran every workload under kernels {kernels.__version__}")
            return 0
        import results_markdown

        slug = results_markdown.cpu_slug()
        json_path = ROOT / "benchmarks" / "results" / f"kernels-benchmark-{slug}.json"
        json_path.write_text(out.read_text())
    table = [line for line in r.stderr.splitlines() if line and line[0] in "┌│├└"]
    run = results_markdown.run_line(f"kernels benchmark ./ (kernels {kernels.__version__})", "default")
    run = run.split(", more runnable work than cores")[0].rstrip(".") + "."  # no brackets here
    body = [run,
            "",
            "The kernels CLI's own runner over `benchmarks/benchmark.py`: 10 warm-up and 100 timed "
            "calls per workload, one after another, not interleaved; Ref is one timed call of "
            "`benchmarks/torch_reference.py`, Match its comparison with the op's result. Means "
            "on a shared machine carry every interruption, so `compare.py`'s paired ratios above "
            f"are the measure. The runner's JSON (not kept in git): `{json_path.name}`.",
            "", "```", *table, "```"]
    md = results_markdown.write_section("kernels.benchmark", "`kernels benchmark ./`", body)
    print(f"kernels_bench: wrote {json_path.relative_to(ROOT)} and the kernels.benchmark section of "
          f"{md.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
