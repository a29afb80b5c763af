"""accept_logits and sample against the exact law of speculative sampling on warped rows.

Each family fixes target logits (K+1 rows) and draft logits (K rows) and the warping
parameters. Every round draws its draft tokens with `sample` from the draft's logits (so
from the draft's warped rows), runs `accept_logits` with the same parameters, and counts the
pair (N, emitted token) over the (K+1)*V cells.
Null hypothesis: the counts are multinomial with the analytic law P(N = n, x) of
tests/law.py computed in float64 from the warped rows of tests/warp_reference.py (p_i the
target's, q_i the draft's).
Sample size: ROUNDS rounds per family and path. Test: G-test (cells expecting fewer than 5
pooled). Threshold: p < P_MIN = 1e-8 fails (a correct kernel fails a run of these tests with
probability < 1e-6; seeds are fixed, so a run is repeatable).
Power: with the draft tokens drawn from the draft's rows warped with another top-p (1, no
cut) while accept_logits warps both with the family's, the same test must fail at
p < P_MIN.
"""
from __future__ import annotations

import pytest
import torch

import warp_reference as ref
from law import g_test, joint_law

ROUNDS = 40_000
P_MIN = 1e-8
K, V = 3, 8


def family(name: str):
    """(target logits [K+1, V], draft logits [K, V], params dict)."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    p = torch.randn(K + 1, V, generator=g) * 0.7
    q = p[:K] + torch.randn(K, V, generator=g) * 0.5
    if name == "temperature":
        params = dict(temperature=0.7)
    elif name == "top_k":
        params = dict(temperature=1.0, top_k=3)
    elif name == "top_p_cuts_the_draft_token":
        # The draft's favourite token (5) is outside the target's top-p set at every
        # position: whenever the draft proposes it, it is rejected.
        p[:, :3] += 1.0
        p[:, 5] -= 1.0
        q[:, 5] += 2.0
        params = dict(temperature=1.0, top_p=0.7)
    elif name == "min_p":
        params = dict(temperature=1.2, min_p=0.4)
    elif name == "kept_sets_differ":
        # Target and draft favour different halves: their top-p sets barely overlap.
        p[:, :4] += 1.0
        q[:, 4:] += 1.0
        params = dict(temperature=0.9, top_p=0.6)
    elif name == "everything":
        params = dict(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05)
    else:
        raise KeyError(name)
    return p.float().contiguous(), q.float().contiguous(), params


FAMILIES = ["temperature", "top_k", "top_p_cuts_the_draft_token", "min_p", "kept_sets_differ", "everything"]


def warped(logits, params):
    full = {**dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), **params}
    w = ref.warp(logits, full["temperature"], full["top_k"], full["top_p"], full["min_p"])
    assert float(w.margin.min()) > ref.CLEAR, "a cutoff lies within rounding of its boundary"
    return w


def run_rounds(sv, p, q, params, rounds, seed, draft_params=None):
    """Counts of (N, x): draft tokens drawn by `sample` with `draft_params` (default: the
    same parameters accept_logits uses)."""
    g = torch.Generator().manual_seed(seed)
    tokens = sv.sample(q.repeat(rounds, 1), generator=g, **(draft_params or params)).view(rounds, K)
    cells = []
    for row in tokens:
        n, x = sv.accept_logits(p, q, row, generator=g, **params)
        cells.append(n * V + x)
    return torch.bincount(torch.tensor(cells), minlength=(K + 1) * V).reshape(K + 1, V)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_joint_law_on_warped_rows(sv, isa, name):
    p, q, params = family(name)
    wp, wq = warped(p, params), warped(q, params)
    # The kernel's kept sets are the reference's.
    assert torch.equal(sv.warp(p, **params) > 0, wp.probs > 0)
    assert torch.equal(sv.warp(q, **params) > 0, wq.probs > 0)
    law = joint_law(wp.probs, wq.probs)
    counts = run_rounds(sv, p, q, params, ROUNDS, seed=77)
    g, df, pval = g_test(counts, law)
    assert pval > P_MIN, f"{name}: G = {g:.1f}, df = {df}, p = {pval:.3g}\ncounts:\n{counts}\nexpected:\n{law * ROUNDS}"


def test_families_exercise_what_they_claim():
    p, q, params = family("top_p_cuts_the_draft_token")
    wp, wq = warped(p, params), warped(q, params)
    assert (wp.probs[:K, 5] == 0).all() and (wq.probs[:, 5] > 0.15).all()
    p, q, params = family("kept_sets_differ")
    wp, wq = warped(p, params), warped(q, params)
    assert not torch.equal(wp.probs[:K] > 0, wq.probs > 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["top_p_cuts_the_draft_token", "kept_sets_differ"])
def test_drafts_warped_differently_fail(sv, name):
    p, q, params = family(name)
    law = joint_law(warped(p, params).probs, warped(q, params).probs)
    counts = run_rounds(sv, p, q, params, ROUNDS, seed=78, draft_params=dict(params, top_p=1.0))
    g, df, pval = g_test(counts, law)
    assert pval < P_MIN, f"{name}: drafts from a differently warped row passed: G = {g:.1f}, p = {pval:.3g}"


SAMPLE_PARAMS = [dict(temperature=0.7), dict(top_k=10), dict(temperature=1.3, top_p=0.8),
                 dict(min_p=0.1), dict(temperature=0.9, top_k=30, top_p=0.95, min_p=0.02)]


@pytest.mark.parametrize("params", SAMPLE_PARAMS, ids=[",".join(f"{k}={v}" for k, v in p.items()) for p in SAMPLE_PARAMS])
def test_sample_follows_the_warped_row(sv, params):
    """Null hypothesis: 100000 tokens drawn by one `sample` call on copies of one row are
    i.i.d. from `warp`'s row (and from the float64 reference row). G-test, cells expecting
    fewer than 5 pooled; fails at p < 1e-8. Power: the same counts against the row warped
    with top-p 0.5 must fail."""
    g = torch.Generator().manual_seed(90)
    x = torch.randn(50, generator=g) * 2
    draws = 100_000
    tokens = sv.sample(x.expand(draws, 50).contiguous(), generator=g, **params)
    counts = torch.bincount(tokens, minlength=50)
    full = {**dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), **params}
    want = ref.warp(x, *full.values())
    assert float(want.margin[0]) > ref.CLEAR
    assert torch.equal(sv.warp(x, **params) > 0, want.probs[0] > 0)
    for law in (sv.warp(x, **params).double(), want.probs[0]):
        g_stat, df, pval = g_test(counts, law)
        assert pval > 1e-8, f"G = {g_stat:.1f}, df = {df}, p = {pval:.3g}"
    other = sv.warp(x, **dict(params, top_p=0.5)).double()
    assert g_test(counts, other)[2] < 1e-8
