"""Every instruction-set path gives identical results; SPEC_VERIFY_ISA forces one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent


def each_path(sv, fn):
    results = {}
    for isa in sv.available_isas():
        sv._force_isa(isa)
        results[isa] = fn()
    sv._force_isa("")
    return results


@pytest.mark.parametrize("vocab,rounds", [(32000, 2000), (128256, 300)])
def test_paths_agree_on_random_rounds(sv, vocab, rounds):
    """Identical (n_accepted, next_token) for both ops on every path, same inputs and uniforms."""
    g = torch.Generator().manual_seed(vocab)
    k = 4
    logits = torch.randn(k + 1, vocab, generator=g) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=g), -1)
    # Unnormalised and sparse variants exercise the scaling and the fallbacks too.
    q[1] *= 1e6
    p[2, ::2] = 0
    tokens = torch.stack([torch.multinomial(q[i], rounds, replacement=True, generator=g) for i in range(k)], 1)
    uniforms = torch.rand(rounds, k + 1, dtype=torch.float64, generator=g)
    greedy_tokens = p[:k].argmax(-1).expand(rounds, k).clone()
    miss = torch.randint(0, k + 1, (rounds,), generator=g)
    for r in range(rounds):
        if miss[r] < k:
            greedy_tokens[r, miss[r]] = tokens[r, miss[r]]

    def run():
        return ([sv.accept_with_uniforms(p, q, tokens[r], uniforms[r]) for r in range(rounds)],
                [sv.verify_greedy(p, greedy_tokens[r]) for r in range(rounds)])

    results = each_path(sv, run)
    reference = results.pop("scalar")
    for isa, got in results.items():
        assert got == reference, f"{isa} differs from scalar"
    n_values = {n for n, _ in reference[0]}
    assert len(n_values) >= 3, "the rounds should end at several positions"


def test_negative_zeros_count_as_zeros(sv):
    """Rows whose zeros are -0.0 give, on every path, the rounds of the same rows with +0.0
    (the SIMD masses take such rows through a second pass; the pair mass hands them back)."""
    g = torch.Generator().manual_seed(7)
    k, vocab, rounds = 4, 32000, 300
    p = torch.softmax(torch.randn(k + 1, vocab, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(k, vocab, generator=g) * 3, -1)
    zeros_p = torch.rand(k + 1, vocab, generator=g) < 0.3
    zeros_q = torch.rand(k, vocab, generator=g) < 0.3
    zeros_q[0] = False  # position 0: -0.0 only in the target row; position 1: only in the draft
    zeros_p[1] = False
    tokens = torch.stack([torch.multinomial(q[i], rounds, replacement=True, generator=g) for i in range(k)], 1)
    uniforms = torch.rand(rounds, k + 1, dtype=torch.float64, generator=g)
    pos_p, pos_q = p.masked_fill(zeros_p, 0.0), q.masked_fill(zeros_q, 0.0)
    neg_p, neg_q = p.masked_fill(zeros_p, -0.0), q.masked_fill(zeros_q, -0.0)
    assert torch.signbit(neg_p).sum() == zeros_p.sum() and torch.signbit(neg_q).sum() == zeros_q.sum()

    def run(pp, qq):
        return [sv.accept_with_uniforms(pp, qq, tokens[r], uniforms[r]) for r in range(rounds)]

    want = each_path(sv, lambda: run(pos_p, pos_q))
    got = each_path(sv, lambda: run(neg_p, neg_q))
    assert got == want
    assert len({n for n, _ in want["scalar"]}) >= 2, "the rounds should end at several positions"


def test_paths_agree_on_masses(sv):
    g = torch.Generator().manual_seed(0)
    for vocab in [1, 15, 16, 17, 255, 256, 257, 1023, 1024, 1025, 32000, 32771, 151936]:
        rows = torch.rand(6, vocab, generator=g) ** 8
        rows[1] *= 1e30
        rows[2] *= 1e-30
        results = each_path(sv, lambda: sv.ops._row_masses(rows))
        for isa, masses in results.items():
            assert torch.equal(masses.view(torch.int64), results["scalar"].view(torch.int64)), (isa, vocab)
        assert torch.allclose(results["scalar"], rows.double().sum(1), rtol=1e-12)


def test_default_is_best_path(sv):
    assert sv.isa() == sv.available_isas()[0]
    assert sv.available_isas()[-1] == "scalar"


def run_with_isa(value: str) -> subprocess.CompletedProcess:
    code = ("import conftest; sv = conftest.load_kernel()\n"
            "try:\n    print('isa', sv.isa())\nexcept ValueError as e:\n    print('ValueError', e)\n")
    env = dict(os.environ, SPEC_VERIFY_ISA=value)
    return subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # one subprocess per path, each importing torch
def test_environment_variable_forces_a_path(sv):
    for isa in sv.available_isas():
        out = run_with_isa(isa)
        assert out.stdout.strip() == f"isa {isa}", out.stderr
    other = {"x86_64": "neon", "aarch64": "avx2"}.get(os.uname().machine, "neon")
    out = run_with_isa(other)
    assert f"ValueError spec_verify: SPEC_VERIFY_ISA asks for the '{other}' path" in out.stdout, out.stdout + out.stderr
    out = run_with_isa("fast")
    assert "ValueError spec_verify: SPEC_VERIFY_ISA = 'fast' is not a path" in out.stdout, out.stdout + out.stderr
    # A call that raises for the environment draws nothing: the generator is as it was.
    code = ("import conftest, torch; sv = conftest.load_kernel()\n"
            "g = torch.Generator().manual_seed(0); s = g.get_state(); p = torch.ones(3, 5)\n"
            "for call in (lambda: sv.accept(p, p[:2], [1, 2], g), lambda: sv.sample(p, generator=g),\n"
            "             lambda: sv.accept_logits(p, p[:2], [1, 2], generator=g)):\n"
            "    try:\n        call()\n    except ValueError:\n        print('unchanged', torch.equal(g.get_state(), s))\n")
    env = dict(os.environ, SPEC_VERIFY_ISA="fast")
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["unchanged", "True"] * 3, out.stdout + out.stderr
