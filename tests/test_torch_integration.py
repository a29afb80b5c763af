"""The ops as torch sees them: opcheck (schema, fake tensors, dispatch) and torch.compile."""
from __future__ import annotations

import torch
from conftest import compile_fullgraph


def inputs():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, 100, generator=g), -1)
    q = torch.softmax(torch.randn(4, 100, generator=g), -1)
    return p, q, p[:4].argmax(-1)


def test_opcheck_every_op(sv):
    p, q, t = inputs()
    u = torch.rand(5, dtype=torch.float64)
    torch.library.opcheck(sv.ops.verify_greedy, (p, t))
    torch.library.opcheck(sv.ops.accept, (p, q, t, u, "token"))
    torch.library.opcheck(sv.ops.accept, (p, q, t, u))
    for method in ("token", "block"):  # one-hot drafts (None) and block verification
        torch.library.opcheck(sv.ops.accept, (p, None, t, u, method))
        torch.library.opcheck(sv.ops.accept, (p, q, t, u, method))
    torch.library.opcheck(sv.ops._row_masses, (p,))


def test_opcheck_logits_ops(sv):
    g = torch.Generator().manual_seed(1)
    target = torch.randn(5, 100, generator=g)
    draft = torch.randn(4, 100, generator=g)
    t = draft.argmax(-1)
    u = torch.rand(5, dtype=torch.float64, generator=g)
    for params in ((0.8, 0, 0.9, 0.0), (1.0, 5, 1.0, 0.1), (0.0, 0, 1.0, 0.0)):
        torch.library.opcheck(sv.ops.warp, (target,) + params)
        torch.library.opcheck(sv.ops.warp, (target[0],) + params)
        torch.library.opcheck(sv.ops.sample, (target,) + params + (u,))
        torch.library.opcheck(sv.ops.sample, (target[0],) + params + (u[0],))
        torch.library.opcheck(sv.ops.accept_logits, (target, draft, t) + params + (u,))
        torch.library.opcheck(sv.ops.accept_logits, (target, draft, t) + params + (u, "token"))
        for d in (draft, None):
            torch.library.opcheck(sv.ops.accept_logits, (target, d, t) + params + (u, "block"))
        torch.library.opcheck(sv.ops.accept_logits, (target, None, t) + params + (u,))
    # Temperature 0 draws nothing: the uniforms may be None.
    torch.library.opcheck(sv.ops.sample, (target, 0.0, 0, 1.0, 0.0, None))
    torch.library.opcheck(sv.ops.accept_logits, (target, None, t, 0.0, 0, 1.0, 0.0, None))
    torch.library.opcheck(sv.ops.accept_logits, (target, None, t, 0.0, 0, 1.0, 0.0, u, "token"))


def test_compile_logits_ops_fullgraph(sv):
    g = torch.Generator().manual_seed(3)
    target = torch.randn(5, 100, generator=g)
    draft = target[:4] + torch.randn(4, 100, generator=g)
    u = torch.rand(5, dtype=torch.float64, generator=g)

    def round_(target, draft, u):
        tokens = sv.sample_with_uniforms(draft, u[:4], temperature=0.8, top_p=0.9)
        n, tok = sv.accept_logits_with_uniforms(target, draft, tokens, u, temperature=0.8, top_p=0.9)
        rows = sv.warp(target, temperature=0.8, top_p=0.9)
        return torch.cat([tokens, torch.tensor([n, tok])]), rows

    compiled = compile_fullgraph(round_)
    for _ in range(3):
        want = round_(target, draft, u)
        got = compiled(target, draft, u)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        u = torch.rand(5, dtype=torch.float64, generator=g)


def test_compile_fullgraph(sv):
    p, q, t = inputs()
    u = torch.rand(5, dtype=torch.float64)

    def verify(p, q, t, u):
        n_greedy, tok_greedy = sv.verify_greedy(p, t)
        n, tok = sv.accept_with_uniforms(p, q, t, u)
        n_one_hot, tok_one_hot = sv.accept_with_uniforms(p, None, t, u)
        n_block, tok_block = sv.accept_with_uniforms(p, q, t, u, method="block")
        return torch.tensor([n_greedy, tok_greedy, n, tok, n_one_hot, tok_one_hot, n_block, tok_block])

    compiled = compile_fullgraph(verify)
    assert torch.equal(compiled(p, q, t, u), verify(p, q, t, u))
    t2 = t.clone()
    t2[0] = (t2[0] + 1) % 100
    assert torch.equal(compiled(p, q, t2, u), verify(p, q, t2, u))


def test_compile_accept_with_default_generator(sv):
    p, q, t = inputs()

    def sample(p, q, t):
        n, tok = sv.accept(p, q, t)
        return torch.tensor([n, tok])

    compiled = compile_fullgraph(sample)
    torch.manual_seed(3)
    got = [compiled(p, q, t) for _ in range(20)]
    torch.manual_seed(3)
    assert all(torch.equal(a, sample(p, q, t)) for a in got)


def test_eager_fast_path_keeps_torch_function(sv):
    """The eager wrappers call the op's builtin, with a generator inside
    DisableTorchFunctionSubclass: a torch function mode still sees the call (the draw from the
    generator, then the op with the drawn uniforms), and torch function handling is on again
    afterwards, also after a call that raises."""
    from torch.overrides import TorchFunctionMode

    p, q, t = inputs()
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append((str(func), type(args[3]).__name__ if len(args) > 3 else None))
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(1)
    want = sv.accept(p, q, t, g)
    with Record():
        g.manual_seed(1)
        assert sv.accept(p, q, t, g) == want
        sv.verify_greedy(p, t)
    assert any("rand" in f for f, _ in seen), seen
    assert any("accept" in f and arg == "Tensor" for f, arg in seen), seen
    assert any("verify_greedy" in f for f, _ in seen), seen
    assert torch._C._is_torch_function_enabled()
    bad = p.clone()
    bad[0, 0] = float("nan")
    state = g.get_state()
    try:
        sv.accept(bad, q, t, g)
    except ValueError:
        pass
    else:
        raise AssertionError("a NaN in row 0 must raise")
    assert torch._C._is_torch_function_enabled()
    assert torch.equal(g.get_state(), state)


def test_public_api_is_all(sv):
    """__all__ is the public API: every name in it exists and is documented; every public
    function or class the package defines is in it; internal ops have private names."""
    import inspect

    assert len(set(sv.__all__)) == len(sv.__all__)
    for name in sv.__all__:
        obj = getattr(sv, name)  # AttributeError: a name in __all__ that does not exist
        assert callable(obj), name
        assert inspect.getdoc(obj) and len(inspect.getdoc(obj)) > 40, f"{name} has no docstring"
    package = sv.__name__
    defined_here = [
        name for name, obj in vars(sv).items()
        if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
        and (obj.__module__ == package or obj.__module__.startswith(package + "."))
    ]
    assert sorted(defined_here) == sorted(sv.__all__)
    # Public functions and classes of the package's modules are either in __all__ or
    # documented helpers of the module they live in (type aliases, not re-exported).
    for module in (sv.decoder, sv._api):
        for name, obj in vars(module).items():
            if (not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
                    and obj.__module__ == module.__name__):
                assert name in sv.__all__, f"{module.__name__}.{name} is public but not exported"
    # The internal ops exist only under private names, in the op namespace and the package.
    for internal in ("row_masses", "force_isa"):
        assert not hasattr(sv.ops, internal) and not hasattr(sv, internal), internal
        assert hasattr(sv.ops, "_" + internal), internal
    assert callable(sv._force_isa)
    # Every public method of the public classes is documented, with Args/Returns where it
    # takes arguments or returns something.
    for cls in (sv.SpeculativeDecoder, sv.DecodeStats):
        for name, member in vars(cls).items():
            if name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            doc = inspect.getdoc(member)
            assert doc, f"{cls.__name__}.{name} has no docstring"
            if inspect.isfunction(member):
                assert "Returns:" in doc, f"{cls.__name__}.{name}: no Returns section"
    for name in ("verify_greedy", "accept", "accept_with_uniforms", "SpeculativeDecoder", "warp", "sample",
                 "sample_with_uniforms", "accept_logits", "accept_logits_with_uniforms"):
        doc = inspect.getdoc(getattr(sv, name))
        assert "Args:" in doc and "Raises:" in doc, name
    for name in ("warp", "sample", "sample_with_uniforms", "accept_logits", "accept_logits_with_uniforms"):
        doc = inspect.getdoc(getattr(sv, name))
        assert "Returns:" in doc and "top_p (`float`" in doc and "{args}" not in doc, name
    doc = inspect.getdoc(sv.SpeculativeDecoder.from_logits)
    assert "Args:" in doc and "Returns:" in doc and "Raises:" in doc
    # The transformers adapter: reachable from the kernel module (whose name is generated),
    # documented, and transformers is not imported by importing the package.
    adapter = sv.transformers
    assert adapter.__name__ == sv.__name__ + ".transformers"
    for name in ("speculative_decoder", "logits_steps", "CachedCausalLM"):
        doc = inspect.getdoc(getattr(adapter, name))
        assert doc and "Args:" in doc and ("Returns:" in doc or inspect.isclass(getattr(adapter, name))), name

