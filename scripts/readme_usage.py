#!/usr/bin/env python3
"""Runs the README's usage line as written, and says what it loaded and what it warned.

    PYTHON scripts/readme_usage.py [--check] [--readme README.md]

Under the Python that runs it (any venv with torch and kernels; LOCAL_KERNELS names the
build to load, as for every test), it executes the Quick start's ```python block, the one
that calls get_kernel, exactly as the README prints it, with every log record and Python
warning of WARNING or above recorded. Then it checks that the block bound `sv` to the kernel
and that one op works, and prints one JSON line:

    {"torch": "2.14.1+cu130", "cuda_build": true, "kernels": "0.19.1",
     "variant": "torch-stable-abi213-cpu-x86_64-linux", "path": ".../build/torch-stable-...",
     "warnings": []}

Exits 1, with the error on stderr, when the block fails (on a CUDA build of torch without
backend="cpu", kernels finds no variant) or binds no working kernel; with --check also when
it warned or loaded another variant than the one for this torch (build.py's name: the
stable-ABI one from torch 2.13 on). tests/test_release.py, scripts/variants.sh and
scripts/hub.py run it.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build  # noqa: E402  (scripts/build.py: the variant names)


def usage_block(readme: Path) -> str:
    """The README's first ```python block that calls get_kernel, as printed.

    Args:
        readme: the README's path.
    Returns:
        The block's code.
    Raises:
        ValueError: the README has no such block.
    """
    for block in re.findall(r"^```python\n(.*?)^```", readme.read_text(), re.M | re.S):
        if "get_kernel(" in block:
            return block
    raise ValueError(f"readme: no ```python block of {readme} calls get_kernel")


class _Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on a warning, or on a variant other than this torch's")
    args = ap.parse_args()
    code = usage_block(args.readme)

    recorder = _Recorder()
    logging.getLogger().addHandler(recorder)
    namespace = {"__name__": "__readme__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, f"{args.readme.name} (usage)", "exec"), namespace)
    messages = recorder.messages + [f"{w.category.__name__}: {w.message}" for w in caught]

    import kernels
    import torch

    sv = namespace.get("sv")
    if sv is None or not hasattr(sv, "verify_greedy"):
        print("readme_usage: the usage block bound no kernel to `sv`", file=sys.stderr)
        return 1
    p = torch.softmax(torch.randn(5, 50, generator=torch.Generator().manual_seed(0)), -1)
    n, x = sv.verify_greedy(p, p[:4].argmax(-1))
    if (n, x) != (4, int(p[4].argmax())):
        print(f"readme_usage: verify_greedy gave {(n, x)} on drafts that all match", file=sys.stderr)
        return 1
    report = {"torch": torch.__version__, "cuda_build": torch.version.cuda is not None,
              "kernels": kernels.__version__, "variant": Path(sv.__file__).parent.name,
              "path": str(Path(sv.__file__).parent), "warnings": messages}
    print(json.dumps(report))
    if args.check:
        version = torch.__version__.split("+")[0]
        stable = build.STABLE_ABI if build.version_tuple(version) >= build.version_tuple(build.STABLE_ABI) else None
        expected = build.variant_name(version, platform.machine(), stable)
        if report["variant"] != expected or messages:
            print(f"readme_usage: torch {torch.__version__}, kernels {kernels.__version__}: loaded "
                  f"{report['variant']} (expected {expected}), warnings {messages}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
