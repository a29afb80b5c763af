"""The conformance suite (spec_verify.testing) tested: exact verifiers pass, named faults fail.

Each fault is a naive PyTorch verifier with one mistake (the mistakes peers have shipped):
the residual without max(0, .), the bonus token from the wrong row, p/q on unnormalised rows,
an off-by-one in the accepted count, an out-of-range token (one element read past the row),
the residual written over the draft rows, a warped target with an unwarped draft. Each must
fail at the suite's default sample size (ROUNDS rounds per case, seed 0, p < 1e-8 fails). The
fault tests run only the case that catches the fault: a case's draws depend only on the run's
seed and the case's name (run.case_seed), so that case's verdict is the one the full default
run gives. The same naive verifier without the mistake passes the same cases, so each
failure is the fault's doing.
Null hypothesis of every law check: the counts of (N, x) are multinomial with the law of
testing/law.py; a correct verifier fails a full run with probability < 2e-7.
"""
from __future__ import annotations

import pytest
import torch

FAULTS = ["no_max", "bonus_from_wrong_row", "unnormalised_ratio", "off_by_one", "out_of_range", "residual_over_draft"]
CAUGHT_BY = {"no_max": "smooth", "bonus_from_wrong_row": "identical", "unnormalised_ratio": "unnormalised",
             "off_by_one": "smooth", "out_of_range": "smooth", "residual_over_draft": "smooth"}


def _sample(weights: torch.Tensor, u: float) -> int:
    csum = torch.cumsum(weights, 0)
    index = int(torch.searchsorted(csum, torch.tensor([u * float(csum[-1])], dtype=csum.dtype), right=True)[0])
    return min(index, weights.numel() - 1)


def naive(fault: str = ""):
    """Token-wise speculative sampling written out in PyTorch, with `fault` (one of FAULTS) or none."""

    def verify(target, draft, tokens, generator):
        k, vocab = target.shape[0] - 1, target.shape[1]
        u = torch.rand(k + 1, dtype=torch.float64, generator=generator)
        p = target.double()
        q = None if draft is None else draft.double()
        if fault != "unnormalised_ratio":
            p = p / p.sum(-1, keepdim=True)
            q = None if q is None else q / q.sum(-1, keepdim=True)
        tokens = torch.as_tensor(tokens, dtype=torch.int64)
        positions = torch.arange(k)
        p_t = p[positions, tokens]
        q_t = torch.ones(k, dtype=torch.float64) if q is None else q[positions, tokens]
        rejected = (~(u[:k] * q_t < p_t)).nonzero()
        if rejected.numel():
            i, t = int(rejected[0]), int(tokens[int(rejected[0])])
            if q is None:
                residual = p[i].clone()
                residual[t] = 0.0
            elif fault == "no_max":
                residual = p[i] - q[i]
            elif fault == "out_of_range":  # reads one element past the row: x = V can come out
                flat_p = torch.cat([p.flatten(), torch.zeros(1, dtype=p.dtype)])
                residual = (flat_p[i * vocab: (i + 1) * vocab + 1] - torch.cat([q[i], q.new_zeros(1)])).clamp(min=0)
            elif fault == "residual_over_draft":  # the residual stored over the caller's draft row
                torch.sub(target[i], draft[i], out=draft[i]).clamp_(min=0)
                residual = (p[i] - q[i]).clamp(min=0)
            else:
                residual = (p[i] - q[i]).clamp(min=0)
            if float(residual.sum()) <= 0:
                residual = p[i]
            x = _sample(residual, float(u[k]))
            return (i + 1 if fault == "off_by_one" else i), x
        row = k - 1 if fault == "bonus_from_wrong_row" and k > 0 else k
        return k, _sample(p[row], float(u[k]))

    verify.__name__ = f"naive[{fault or 'exact'}]"
    return verify


def test_every_fault_is_listed():
    assert sorted(CAUGHT_BY) == sorted(FAULTS)


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_is_caught_at_default_sample_size(sv, fault):
    case = CAUGHT_BY[fault]
    report = sv.testing.check_verifier(naive(fault), checks=[case], greedy=False, shrink=fault == "no_max")
    assert not report.passed, f"{fault} passed:\n{report}"
    failed = {c.name for c in report.failures}
    if fault == "residual_over_draft":
        assert "inputs" in failed, report
        assert "draft_probs" in report["inputs"].message
    else:
        assert f"law/{case}" in failed, report
    if fault == "out_of_range":
        assert "next_token = 8 is outside the vocabulary [0, V) = [0, 8)" in report[f"law/{case}"].message
    failure = report.failures[0]
    assert failure.message.startswith(f"check '{failure.name}'"), failure.message
    assert str(report).count("FAIL") >= 1
    if fault == "no_max":
        # Shrunk to the smallest failing prefix: K = 1 (K = 0 has no rejection), with what the
        # law says there (the negative residual puts mass on a cell the law forbids).
        smallest = report["law/smooth"].smallest
        assert smallest.k == 1 and smallest.vocab == 8
        assert "the law forbids (N = 0, x = " in smallest.law_says, smallest.law_says


def test_exact_naive_verifier_passes_the_cases_that_catch_faults(sv):
    """The faults' base without a fault passes their cases: the failures above are the faults'."""
    report = sv.testing.check_verifier(naive(), checks=sorted(set(CAUGHT_BY.values())), greedy=False)
    assert report.passed, report


def _warped_target_unwarped_draft(sv):
    def verify(target_logits, draft_logits, tokens, generator, **warp):
        p = sv.warp(target_logits, **warp)
        q = (draft_logits.double() - draft_logits.max()).exp().float()  # the mistake: the draft is not warped
        return naive()(p, q, tokens, generator)
    return verify


def test_warped_target_with_unwarped_draft_is_caught(sv):
    report = sv.testing.check_logits_verifier(_warped_target_unwarped_draft(sv), checks=["top_k"], greedy=False,
                                              shrink=False)
    assert not report.passed and report["law/top_k"].p_value < 1e-8, report


def test_exact_logits_verifier_passes_top_k(sv):
    def verify(target_logits, draft_logits, tokens, generator, **warp):
        return naive()(sv.warp(target_logits, **warp), sv.warp(draft_logits, **warp), tokens, generator)
    assert sv.testing.check_logits_verifier(verify, checks=["top_k"], greedy=False).passed


def test_verdicts_are_reproducible(sv):
    """The same seed gives the same counts and p-values; another seed other counts."""
    run = lambda seed: sv.testing.check_verifier(sv.accept, rounds=2000, seed=seed, checks=["smooth", "one_hot_fixed"])
    a, b, c = run(3), run(3), run(4)
    for name in ("law/smooth", "law/one_hot_fixed"):
        assert torch.equal(a[name].counts, b[name].counts) and a[name].p_value == b[name].p_value
        assert not torch.equal(a[name].counts, c[name].counts)


@pytest.mark.parametrize("bad, expect", [
    (lambda p, q, t, g: (_ for _ in ()).throw(RuntimeError("boom")), "verify raised RuntimeError: boom (call 1)"),
    (lambda p, q, t, g: (0.0, 1), "n_accepted is float (0.0); expected an int"),
    (lambda p, q, t, g: torch.tensor([0, 1]), "returned Tensor tensor([0, 1]); expected a pair (n_accepted, next_token)"),
    (lambda p, q, t, g: None, "returned NoneType None; expected a pair"),
    (lambda p, q, t, g: (True, 1), "n_accepted is a bool (True); expected an int"),
    (lambda p, q, t, g: (0, torch.tensor(1.5)), "next_token is a tensor of shape [] and dtype torch.float32"),
])
def test_bad_verifier_gets_a_message_naming_the_check(sv, bad, expect):
    report = sv.testing.check_verifier(bad, rounds=100, checks=["smooth", "greedy"])
    assert not report.passed
    law = report["law/smooth"]
    assert law.message.startswith("check 'law/smooth': ") and expect in law.message, law.message
    assert not report["greedy"].passed and "the verifier gave" in report["greedy"].smallest.law_says


def test_options_are_checked(sv):
    with pytest.raises(TypeError, match="verify must be callable"):
        sv.testing.check_verifier("accept")
    with pytest.raises(ValueError, match="rounds must be at least 100"):
        sv.testing.check_verifier(sv.accept, rounds=10)
    with pytest.raises(ValueError, match=r"checks names unknown checks \['smoth'\]"):
        sv.testing.check_verifier(sv.accept, checks=["smoth"])
    with pytest.raises(ValueError, match="warps must be a subset"):
        sv.testing.check_logits_verifier(sv.accept_logits, warps=("typical_p",))


# ---- the package's verifiers pass the default run -------------------------------------------

def _ragged(sv):
    """verify_batch_probs (vLLM's ragged layout) behind the suite's batch form [B, ...]."""
    def verify(target, draft, tokens, generator):
        b, k = tokens.shape
        cu = torch.arange(1, b + 1) * k
        out, n = sv.verify_batch_probs(target.reshape(-1, target.shape[-1]), tokens.reshape(-1), cu,
                                       draft_probs=None if draft is None else draft.reshape(-1, draft.shape[-1]),
                                       generator=generator)
        return n, out[torch.arange(b), n]
    return verify


@pytest.mark.slow
@pytest.mark.parametrize("which", ["accept", "accept_with_uniforms", "block", "verify_batch_probs", "reference"])
def test_package_verifiers_pass(sv, which):
    t = sv.testing
    if which == "accept":
        report = t.check_verifier(sv.accept)
    elif which == "accept_with_uniforms":
        report = t.check_verifier(t.with_uniforms(sv.accept_with_uniforms))
    elif which == "block":
        report = t.check_verifier(lambda p, q, tok, g: sv.accept(p, q, tok, g, method="block"), method="block")
    elif which == "verify_batch_probs":
        report = t.check_verifier(t.from_batch(_ragged(sv)))
    else:
        report = t.check_verifier(t.reference_accept)
    assert report.passed, report
    assert report.false_alarm_rate < 1e-6


@pytest.mark.slow
def test_accept_logits_passes(sv):
    report = sv.testing.check_logits_verifier(lambda p, q, t, g, **w: sv.accept_logits(p, q, t, generator=g, **w))
    assert report.passed, report


def test_block_law_catches_token_wise(sv):
    """Power of the block law: token-wise verification is not block verification (its law
    differs visibly on smooth rows) and must fail the block cases."""
    report = sv.testing.check_verifier(sv.accept, method="block", checks=["smooth"], shrink=False)
    assert not report.passed, report


def test_detectable_bias_is_honest(sv):
    """The stated power holds: counts drawn from the smooth case's law with position 0's
    acceptance probability biased up or down by the stated detectable amount are rejected
    (p < 1e-8) in at least 95 of 100 runs each (the statement says 99%: a binomial(100, 0.99)
    falls below 95 with probability 5e-4), and with a third of that bias in fewer than half."""
    t = sv.testing
    case = [c for c in t.cases.probability_cases(one_hot=False, half=False) if c.name == "smooth"][0]
    bias = t.law.detectable_bias(case.law, t.ROUNDS, t.P_MIN)
    assert 0.02 < bias < 0.05
    g = torch.Generator().manual_seed(5)
    for delta, low, high in ((bias, 95, 100), (-bias, 95, 100), (bias / 3, 0, 49), (-bias / 3, 0, 49)):
        alt = t.law.biased_acceptance(case.law, delta).flatten()
        rejected = 0
        for _ in range(100):
            counts = torch.bincount(torch.multinomial(alt, t.ROUNDS, replacement=True, generator=g),
                                    minlength=alt.numel())
            rejected += t.law.g_test(counts, case.law)[2] < t.P_MIN
        assert low <= rejected <= high, (delta, rejected)


def test_testing_needs_no_op(sv):
    """The folder imports nothing outside itself but the standard library and torch, so it runs
    vendored alone: loaded by path, its reference verifier passes a case."""
    import ast
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(sv.testing.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, f"{path.name} imports from outside testing/"
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for name in names:
                    assert name.split(".")[0] in set(sys.stdlib_module_names) | {"torch", "__future__"}, name
    spec = importlib.util.spec_from_file_location("vendored_testing", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["vendored_testing"] = module
    try:
        spec.loader.exec_module(module)
        assert module.check_verifier(module.reference_accept, rounds=3000, checks=["masked", "greedy"]).passed
    finally:
        for name in [n for n in sys.modules if n == "vendored_testing" or n.startswith("vendored_testing.")]:
            del sys.modules[name]


def test_command_line_from_the_built_variant(sv):
    """`python <variant>/testing` runs from the built package: --help, and a short run of the
    float64 reference that passes (exit 0) and prints the report."""
    import subprocess
    import sys
    from pathlib import Path

    folder = str(Path(sv.__file__).parent / "testing")
    out = subprocess.run([sys.executable, folder, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--verifier" in out.stdout, out.stderr
    out = subprocess.run([sys.executable, folder, "--rounds", "500", "--checks", "smooth", "greedy"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "reference: PASSED" in out.stdout, out.stdout + out.stderr
