"""Draft bounds (DESIGN.md, "Draft bounds"): `sample(..., return_bounds=True)` hands each draft
row's bound to `accept_logits(..., draft_bounds=...)`, which then accepts from the target row
alone where that is certain. The bounds never change an outcome (every round equals the round
without them, uniform for uniform), bounds that cannot be a row's are reported where the row is
read, and the decoder on logits passes them along."""
from __future__ import annotations

import sys

import pytest
import torch

FAMILIES = [
    dict(temperature=0.8),
    dict(temperature=1.3),
    dict(temperature=0.8, top_p=0.9),
    dict(temperature=0.7, top_k=20),
    dict(temperature=1.0, min_p=0.05),
    dict(temperature=0.9, top_k=50, top_p=0.8, min_p=0.01),
]


def rows(seed, k, v, closeness, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(k + 1, v, generator=g) * 3
    draft = target[:k] + closeness * torch.randn(k, v, generator=g)
    return target.to(dtype), draft.to(dtype)


@pytest.mark.parametrize("params", FAMILIES, ids=lambda p: ",".join(f"{a}={b}" for a, b in p.items()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sample_bounds_hold_the_token_weight_and_the_mass(sv, params, dtype):
    """Same tokens and generator stream as `sample`; per row, the token's probability under
    `warp` (to float32 rounding) is weight / Q for a Q in [lo, hi], a range at most 2^-17
    wide (one point where the row was warped exactly)."""
    target, _ = rows(7, 5, 3000, 1.0, dtype)  # 6 rows
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    tokens = sv.sample(target, generator=g1, **params)
    got, bounds = sv.sample(target, generator=g2, return_bounds=True, **params)
    assert torch.equal(got, tokens) and torch.equal(g1.get_state(), g2.get_state())
    assert bounds.dtype == torch.float64 and bounds.shape == (6, 3)
    warped = sv.warp(target, **params).double()
    for r in range(6):
        w, lo, hi = bounds[r].tolist()
        assert 0 < w <= 1 and 0 < lo <= hi <= lo * (1 + 2 ** -17)
        p = float(warped[r, tokens[r]])
        assert w / hi <= p * (1 + 4e-7) and w / lo >= p * (1 - 4e-7)  # p = w / Q for a Q in [lo, hi]
    one_token, one_bound = sv.sample(target[0], generator=torch.Generator().manual_seed(3), return_bounds=True,
                                     **params)
    assert one_token.shape == () and one_bound.shape == (3,) and torch.equal(one_bound, bounds[0])
    u = torch.rand(6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    t_u, b_u = sv.sample_with_uniforms(target, u, return_bounds=True, **params)
    assert torch.equal(t_u, sv.sample_with_uniforms(target, u, **params)) and b_u.shape == (6, 3)


@pytest.mark.parametrize("params", FAMILIES, ids=lambda p: ",".join(f"{a}={b}" for a, b in p.items()))
@pytest.mark.parametrize("v", [50, 3000, 32000])
def test_accept_with_bounds_is_accept_without(sv, params, v):
    """H0: the bounds change nothing. 120 rounds per case (K 1 to 5, drafts close to or far
    from the target, float32 and bfloat16 rows): the same (n_accepted, next_token) and the
    same generator state after the call as without them, and the same with the uniforms
    given. Fails on any difference."""
    for seed in range(120 if v < 32000 else 30):
        k = 1 + seed % 5
        target, draft = rows(seed, k, v, (0.05, 0.5, 3.0)[seed % 3], torch.bfloat16 if seed % 4 == 3 else torch.float32)
        tokens, bounds = sv.sample(draft, generator=torch.Generator().manual_seed(seed), return_bounds=True,
                                   **params)
        g1, g2 = torch.Generator().manual_seed(1000 + seed), torch.Generator().manual_seed(1000 + seed)
        want = sv.accept_logits(target, draft, tokens, generator=g1, **params)
        got = sv.accept_logits(target, draft, tokens, generator=g2, draft_bounds=bounds, **params)
        assert got == want and torch.equal(g1.get_state(), g2.get_state()), (seed, got, want)
        u = torch.rand(k + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        assert sv.accept_logits_with_uniforms(target, draft, tokens, u, draft_bounds=bounds, **params) == \
            sv.accept_logits_with_uniforms(target, draft, tokens, u, **params)
        assert sv.accept_logits_with_uniforms(target, draft, tokens, u, draft_bounds=bounds, method="block",
                                              **params) == \
            sv.accept_logits_with_uniforms(target, draft, tokens, u, method="block", **params)


def test_greedy_ignores_the_bounds(sv):
    target, draft = rows(1, 3, 100, 0.5)
    tokens, bounds = sv.sample(draft, temperature=0.0, return_bounds=True)
    assert torch.equal(bounds, torch.ones(3, 3, dtype=torch.float64))
    assert sv.accept_logits(target, draft, tokens, temperature=0.0, draft_bounds=bounds) == \
        sv.verify_greedy(target, tokens)


def rejected_round(sv, params):
    """A round whose first position is rejected (an independent draft, its argmax as tokens)."""
    target, draft = rows(5, 3, 2000, 30.0)
    tokens, bounds = sv.sample(draft, generator=torch.Generator().manual_seed(0), return_bounds=True, **params)
    u = torch.full((4,), 0.999999, dtype=torch.float64)
    assert sv.accept_logits_with_uniforms(target, draft, tokens, u, **params)[0] == 0
    return target, draft, tokens, bounds, u


@pytest.mark.parametrize("params", [dict(temperature=0.8), dict(temperature=0.8, top_p=0.9)], ids=["T", "top-p"])
@pytest.mark.parametrize("how", ["weight", "mass above", "mass below"])
def test_bounds_that_are_not_the_rows_are_reported(sv, params, how):
    target, draft, tokens, bounds, u = rejected_round(sv, params)
    bad = bounds.clone()
    if how == "weight":
        bad[0, 0] = float(torch.tensor(bad[0, 0].item(), dtype=torch.float32).nextafter(torch.tensor(0.0)))
    else:
        bad[0, 1:] *= 1.001 if how == "mass above" else 0.999
    g = torch.Generator().manual_seed(2)
    state = g.get_state()
    with pytest.raises(ValueError, match=r"accept_logits: draft_bounds\[0\] does not hold for draft_logits\[0\]"):
        sv.accept_logits(target, draft, tokens, generator=g, draft_bounds=bad, **params)
    assert torch.equal(g.get_state(), state)
    with pytest.raises(ValueError, match=r"draft_bounds\[0\] does not hold"):
        sv.accept_logits_with_uniforms(target, draft, tokens, u, draft_bounds=bad, **params)


@pytest.mark.parametrize("op", ["accept_logits", "accept_logits_with_uniforms"])
def test_malformed_bounds(sv, op):
    target, draft, tokens, bounds, u = rejected_round(sv, dict(temperature=0.8))

    def call(b, d=draft):
        if op == "accept_logits":
            return sv.accept_logits(target, d, tokens, temperature=0.8, draft_bounds=b)
        return sv.accept_logits_with_uniforms(target, d, tokens, u, temperature=0.8, draft_bounds=b)

    with pytest.raises(ValueError, match=f"{op}: draft_bounds describe draft rows: pass draft_logits"):
        call(bounds, None)
    with pytest.raises(ValueError, match=r"draft_bounds must have shape \[K, 3\] = \[3, 3\], got \[2, 3\]"):
        call(bounds[:2])
    with pytest.raises(ValueError, match=r"draft_bounds must have shape"):
        call(bounds[:, :2])
    with pytest.raises(TypeError, match="draft_bounds must have dtype torch.float64, got torch.float32"):
        call(bounds.float())
    with pytest.raises(TypeError, match="draft_bounds must be a torch.Tensor, got list"):
        call(bounds.tolist())
    for r, c, value in [(1, 0, 0.1), (1, 0, -1.0), (1, 0, 2.0), (2, 1, 0.0), (2, 1, 1e9), (0, 2, float("inf")),
                        (0, 1, float("nan"))]:
        bad = bounds.clone()
        bad[r, c] = value  # 0.1 is no float32; lo > hi; a zero or NaN lo; an infinite hi
        with pytest.raises(ValueError, match=rf"draft_bounds\[{r}\] = .* is not \(a float32 weight"):
            call(bad)
    with pytest.raises(TypeError, match="return_bounds must be a bool, got int"):
        sv.sample(draft, temperature=0.8, return_bounds=1)


def test_the_decoder_on_logits_hands_its_bounds_over(sv, monkeypatch):
    """Every sampled round of SpeculativeDecoder.from_logits passes draft bounds for the rows
    it drafted, and each round's outcome equals the same call without them (generator state
    cloned before the call)."""
    decoder = sys.modules[sv.SpeculativeDecoder.__module__]  # the decoder module the kernel loaded
    real = decoder.accept_logits
    seen = []

    def spy(rows, draft_rows, tokens, *, generator=None, draft_bounds=None, **kw):
        state = generator.get_state()
        got = real(rows, draft_rows, tokens, generator=generator, draft_bounds=draft_bounds, **kw)
        check = torch.Generator()
        check.set_state(state)
        assert got == real(rows, draft_rows, tokens, generator=check, **kw)
        seen.append(draft_bounds is not None and draft_bounds.shape == (len(tokens), 3))
        return got

    monkeypatch.setattr(decoder, "accept_logits", spy)
    v = 64
    table = torch.randn(97, v, generator=torch.Generator().manual_seed(0)) * 2

    def draft_logits_step(seq):
        return table[(sum(seq) * 7 + len(seq)) % 97] + 0.3 * table[len(seq) % 97]

    def target_logits_step(prefix, proposed):
        seq = list(prefix)
        out = []
        for t in [None] + proposed.tolist():
            if t is not None:
                seq.append(t)
            out.append(table[(sum(seq) * 7 + len(seq)) % 97])
        return torch.stack(out)

    dec = sv.SpeculativeDecoder.from_logits(draft_logits_step, target_logits_step, 4, temperature=0.9, top_p=0.95,
                                            generator=torch.Generator().manual_seed(1), schedule="constant")
    dec.generate([1, 2, 3], max_new=60)
    assert len(seen) >= 10 and all(seen)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_verify_batch_with_bounds_is_verify_batch_without(sv, n_threads):
    """A ragged batch (mixed K_b, greedy and sampled sequences, mixed warping) whose draft
    tokens are drawn by `sample` with each sequence's parameters, bounds kept: verify_batch
    with draft_bounds gives the outputs and generator state it gives without, for 40
    batches."""
    from test_batch import random_batch

    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        for seed in range(40):
            bt = random_batch(seed, 1 + seed % 9, 300 if seed % 2 else 3000, with_draft=True, probs=False)
            n = bt.tokens.shape[0]
            bounds = torch.empty(n, 3, dtype=torch.float64)
            tokens = bt.tokens.clone()
            g = torch.Generator().manual_seed(seed)
            for b, (d0, _) in enumerate(bt.starts()):
                params = dict(temperature=float(bt.temperature[b]), top_k=int(bt.top_k[b]),
                              top_p=float(bt.top_p[b]), min_p=float(bt.min_p[b]))
                for i in range(d0, d0 + bt.ks[b]):
                    t, bound = sv.sample(bt.draft[i], generator=g, return_bounds=True, **params)
                    tokens[i], bounds[i] = t, bound
            kw = dict(draft_logits=bt.draft, temperature=bt.temperature, top_k=bt.top_k, top_p=bt.top_p,
                      min_p=bt.min_p)
            g1, g2 = torch.Generator().manual_seed(100 + seed), torch.Generator().manual_seed(100 + seed)
            want = sv.verify_batch(bt.target, tokens, bt.cu, generator=g1, **kw)
            got = sv.verify_batch(bt.target, tokens, bt.cu, generator=g2, draft_bounds=bounds, **kw)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed
            assert torch.equal(g1.get_state(), g2.get_state())
    finally:
        torch.set_num_threads(before)


def test_verify_batch_bounds_errors(sv):
    target, draft, tokens, bounds, _ = rejected_round(sv, dict(temperature=0.8))
    # Two sequences: K = 3 (the rejected round) then K = 0.
    target2 = torch.cat([target, target[:1]])
    cu = torch.tensor([3, 3])
    bad = bounds.clone()
    bad[0, 1:] *= 1.01
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    with pytest.raises(ValueError, match=r"verify_batch: sequence 0: draft_bounds\[0\] does not hold for "
                                         r"draft_logits\[0\]"):
        sv.verify_batch(target2, tokens, cu, draft_logits=draft, temperature=0.8, generator=g, draft_bounds=bad)
    assert torch.equal(g.get_state(), state)
    with pytest.raises(ValueError, match=r"draft_bounds must have shape \[N, 3\] = \[3, 3\]"):
        sv.verify_batch(target2, tokens, cu, draft_logits=draft, temperature=0.8, draft_bounds=bounds[:2])
    with pytest.raises(ValueError, match="draft_bounds describe draft rows"):
        sv.verify_batch(target2, tokens, cu, temperature=0.8, draft_bounds=bounds)
    with pytest.raises(TypeError, match="draft_bounds must be a torch.Tensor"):
        sv.verify_batch(target2, tokens, cu, draft_logits=draft, temperature=0.8, draft_bounds=[[1.0, 1.0, 1.0]])


def test_opcheck_verify_batch_with_bounds(sv):
    target, draft, tokens, bounds, _ = rejected_round(sv, dict(temperature=0.8))
    target2, cu = torch.cat([target, target[:1]]), torch.tensor([3, 3])
    temperature = torch.tensor([0.8, 0.8])
    torch.library.opcheck(sv.ops.verify_batch, (target2, tokens, cu, draft, temperature, None, None, None, "token",
                                                None, None, bounds))
