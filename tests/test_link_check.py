"""A build that leaves a source out fails when it links, not when `kernels` loads it.

kernel-builder compiles exactly build.toml's src lists; a .cpp left out of them used to link
into a library with undefined symbols, found only by the loader ("undefined symbol") on a
user's machine. scripts/build.py links with --no-undefined (softened for the Python C API,
which the running interpreter provides) and fails naming the symbols. These tests relink the
objects `make build` compiled (cached by content, so only the link runs) from a copy of
build.toml with one source removed, and from an unchanged copy as the control.
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build.py"


def _build(tmp_path: Path, drop: str | None) -> subprocess.CompletedProcess:
    text = (ROOT / "build.toml").read_text()
    if drop is not None:
        assert f'"{drop}"' in text
        text = re.sub(rf'\s*"{re.escape(drop)}",', "", text)
    toml = tmp_path / "build.toml"
    toml.write_text(text)
    out = tmp_path / "out"
    # This machine's objects from `make build`, so that only the link runs (the object cache
    # is keyed by content and flags, not by the build directory).
    for objects in (ROOT / "build" / ".obj").glob(f"*-{platform.machine()}-linux"):
        shutil.copytree(objects, out / ".obj" / objects.name)
    return subprocess.run([sys.executable, str(BUILD), "--out", str(out), "--build-toml", str(toml)],
                          capture_output=True, text=True, cwd=ROOT)


def test_the_unchanged_source_list_links(tmp_path):
    done = _build(tmp_path, None)
    assert done.returncode == 0, done.stderr


def test_a_source_left_out_of_build_toml_fails_at_link_time(tmp_path):
    done = _build(tmp_path, "csrc/rounds.cpp")
    assert done.returncode != 0
    assert "undefined" in done.stderr and "build.toml" in done.stderr, done.stderr
    assert "spec_verify::accept_round" in done.stderr  # a symbol the left-out file defines is named
    assert not list((tmp_path / "out").glob("*/_spec_verify_cpu_*.so"))
