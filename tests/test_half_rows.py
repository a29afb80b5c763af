"""float16 and bfloat16 rows (DESIGN.md, "Half rows"): every op on half rows returns exactly
what it returns on the same rows converted to float32 (`.float()`, an exact conversion), on
every path, errors included; and the law tests once on bfloat16 rows.
"""
from __future__ import annotations

import pytest
import torch

import test_law
from law import g_test, joint_law

HALVES = [torch.float16, torch.bfloat16]
V = 300  # more than one mass block and not a multiple of any vector width


def special_rows(rows: int, dtype, seed: int, logits: bool = False) -> torch.Tensor:
    """Random rows with the type's specials spliced in: denormals, -0.0, the largest finite
    value, and (for logits) -inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, V, generator=g) ** 4
    if logits:
        x = (x - 0.3) * 20
    info = torch.finfo(dtype)
    x[:, 7] = info.tiny / 8  # subnormal in both half types
    x[:, 8] = -0.0
    x[:, 9] = 0.0
    if logits:
        x[:, 10] = float("-inf")
        x[:, 11] = info.max / 4
    else:
        x[:, 10] = info.max / 64
        x[:, 11] = info.tiny  # the smallest normal
    return x.to(dtype)


def same(a, b):
    return a == b if not isinstance(a, torch.Tensor) else (a.dtype == b.dtype and torch.equal(a, b))


@pytest.mark.parametrize("dtype", HALVES, ids=["f16", "bf16"])
def test_probability_ops_equal_float32(sv, isa, dtype):
    k = 4
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    for seed in range(20):
        p = special_rows(k + 1, dtype, seed)
        q = special_rows(k, other if seed % 2 else dtype, seed + 100)
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, V, (k,), generator=g)
        tokens[: seed % (k + 1)] = p.float()[: seed % (k + 1)].argmax(-1)
        assert same(sv.verify_greedy(p, tokens), sv.verify_greedy(p.float(), tokens))
        u = torch.rand(k + 1, dtype=torch.float64, generator=g)
        for method in ("token", "block"):
            for draft in (q, None):
                want = sv.accept_with_uniforms(p.float(), None if draft is None else draft.float(), tokens, u,
                                               method=method)
                assert sv.accept_with_uniforms(p, draft, tokens, u, method=method) == want
            g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
            assert sv.accept(p, q, tokens, g1, method=method) == sv.accept(p.float(), q.float(), tokens, g2,
                                                                         method=method)
        assert torch.equal(sv.ops._row_masses(p), sv.ops._row_masses(p.float()))


@pytest.mark.parametrize("dtype", HALVES, ids=["f16", "bf16"])
def test_logits_ops_equal_float32(sv, isa, dtype):
    k = 3
    for seed in range(12):
        x = special_rows(k + 1, dtype, seed, logits=True)
        d = special_rows(k, dtype, seed + 50, logits=True)
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, V, (k,), generator=g)
        u = torch.rand(k + 1, dtype=torch.float64, generator=g)
        for params in (dict(temperature=0.7), dict(temperature=1.0, top_p=0.8), dict(top_k=5, min_p=0.01),
                       dict(temperature=0.0)):
            warped = sv.warp(x, **params)
            assert warped.dtype == torch.float32 and torch.equal(warped, sv.warp(x.float(), **params))
            assert torch.equal(sv.sample_with_uniforms(x, u, **params), sv.sample_with_uniforms(x.float(), u, **params))
            for method in ("token", "block"):
                for draft in (d, None):
                    want = sv.accept_logits_with_uniforms(x.float(), None if draft is None else draft.float(), tokens,
                                                          u, method=method, **params)
                    assert sv.accept_logits_with_uniforms(x, draft, tokens, u, method=method, **params) == want


BAD = [("nan", float("nan"), "is NaN"), ("+inf", float("inf"), "is infinite"), ("negative", -0.5, "is negative")]


@pytest.mark.parametrize("dtype", HALVES, ids=["f16", "bf16"])
@pytest.mark.parametrize("name, value, what", BAD, ids=[b[0] for b in BAD])
def test_bad_half_rows_raise_as_float32_does(sv, isa, dtype, name, value, what):
    p = special_rows(3, dtype, 1)
    q = special_rows(2, dtype, 2)
    p[1, 123] = value
    tokens = p.float()[:2].argmax(-1)  # row 0 accepted always (equal rows), so row 1 is read
    q[0] = p[0]
    u = torch.zeros(3, dtype=torch.float64)
    messages = []
    for rows, draft in ((p, q), (p.float(), q.float())):
        with pytest.raises(ValueError) as e:
            sv.accept_with_uniforms(rows, draft, tokens, u)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and f"target_probs[1, 123] = " in messages[0] and what in messages[0]
    if name == "nan":
        for rows in (p, p.float()):
            with pytest.raises(ValueError, match=r"target_probs\[1, 123\] = nan is NaN"):
                sv.verify_greedy(rows, tokens)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smooth", "spiky", "mixed_positions"])
def test_joint_law_on_bfloat16_rows(sv, name):
    """test_law's joint-law test, once, with a bfloat16 target and a float16 draft: the law
    from the rows as stored (converted exactly). Null hypothesis and threshold as there
    (60000 rounds, G-test, p > 1e-8)."""
    p, q = test_law.family(name)
    p, q = p.bfloat16(), q.half()
    counts = test_law.run_rounds(sv, p, q, test_law.ROUNDS, seed=4242)
    assert g_test(counts, joint_law(p.float(), q.float()))[2] > test_law.P_MIN
