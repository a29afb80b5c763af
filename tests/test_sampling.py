"""accept(): invariants over many random rounds, early exit, reproducibility."""
from __future__ import annotations

import pytest
import torch


def random_round(g, k, vocab, sparsity):
    p = torch.rand(k + 1, vocab, generator=g) ** 4
    q = torch.rand(k, vocab, generator=g) ** 4
    p[torch.rand(k + 1, vocab, generator=g) < sparsity] = 0
    q[torch.rand(k, vocab, generator=g) < sparsity] = 0
    p[:, 0] += 1e-3  # no zero-mass row
    q[:, -1] += 1e-3
    tokens = torch.multinomial(q, 1, generator=g).reshape(k) if k else torch.empty(0, dtype=torch.int64)
    return p, q, tokens


@pytest.mark.slow
def test_invariants_over_random_rounds(sv, isa):
    """The emitted token is in [0, V) with positive target probability at its position,
    and n_accepted is in [0, K], over 4000 random rounds with sparse rows."""
    g = torch.Generator().manual_seed(42)
    for r in range(4000):
        k = r % 6
        vocab = 1 + (r * 37) % 2500
        p, q, tokens = random_round(g, k, vocab, sparsity=[0.0, 0.5, 0.95][r % 3])
        n, x = sv.accept(p, q, tokens, g)
        assert 0 <= n <= k
        assert 0 <= x < vocab
        assert p[n, x] > 0, (r, n, x)
        for i in range(n):  # accepted tokens had positive target probability
            assert p[i, tokens[i]] > 0


def test_rows_after_the_decision_are_not_read(sv, isa):
    """Disjoint supports at position 0: always rejected there, so rows 1.. are never read."""
    p = torch.zeros(4, 64)
    q = torch.zeros(3, 64)
    p[0, :32] = 1.0
    q[0, 32:] = 1.0
    p[1:] = float("nan")
    q[1:] = float("nan")
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        n, x = sv.accept(p, q, torch.tensor([40, 0, 0]), g)
        assert n == 0 and 0 <= x < 32


def test_uniform_zero_never_accepts_zero_probability(sv, isa):
    """u = 0 with p(t) = 0 < q(t): rejected (a float32 uniform of 0 once broke this elsewhere)."""
    p = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    q = torch.tensor([[1.0, 0.0]])
    assert sv.accept_with_uniforms(p, q, [0], torch.zeros(2, dtype=torch.float64)) == (0, 1)


def test_zero_draft_probability_always_accepts(sv, isa):
    p = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    q = torch.tensor([[0.0, 1.0]])
    u = torch.tensor([0.999999, 0.3], dtype=torch.float64)
    assert sv.accept_with_uniforms(p, q, [0], u) == (1, 1)


def test_uniforms_decide_exactly(sv, isa):
    """p(t)/q(t) = 0.25 with equal masses: u < 0.25 accepts, u >= 0.25 rejects."""
    p = torch.tensor([[0.25, 0.75], [1.0, 0.0]])
    q = torch.tensor([[1.0, 0.0]])
    assert sv.accept_with_uniforms(p, q, [0], torch.tensor([0.2499, 0.5], dtype=torch.float64)) == (1, 0)
    assert sv.accept_with_uniforms(p, q, [0], torch.tensor([0.25, 0.5], dtype=torch.float64)) == (0, 1)


def test_sampling_threshold_picks_smallest_index(sv, isa):
    """All accepted, p_K = [1, 1, 2] (mass 4): u in [0, .25) -> 0, [.25, .5) -> 1, [.5, 1) -> 2."""
    p = torch.tensor([[1.0, 1.0, 2.0]])
    q = torch.empty(0, 3)
    for u, want in [(0.0, 0), (0.2499, 0), (0.25, 1), (0.4999, 1), (0.5, 2), (0.999999, 2)]:
        assert sv.accept_with_uniforms(p, q, [], torch.tensor([u], dtype=torch.float64)) == (0, want)


def test_same_seed_same_result_and_state(sv, isa):
    g = torch.Generator().manual_seed(0)
    p, q, tokens = random_round(g, 4, 5000, 0.3)
    a, b = torch.Generator().manual_seed(123), torch.Generator().manual_seed(123)
    ra = [sv.accept(p, q, tokens, a) for _ in range(200)]
    rb = [sv.accept(p, q, tokens, b) for _ in range(200)]
    assert ra == rb
    assert torch.equal(a.get_state(), b.get_state())
    c = torch.Generator().manual_seed(124)
    assert [sv.accept(p, q, tokens, c) for _ in range(200)] != ra


def test_draws_exactly_k_plus_one_uniforms(sv, isa):
    """accept(g) == accept_with_uniforms(torch.rand(K+1, float64, g')) with g' seeded alike,
    and both generators end in the same state, whatever the outcome."""
    g = torch.Generator().manual_seed(5)
    for k in [0, 1, 4, 7]:
        p, q, tokens = random_round(g, k, 300, 0.5)
        a, b = torch.Generator().manual_seed(k), torch.Generator().manual_seed(k)
        for _ in range(100):
            got = sv.accept(p, q, tokens, a)
            u = torch.rand(k + 1, dtype=torch.float64, generator=b)
            assert got == sv.accept_with_uniforms(p, q, tokens, u)
        assert torch.equal(a.get_state(), b.get_state())


def test_default_generator_is_torch_default(sv, isa):
    g = torch.Generator().manual_seed(9)
    p, q, tokens = random_round(g, 3, 100, 0.0)
    torch.manual_seed(77)
    first = [sv.accept(p, q, tokens) for _ in range(50)]
    torch.manual_seed(77)
    assert [sv.accept(p, q, tokens) for _ in range(50)] == first
