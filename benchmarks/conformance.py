#!/usr/bin/env python3
"""The conformance suite (spec_verify.testing) run over the verifiers installable here, each
through a small adapter, with the results table written to benchmarks/results/conformance.md.

    LOCAL_KERNELS=phanerozoic/spec-verify=$PWD/build .venv/bin/python benchmarks/conformance.py \\
        [--only NAME ...] [--rounds N] [--markdown benchmarks/results/conformance.md]
    # llama-cpp-python's verifier too: PYTHONPATH=$(scripts/llama_env.sh site) in front

Verifiers (`--only` takes these names):
  sv.accept, sv.accept(block), sv.accept_logits, sv.verify_batch_probs   this package's ops
  torch_reference.accept       the seed's formulas written out in PyTorch (benchmarks/torch_reference.py)
  transformers                 transformers.generation.utils._speculative_sampling
  transformers(ensemble=0.5)   the same with assistant_ensemble_weight=0.5 (relaxes the law on purpose)
  llama-cpp-python             Llama.generate's draft check (one-hot drafts; benchmarks/conformance_llama.py)
"""
from __future__ import annotations

import argparse
import inspect
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("LOCAL_KERNELS", f"phanerozoic/spec-verify={ROOT / 'build'}")


def load_kernel():
    from kernels import get_kernel

    return get_kernel("phanerozoic/spec-verify", version=1, trust_remote_code=True)


# ---- transformers ----------------------------------------------------------------------------

def _logs(rows: torch.Tensor) -> torch.Tensor:
    """float32 logits whose softmax is the row's normalised probabilities (log 0 = -inf: masked);
    float32 as assisted generation casts the target's logits before this function sees them."""
    return rows.float().log()


def transformers_verifier(ensemble_weight=None):
    """`_speculative_sampling(candidate_input_ids [1, L], candidate_logits [1, K, V], K,
    new_logits [1, K+1, V], assistant_ensemble_weight)` -> (valid_tokens [1, n+1], n_matches),
    drawing from torch's global generator, as the suite's verify(p, q, tokens)."""
    from transformers.generation.utils import _speculative_sampling

    def verify(target, draft, tokens):
        k = tokens.shape[0]
        extra = {} if ensemble_weight is None else {"assistant_ensemble_weight": ensemble_weight}
        valid, n = _speculative_sampling(tokens[None], _logs(draft)[None], k, _logs(target)[None], **extra)
        return int(n), int(valid[0, -1])

    verify.__name__ = "transformers" if ensemble_weight is None else f"transformers(ensemble={ensemble_weight})"
    return verify


def transformers_has_ensemble() -> bool:
    from transformers.generation.utils import _speculative_sampling

    return "assistant_ensemble_weight" in inspect.signature(_speculative_sampling).parameters


# ---- this package's batch op behind the suite's batch form ------------------------------------

def ragged(sv):
    def verify(target, draft, tokens, generator):
        b, k = tokens.shape
        out, n = sv.verify_batch_probs(target.reshape(-1, target.shape[-1]), tokens.reshape(-1),
                                       torch.arange(1, b + 1) * k,
                                       draft_probs=None if draft is None else draft.reshape(-1, draft.shape[-1]),
                                       generator=generator)
        return n, out[torch.arange(b), n]
    verify.__name__ = "verify_batch_probs"
    return verify


def peers(sv, t):
    """(name, interface, run(rounds) -> Report) for every verifier installed here."""
    import torch_reference

    out = [
        ("sv.accept", "probs + generator", lambda r: t.check_verifier(sv.accept, rounds=r, name="sv.accept")),
        ("sv.accept(block)", "probs + generator, method='block'",
         lambda r: t.check_verifier(lambda p, q, tok, g: sv.accept(p, q, tok, g, method="block"), rounds=r,
                                    method="block", name="sv.accept(block)")),
        ("sv.accept_logits", "logits + warping + generator",
         lambda r: t.check_logits_verifier(lambda p, q, tok, g, **w: sv.accept_logits(p, q, tok, generator=g, **w),
                                           rounds=r, name="sv.accept_logits")),
        ("sv.verify_batch_probs", "ragged batch (from_batch)",
         lambda r: t.check_verifier(t.from_batch(ragged(sv)), rounds=r, name="sv.verify_batch_probs")),
        ("torch_reference.accept", "probs + generator (draft rows only)",
         lambda r: t.check_verifier(torch_reference.accept, rounds=r, one_hot=False, name="torch_reference.accept",
                                    notes=["one-hot drafts not supported (draft_probs is required)"])),
    ]
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers not installed: skipped")
    else:
        out.append(("transformers", "logits, global RNG (seeding_global_rng), draft rows only",
                    lambda r: t.check_verifier(t.seeding_global_rng(transformers_verifier()), rounds=r, one_hot=False,
                                               name="transformers",
                                               notes=["one-hot drafts not supported (candidate logits required)"])))
        if transformers_has_ensemble():
            out.append(("transformers(ensemble=0.5)", "logits, global RNG, assistant_ensemble_weight=0.5",
                        lambda r: t.check_verifier(
                            t.seeding_global_rng(transformers_verifier(0.5)), rounds=r, one_hot=False,
                            name="transformers(ensemble=0.5)",
                            notes=["assistant_ensemble_weight relaxes the law on purpose (DIVERSE static ensemble: "
                                   "accepts with min(1, 1 - w + w p/q)); the law checks are expected to fail"])))
    try:
        import conformance_llama
    except ImportError as e:
        print(f"llama-cpp-python not importable ({e}): skipped")
    else:
        out.append(("llama-cpp-python", conformance_llama.INTERFACE,
                    lambda r: conformance_llama.check(t, rounds=r)))
    return out


READING = [
    "- A pass means every count was consistent with the exact law at p >= 1e-8; each law check's "
    "99%-power bias (0.010 to 0.037 at 20000 rounds, in the report) is how large a bias in an acceptance "
    "probability had to be to be seen (DESIGN.md, \"The conformance suite\").",
    "- transformers' `_speculative_sampling` without `assistant_ensemble_weight` keeps the law on every case "
    "it can take (draft rows; rows cast to float32 as assisted generation does).",
    "- With `assistant_ensemble_weight=0.5` it does not, on purpose (DIVERSE's relaxed verification, "
    "documented as a controlled bias): it accepts a draft token with probability min(1, 1 - w + w p/q), "
    "so a token the target gives probability 0 (masked, cut, or not the argmax of a one-hot row) is "
    "still accepted half the time: the disjoint case emits tokens the law forbids, and the greedy check "
    "fails (K = 1, V = 2: target rows [0, 1], [1, 0], draft token 0; the law allows only (0, 1), it "
    "gave (1, 0)). The identical and K = 0 cases pass, where the relaxation changes nothing.",
    "- llama-cpp-python's draft check (keep a draft token while the sampled token equals it) is exact "
    "for one-hot drafts, the only drafts it has.",
    "- Not run: vLLM's rejection sampler. PyPI's vllm 0.34.0 is a CUDA 13 wheel requiring torch 2.14.0 "
    "and flashinfer; a CPU build is a source build (well over the 10 minutes allowed), not attempted.",
]


def markdown(results, rounds, machine) -> str:
    lines = ["# Conformance: verifiers against the exact law", "",
             "`benchmarks/conformance.py` runs `spec_verify.testing` over every verifier installable here, each "
             "through a small adapter (README, \"Checking a verifier\"). "
             f"Each law case: {rounds} rounds, a G-test against the exact law, fails at p < 1e-8; seed 0. "
             f"Machine: {machine}.", "",
             "| verifier | interface | verdict | checks passed | failed checks | time (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, interface, report in results:
        failed = ", ".join(c.name for c in report.failures) or "-"
        lines.append(f"| {name} | {interface} | {'pass' if report.passed else '**FAIL**'} | "
                     f"{len(report.checks) - len(report.failures)}/{len(report.checks)} | {failed} | "
                     f"{report.seconds:.0f} |")
    lines += ["", "## Every check", ""]
    names = []
    for _, _, report in results:
        names += [c.name for c in report.checks if c.name not in names]
    lines.append("| check | " + " | ".join(n for n, _, _ in results) + " |")
    lines.append("| --- |" + " --- |" * len(results))
    for check in names:
        cells = []
        for _, _, report in results:
            try:
                c = report[check]
            except KeyError:
                cells.append("")
                continue
            p = f" (p = {c.p_value:.2g})" if c.p_value is not None else ""
            cells.append(("pass" if c.passed else "**FAIL**") + p)
        lines.append(f"| {check} | " + " | ".join(cells) + " |")
    lines += ["", "## Reading it", "", *READING, "", "## Notes per verifier", ""]
    for name, _, report in results:
        if report.notes:
            lines.append(f"- {name}: " + "; ".join(report.notes))
    lines += ["", "## Failures, with the smallest failing case"]
    for name, _, report in results:
        for c in report.failures:
            lines += ["", f"### {name}: {c.name}", "", "```", str(c), "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", help="run only these verifiers")
    ap.add_argument("--rounds", type=int, default=20_000)
    ap.add_argument("--markdown", help="write the results table here")
    args = ap.parse_args()
    # Every verifier here works on rows of a few dozen values: one thread. (On a loaded machine
    # torch's two intra-op threads made one softmax of 24 values take 17 ms instead of 1.5 us.)
    torch.set_num_threads(1)
    sv = load_kernel()
    t = sv.testing
    results = []
    for name, interface, run in peers(sv, t):
        if args.only and name not in args.only:
            continue
        start = time.monotonic()
        report = run(args.rounds)
        print(report, flush=True)
        print(f"{name}: {time.monotonic() - start:.1f} s\n", flush=True)
        results.append((name, interface, report))
    if args.markdown:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   platform.machine()) if Path("/proc/cpuinfo").exists() else platform.machine()
        machine = (f"{cpu}, {os.cpu_count()} cores shared with other jobs (load 4 to 16), one torch thread, "
                   f"torch {torch.__version__}")
        try:
            import transformers
            machine += f", transformers {transformers.__version__}"
        except ImportError:
            pass
        Path(args.markdown).write_text(markdown(results, args.rounds, machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
