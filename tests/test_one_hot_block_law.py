"""One-hot drafts and block verification against their exact laws (tests/law.py).

Rows: the position-dependent families of test_law.py (probabilities) and test_logits_law.py
(logits with warping). Each round draws its draft tokens t_i independently from rows r_i
(the family's draft rows, or one-hot rows that fix the tokens), runs the op, and counts
the pair (N, emitted token) over the (K+1)*V cells.
- One-hot drafts (draft rows None): null hypothesis P(N = n, x) = prod_{i<n} beta_i *
  p_n(x) * (1 - r_n(x)), beta_i = sum_t r_i(t) p_i(t) (law.one_hot_joint_law).
- Block verification (method="block", with draft rows or one-hot): null hypothesis the
  float64 mixture over every token tuple of the block law (law.block_joint_law).
Sample size: ROUNDS rounds per case. Test: G-test, cells expecting fewer than 5 pooled.
Threshold: p < P_MIN = 1e-8 fails; with about 60 cases a correct kernel fails a run with
probability < 1e-6. Seeds are fixed, so a run is repeatable.
Power: the same counts must be rejected (p < P_MIN) against the law of a plausible bug
wherever that law differs visibly (by more than 0.02 in some cell): for one-hot drafts, a
correction drawn from p_n with t_n left in; for block verification, h_n = rho_n (the
residual mass Z_n ignored).
These run on the active path only: every path is held bit for bit to the scalar reference
by the native tests (tests/native) and test_cross_arch.py, so the laws hold on all of them.
"""
from __future__ import annotations

import pytest
import torch

import test_law
import test_logits_law
from law import (acceptance_rates, block_joint_law, expected_accepted, g_test, mean_accepted, normalise,
                 one_hot_joint_law, one_hot_law_residual_with_token, one_hot_rates, reach_probabilities)

ROUNDS = 40_000
P_MIN = 1e-8
K, V = test_law.K, test_law.V
FIXED_TOKENS = [1, 5, 2]


def fixed_rows(tokens=FIXED_TOKENS):
    r = torch.zeros(len(tokens), V)
    r[torch.arange(len(tokens)), torch.tensor(tokens)] = 1.0
    return r


def draw_tokens(r, rounds, g):
    rn = normalise(r)
    return torch.stack([torch.multinomial(rn[i], rounds, replacement=True, generator=g)
                        for i in range(r.shape[0])], 1)


def counts_of(outcomes, k=K):
    cells = torch.tensor([n * V + x for n, x in outcomes])
    return torch.bincount(cells, minlength=(k + 1) * V).reshape(k + 1, V)


def run_probs(sv, p, q, r, method, seed, rounds=ROUNDS):
    """Counts of (N, x) from `accept(p, q, t, method=method)` with t_i ~ r_i."""
    g = torch.Generator().manual_seed(seed)
    tokens = draw_tokens(r, rounds, g)
    return counts_of(sv.accept(p, q, row, g, method=method) for row in tokens)


def wrong_h(n, rho, z):
    return rho


def check(counts, law, wrong=None, what=""):
    g, df, pval = g_test(counts, law)
    assert pval > P_MIN, f"{what}: G = {g:.1f}, df = {df}, p = {pval:.3g}\ncounts:\n{counts}\nexpected:\n{law * counts.sum()}"
    if wrong is not None and (wrong - law).abs().max() > 0.02:
        assert g_test(counts, wrong)[2] < P_MIN, f"{what}: the test cannot tell the law from a bug's"
        return True
    return False


# ---- one-hot drafts -------------------------------------------------------------------------

ONE_HOT_CASES = [(name, draws) for name in test_law.FAMILIES for draws in ("draft", "fixed")]


@pytest.mark.slow
@pytest.mark.parametrize("name, draws", ONE_HOT_CASES, ids=[f"{n}-{d}" for n, d in ONE_HOT_CASES])
def test_one_hot_joint_law(sv, name, draws):
    p, q = test_law.family(name)
    r = q if draws == "draft" else fixed_rows()
    counts = run_probs(sv, p, None, r, "token", seed=4321)
    check(counts, one_hot_joint_law(p, r), one_hot_law_residual_with_token(p, r), f"{name}, tokens from {draws}")


def test_one_hot_power_is_real():
    """The bug's law differs visibly on most families: the power check is not vacuous."""
    differs = 0
    for name, draws in ONE_HOT_CASES:
        p, q = test_law.family(name)
        r = q if draws == "draft" else fixed_rows()
        differs += bool((one_hot_law_residual_with_token(p, r) - one_hot_joint_law(p, r)).abs().max() > 0.02)
    assert differs >= 10


def test_one_hot_first_token_has_target_law(sv):
    """Whatever the proposals, a round's first token (accepted or drawn) has law p_0.
    Null hypothesis: first tokens ~ p_0; 40000 rounds, tokens from a draft unlike p; p > 1e-8."""
    g = torch.Generator().manual_seed(12)
    p, q = test_law.smooth(g, K + 1, 2.0), test_law.smooth(g, K, 2.0)
    tokens = draw_tokens(q, 40_000, g)
    first = []
    for row in tokens:
        n, x = sv.accept(p, None, row, g)
        first.append(int(row[0]) if n > 0 else x)
    assert g_test(torch.bincount(torch.tensor(first), minlength=V), normalise(p)[0])[2] > P_MIN


# ---- block verification ---------------------------------------------------------------------

BLOCK_CASES = [(name, drafts) for name in test_law.FAMILIES for drafts in ("rows", "one-hot")]


@pytest.mark.slow
@pytest.mark.parametrize("name, drafts", BLOCK_CASES, ids=[f"{n}-{d}" for n, d in BLOCK_CASES])
def test_block_joint_law(sv, name, drafts):
    p, q = test_law.family(name)
    given = q if drafts == "rows" else None
    counts = run_probs(sv, p, given, q, "block", seed=8765)
    law = block_joint_law(p, given, q)
    check(counts, law, block_joint_law(p, given, q, wrong_h), f"{name}, {drafts}")


def test_block_power_is_real():
    """h_n = rho_n changes the law visibly with draft rows (one-hot drafts barely feel it at
    K = 3: the sequence-law test catches a wrong block verifier there)."""
    differs = 0
    for name in test_law.FAMILIES:
        p, q = test_law.family(name)
        for given in (q, None):
            differs += bool((block_joint_law(p, given, q, wrong_h) - block_joint_law(p, given, q)).abs().max() > 0.02)
    assert differs >= 6


def test_block_law_keeps_the_target_law():
    """The reference law itself: summed over how many tokens were accepted, the first token
    of a round has law p_0, for every family, with draft rows and one-hot (exact, float64)."""
    for name in test_law.FAMILIES:
        p, q = test_law.family(name)
        pn = normalise(p)
        for given in (q, None):
            law = block_joint_law(p, given, q)
            # First token: t_0 when tau >= 1, else the emitted token.
            rn = normalise(q)
            first = law[0].clone()
            for t in range(V):
                # P(tau >= 1, t_0 = t) = sum over tuples starting with t: law restricted.
                r_fixed = rn.clone()
                r_fixed[0] = 0
                r_fixed[0, t] = 1
                if float(rn[0, t]) > 0:
                    first[t] += float(rn[0, t]) * float(block_joint_law(p, given, r_fixed)[1:].sum())
            assert torch.allclose(first, pn[0], atol=1e-12), f"{name}: {first} vs {pn[0]}"


@pytest.mark.parametrize("k", [1, 2, 3])
def test_block_never_accepts_fewer_than_token_wise(k):
    """E[accepted] of block verification against token-wise, analytic on every family.
    With draft rows: equal at K = 1 (the two rules coincide), never lower for K > 1, and
    higher on the families where a rejected position can be recovered (p and q overlapping
    without being equal). One-hot drafts: equal at every K, as theory says: no rule can
    accept the first n proposals with probability above prod_{i<n} p_i(t_i), the target's
    own probability of that prefix, and token-wise already does."""
    for name in test_law.FAMILIES:
        p, q = test_law.family(name)
        p, q = p[: k + 1], q[:k]
        token = expected_accepted(acceptance_rates(p, q))
        token_one_hot = float(reach_probabilities(one_hot_rates(p, q))[1:].sum())
        block = mean_accepted(block_joint_law(p, q, q))
        block_one_hot = mean_accepted(block_joint_law(p, None, q))
        assert abs(block_one_hot - token_one_hot) < 1e-12, f"{name} one-hot: {block_one_hot} != {token_one_hot}"
        for b, t, what in ((block, token, "rows"),):
            if k == 1:
                assert abs(b - t) < 1e-12, f"{name} {what}: K = 1 block {b} != token {t}"
            else:
                assert b >= t - 1e-12, f"{name} {what}: block {b} < token-wise {t}"
                if name in ("smooth", "spiky", "unnormalised", "zeros_in_target"):
                    assert b > t + 1e-3, f"{name} {what}: block {b} no better than token-wise {t}"


@pytest.mark.slow
def test_block_mean_accepted_at_full_vocabulary(sv):
    """At V = 32000, K = 4 (target logits plus noise as draft): token-wise E[N] is analytic;
    block verification's mean over 6000 rounds must not fall below it. Null hypothesis: the
    block mean >= the token-wise E[N]; one-sided z > -5.5 (p < 2e-8). Rounds counted per
    method on the same draft tokens."""
    k, vocab, rounds = 4, 32000, 6000
    g = torch.Generator().manual_seed(2025)
    logits = torch.randn(k + 1, vocab, generator=g) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits[:k] + torch.randn(k, vocab, generator=g) * 1.5, -1)
    tokens = torch.stack([torch.multinomial(q[i], rounds, replacement=True, generator=g) for i in range(k)], 1)
    token_mean = expected_accepted(acceptance_rates(p, q))
    n = torch.tensor([float(sv.accept(p, q, row, g, method="block")[0]) for row in tokens], dtype=torch.float64)
    z = (float(n.mean()) - token_mean) / (float(n.std()) / rounds ** 0.5)
    assert z > -5.5, f"block mean {float(n.mean()):.4f} below token-wise E[N] {token_mean:.4f} (z = {z:.2f})"


def test_zero_draft_tokens_every_mode(sv):
    """K = 0: one uniform, the token from p_0, whatever the method and draft form."""
    g = torch.Generator().manual_seed(5)
    p = test_law.smooth(g, 1)
    for method in ("token", "block"):
        for q in (torch.empty(0, V), None):
            g = torch.Generator().manual_seed(6)
            outcomes = [sv.accept(p, q, torch.empty(0, dtype=torch.int64), g, method=method) for _ in range(20_000)]
            assert all(n == 0 for n, _ in outcomes)
            assert g_test(counts_of(outcomes, 0), normalise(p))[2] > P_MIN


def test_block_draws_the_same_uniforms(sv):
    """K+1 uniforms whatever the outcome: the generator ends where torch.rand(K+1) leaves it."""
    p, q = test_law.family("smooth")
    for given in (q, None):
        for seed in range(50):
            g = torch.Generator().manual_seed(seed)
            sv.accept(p, given, [0, 1, 2], g, method="block")
            h = torch.Generator().manual_seed(seed)
            torch.rand(K + 1, dtype=torch.float64, generator=h)
            assert torch.equal(g.get_state(), h.get_state())


def test_block_at_k_1_is_token_wise(sv):
    """K = 1: both rules accept iff u_0 < min(1, p(t)/q(t)) and draw from the same residual;
    with the same uniforms they agree except where u_0 lies within rounding of the ratio."""
    g = torch.Generator().manual_seed(8)
    p, q = test_law.smooth(g, 2, 2.0), test_law.smooth(g, 1, 2.0)
    differ = 0
    for _ in range(2000):
        u = torch.rand(2, dtype=torch.float64, generator=g)
        t = [int(torch.randint(V, (1,), generator=g))]
        for given in (q, None):
            differ += sv.accept_with_uniforms(p, given, t, u) != sv.accept_with_uniforms(p, given, t, u, method="block")
    assert differ == 0


# ---- logits in: accept_logits with one-hot drafts and block verification ---------------------

LOGIT_CASES = [(name, mode) for name in test_logits_law.FAMILIES for mode in ("one-hot", "block", "block one-hot")]


@pytest.mark.slow
@pytest.mark.parametrize("name, mode", LOGIT_CASES, ids=[f"{n}-{m}" for n, m in LOGIT_CASES])
def test_accept_logits_laws(sv, name, mode):
    """Draft tokens drawn by `sample` from the draft's warped rows; the law from the float64
    reference warp (tests/warp_reference.py)."""
    p, q, params = test_logits_law.family(name)
    wp = test_logits_law.warped(p, params).probs
    wq = test_logits_law.warped(q, params).probs
    g = torch.Generator().manual_seed(99)
    tokens = sv.sample(q.repeat(ROUNDS, 1), generator=g, **params).view(ROUNDS, K)
    one_hot = "one-hot" in mode
    method = "block" if "block" in mode else "token"
    counts = counts_of(sv.accept_logits(p, None if one_hot else q, row, generator=g, method=method, **params)
                       for row in tokens)
    if method == "token":
        law, wrong = one_hot_joint_law(wp, wq), one_hot_law_residual_with_token(wp, wq)
    else:
        given = None if one_hot else wq
        law, wrong = block_joint_law(wp, given, wq), block_joint_law(wp, given, wq, wrong_h)
    check(counts, law, wrong, f"{name}, {mode}")


def test_accept_logits_greedy_ignores_method_and_drafts(sv):
    """temperature 0 is verify_greedy whatever the method and draft form; nothing drawn."""
    p, q, _ = test_logits_law.family("temperature")
    best = p.argmax(-1)
    tokens = [int(best[0]), int(best[1]), (int(best[2]) + 1) % V]
    want = sv.verify_greedy(p, tokens)
    for method in ("token", "block"):
        for given in (q, None):
            g = torch.Generator().manual_seed(1)
            state = g.get_state()
            assert sv.accept_logits(p, given, tokens, temperature=0.0, method=method, generator=g) == want
            assert torch.equal(g.get_state(), state)


def test_the_papers_motivating_example(sv):
    """Sun et al.'s example: vocabulary {a, b}, context-free target (1/3, 2/3) and draft
    (2/3, 1/3), K = 2: 10/9 accepted tokens a round token-wise, 11/9 with block
    verification. The reference law gives both exactly; the kernel's mean over 40000 rounds
    (tokens drawn from the draft) must match 11/9: null hypothesis mean = 11/9 with the
    variance of the exact law, |z| < 5.5 (p < 4e-8); and its (N, x) counts pass the G-test."""
    p = torch.tensor([[1 / 3, 2 / 3]] * 3)
    q = torch.tensor([[2 / 3, 1 / 3]] * 2)
    assert abs(expected_accepted(acceptance_rates(p, q)) - 10 / 9) < 1e-12
    law = block_joint_law(p, q, q)
    assert abs(mean_accepted(law) - 11 / 9) < 1e-12
    g = torch.Generator().manual_seed(2403)
    rounds = 40_000
    tokens = draw_tokens(q, rounds, g)
    outcomes = [sv.accept(p, q, row, g, method="block") for row in tokens]
    cells = torch.tensor([n * 2 + x for n, x in outcomes])
    counts = torch.bincount(cells, minlength=6).reshape(3, 2)
    n = torch.arange(3, dtype=torch.float64)
    law_n = law.sum(1)
    sd = float(((law_n * n * n).sum() - (law_n * n).sum() ** 2).sqrt())
    mean = float((counts.sum(1).double() * n).sum()) / rounds
    assert abs(mean - 11 / 9) / (sd / rounds ** 0.5) < 5.5, f"mean accepted {mean:.4f}, paper 11/9"
    assert g_test(counts, law)[2] > P_MIN
