"""One results file per machine: benchmarks/results/<cpu-slug>.md, written with --markdown.

The file holds one section per benchmark section (compare.py's chain, logits, one-hot,
half and tree tables; batch.py's table), each between `<!-- section NAME -->` and
`<!-- end NAME -->`. A run replaces the sections it measured and keeps the others, so
`compare.py --tree-only --markdown` refreshes the tree table alone. The README links these
files instead of quoting them.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# The order sections take in a new file (a section not listed goes last).
ORDER = ["compare.chain", "compare.fixed_cost", "compare.logits", "compare.one_hot", "compare.half",
         "compare.tree", "batch"]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_slug(name: str | None = None) -> str:
    """'AMD EPYC' -> 'amd-epyc'; 'Intel(R) Xeon(R) Processor' -> 'intel-xeon-processor'."""
    name = re.sub(r"\((r|tm)\)", "", (name or cpu_name()).lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or platform.machine()


def default_path() -> Path:
    return RESULTS / f"{cpu_slug()}.md"


def run_line(command: str, path: str, blocks: int | None = None, threads: str = "1 thread") -> str:
    load = os.getloadavg()[0]
    parts = [f"`{command}`", f"{path} path", f"torch {torch.__version__}", threads,
             f"load average {load:.1f} at the end", datetime.date.today().isoformat()]
    if blocks is not None:
        parts.insert(2, f"{blocks} interleaved blocks")
    if load >= (os.cpu_count() or 1):
        parts.append("more runnable work than cores, so brackets are wide and a 2-thread column says little")
    return "Run: " + ", ".join(parts) + "."


def header(name: str) -> str:
    return (f"# Benchmarks on {name} ({platform.machine()}, {os.cpu_count()} CPUs)\n\n"
            "Written by `benchmarks/compare.py --markdown` and `benchmarks/batch.py --markdown`; each "
            "section is replaced by the run that measures it. Every ratio is the median of ratios paired "
            "block by block, with its interquartile range in brackets; absolute times on a shared machine "
            "are noise. How to read them: [benchmarks/README.md](../README.md).\n")


def write_section(key: str, title: str, body: list[str], path: Path | None = None) -> Path:
    """Put section `key` (a `## title` and the body's lines) into the machine's file."""
    path = default_path() if path is None else path
    text = path.read_text() if path.exists() else header(cpu_name())
    body_text = re.sub(r"\n{3,}", "\n\n", "\n".join(body).strip("\n"))
    block = f"<!-- section {key} -->\n## {title}\n\n{body_text}\n<!-- end {key} -->"
    pattern = re.compile(rf"<!-- section {re.escape(key)} -->.*?<!-- end {re.escape(key)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        later = [k for k in ORDER[ORDER.index(key) + 1:]] if key in ORDER else []
        at = min((m.start() for k in later for m in [re.search(rf"<!-- section {re.escape(k)} -->", text)] if m),
                 default=None)
        text = (text.rstrip("\n") + "\n\n" + block + "\n") if at is None else (text[:at] + block + "\n\n" + text[at:])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
