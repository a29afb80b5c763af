#!/usr/bin/env python3
"""Local build of the kernel, laid out exactly as kernel-builder lays out a Hub variant.

    build/torch-stable-abi213-cpu-<arch>-linux/     (torch 2.13 and later; see below)
    build/torch<MAJ><MIN>-cxx11-cpu-<arch>-linux/    (an older torch)
        __init__.py, ...            the Python files of torch-ext/spec_verify (testing/ too)
        _ops.py                     generated: binds `ops` to the extension's op namespace
        _spec_verify_cpu_<id>.abi3.so
        metadata.json               with the digest of the files above (scripts/variant_digest.py)

kernel-builder (Nix) cannot run here; this script is its stand-in. Like kernel-builder it
compiles exactly the files build.toml's `src` lists name (scripts/build_sources.py), copied
into build/.src/<variant>/ first, so a header the lists leave out is missing here as it is
there and the build fails the same way (the compiler's messages name the copies under
build/.src/). <id> is 7 hex digits of
the git tree of HEAD, plus "_dirty" when tracked files have uncommitted changes. Objects are
cached by a hash of their inputs, so a rebuild recompiles only what changed. Every variant
targets manylinux_2_28 (glibc 2.28) although this machine's glibc and GCC are newer: see
scripts/manylinux/ and the README's build notes; scripts/abi_check.py verifies the result.

Usage: scripts/build.py [--arch x86_64|aarch64] [--torch-dir DIR] [--cxx COMPILER]
                       [--python-include DIR] [--stable-abi X.Y | --versioned] [--out DIR]
The defaults build for this machine against the torch that runs this script. A cross build
names the target's torch package directory (for its headers, libraries and version) and the
target's Python headers (pyconfig.h differs per architecture); the compiler defaults to
<arch>-linux-gnu-g++. Example (the aarch64 variant on an x86-64 machine):
    scripts/build.py --arch aarch64 --torch-dir .../site/torch --python-include .../python3.11

Against torch 2.13 or later the binding is built on the LibTorch stable ABI (torch-ext/stable/,
torch/csrc/stable and torch/headeronly only, compiled with TORCH_TARGET_VERSION = 2.13), as
kernel-builder builds build.toml's `[torch.stable-abi] cpu = "2.13"`: the one variant
torch-stable-abi213-cpu-<arch>-linux, which `kernels` loads on torch 2.13 and every later
torch. Against an older torch (2.12 for its users, 2.10 for the emulated aarch64 tests) it is
versioned/ (build_sources.VERSIONED_BINDING),
torch<MAJ><MIN>-cxx11-cpu-<arch>-linux. --stable-abi X.Y and
--versioned choose explicitly.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import build_sources
import variant_digest

ROOT = Path(__file__).resolve().parent.parent
NAME = "spec-verify"
PY_NAME = "spec_verify"
# Kernel files: no torch headers, and no contraction of a*b+c into an FMA, so every path
# rounds the same operations (DESIGN.md, "The numerics contract").
KERNEL_FLAGS = ["-O3", "-std=c++20", "-fPIC", "-fno-gnu-unique", "-ffp-contract=off", "-Wall", "-Wextra"]
BINDING_FLAGS = ["-O2", "-std=c++20", "-fPIC", "-fno-gnu-unique", "-ffp-contract=off",
                 "-DCPU_KERNEL", "-DPy_LIMITED_API=0x03090000", "-D_GLIBCXX_USE_CXX11_ABI=1"]
# manylinux_2_28 with this machine's newer glibc and GCC (README, "Build notes"): a stand-in
# for glibc's <sys/single_threaded.h> first on every include path, the libstdc++ members newer
# than manylinux_2_28 instantiated into the library, and only PyInit_* exported.
MANYLINUX = ROOT / "scripts" / "manylinux"
COMPAT_FLAGS = ["-isystem", str(MANYLINUX / "include")]
COMPAT_SOURCE = MANYLINUX / "libstdcxx_compat.cpp"
COMPAT_CXX_FLAGS = ["-O2", "-std=c++20", "-fPIC", "-fno-gnu-unique", "-D_GLIBCXX_USE_CXX11_ABI=1"]
EXPORTS_MAP = MANYLINUX / "exports.map"
# The oldest core each variant must run on. aarch64: armv8.0 (a Raspberry Pi 4's Cortex-A72),
# pinned because a toolchain's default could be newer. x86-64: the compiler's baseline; AVX2
# is enabled per function and chosen at run time.
ARCH_FLAGS = {"x86_64": [], "aarch64": ["-march=armv8-a"]}
# The stable ABI the stable binding targets (build.toml's [torch.stable-abi]): the first with
# torch::stable::Generator, which the ops that take a generator need.
STABLE_ABI = "2.13"


def torch_version(torch_dir: Path) -> str:
    text = (torch_dir / "version.py").read_text()
    return re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M).group(1)


def variant_name(version: str, arch: str, stable_abi: str | None = None) -> str:
    if stable_abi is not None:
        # kernel-builder's name (nix-builder/lib/variants/torch.nix), which kernels/variants.py
        # parses as a stable-ABI arch variant: no C++ ABI tag.
        major, minor = stable_abi.split(".")[:2]
        return f"torch-stable-abi{major}{minor}-cpu-{arch}-linux"
    major, minor = version.split(".")[:2]
    return f"torch{major}{minor}-cxx11-cpu-{arch}-linux"


def version_tuple(version: str) -> tuple:
    return tuple(int(re.match(r"\d+", x).group()) for x in version.split(".")[:2])


def target_version_flag(stable_abi: str) -> str:
    # TORCH_TARGET_VERSION as torch/csrc/stable/version.h defines it: major << 56 | minor << 48.
    major, minor = version_tuple(stable_abi)
    return f"-DTORCH_TARGET_VERSION={hex((major << 56) | (minor << 48))}"


def kernel_id() -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    try:
        tree = git("rev-parse", "HEAD^{tree}").strip()[:7]
        dirty = git("status", "--porcelain", "--untracked-files=no").strip() != ""
    except (subprocess.CalledProcessError, FileNotFoundError):
        # Not a git checkout (a source tarball): name the build by its sources instead.
        digest = hashlib.sha1()
        sources = sorted((ROOT / "csrc").glob("*")) + sorted((ROOT / "torch-ext").rglob("*.[ch]*"))
        for f in sources + sorted((ROOT / "versioned").glob("*")):
            digest.update(f.read_bytes())
        return digest.hexdigest()[:7]
    return tree + ("_dirty" if dirty else "")


def registration_header(stable: bool = False) -> str:
    # What kernel-builder generates as registration.h, reduced to what the binding uses.
    if stable:
        return """#pragma once
#include <Python.h>
#include <torch/csrc/stable/library.h>

#define _SPEC_VERIFY_CONCAT(A, B) A##B
#define SPEC_VERIFY_CONCAT(A, B) _SPEC_VERIFY_CONCAT(A, B)
#define _SPEC_VERIFY_STRINGIFY(A) #A
#define SPEC_VERIFY_STRINGIFY(A) _SPEC_VERIFY_STRINGIFY(A)

#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE) STABLE_TORCH_LIBRARY(NAME, MODULE)
#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) STABLE_TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

#define REGISTER_EXTENSION(NAME)                                                       \\
  PyMODINIT_FUNC SPEC_VERIFY_CONCAT(PyInit_, NAME)() {                                 \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                         \\
                                        SPEC_VERIFY_STRINGIFY(NAME), nullptr, 0, nullptr}; \\
    return PyModule_Create(&module);                                                   \\
  }
"""
    return """#pragma once
#include <Python.h>
#include <torch/library.h>

#define _SPEC_VERIFY_CONCAT(A, B) A##B
#define SPEC_VERIFY_CONCAT(A, B) _SPEC_VERIFY_CONCAT(A, B)
#define _SPEC_VERIFY_STRINGIFY(A) #A
#define SPEC_VERIFY_STRINGIFY(A) _SPEC_VERIFY_STRINGIFY(A)

#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)

// An importable, empty Python module: the ops register themselves when the library loads.
#define REGISTER_EXTENSION(NAME)                                                       \\
  PyMODINIT_FUNC SPEC_VERIFY_CONCAT(PyInit_, NAME)() {                                 \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                         \\
                                        SPEC_VERIFY_STRINGIFY(NAME), nullptr, 0, nullptr}; \\
    return PyModule_Create(&module);                                                   \\
  }
"""


def ops_py(ext: str) -> str:
    return f'''import torch
from . import {ext}

ops = torch.ops.{ext}


def add_op_namespace_prefix(op_name: str) -> str:
    """Prefix op by namespace."""
    return f"{ext}::{{op_name}}"
'''


class BuildError(Exception):
    pass


def check_compiler(cxx: str, arch: str) -> None:
    # A host g++ handed --arch aarch64 would otherwise fail deep inside torch's headers, or
    # worse, produce an x86-64 library in an aarch64 directory.
    try:
        machine = subprocess.run([cxx, "-dumpmachine"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"cannot run the compiler {cxx!r} ({e})")
    if machine.split("-")[0] != arch:
        raise BuildError(f"{cxx} targets {machine}, not {arch}: pass --cxx for {arch}")


def run(cmd: list) -> None:
    if subprocess.run(cmd).returncode != 0:
        raise BuildError("failed: " + " ".join(cmd))


def link_checked(cmd: list) -> None:
    """Links, and fails on any symbol no object or library defines but the Python C API's.

    The module's init function calls the running interpreter (PyModule_Create2), which the
    library must not link (no libpython), so --no-undefined is softened to warnings and the
    warnings read here: any other undefined symbol (a source left out of build.toml) fails the
    build now rather than when `kernels` loads the library ("undefined symbol")."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise BuildError("failed: " + " ".join(cmd))
    undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", done.stderr)))
    missing = [s for s in undefined if not re.match(r"_?Py", s)]
    if missing:
        Path(cmd[cmd.index("-o") + 1]).unlink(missing_ok=True)  # --warn-unresolved-symbols wrote it
        raise BuildError("the library leaves symbols undefined (is a source missing from build.toml's src "
                         "lists?):\n  " + "\n  ".join(missing))
    # What else the linker said (its lines around the Python symbol's warning are not news).
    rest = [line for line in done.stderr.splitlines()
            if "undefined reference to `" not in line and ": in function `" not in line]
    if rest:
        sys.stderr.write("\n".join(rest) + "\n")


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    host = platform.machine()
    ap.add_argument("--arch", default=host, choices=sorted(ARCH_FLAGS))
    ap.add_argument("--torch-dir", type=Path, help="the target's torch package directory")
    ap.add_argument("--cxx", help="default: $CXX or g++ natively, <arch>-linux-gnu-g++ for a cross build")
    ap.add_argument("--python-include", type=Path,
                    help="the target's Python headers (Python.h, pyconfig.h); default: this Python's, natively")
    ap.add_argument("--out", type=Path, default=ROOT / "build")
    ap.add_argument("--build-toml", type=Path, default=build_sources.BUILD_TOML,
                    help="the source lists to build from (default: the repository's build.toml)")
    ap.add_argument("--stable-abi", metavar="X.Y",
                    help=f"build the stable-ABI binding (torch-ext/stable/) for torch X.Y and later "
                         f"(default: {STABLE_ABI} against torch {STABLE_ABI} or later)")
    ap.add_argument("--versioned", action="store_true",
                    help="build the versioned binding (versioned/) "
                         "for the given torch only, whatever its version")
    args = ap.parse_args()
    start = time.monotonic()
    cross = args.arch != host
    if args.cxx is None:
        args.cxx = f"{args.arch}-linux-gnu-g++" if cross else os.environ.get("CXX", "g++")
    if cross:
        check_compiler(args.cxx, args.arch)
        if args.torch_dir is None or args.python_include is None:
            raise BuildError(f"a build for {args.arch} on {host} needs --torch-dir and --python-include "
                             "(the target's torch package and Python headers)")
    if args.python_include is None:
        args.python_include = Path(sysconfig.get_paths()["include"])
    if not (args.python_include / "Python.h").is_file():
        raise BuildError(f"no Python.h in {args.python_include}")

    if args.torch_dir is None:
        import torch
        args.torch_dir = Path(torch.__file__).parent
    torch_dir = args.torch_dir.resolve()
    version = torch_version(torch_dir)
    if args.stable_abi is None and not args.versioned and version_tuple(version) >= version_tuple(STABLE_ABI):
        args.stable_abi = STABLE_ABI
    if args.versioned:
        args.stable_abi = None
    stable = args.stable_abi is not None
    if stable and version_tuple(version) < version_tuple(args.stable_abi):
        raise BuildError(f"torch {version} is older than the stable ABI {args.stable_abi} asked for")
    variant = variant_name(version, args.arch, args.stable_abi)
    ident = kernel_id()
    ext = f"_{PY_NAME}_cpu_{ident}"

    out_dir = args.out / variant
    obj_dir = args.out / ".obj" / variant
    gen_dir = args.out / ".gen" / variant
    for d in (out_dir, obj_dir, gen_dir):
        d.mkdir(parents=True, exist_ok=True)
    registration = registration_header(stable)
    write_if_changed(gen_dir / "registration.h", registration)

    # build.toml's sources, and only those, staged as kernel-builder stages them. Its [torch]
    # list is the stable-ABI binding; the versioned binding (torch212 variants, built by
    # scripts/variants.sh, not by kernel-builder) is build_sources.VERSIONED_BINDING.
    config = build_sources.load(args.build_toml)
    binding = build_sources.torch_sources(config) if stable else build_sources.VERSIONED_BINDING
    listed = build_sources.kernel_sources(config) + binding
    missing = [f for f in listed if not (ROOT / f).is_file()]
    if missing:
        raise BuildError(f"build.toml lists files that do not exist: {', '.join(missing)}")
    src_dir = args.out / ".src" / variant
    for f in listed:
        (src_dir / f).parent.mkdir(parents=True, exist_ok=True)
        data = (ROOT / f).read_bytes()
        if not (src_dir / f).exists() or (src_dir / f).read_bytes() != data:
            (src_dir / f).write_bytes(data)
    for p in src_dir.rglob("*"):
        if p.is_file() and p.relative_to(src_dir).as_posix() not in listed:
            p.unlink()
    includes = [f"-I{src_dir / d}" for k in config["kernel"].values() for d in k.get("include", [])]
    headers = b"".join((src_dir / f).read_bytes() for f in sorted(listed) if not f.endswith(".cpp"))
    headers += registration.encode()
    headers += b"".join(p.read_bytes() for p in sorted(MANYLINUX.rglob("*.h")))
    torch_inc = [f"-I{torch_dir / 'include'}"]
    if stable:
        torch_inc.append(target_version_flag(args.stable_abi))
    else:
        torch_inc.append(f"-I{torch_dir / 'include/torch/csrc/api/include'}")
    py_inc = f"-I{args.python_include}"

    jobs = []  # (source, flags)
    arch_flags = ARCH_FLAGS[args.arch]
    for source in build_sources.kernel_cpp(config):
        jobs.append((src_dir / source, KERNEL_FLAGS + arch_flags + COMPAT_FLAGS + includes))
    for source in binding:
        if source.endswith(".cpp"):
            jobs.append((src_dir / source, BINDING_FLAGS + arch_flags + COMPAT_FLAGS
                         + [f"-DTORCH_EXTENSION_NAME={ext}", *includes, f"-I{(src_dir / source).parent}",
                            f"-I{gen_dir}", py_inc] + torch_inc))
    jobs.append((COMPAT_SOURCE, COMPAT_CXX_FLAGS + arch_flags + COMPAT_FLAGS))

    def compile_one(job):
        src, flags = job
        # The key leaves out where the build directory is (an object does not depend on it), so
        # objects copied from another build directory are found (tests/test_build_sources.py).
        command = " ".join([args.cxx, *flags]).replace(str(args.out), "<out>")
        key = hashlib.sha1(src.read_bytes() + headers + command.encode()).hexdigest()[:16]
        obj = obj_dir / f"{src.stem}-{key}.o"
        if obj.exists():
            return obj, False
        tmp = obj.with_suffix(".tmp.o")
        run([args.cxx, *flags, "-c", str(src), "-o", str(tmp)])
        tmp.rename(obj)
        return obj, True

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, jobs))
    objects = [o for o, _ in results]
    compiled = [o.name for o, fresh in results if fresh]

    so = out_dir / f"{ext}.abi3.so"
    stale = [p for p in out_dir.glob(f"_{PY_NAME}_cpu_*.abi3.so") if p != so]
    # No libpython and no libtorch_python: the module init resolves against the running
    # interpreter, and the ops need only libtorch_cpu (and c10).
    link = [args.cxx, "-shared", "-o", str(so), *map(str, objects), f"-Wl,--version-script={EXPORTS_MAP}",
            f"-L{torch_dir / 'lib'}", f"-Wl,-rpath-link,{torch_dir / 'lib'}",
            "-Wl,--no-as-needed", *(["-ltorch_cpu"] if stable else ["-lc10", "-ltorch_cpu", "-ltorch"]),
            "-Wl,--as-needed", "-Wl,--no-undefined", "-Wl,--warn-unresolved-symbols"]
    link_key = hashlib.sha1(" ".join(link).encode() + EXPORTS_MAP.read_bytes()).hexdigest()
    link_stamp = obj_dir / "link.key"
    if (compiled or not so.exists() or stale
            or not link_stamp.exists() or link_stamp.read_text() != link_key):
        for p in stale:
            p.unlink()
        link_checked(link)
        link_stamp.write_text(link_key)

    # The Python package: copy (not link) so the variant directory stands alone, like a Hub variant.
    pkg = ROOT / "torch-ext" / PY_NAME
    # Subpackages too (spec_verify.testing): every .py file at its relative path.
    sources = [p.relative_to(pkg) for p in pkg.rglob("*.py") if "__pycache__" not in p.parts]
    wanted = {p.parts[0] for p in sources} | {"_ops.py", so.name, "metadata.json"}
    for p in out_dir.iterdir():
        if p.name not in wanted:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in sources:
        (out_dir / p).parent.mkdir(parents=True, exist_ok=True)
        write_if_changed(out_dir / p, (pkg / p).read_text())
    for p in out_dir.rglob("*.py"):  # a file removed from a subpackage's source
        if p.parent != out_dir and p.relative_to(out_dir) not in sources:
            p.unlink()
    write_if_changed(out_dir / "_ops.py", ops_py(ext))
    metadata = {"name": NAME, "id": ext, "version": 1, "license": "apache-2.0",
                "python-depends": [], "backend": {"type": "cpu"}}
    # Last, once every other file is in place: the digest `kernels` (0.19 on) checks the
    # variant's files against at load (scripts/variant_digest.py), as `kernel-builder hash`
    # writes it after the install.
    metadata = variant_digest.with_digest(metadata, out_dir)
    write_if_changed(out_dir / "metadata.json", json.dumps(metadata, indent=2) + "\n")

    what = f"compiled {', '.join(compiled)}" if compiled else "up to date"
    print(f"build: {out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir} "
          f"({ext}; {what}) in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BuildError as e:
        print(f"build: {e}", file=sys.stderr)
        sys.exit(1)
