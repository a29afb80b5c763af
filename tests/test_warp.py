"""warp, sample and accept_logits against their definition (DESIGN.md, "Warping").

- The kept set of `warp` equals transformers' chain TemperatureLogitsWarper ->
  TopKLogitsWarper -> TopPLogitsWarper -> MinPLogitsWarper (transformers' own order) on
  rows whose cutoffs are clear of float rounding, and its probabilities match transformers'
  softmax on the kept set.
- `warp` against the float64 reference (tests/warp_reference.py): the same kept set, values
  within a few float32 ulps.
- `sample_with_uniforms` and `accept_logits_with_uniforms` against the reference's inverse
  CDF and float64 `accept` with the same uniforms (away from rounding boundaries).
- Every instruction-set path gives the same bits for `warp` and the same tokens for the
  sampling ops, on rows with -inf entries, ties, one token holding all the mass and
  subnormal weights.
"""
from __future__ import annotations

import math

import pytest
import torch

import warp_reference as ref

# The warping parameters the comparisons sweep: (temperature, top_k, top_p, min_p).
PARAMS = [
    (1.0, 0, 1.0, 0.0),
    (0.7, 0, 1.0, 0.0),
    (1.5, 0, 1.0, 0.0),
    (1.0, 1, 1.0, 0.0),
    (1.0, 5, 1.0, 0.0),
    (0.8, 40, 1.0, 0.0),
    (1.0, 0, 0.5, 0.0),
    (0.8, 0, 0.9, 0.0),
    (1.2, 0, 0.95, 0.0),
    (1.0, 0, 0.99, 0.0),
    (1.0, 0, 1.0, 0.05),
    (0.6, 0, 1.0, 0.2),
    (0.8, 50, 0.9, 0.0),
    (1.0, 20, 0.8, 0.1),
    (0.9, 0, 0.9, 0.02),
    (0.5, 10, 0.7, 0.3),
]


def hf_warp(x: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """transformers' chain on [R, V] float32 logits; its softmax, float32 [R, V]."""
    from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                         TopKLogitsWarper, TopPLogitsWarper)

    ids = torch.zeros(x.shape[0], 1, dtype=torch.int64)
    s = TemperatureLogitsWarper(temperature)(ids, x.clone())
    if top_k:
        s = TopKLogitsWarper(top_k)(ids, s)
    if top_p < 1.0:
        s = TopPLogitsWarper(top_p)(ids, s)
    if min_p > 0.0:
        s = MinPLogitsWarper(min_p)(ids, s)
    return torch.softmax(s, -1)


def random_rows(g: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    """Logits of varied sharpness (scales 0.5 to 6), so cutoffs fall in many places.

    From V = 10000 on, a row is a head of 50 tokens (logits uniform in [8, 14], at random
    places) over a tail of V - 50 (standard normal, minus 3) holding under 1% of the mass:
    the shape of a language model's row, and one whose top-p and min-p cutoffs fall between
    tokens of visible mass, so that float32 rounding cannot move them (a cutoff inside a
    smooth tail of 10^5 tokens of mass 1e-5 each is always within rounding of a boundary).
    """
    if vocab < 10000:
        scale = torch.tensor([0.5, 1.0, 2.0, 3.0, 6.0])[torch.randint(0, 5, (rows, 1), generator=g)]
        return (torch.randn(rows, vocab, generator=g) * scale).float()
    x = torch.randn(rows, vocab, generator=g) - 3.0
    for r in range(rows):
        head = torch.randperm(vocab, generator=g)[:50]
        x[r, head] = 8.0 + 6.0 * torch.rand(50, generator=g)
    return x.float()


# transformers' TopP compares a float32 cumsum of float32 softmax values (in ascending
# order) with 1 - top_p; over 151936 values that sum can be off by ~1e-5 of the total. Its
# MinP compares float32 probabilities. Exact agreement is expected on rows where every
# decision is further than this (relative) from its boundary; the rows are drawn until
# enough such rows are found.
HF_CLEAR = 1e-4

VOCABS = [(1, 40), (2, 200), (3, 200), (7, 300), (50, 300), (1000, 150), (32000, 8), (151936, 3)]


@pytest.mark.slow
@pytest.mark.parametrize("vocab,rows", VOCABS, ids=[f"V{v}" for v, _ in VOCABS])
def test_kept_set_equals_transformers(sv, vocab, rows):
    """Thousands of rows in all (the row counts above times 16 parameter sets): the kept set
    of `warp` is transformers' kept set exactly, and the probabilities on it agree.

    Tolerances: our values are within 5e-7 relative of the float64 definition (a few float32
    ulps; tested below); transformers' float32 softmax divides by a float32 sum whose error
    grows with the kept set (measured here: up to 2.7e-5 relative to the float64 values at
    V = 151936, all kept, on x86-64; 2.1e-4 with aarch64 torch 2.9.1). So the two rows must be
    proportional to within 1e-6 (max/min of the ratio ours/transformers on the kept set: the
    shape, token by token), and their normalisations differ by no more than transformers' own
    error against the float64 definition (plus 1e-6).
    """
    g = torch.Generator().manual_seed(vocab)
    compared = 0
    for temperature, top_k, top_p, min_p in PARAMS:
        x = random_rows(g, 3 * rows, vocab)
        # The first `rows` rows with clear cutoffs, in order; the reference stops there.
        clear, exact = [], []
        for r in range(x.shape[0]):
            probs, _, _, margin = ref.warp_row(x[r], temperature, top_k, top_p, min_p)
            if margin > HF_CLEAR:
                clear.append(r)
                exact.append(probs)
                if len(clear) == rows:
                    break
        assert len(clear) >= min(rows, 2), "too few rows with clear cutoffs: change the generator"
        x = x[clear]
        ours = sv.warp(x, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        hf = hf_warp(x, temperature, top_k, top_p, min_p)
        where = f"V = {vocab}, T = {temperature}, top_k = {top_k}, top_p = {top_p}, min_p = {min_p}"
        assert torch.equal(ours > 0, hf > 0), f"kept sets differ from transformers at {where}"
        kept = ours > 0
        ratio = torch.where(kept, ours.double() / hf.double(), torch.tensor(float("nan"), dtype=torch.float64))
        hi, lo = ratio.nan_to_num(-math.inf).amax(1), ratio.nan_to_num(math.inf).amin(1)
        assert float((hi / lo - 1).max()) < 1e-6, f"rows not proportional to transformers' at {where}"
        # Normalisation: ours is the float64 definition's within 5e-7; transformers' is off by
        # its float32 sum's error, which depends on torch's reduction (up to 2.7e-5 at V =
        # 151936 with x86-64 torch 2.13, 2.1e-4 with aarch64 torch 2.9.1). So ours / theirs
        # may differ from 1 by that error, measured against the definition, and no more.
        exact = torch.stack(exact)
        hf_err = torch.where(kept, hf.double() / exact - 1, torch.zeros((), dtype=torch.float64)).abs().amax(1)
        assert float(hf_err.max()) < 1e-3, f"transformers' own normalisation is off at {where}"
        assert bool(((hi - 1).abs() <= hf_err + 1e-6).all()), f"normalisation differs from transformers' at {where}"
        compared += x.shape[0]
    assert compared >= 2 * len(PARAMS)


def test_top_p_tie_group_at_the_cutoff_is_kept_whole(sv):
    """Our rule: a tie group at the top-p cutoff is kept whole (FlashInfer's rule). Here the
    cutoff (0.6 of the mass) falls inside a group of three equal tokens after the largest:
    all three are kept. transformers' TopPLogitsWarper keeps tokens by their position in its
    sort, so it keeps only part of such a group (which part depends on the sort); we only
    check that it keeps no more than we do."""
    x = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0, -1.0, 1.0, -3.0]])
    ours = sv.warp(x, top_p=0.6)
    group = [1, 2, 3, 6]
    assert (ours[0, [0] + group] > 0).all() and (ours[0, [4, 5, 7]] == 0).all(), ours
    assert ref.warp(x, 1.0, 0, 0.6, 0.0).kept.equal(ours > 0)
    # Equal values get equal probabilities.
    assert len(set(ours[0, group].tolist())) == 1
    hf = hf_warp(x, 1.0, 0, 0.6, 0.0)
    assert ((hf > 0) <= (ours > 0)).all()
    # The same with top-k cutting inside a tie: ties at the k-th value are kept (as
    # transformers does too).
    ours_k = sv.warp(x, top_k=2)
    assert torch.equal(ours_k > 0, hf_warp(x, 1.0, 2, 1.0, 0.0) > 0)
    assert int((ours_k > 0).sum()) == 5


@pytest.mark.parametrize("vocab", [1, 2, 5, 64, 1000, 32000])
def test_warp_matches_the_float64_definition(sv, vocab):
    """Exact kept set and values within 5e-7 relative (about 8 float32 ulps) of the float64
    definition, on rows whose decisions are clear of float32 rounding (margin > 1e-5)."""
    g = torch.Generator().manual_seed(1000 + vocab)
    rows = 24 if vocab < 32000 else 3
    for temperature, top_k, top_p, min_p in PARAMS:
        x = random_rows(g, rows, vocab)
        want = ref.warp(x, temperature, top_k, top_p, min_p)
        clear = want.margin > ref.CLEAR
        ours = sv.warp(x, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        assert ours.dtype == torch.float32 and ours.shape == x.shape
        support = want.kept & (want.probs > 0)
        assert torch.equal((ours > 0)[clear], support[clear]), (temperature, top_k, top_p, min_p)
        kept = support & clear[:, None]
        err = ((ours.double() - want.probs).abs() / want.probs.clamp(min=1e-300))[kept]
        assert float(err.max()) < 5e-7, (temperature, top_k, top_p, min_p, float(err.max()))
        sums = ours.double().sum(-1)
        assert float((sums - 1).abs().max()) < 1e-5


def test_warp_shapes_and_greedy(sv):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 50, generator=g)
    x[2, 7] = x[2, 30] = x[2].max() + 1  # a tie for the argmax: the lowest index wins
    one = sv.warp(x, temperature=0)
    assert torch.equal(one, torch.nn.functional.one_hot(x.argmax(-1), 50).float())
    assert int(one[2].argmax()) == 7
    assert torch.equal(sv.warp(x[1], temperature=0.5), sv.warp(x, temperature=0.5)[1])
    assert sv.warp(x[1]).shape == (50,)
    # A non-contiguous input (a column slice) gives the rows of its contiguous copy.
    wide = torch.randn(3, 100, generator=g)
    assert torch.equal(sv.warp(wide[:, ::2]), sv.warp(wide[:, ::2].contiguous()))
    assert torch.equal(sv.warp(wide.t()), sv.warp(wide.t().contiguous()))
    # Parameters that cut nothing give the plain softmax (within float32 rounding).
    assert torch.allclose(sv.warp(x, top_k=50, top_p=1.0, min_p=0.0), torch.softmax(x, -1), rtol=1e-6, atol=0)
    # -inf masks a token; a row with one finite value is one-hot there.
    y = torch.full((10,), float("-inf"))
    y[4] = -3.0
    assert torch.equal(sv.warp(y), torch.nn.functional.one_hot(torch.tensor(4), 10).float())
    # top_k = 1 keeps the maximum (and any tie of it); top_p tiny keeps the top group.
    assert int((sv.warp(x, top_k=1) > 0).sum()) == 5
    assert torch.equal(sv.warp(x, top_p=1e-9) > 0, sv.warp(x, top_k=1) > 0)


def test_sample_with_uniforms_is_the_inverse_cdf_of_warp(sv):
    """Token = the smallest index whose running mass of the warped row exceeds u * total:
    compared with the float64 reference on 3000 (row, u) pairs, skipping draws within 1e-9
    (relative) of a boundary, where rounding of the masses may decide."""
    g = torch.Generator().manual_seed(5)
    checked = 0
    for temperature, top_k, top_p, min_p in PARAMS[::2]:
        x = random_rows(g, 200, 300)
        u = torch.rand(200, dtype=torch.float64, generator=g)
        got = sv.sample_with_uniforms(x, u, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        assert got.dtype == torch.int64 and got.shape == (200,)
        want = ref.warp(x, temperature, top_k, top_p, min_p)
        for r in range(200):
            if want.margin[r] <= ref.CLEAR:
                continue
            idx, gap = ref.sample_index(want.probs[r], float(u[r]))
            if gap > 1e-9:
                assert int(got[r]) == idx, (temperature, top_k, top_p, min_p, r)
                checked += 1
        # One row at a time, with a 0-d uniform: the same tokens.
        assert int(sv.sample_with_uniforms(x[3], u[3], temperature=temperature, top_k=top_k, top_p=top_p,
                                           min_p=min_p)) == int(got[3])
    assert checked > 1000


def test_sample_draws_one_uniform_per_row_in_order(sv):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(6, 1000, generator=g)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    got = sv.sample(x, temperature=0.9, top_p=0.8, generator=g1)
    u = torch.rand(6, dtype=torch.float64, generator=g2)
    assert torch.equal(got, sv.sample_with_uniforms(x, u, temperature=0.9, top_p=0.8))
    assert torch.equal(g1.get_state(), g2.get_state())
    # A [V] row: a 0-d token, one uniform.
    tok = sv.sample(x[0], top_k=3, generator=g1)
    assert tok.shape == () and tok.dtype == torch.int64
    torch.rand(1, dtype=torch.float64, generator=g2)
    assert torch.equal(g1.get_state(), g2.get_state())
    # Temperature 0: the argmax, nothing drawn.
    assert torch.equal(sv.sample(x, temperature=0, generator=g1), x.argmax(-1))
    assert torch.equal(g1.get_state(), g2.get_state())
    # The default generator when None.
    torch.manual_seed(4)
    a = sv.sample(x)
    torch.manual_seed(4)
    assert torch.equal(a, sv.sample_with_uniforms(x, torch.rand(6, dtype=torch.float64)))


def test_accept_logits_is_accept_on_the_warped_rows(sv):
    """accept_logits_with_uniforms against float64 `accept` on the reference's warped rows,
    same uniforms: equal (n, token) on 1500 rounds, skipping rounds with a decision within
    1e-9 of its boundary. Also: accept_logits draws exactly K+1 uniforms."""
    g = torch.Generator().manual_seed(6)
    k, vocab = 3, 40
    checked = 0
    for temperature, top_k, top_p, min_p in PARAMS[::3]:
        for _ in range(250):
            p_logits = random_rows(g, k + 1, vocab)
            q_logits = (p_logits[:k] + torch.randn(k, vocab, generator=g)).float()
            wp = ref.warp(p_logits, temperature, top_k, top_p, min_p)
            wq = ref.warp(q_logits, temperature, top_k, top_p, min_p)
            if min(float(wp.margin.min()), float(wq.margin.min())) <= ref.CLEAR:
                continue
            tokens = torch.stack([torch.multinomial(wq.probs[i], 1, generator=g)[0] for i in range(k)])
            u = torch.rand(k + 1, dtype=torch.float64, generator=g)
            n, x, margin = ref.accept_reference(wp.probs, wq.probs, tokens, u)
            if margin <= 1e-9:
                continue
            got = sv.accept_logits_with_uniforms(p_logits, q_logits, tokens, u, temperature=temperature,
                                                 top_k=top_k, top_p=top_p, min_p=min_p)
            assert got == (n, x), (temperature, top_k, top_p, min_p)
            checked += 1
            if checked % 50 == 0:  # the generator form draws K+1 uniforms, as torch.rand would
                g1, g2 = torch.Generator().manual_seed(checked), torch.Generator().manual_seed(checked)
                got = sv.accept_logits(p_logits, q_logits, tokens, temperature=temperature, top_k=top_k,
                                       top_p=top_p, min_p=min_p, generator=g1)
                u2 = torch.rand(k + 1, dtype=torch.float64, generator=g2)
                assert got == sv.accept_logits_with_uniforms(p_logits, q_logits, tokens, u2,
                                                             temperature=temperature, top_k=top_k,
                                                             top_p=top_p, min_p=min_p)
                assert torch.equal(g1.get_state(), g2.get_state())
    assert checked > 600


def test_accept_logits_greedy_is_verify_greedy(sv):
    g = torch.Generator().manual_seed(12)
    k, vocab = 4, 500
    logits = torch.randn(k + 1, vocab, generator=g)
    best = logits.argmax(-1)
    for miss in range(k + 1):
        tokens = best[:k].clone()
        if miss < k:
            tokens[miss] = (tokens[miss] + 1) % vocab
        g1 = torch.Generator().manual_seed(1)
        state = g1.get_state()
        want = sv.verify_greedy(logits, tokens)
        assert want == (miss, int(best[miss]))
        assert sv.accept_logits(logits, None, tokens, temperature=0, generator=g1) == want
        assert sv.accept_logits(logits, logits[:k], tokens, temperature=0.0, top_p=0.5) == want
        u = torch.rand(k + 1, dtype=torch.float64)
        assert sv.accept_logits_with_uniforms(logits, None, tokens, u, temperature=0) == want
        assert torch.equal(g1.get_state(), state), "temperature 0 drew a uniform"


def test_rows_after_the_deciding_one_are_never_read(sv):
    """Rows past the deciding position may hold anything, NaN included."""
    g = torch.Generator().manual_seed(13)
    k, vocab = 4, 64
    p = torch.randn(k + 1, vocab, generator=g)
    q = p[:k].clone()
    tokens = p[:k].argmax(-1)
    p[0, tokens[0]] = float("-inf")  # the target gives token 0 probability 0: rejected at 0
    p[1:] = float("nan")
    q[1:] = float("nan")
    u = torch.rand(k + 1, dtype=torch.float64, generator=g)
    n, x = sv.accept_logits_with_uniforms(p, q, tokens, u, temperature=0.8, top_p=0.9)
    assert n == 0 and x != int(tokens[0])
    n, x = sv.accept_logits(p, None, torch.tensor([int(p[0].argmax()) + 1, 0, 0, 0]) % vocab, temperature=0)
    assert n == 0


# ---------------------------------------------------------------- every path, bit for bit

def hard_rows(seed: int, vocab: int) -> torch.Tensor:
    """Rows that take every branch: -inf entries, ties (at the top, at a top-k or top-p
    cutoff), one token holding all the mass, subnormal weights (gaps of 87-104 below the
    maximum at temperature 1), a single finite value, flat rows, huge and tiny logits."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    base = torch.randn(vocab, generator=g) * 3
    rows.append(base)
    r = base.clone()
    r[torch.randperm(vocab, generator=g)[: vocab // 3]] = float("-inf")
    rows.append(r)
    r = torch.randint(0, 4, (vocab,), generator=g).float()  # many ties
    rows.append(r)
    r = base.clone()
    r[vocab // 2] = r.max() + 200.0  # one token holds all the mass
    rows.append(r)
    r = -87.0 - torch.rand(vocab, generator=g) * 17.0  # subnormal weights
    r[vocab // 3] = 0.0
    rows.append(r)
    r = -torch.rand(vocab, generator=g) * 104.0
    r[0] = 0.0
    rows.append(r)
    r = torch.full((vocab,), float("-inf"))
    r[vocab - 1] = 5.0  # a single finite value
    rows.append(r)
    rows.append(torch.zeros(vocab))  # flat
    rows.append(torch.randn(vocab, generator=g) * 1e30)
    rows.append(torch.randn(vocab, generator=g) * 1e-30)
    r = base.clone()
    r[vocab // 5::7] = r.max()  # ties at the top
    rows.append(r)
    return torch.stack(rows).float()


PATH_PARAMS = PARAMS + [(0.0, 0, 1.0, 0.0), (1e-3, 0, 0.9, 0.0), (3.0, 2, 0.3, 0.5), (1.0, 10**9, 1.0, 0.0),
                        (0.8, 0, 0.6, 0.0), (1.0, 0, 0.999999, 0.0), (1.0, 0, 1.0, 0.999)]


def path_results(sv, vocab: int, seed: int):
    x = hard_rows(seed, vocab)
    g = torch.Generator().manual_seed(seed)
    k = 4
    out = []
    for temperature, top_k, top_p, min_p in PATH_PARAMS:
        kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        if temperature and temperature < 1 and float(x.abs().max()) > 1e29:
            xs = x[:-2]  # 1e30 / 1e-3 overflows float32: an error, tested elsewhere
        else:
            xs = x
        w = sv.warp(xs, **kw)
        u = torch.rand(xs.shape[0], dtype=torch.float64, generator=g)
        s = sv.sample_with_uniforms(xs, u, **kw)
        rounds = []
        for r in range(xs.shape[0] - k):
            target = xs[r: r + k + 1]
            draft = torch.roll(xs[r + 1: r + k + 1], 1, -1)
            tokens = torch.stack([torch.multinomial(w[r + 1 + i] + 1e-30, 1, generator=g)[0] for i in range(k)])
            uu = torch.rand(k + 1, dtype=torch.float64, generator=g)
            rounds.append(sv.accept_logits_with_uniforms(target, draft, tokens, uu, **kw))
        out.append((w.view(torch.int32).clone(), s, rounds))
    return out


@pytest.mark.parametrize("vocab", [1, 3, 17, 256, 1000, 4099, 32000])
def test_every_path_gives_the_same_bits(sv, isa, vocab):
    """warp's output bit for bit, and the tokens of sample_with_uniforms and
    accept_logits_with_uniforms, are those of the scalar reference path."""
    got = path_results(sv, vocab, seed=vocab)
    if isa == "scalar":
        return  # the reference itself: it ran
    sv._force_isa("scalar")
    want = path_results(sv, vocab, seed=vocab)
    sv._force_isa(isa)
    for (params, (gw, gs, gr), (ww, ws, wr)) in zip(PATH_PARAMS, got, want):
        assert torch.equal(gw, ww), f"warp bits differ from scalar at V = {vocab}, {params}"
        assert torch.equal(gs, ws), f"sample tokens differ from scalar at V = {vocab}, {params}"
        assert gr == wr, f"accept_logits differs from scalar at V = {vocab}, {params}"


def test_subnormal_weights_are_kept(sv):
    """A token 100 below the maximum has w = exp(-100) ~ 3.7e-44, a subnormal float32: it is
    kept (it has mass), and its probability is within float32 subnormal precision."""
    x = torch.tensor([0.0, -100.0, -103.0, -200.0, float("-inf")])
    w = sv.warp(x)
    assert w[0] == 1.0 and w[1] > 0 and w[2] > 0 and w[3] == 0 and w[4] == 0
    assert abs(float(w[1]) - math.exp(-100)) < 2 ** -149 * 2
