"""The command line: run the suite over a verifier named on it and print the report.

    python <variant dir>/testing --verifier reference           # the float64 reference, no op
    python <variant dir>/testing --verifier accept              # spec-verify's accept, through `kernels`
    python <variant dir>/testing --verifier mypkg.mod:verify    # any callable of the suite's interface
    python -m spec_verify.testing ...                           # where spec_verify is importable by name
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, List, Optional, Tuple

from . import adapters, check_logits_verifier, check_verifier
from .logits import WARPS

PACKAGE_VERIFIERS = {
    "accept": ("probs", lambda sv: sv.accept),
    "accept_with_uniforms": ("uniforms", lambda sv: sv.accept_with_uniforms),
    "block": ("probs", lambda sv: (lambda p, q, t, g: sv.accept(p, q, t, g, method="block"))),
    "accept_logits": ("logits", lambda sv: (lambda p, q, t, g, **w: sv.accept_logits(p, q, t, generator=g, **w))),
}


def _package():
    """spec-verify's kernel module: the package this folder sits in, else `kernels.get_kernel`."""
    parent = __name__.rsplit(".", 2)[0] if __name__.count(".") >= 2 else None
    if parent and parent in sys.modules and hasattr(sys.modules[parent], "accept"):
        return sys.modules[parent]
    kernels = importlib.import_module("kernels")
    return kernels.get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)


def resolve(spec: str, interface: Optional[str]) -> Tuple[Callable, str]:
    """(callable, interface) for a --verifier value."""
    if spec == "reference":
        return adapters.reference_accept, interface or "probs"
    if spec in PACKAGE_VERIFIERS:
        kind, get = PACKAGE_VERIFIERS[spec]
        return get(_package()), interface or kind
    module, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--verifier must be 'reference', one of {sorted(PACKAGE_VERIFIERS)} or module:function, "
                         f"got {spec!r}")
    target = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target, interface or "probs"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spec_verify.testing",
        description="Check a speculative-decoding verifier against the exact law of speculative sampling: "
                    "the joint law of (accepted length, emitted token) per case by a G-test, greedy certainty, "
                    "inputs unchanged. Exit status 0 if every check passed, 1 otherwise.")
    ap.add_argument("--verifier", default="reference",
                    help="'reference' (float64, torch only), "
                         f"{', '.join(sorted(PACKAGE_VERIFIERS))} (spec-verify's ops, loaded with kernels), "
                         "or module:function, a callable verify(target_probs, draft_probs, draft_tokens, generator) "
                         "-> (n_accepted, next_token)")
    ap.add_argument("--interface", choices=["probs", "uniforms", "batch", "global-rng", "logits"],
                    help="how the callable is called: probs (the interface above, default), uniforms "
                         "(f(p, q, tokens, uniforms)), batch (f over [B, ...] tensors), global-rng (f(p, q, tokens) "
                         "drawing from torch's global generator), logits (f(p, q, tokens, generator, **warp) on logits)")
    ap.add_argument("--rounds", type=int, default=20_000, help="rounds per law case (default 20000)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    ap.add_argument("--method", choices=["token", "block"], default="token", help="the rule (default token)")
    ap.add_argument("--checks", nargs="+", help="run only these checks (case names, or greedy)")
    ap.add_argument("--no-draft-rows", action="store_true", help="leave out the cases with draft rows")
    ap.add_argument("--no-one-hot", action="store_true", help="leave out one-hot drafts (draft_probs=None)")
    ap.add_argument("--no-half", action="store_true", help="leave out float16 and bfloat16 rows")
    ap.add_argument("--warps", nargs="*", choices=list(WARPS), default=list(WARPS),
                    help="logits interface: the warping parameters the verifier takes (default all)")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    """Run the suite as the command line asks; print the report; 0 if it passed, else 1."""
    args = parser().parse_args(argv)
    verify, interface = resolve(args.verifier, args.interface)
    common = dict(rounds=args.rounds, seed=args.seed, method=args.method, checks=args.checks, name=args.verifier)
    if interface == "logits":
        report = check_logits_verifier(verify, warps=args.warps, **common)
    else:
        wrap = {"probs": lambda f: f, "uniforms": adapters.with_uniforms, "batch": adapters.from_batch,
                "global-rng": adapters.seeding_global_rng}[interface]
        report = check_verifier(wrap(verify), draft_rows=not args.no_draft_rows, one_hot=not args.no_one_hot,
                                half=not args.no_half, **common)
    print(report)
    return 0 if report.passed else 1
