#!/usr/bin/env python3
"""The source lists of build.toml, the one place that says what the kernel is built from.

kernel-builder (flake.nix, the Hub) compiles exactly the files a `src` list names and sees
no other file; a header left out of the list is missing there. So every local build reads
its sources from here instead of globbing csrc/: scripts/build.py (and through it
emulated_tests.sh and variants.sh), native_tests.sh and insn_budget.py.
tests/test_build_sources.py fails when a file in csrc/ is in no list or a listed one does
not exist.

Usage: scripts/build_sources.py [kernel-cpp | kernel | torch]
    kernel-cpp  the kernel's .cpp files (what native_tests.sh compiles), one a line
    kernel      every file of the kernel's src lists (sources and headers)
    torch       the [torch] src list (the binding)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_TOML = ROOT / "build.toml"


def _parse(text: str) -> dict:
    try:
        import tomllib  # Python 3.11 and later
    except ModuleNotFoundError:
        return _parse_src_lists(text)
    return tomllib.loads(text)


def _parse_src_lists(text: str) -> dict:
    # Before Python 3.11 (no tomllib): only what this module reads, each table's src list.
    config: dict = {}
    table: dict = config
    items: list | None = None  # the src list being read, while it spans lines
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if items is not None:
            items += re.findall(r'"([^"]+)"', line)
            if "]" in line:
                items = None
            continue
        header = re.fullmatch(r"\[([^\]]+)\]", line)
        if header:
            table = config
            for key in header.group(1).split("."):
                table = table.setdefault(key.strip().strip('"'), {})
        elif re.match(r"src\s*=\s*\[", line):
            table["src"] = re.findall(r'"([^"]+)"', line)
            if "]" not in line.split("[", 1)[1]:
                items = table["src"]
    return config


def load(path: Path = BUILD_TOML) -> dict:
    return _parse(path.read_text())


def kernel_sources(config: dict | None = None) -> list[str]:
    """Every file of every [kernel.*] src list, in build.toml's order (relative to the root)."""
    config = load() if config is None else config
    return [f for kernel in config.get("kernel", {}).values() for f in kernel.get("src", [])]


def kernel_cpp(config: dict | None = None) -> list[str]:
    return [f for f in kernel_sources(config) if f.endswith(".cpp")]


# The binding of the versioned variants (torch212-cxx11-*: scripts/variants.sh builds them):
# the shared code of torch-ext/common/ with the ATen backend and registry of versioned/.
# kernel-builder builds build.toml's stable-ABI binding only, so versioned/ is in no src list.
VERSIONED_BINDING = [
    "torch-ext/common/schemas.h",
    "torch-ext/common/view.h",
    "torch-ext/common/checks.h",
    "torch-ext/common/checks.cpp",
    "torch-ext/common/ops.h",
    "versioned/backend.h",
    "versioned/torch_binding.cpp",
]


def torch_sources(config: dict | None = None) -> list[str]:
    config = load() if config is None else config
    return list(config.get("torch", {}).get("src", []))


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else "kernel-cpp"
    lists = {"kernel-cpp": kernel_cpp, "kernel": kernel_sources, "torch": torch_sources}
    if what not in lists or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = lists[what]()
    missing = [f for f in files if not (ROOT / f).is_file()]
    if missing:
        print(f"build_sources: build.toml lists files that do not exist: {', '.join(missing)}", file=sys.stderr)
        return 1
    print("\n".join(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
