#!/usr/bin/env python3
"""Assembles exactly what would be uploaded to the Hub, checks it, and prints the upload command.

    scripts/hub.py [--out hub/] [--python PY ...]

The folder holds, as kernel-builder's Hub repositories do: build/ with every variant of
this repository's build/ (the release variants torch212-cxx11 and torch-stable-abi213 on
x86-64 and aarch64 are required; any other built variant, such as the torch 2.10 aarch64 one,
goes along),
README.md (the model card, front matter included), media/, LICENSE, build.toml, flake.nix,
the sources (csrc/, torch-ext/, versioned/) and the documents the card links to. Then it checks:
- every variant with scripts/abi_check.py (manylinux_2_28, Python ABI 3.9, exports,
  metadata.json, _ops.py), all built from the same clean tree (one id, no `_dirty`);
- the card's front matter (library_name: kernels, the license of build.toml) and that every
  relative link of the card resolves inside the folder;
- that the README's usage line, as written, loads the variant of each given Python's torch
  from the folder, through LOCAL_KERNELS, with no warning (the host's venv, and every venv
  of scripts/variants.sh that exists: torch 2.12.1 to 2.15.0, kernels 0.17.2 and 0.19.1):
  the stable variant from torch 2.13 on; every variant's metadata digest matches its files.
Nothing is uploaded: the command a maintainer with credentials would run is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "phanerozoic/spec-verify"
RELEASE = [f"{t}-cpu-{a}-linux" for t in ("torch212-cxx11", "torch-stable-abi213") for a in ("x86_64", "aarch64")]
VARIANT = re.compile(r"^torch(\d+-cxx11|-stable-abi\d+)-cpu-(x86_64|aarch64)-linux$")
FILES = ["README.md", "LICENSE", "build.toml", "flake.nix", "DESIGN.md", "benchmarks/README.md"]
TREES = ["media", "csrc", "torch-ext", "versioned", "benchmarks/results"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "_ops.py", "registration.h")


class HubError(Exception):
    pass


def tracked(tree: str) -> list:
    # The tracked files of a source tree (what a clean clone has), or every file without git.
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", tree], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return [ROOT / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in (ROOT / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def assemble(out: Path) -> list:
    build = ROOT / "build"
    variants = sorted(p for p in build.iterdir() if p.is_dir() and VARIANT.match(p.name)) if build.is_dir() else []
    missing = [v for v in RELEASE if not (build / v).is_dir()]
    if missing:
        raise HubError(f"missing release variants {missing}: run `make hub` (it builds them)")
    if out.exists():
        shutil.rmtree(out)
    (out / "build").mkdir(parents=True)
    for v in variants:
        shutil.copytree(v, out / "build" / v.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in FILES:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, out / f)
    for tree in TREES:
        for src in tracked(tree):
            if IGNORE(str(src.parent), [src.name]):
                continue
            dst = out / src.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return [v.name for v in variants]


def check_card(out: Path) -> None:
    card = (out / "README.md").read_text()
    m = re.match(r"---\n(.*?)\n---\n", card, re.S)
    if not m:
        raise HubError("README.md has no front matter")
    front = m.group(1)
    license_ = re.search(r'^license\s*=\s*"([^"]+)"', (out / "build.toml").read_text(), re.M).group(1)
    for key, value in (("library_name", "kernels"), ("license", license_)):
        if not re.search(rf"^{key}:\s*{re.escape(value)}\s*$", front, re.M):
            raise HubError(f"README.md front matter: {key} is not {value}")
    for target in re.findall(r"\]\(([^)\s]+)\)", card):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (out / target.split("#")[0]).exists():
            raise HubError(f"README.md links to {target}, which is not in the folder")


def check_ids(out: Path, variants: list) -> str:
    ids = set()
    for v in variants:
        ids.add(json.loads((out / "build" / v / "metadata.json").read_text())["id"])
    if len(ids) != 1:
        raise HubError(f"the variants were built from different trees: {sorted(ids)}")
    ident = ids.pop()
    if ident.endswith("_dirty"):
        raise HubError(f"{ident}: built with uncommitted changes; commit, then `make hub`")
    return ident


def check_load(out: Path, pythons: list) -> list:
    """The README's usage line, as written (scripts/readme_usage.py), under each Python,
    resolved to the folder through LOCAL_KERNELS: it must load the folder's variant for that
    Python's torch, with no warning (kernels 0.19 verifies the metadata digest there)."""
    env = dict(os.environ, LOCAL_KERNELS=f"{REPO_ID}={out / 'build'}")
    env.pop("SPEC_VERIFY_ISA", None)
    reports = []
    for py in pythons:
        py = os.path.abspath(py)  # not resolved: a venv's python is a symlink to its base
        # --check: the variant of this torch, and no warning.
        r = subprocess.run([py, str(ROOT / "scripts" / "readme_usage.py"), "--check", "--readme",
                            str(out / "README.md")], env=env, cwd="/", capture_output=True, text=True)
        if r.returncode != 0:
            raise HubError(f"the card's usage line, from the folder, under {py} failed:\n{r.stderr.strip()}")
        report = json.loads(r.stdout)
        if Path(report["path"]) != out / "build" / report["variant"]:
            raise HubError(f"under {py} the usage line loaded {report['path']}, not from the folder")
        print(f"hub: torch {report['torch']}, kernels {report['kernels']}: {report['variant']} loads "
              f"with no warning, verify_greedy ok ({py})")
        reports.append(report)
    return reports


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "hub")
    ap.add_argument("--python", action="append", default=[],
                    help="a Python with torch and kernels to load the folder's variant with (repeatable)")
    args = ap.parse_args()
    if platform.machine() != "x86_64":
        # scripts/variants.sh builds the release variants of both arches from an x86-64 host.
        print(f"hub: skipped on {platform.machine()}: the release variants are built and "
              "assembled on an x86-64 host (scripts/variants.sh)")
        return 0
    out = args.out.resolve()
    variants = assemble(out)
    ident = check_ids(out, variants)
    check_card(out)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "abi_check.py"), str(out / "build")])
    if r.returncode != 0:
        raise HubError("the ABI check of the folder's variants failed")
    check_load(out, list(dict.fromkeys(args.python)) or [sys.executable])
    files = sum(1 for p in out.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    rel = os.path.relpath(out)
    print(f"hub: {rel}/ checked: {files} files, {size / 1e6:.1f} MB, {ident}, variants {', '.join(variants)}")
    print("hub: nothing was uploaded. A maintainer logged in (`hf auth login`) with write access runs:")
    msg = f"spec-verify {ident[len('_spec_verify_cpu_'):]}"
    print(f"  hf repos create {REPO_ID} --repo-type kernel --exist-ok\n"
          f"  hf upload {REPO_ID} {rel} . --repo-type kernel --commit-message \"{msg}\"\n"
          f"  hf repos branch create {REPO_ID} v1 --repo-type kernel --exist-ok\n"
          f"  hf upload {REPO_ID} {rel} . --repo-type kernel --revision v1 --commit-message \"{msg}\"")
    print("  (main carries the card; branch v1 is what get_kernel(..., version=1) loads)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HubError as e:
        print(f"hub: {e}", file=sys.stderr)
        sys.exit(1)
