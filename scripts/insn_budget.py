#!/usr/bin/env python3
"""Instruction budgets of the aarch64 kernels, counted exactly under qemu.

Builds tests/native/kernel_calls.cpp for aarch64 (static, with a linker map), runs each
kernel of each path under qemu-aarch64 with the counting plugin (scripts/insn_count), and
counts the instructions executed inside the kernel files' code (every .text section the map
attributes to kernels_neon.o or kernels_scalar.o), per element of the rows read:

    kernel          rows read   NEON budget   NEON vs scalar
    row argmax      1           <= 0.80       >= 4x fewer
    row mass        1           <= 1.75       >= 2x fewer
    residual mass   2 (p, q)    <= 2.50       >= 2x fewer
    residual store  2 (p, q)    <= 2.95       >= 2x fewer   (the residual, also stored: trees)
    row weights     1 (logits)  <= 11.25      >= 4x fewer
    keep at least   1 (weights) <= 5.00       >= 3x fewer
    gather at least 1 (weights) <= 2.85       >= 3x fewer   (7% of the values taken)
    widen f16       1 (halves)  <= 1.00       >= 2x fewer
    widen bf16      1 (halves)  <= 1.00       >= 2x fewer
    argmax, bf16    1 (halves)  <= 1.60       >= 2x fewer   (widen + row argmax, chunked)
    mass, f16       1 (halves)  <= 2.60       >= 2x fewer   (widen + row mass, chunked)

The warping budgets sit just above what the kernels reach (10.97 and 4.6): one exp is
about 30 vector operations per 4 lanes (Note [One exp]: the reduction, a degree-6
polynomial, the two-factor scaling), plus a division and the float64 mass of the weights
in the same pass (y - n C1 is one fused fmls since n C1 is exact: 11.22 -> 10.97, the
budget 11.5 -> 11.25); keep_at_least masks each value twice and widens both masked rows into
float64 lanes. gather_at_least (2.70; it gathers indices since top-p sums its candidates
sparsely, and was 2.9 gathering values four at a time under a budget of 3.20) tests eight
values at a time and takes apart lane by lane every group of four that holds a value >= t,
about a quarter of them in the counted row. residual_store (2.85)
is the residual plus its stores, about 7 instructions per 16 values more than the residual
alone as GCC schedules it. Half rows (Note [Half
rows]) are widened eight values at a time (a load, two conversions or shifts, two stores)
into an L1 buffer the float32 kernel then reads (0.875 instructions per value): the
budgets are the float32 kernel's plus that, plus a little for the per-chunk calls (the
argmax's per-call search costs 0.11 a value at chunks of 4096).

"Per element" divides by V, the row length (the residual reads two rows of V). Counts are
exact and repeatable, so these are tests. Prints a table and "N passed, N failed".
"""
from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import build_sources

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "native"
V, REPS = 32000, 4
# Cross-built on x86-64; on an aarch64 host the native g++ (Debian's also answers to the
# triplet name). qemu-aarch64 counts on either host: the plugin runs with the emulator.
NATIVE = platform.machine() == "aarch64"
CXX = "aarch64-linux-gnu-g++"
CXX_PACKAGE = "g++" if NATIVE else "g++-aarch64-linux-gnu"
BUDGETS = {"argmax": (0.80, 4.0), "mass": (1.75, 2.0), "residual": (2.50, 2.0),
           "residual_store": (2.95, 2.0),
           "weights": (11.25, 4.0),
           "keep": (5.00, 3.0),
           "gather": (2.85, 3.0),
           "widen_f16": (1.00, 2.0), "widen_bf16": (1.00, 2.0), "argmax_bf16": (1.60, 2.0),
           "mass_f16": (2.60, 2.0)}
OBJECTS = {"neon": "kernels_neon.o", "scalar": "kernels_scalar.o"}
# The half readers' chunk loop lives in typed_rows.cpp: counted with both paths.
SHARED = "typed_rows.o"


def build() -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    objs = []
    flags = ["-std=c++20", "-O3", "-ffp-contract=off", "-march=armv8-a", f"-I{ROOT / 'csrc'}"]
    for src in (ROOT / f for f in build_sources.kernel_cpp()):  # as build.toml lists them
        obj = OUT / f"aarch64_{src.stem}.o"
        subprocess.run([CXX, *flags, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(obj)
    exe = OUT / "kernel_calls_aarch64"
    subprocess.run([CXX, *flags, "-static", str(ROOT / "tests/native/kernel_calls.cpp"),
                    *map(str, objs), "-o", str(exe), f"-Wl,-Map,{exe}.map"], check=True)
    return exe


def code_ranges(map_file: Path, obj_suffix: str):
    """[lo, hi) of every .text input section the linker map attributes to an object."""
    ranges = []
    lines = map_file.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s*(\.text\S*)\s*(0x[0-9a-f]+)?\s*(0x[0-9a-f]+)?\s*(\S+)?$", line)
        if not m:
            continue
        if m.group(2) is None and i + 1 < len(lines):  # long section names wrap to the next line
            m2 = re.match(r"^\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S+)$", lines[i + 1])
            if not m2:
                continue
            lo, size, obj = m2.groups()
        else:
            lo, size, obj = m.group(2), m.group(3), m.group(4)
        if obj and obj.endswith("aarch64_" + obj_suffix) and size and int(size, 16) > 0:
            ranges.append((int(lo, 16), int(lo, 16) + int(size, 16)))
    return ranges


def count(plugin: str, exe: Path, ranges, kernel: str, path: str, cpu: str) -> int:
    spec = ",".join(f"range=r{i}:{lo:#x}:{hi:#x}" for i, (lo, hi) in enumerate(ranges))
    out = OUT / "insn_count.txt"
    subprocess.run(["qemu-aarch64", "-cpu", cpu, "-plugin", f"{plugin},{spec},out={out}",
                    str(exe), kernel, path, str(V), str(REPS)], check=True, capture_output=True)
    return sum(int(line.split()[1]) for line in out.read_text().splitlines())


def main() -> int:
    subprocess.run([str(ROOT / "scripts/ensure_apt.sh"), CXX_PACKAGE, "qemu-user"], check=True)
    plugin = subprocess.run([str(ROOT / "scripts/insn_count/build.sh")], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    exe = build()
    shared = code_ranges(Path(f"{exe}.map"), SHARED)
    ranges = {path: code_ranges(Path(f"{exe}.map"), obj) + shared for path, obj in OBJECTS.items()}
    passed = failed = 0
    print(f"aarch64 instructions per element, V = {V}, counted under qemu (Cortex-A72 and Neoverse-N1)")
    print(f"{'kernel':<12} {'cpu':<12} {'neon':>7} {'scalar':>7} {'ratio':>6}   budget")
    for kernel, (budget, min_ratio) in BUDGETS.items():
        for cpu in ["cortex-a72", "neoverse-n1"]:
            per = {path: count(plugin, exe, ranges[path], kernel, path, cpu) / (V * REPS) for path in OBJECTS}
            ratio = per["scalar"] / per["neon"]
            ok = per["neon"] <= budget and ratio >= min_ratio
            passed, failed = passed + ok, failed + (not ok)
            print(f"{kernel:<12} {cpu:<12} {per['neon']:>7.3f} {per['scalar']:>7.3f} {ratio:>5.1f}x   "
                  f"<= {budget:.2f}, >= {min_ratio:g}x fewer: {'ok' if ok else 'FAIL'}")
    print(f"insn-budget: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
