#!/usr/bin/env python3
"""Checks every built variant the way kernel-builder holds its Hub variants to it.

    scripts/abi_check.py [DIR ...]        default: build/

For each variant directory (torch<MAJ><MIN>-cxx11-cpu-<arch>-linux, or
torch-stable-abi<MAJ><MIN>-cpu-<arch>-linux) under each DIR:
- its extension (`_spec_verify_cpu_<id>.abi3.so`, exactly one) passes kernel-abi-check's
  `check_manylinux("manylinux_2_28")` and `check_python_abi("3.9")`;
- it is an ELF shared object for the arch its directory names, and exports nothing but
  `PyInit_<id>` (scripts/manylinux/exports.map);
- metadata.json names the same id and the fields `kernels` reads, and records the digest of
  the variant's files that kernels 0.19 and later verify at load (scripts/variant_digest.py);
- `_ops.py` binds the same id;
- a stable-ABI variant uses nothing of torch but its stable ABI, as kernel-builder's
  `check_torch_stable_abi` requires: no undefined C++ symbol of c10::, at:: or torch:: other
  than torch::stable::, every C shim function it calls declared by the headers of torch
  <MAJ>.<MIN> (given with --stable-headers, default: the running torch's, when that is the
  version), and it links no torch library but libtorch_cpu.
Prints one line per variant with the newest symbol version it needs from each library
(glibc, libstdc++, libgcc), read from the ELF's version references. Exits 1 on any failure.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import variant_digest

ROOT = Path(__file__).resolve().parent.parent
POLICY = "manylinux_2_28"
PYTHON_ABI = "3.9"
VARIANT = re.compile(r"^torch(?:(-stable-abi)?(\d)(\d+)-cpu|(\d)(\d+)-cxx11-cpu)-(x86_64|aarch64)-linux$")
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}  # e_machine


def elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return -1  # not a 64-bit little-endian ELF
    return int.from_bytes(head[18:20], "little")


def version_refs(path: Path) -> dict:
    """{library: [version names]} from the ELF's version references (objdump -p)."""
    out = subprocess.run(["objdump", "-p", str(path)], capture_output=True, text=True, check=True).stdout
    refs, lib = {}, None
    for line in out.splitlines():
        m = re.match(r"\s+required from (\S+):", line)
        if m:
            lib = m.group(1)
            refs[lib] = []
        elif lib and re.match(r"\s+0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)", line):
            refs[lib].append(line.split()[-1])
        elif lib and not line.startswith("    "):
            lib = None
    return refs


def newest(versions) -> str:
    def key(v):
        name, _, num = v.partition("_")
        return name, tuple(int(x) if x.isdigit() else 0 for x in num.split("."))
    by_name = {}
    for v in versions:
        name = v.partition("_")[0]
        if name not in by_name or key(v) > key(by_name[name]):
            by_name[name] = v
    return ", ".join(sorted(by_name.values()))


def exported(path: Path) -> list:
    # Defined dynamic symbols (nm -D --defined-only): the library's exports.
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line.strip())


def check_variant(vdir: Path) -> list:
    import kernel_abi_check

    problems = []
    m = VARIANT.match(vdir.name)
    arch = m.group(6)
    sos = sorted(vdir.glob("_spec_verify_cpu_*.abi3.so"))
    if len(sos) != 1:
        return [f"expected one _spec_verify_cpu_*.abi3.so, found {[p.name for p in sos]}"]
    so = sos[0]
    ident = so.name[: -len(".abi3.so")]
    if elf_machine(so) != ELF_MACHINE[arch]:
        problems.append(f"{so.name} is not a 64-bit ELF for {arch} (e_machine {elf_machine(so)})")
        return problems
    obj = kernel_abi_check.ObjectFile(str(so))
    for v in obj.check_manylinux(POLICY):
        problems.append(f"{POLICY}: {v.name} needs {v.dep} {v.version}")
    for v in obj.check_python_abi(PYTHON_ABI):
        problems.append(f"Python ABI {PYTHON_ABI}: {v!r}")
    extra = [s for s in exported(so) if s != f"PyInit_{ident}"]
    if extra:
        problems.append(f"exports more than PyInit_{ident}: {extra[:5]}{' ...' if len(extra) > 5 else ''}")
    try:
        meta = json.loads((vdir / "metadata.json").read_text())
    except (OSError, ValueError) as e:
        problems.append(f"metadata.json: {e}")
        meta = {}
    want = {"name": "spec-verify", "id": ident, "version": 1, "license": "apache-2.0",
            "python-depends": [], "backend": {"type": "cpu"}}
    for key, value in want.items():
        if meta.get(key) != value:
            problems.append(f"metadata.json: {key} = {meta.get(key)!r}, expected {value!r}")
    if meta:
        # What kernels (0.19 on) checks at every load: the files against metadata.json's digest.
        problems += [f"metadata.json digest: {p}" for p in variant_digest.digest_problems(vdir)]
    ops = vdir / "_ops.py"
    if not ops.is_file() or f"torch.ops.{ident}\n" not in ops.read_text():
        problems.append(f"_ops.py does not bind torch.ops.{ident}")
    for f in ("__init__.py", "_api.py", "decoder.py"):
        if not (vdir / f).is_file():
            problems.append(f"{f} missing")
    if m.group(1):
        problems += stable_abi_problems(so)
    return problems


def undefined(path: Path) -> list:
    out = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return [line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()]


def stable_abi_problems(so: Path) -> list:
    """What kernel-abi-check's check_torch_stable_abi reports (not in the kernel-abi-check
    wheel this project pins): C++ symbols of torch outside torch::stable, and the libraries."""
    problems = []
    names = undefined(so)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                               check=True).stdout.splitlines()
    for d in demangled:
        if d.startswith(("c10::", "at::", "torch::")) and not d.startswith("torch::stable::"):
            problems.append(f"stable ABI: uses {d}")
    shims = sorted(n for n in names if n.startswith(("aoti_torch_", "torch_")))
    declared = shim_declarations()
    if declared is not None:
        for n in shims:
            if n not in declared:
                problems.append(f"stable ABI: {n} is not in the stable ABI headers of this torch")
    needed = [line.split()[-1] for line in subprocess.run(["objdump", "-p", str(so)], capture_output=True, text=True,
                                                         check=True).stdout.splitlines() if "NEEDED" in line]
    extra = [lib for lib in needed if lib.startswith(("libc10", "libtorch")) and lib != "libtorch_cpu.so"]
    if extra:
        problems.append(f"stable ABI: links {extra} (only libtorch_cpu.so holds the stable ABI's C shim)")
    return problems


def shim_declarations():
    """The C shim functions the running torch's stable-ABI headers declare, or None."""
    try:
        import torch
    except ImportError:
        return None
    inc = Path(torch.__file__).parent / "include" / "torch" / "csrc"
    text = "".join(p.read_text(errors="replace") for d in ("stable", "inductor/aoti_torch")
                   for p in (inc / d).rglob("*.h"))
    return set(re.findall(r"\b((?:aoti_torch|torch)_[A-Za-z0-9_]+)\s*\(", text))


def main(argv) -> int:
    try:
        import kernel_abi_check  # noqa: F401
    except ImportError:
        print("abi_check: kernel-abi-check is not installed (pip install -r requirements.txt)", file=sys.stderr)
        return 1
    dirs = [Path(a) for a in argv] or [ROOT / "build"]
    failed = checked = 0
    for d in dirs:
        variants = sorted(p for p in d.iterdir() if p.is_dir() and VARIANT.match(p.name)) if d.is_dir() else []
        if not variants:
            print(f"abi_check: no variant directories in {d}", file=sys.stderr)
            failed += 1
        for vdir in variants:
            checked += 1
            problems = check_variant(vdir)
            so = next(vdir.glob("_spec_verify_cpu_*.abi3.so"), None)
            needs = newest(v for vs in version_refs(so).values() for v in vs) if so and not problems else ""
            status = "ok" if not problems else "FAILED"
            print(f"abi_check: {vdir.name}: {status}"
                  + (f" ({POLICY}, Python ABI {PYTHON_ABI}; needs {needs})" if needs else ""))
            for p in problems:
                print(f"    {p}")
            failed += bool(problems)
    print(f"abi_check: {checked - failed} of {checked} variants pass" if checked else "abi_check: nothing checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
