"""build.toml is the source list: what kernel-builder (flake.nix, the Hub) compiles.

kernel-builder sees only the files a `src` list names. These tests fail when a file of
csrc/ or torch-ext/ is in no list, when a listed file does not exist, and when a local
build script compiles sources by a glob of its own instead of reading the lists
(scripts/build_sources.py). They read files only: no build, no torch op.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("build_sources", ROOT / "scripts" / "build_sources.py")
build_sources = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(build_sources)

CONFIG = build_sources.load()
KERNEL = build_sources.kernel_sources(CONFIG)
TORCH = build_sources.torch_sources(CONFIG)


def source_files(folder: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).iterdir()
            if p.is_file() and p.suffix in (".cpp", ".h")}


def test_every_listed_file_exists():
    missing = [f for f in KERNEL + TORCH if not (ROOT / f).is_file()]
    assert not missing, f"build.toml lists files that do not exist: {missing}"


def test_every_csrc_file_is_listed():
    unlisted = sorted(source_files("csrc") - set(KERNEL))
    assert not unlisted, (f"csrc/ has files that build.toml's [kernel.*] src lists leave out, so the "
                          f"Hub build lacks them: {unlisted}")


def test_every_binding_file_is_listed():
    # The stable-ABI binding is build.toml's [torch] list; the versioned one (torch212
    # variants, which kernel-builder does not build) is build_sources.VERSIONED_BINDING.
    unlisted = sorted((source_files("torch-ext") | source_files("torch-ext/stable")) - set(TORCH))
    assert not unlisted, f"torch-ext/ has files that build.toml's [torch] src leaves out: {unlisted}"
    versioned = set(build_sources.VERSIONED_BINDING)
    unlisted = sorted(source_files("versioned") - versioned)
    assert not unlisted, f"versioned/ has binding files VERSIONED_BINDING leaves out: {unlisted}"
    assert all((ROOT / f).is_file() for f in build_sources.VERSIONED_BINDING)
    assert len(versioned) == len(build_sources.VERSIONED_BINDING), "VERSIONED_BINDING lists a file twice"


def test_no_file_listed_twice():
    listed = KERNEL + TORCH
    assert len(listed) == len(set(listed)), f"listed more than once: {sorted({f for f in listed if listed.count(f) > 1})}"


def test_every_quoted_include_is_listed():
    # A header a listed file includes must be listed too (kernel-builder would not have it).
    listed = set(KERNEL + TORCH)
    names = {Path(f).name for f in listed}
    generated = {"registration.h"}  # written by the builder (and by scripts/build.py)
    for f in sorted(f for f in listed if (ROOT / f).is_file()):
        for header in re.findall(r'^\s*#\s*include\s+"([^"]+)"', (ROOT / f).read_text(), re.M):
            # Resolved as the compiler resolves it: the including file's folder, then the
            # kernel's include folder (csrc/) by name.
            local = os.path.normpath(Path(f).parent / header)
            assert local in listed or header in names | generated, (
                f"{f} includes {header!r}, which build.toml does not list")


def test_every_versioned_include_is_listed():
    # The versioned binding's quoted includes, resolved as the compiler resolves them (the
    # including file's folder first, then csrc/ and the generated registration.h): each must
    # be a file build.py stages, or the build fails on the missing copy.
    versioned = set(build_sources.VERSIONED_BINDING)
    kernel = {Path(f).name for f in KERNEL}
    for f in build_sources.VERSIONED_BINDING:
        folder = Path(f).parent
        for header in re.findall(r'^\s*#\s*include\s+"([^"]+)"', (ROOT / f).read_text(), re.M):
            local = os.path.normpath(folder / header)
            assert local in versioned or header in kernel | {"registration.h"}, (
                f"{f} includes {header!r}, which neither VERSIONED_BINDING nor build.toml lists")


def test_fallback_parser_reads_the_same_lists():
    # Before Python 3.11 the lists come from build_sources' own reader: it must agree.
    fallback = build_sources._parse_src_lists((ROOT / "build.toml").read_text())
    assert build_sources.kernel_sources(fallback) == KERNEL
    assert build_sources.torch_sources(fallback) == TORCH


@pytest.mark.parametrize("dropped", ["csrc/typed_rows.cpp", "csrc/half.h"])
def test_a_dropped_file_is_caught(tmp_path, dropped):
    # The check above must fail on the very mistake it guards against.
    text = (ROOT / "build.toml").read_text()
    assert f'"{dropped}"' in text
    config = build_sources._parse(re.sub(rf'^\s*"{re.escape(dropped)}",\n', "", text, flags=re.M))
    assert dropped in source_files("csrc") - set(build_sources.kernel_sources(config))


def test_build_scripts_read_the_lists():
    # Every script that compiles the kernel takes its files from build_sources, none globs csrc/.
    for script in ("scripts/build.py", "scripts/native_tests.sh", "scripts/insn_budget.py"):
        text = (ROOT / script).read_text()
        assert "build_sources" in text, f"{script} does not read build.toml's lists"
        assert not re.search(r"csrc/\*\.cpp|glob\(\"\*\.cpp\"\)", text), f"{script} globs csrc/ itself"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_sources.py"), "kernel-cpp"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [f for f in KERNEL if f.endswith(".cpp")]
