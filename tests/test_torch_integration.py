"""The ops as torch sees them: opcheck (schema, fake tensors, dispatch) and torch.compile."""
from __future__ import annotations

import torch


def inputs():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 100, generator=g), -1)
    q = torch.softmax(torch.randn(4, 100, generator=g), -1)
    return p, q, p[:4].argmax(-1)


def test_opcheck_every_op(sv):
    p, q, t = inputs()
    u = torch.rand(5, dtype=torch.float64)
    torch.library.opcheck(sv.ops.verify_greedy, (p, t))
    torch.library.opcheck(sv.ops.accept_with_uniforms, (p, q, t, u))
    torch.library.opcheck(sv.ops.accept, (p, q, t, None))
    torch.library.opcheck(sv.ops._row_masses, (p,))


def test_compile_fullgraph(sv):
    p, q, t = inputs()
    u = torch.rand(5, dtype=torch.float64)

    def verify(p, q, t, u):
        n_greedy, tok_greedy = sv.verify_greedy(p, t)
        n, tok = sv.accept_with_uniforms(p, q, t, u)
        return torch.tensor([n_greedy, tok_greedy, n, tok])

    compiled = torch.compile(verify, fullgraph=True, backend="eager")
    assert torch.equal(compiled(p, q, t, u), verify(p, q, t, u))
    t2 = t.clone()
    t2[0] = (t2[0] + 1) % 100
    assert torch.equal(compiled(p, q, t2, u), verify(p, q, t2, u))


def test_compile_accept_with_default_generator(sv):
    p, q, t = inputs()

    def sample(p, q, t):
        n, tok = sv.accept(p, q, t)
        return torch.tensor([n, tok])

    compiled = torch.compile(sample, fullgraph=True, backend="eager")
    torch.manual_seed(3)
    got = [compiled(p, q, t) for _ in range(20)]
    torch.manual_seed(3)
    assert all(torch.equal(a, sample(p, q, t)) for a in got)


def test_public_api_is_all(sv):
    assert sorted(sv.__all__) == sorted(
        ["verify_greedy", "accept", "accept_with_uniforms", "SpeculativeDecoder", "isa", "available_isas"])
    for name in sv.__all__:
        assert hasattr(sv, name)
