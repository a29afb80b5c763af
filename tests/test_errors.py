"""Every malformed input of DESIGN.md's "Bad input" list: the exception type, a message
that names the problem, and nothing mutated (inputs and the generator are as they were)."""
from __future__ import annotations

import numpy as np
import re

import pytest
import torch

K, V = 3, 20


def good():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(K + 1, V, generator=g) + 0.01
    q = torch.rand(K, V, generator=g) + 0.01
    return p, q, torch.tensor([1, 2, 3])


def with_value(t, index, value):
    t = t.clone()
    t[index] = value
    return t


p0, q0, t0 = good()
ACCEPT_CASES = [
    # (description, (p, q, tokens), exception, message pattern)
    ("target 1-D", (p0[0], q0, t0), ValueError, r"target_probs must be 2-D"),
    ("target 3-D", (p0[None], q0, t0), ValueError, r"target_probs must be 2-D"),
    ("target empty V", (torch.empty(K + 1, 0), q0, t0), ValueError, r"target_probs must be 2-D.*V >= 1"),
    ("target no rows", (torch.empty(0, V), q0, t0), ValueError, r"target_probs must be 2-D.*K >= 0"),
    ("draft rows K+1", (p0, torch.rand(K + 1, V), t0), ValueError, r"draft_probs must have shape \[K, V\] = \[3, 20\], got \[4, 20\]"),
    ("draft other V", (p0, torch.rand(K, V + 1), t0), ValueError, r"draft_probs must have shape \[K, V\] = \[3, 20\]"),
    ("draft 1-D", (p0, q0[0], t0), ValueError, r"draft_probs must be 2-D"),
    ("tokens K-1", (p0, q0, t0[:2]), ValueError, r"draft_tokens must have shape \[K\] = \[3\].*got \[2\]"),
    ("tokens 2-D", (p0, q0, t0[None]), ValueError, r"draft_tokens must have shape \[K\]"),
    ("target float64", (p0.double(), q0, t0), TypeError, r"target_probs must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64 \(convert with .float\(\)\)"),
    ("target int32", (p0.int(), q0, t0), TypeError, r"target_probs must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.int32"),
    ("draft float64", (p0, q0.double(), t0), TypeError, r"draft_probs must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
    ("tokens float", (p0, q0, t0.float()), TypeError, r"draft_tokens must have an integer dtype, got torch.float32"),
    ("tokens bool", (p0, q0, t0 > 1), TypeError, r"draft_tokens must have an integer dtype, got torch.bool"),
    ("token negative", (p0, q0, torch.tensor([1, -1, 3])), ValueError, r"draft_tokens\[1\] = -1 is outside the vocabulary \[0, 20\)"),
    ("token = V", (p0, q0, torch.tensor([1, 2, V])), ValueError, r"draft_tokens\[2\] = 20 is outside"),
    ("target NaN", (with_value(p0, (0, 4), float("nan")), q0, t0), ValueError, r"target_probs\[0, 4\] = nan is NaN"),
    ("draft NaN", (p0, with_value(q0, (0, 9), float("nan")), t0), ValueError, r"draft_probs\[0, 9\] = nan is NaN"),
    ("target negative", (with_value(p0, (0, 3), -0.5), q0, t0), ValueError, r"target_probs\[0, 3\] = -0.5 is negative"),
    ("draft negative", (p0, with_value(q0, (0, 0), -1e-30), t0), ValueError, r"draft_probs\[0, 0\] = .* is negative"),
    ("target +inf", (with_value(p0, (0, 5), float("inf")), q0, t0), ValueError, r"target_probs\[0, 5\] = inf is infinite"),
    ("draft -inf", (p0, with_value(q0, (0, 5), float("-inf")), t0), ValueError, r"draft_probs\[0, 5\] = -inf is negative"),
    ("target zero row", (with_value(p0, 0, 0.0), q0, t0), ValueError, r"target_probs\[0\] has zero mass"),
    ("draft zero row", (p0, with_value(q0, 0, 0.0), t0), ValueError, r"draft_probs\[0\] has zero mass"),
    # Both rows of a position malformed: the target row's error is reported.
    ("target zero row, draft NaN", (with_value(p0, 0, 0.0), with_value(q0, (0, 1), float("nan")), t0),
     ValueError, r"target_probs\[0\] has zero mass"),
    ("target -0.0 row, draft NaN", (with_value(p0, 0, -0.0), with_value(q0, (0, 1), float("nan")), t0),
     ValueError, r"target_probs\[0\] has zero mass"),
    ("target NaN, draft negative", (with_value(p0, (0, 7), float("nan")), with_value(q0, (0, 1), -2.0), t0),
     ValueError, r"target_probs\[0, 7\] = nan is NaN"),
    ("target -0.0s, draft NaN", (with_value(p0, (0, 2), -0.0), with_value(q0, (0, 1), float("nan")), t0),
     ValueError, r"draft_probs\[0, 1\] = nan is NaN"),
    ("target on meta", (p0.to("meta"), q0, t0), ValueError, r"target_probs must be on the CPU, got a tensor on meta"),
    ("draft on meta", (p0, q0.to("meta"), t0), ValueError, r"draft_probs must be on the CPU"),
    ("tokens on meta", (p0, q0, t0.to("meta")), ValueError, r"draft_tokens must be on the CPU"),
    ("target a list", (p0.tolist(), q0, t0), TypeError, r"target_probs must be a torch.Tensor, got list"),
    ("tokens a string", (p0, q0, "123"), TypeError, r"draft_tokens must be a 1-D integer tensor or a list of ints"),
]


@pytest.mark.parametrize("case", ACCEPT_CASES, ids=[c[0] for c in ACCEPT_CASES])
def test_accept_rejects(sv, case):
    _, args, exc, pattern = case
    before = [a.clone() if isinstance(a, torch.Tensor) and a.device.type == "cpu" else a for a in args]
    g = torch.Generator().manual_seed(1)
    state = g.get_state()
    with pytest.raises(exc, match=pattern):
        sv.accept(*args, g)
    assert torch.equal(g.get_state(), state), "the generator advanced on a call that raised"
    for a, b in zip(args, before):
        if isinstance(a, torch.Tensor) and a.device.type == "cpu":
            assert same_bits(a, b), "an input was written by a call that raised"


# Block verification reads the same rows first and checks them the same way; one-hot drafts
# (draft_probs None) meet every case that does not involve the draft's rows.
ONE_HOT_CASES = [c for c in ACCEPT_CASES if "draft" not in c[0] and "meta" not in c[0]]


MODE_CASES = [(c, False) for c in ACCEPT_CASES] + [(c, True) for c in ONE_HOT_CASES]


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("case, one_hot", MODE_CASES,
                         ids=[c[0] + (", one-hot" if one_hot else "") for c, one_hot in MODE_CASES])
def test_accept_rejects_in_every_mode(sv, case, one_hot, method):
    _, args, exc, pattern = case
    if one_hot:
        args = (args[0], None, args[2])
    g = torch.Generator().manual_seed(1)
    state = g.get_state()
    with pytest.raises(exc, match=pattern):
        sv.accept(*args, g, method=method)
    assert torch.equal(g.get_state(), state), "the generator advanced on a call that raised"
    with pytest.raises(exc, match=pattern):
        sv.accept_with_uniforms(*args, torch.full((K + 1,), 0.5, dtype=torch.float64), method=method)


@pytest.mark.parametrize("method", ["tokens", "Block", "", None, 1])
def test_unknown_method(sv, method):
    for call in (lambda: sv.accept(p0, q0, t0, method=method),
                 lambda: sv.accept(p0, None, t0, method=method),
                 lambda: sv.accept_with_uniforms(p0, q0, t0, torch.zeros(K + 1, dtype=torch.float64),
                                                 method=method)):
        with pytest.raises(ValueError, match=r'^spec_verify\.accept(_with_uniforms)?: method must be "token" '
                                             r'or "block", got ' + re.escape(repr(method))):
            call()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Identical tensors, bit for bit: NaNs (of the same payload) compare equal, and every
    other value exactly (-0.0 differs from 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    return torch.equal(a, b)


def test_same_bits_tells_changed_values_apart():
    a = torch.tensor([1.0, float("nan"), 0.0])
    assert same_bits(a, a.clone())
    assert not same_bits(a, torch.tensor([2.0, float("nan"), 0.0]))
    assert not same_bits(a, torch.tensor([1.0, float("nan"), -0.0]))
    assert not same_bits(a, torch.tensor([1.0, 1.0, 0.0]))


GREEDY_CASES = [
    ("target 1-D", (p0[0], t0), ValueError, r"target_probs must be 2-D"),
    ("tokens K+1", (p0, torch.tensor([1, 2, 3, 4])), ValueError, r"draft_tokens must have shape \[K\] = \[3\]"),
    ("target float64", (p0.double(), t0), TypeError, r"must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
    ("tokens float", (p0, t0.double()), TypeError, r"draft_tokens must have an integer dtype"),
    ("token = V", (p0, torch.tensor([0, V, 1])), ValueError, r"draft_tokens\[1\] = 20 is outside"),
    ("NaN in row 0", (with_value(p0, (0, 2), float("nan")), t0), ValueError, r"target_probs\[0, 2\] = nan is NaN"),
    ("target on meta", (p0.to("meta"), t0), ValueError, r"must be on the CPU"),
]


@pytest.mark.parametrize("case", GREEDY_CASES, ids=[c[0] for c in GREEDY_CASES])
def test_verify_greedy_rejects(sv, case):
    _, args, exc, pattern = case
    with pytest.raises(exc, match=pattern):
        sv.verify_greedy(*args)


def test_uniforms_checked(sv):
    p, q, t = good()
    with pytest.raises(TypeError, match=r"uniforms must have dtype torch.float64, got torch.float32"):
        sv.accept_with_uniforms(p, q, t, torch.rand(K + 1))
    with pytest.raises(ValueError, match=r"uniforms must have shape \[K\+1\] = \[4\], got \[3\]"):
        sv.accept_with_uniforms(p, q, t, torch.rand(K, dtype=torch.float64))
    for bad in [1.0, -0.1, float("nan")]:
        u = torch.rand(K + 1, dtype=torch.float64)
        u[2] = bad
        with pytest.raises(ValueError, match=r"uniforms\[2\] = .* is outside \[0, 1\)"):
            sv.accept_with_uniforms(p, q, t, u)


def test_generator_type_checked(sv):
    p, q, t = good()
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        sv.accept(p, q, t, 123)


def test_forced_path_that_does_not_exist(sv):
    with pytest.raises(ValueError, match="'sse9' is not a path"):
        sv._force_isa("sse9")
    assert sv.isa() in sv.available_isas()


# Tokens are handled one way by every op: ints and anything with __index__ (NumPy integers,
# 0-d integer tensors) in a list or tuple, integer tensors of any dtype, NumPy integer
# arrays; bools are rejected in a list as in a tensor; values beyond int64 are reported as
# they are.
TOKEN_CASES = [
    ("bools in a list", [True, False, True], TypeError, r"spec_verify.{op}: draft_tokens\[0\] must be an int, got bool"),
    ("bool tensor", torch.tensor([True, False, True]), TypeError, r"draft_tokens must have an integer dtype, got torch.bool"),
    ("a float in a list", [1, 2.0, 3], TypeError, r"spec_verify.{op}: draft_tokens\[1\] must be an int, got float"),
    ("a float 0-d tensor in a list", [1, torch.tensor(2.0), 3], TypeError,
     r"draft_tokens\[1\] must be an int, got a torch.float32 tensor of shape \[\]"),
    ("nested list", [[1], [2], [3]], TypeError, r"draft_tokens\[0\] must be an int, got list"),
    ("uint64 2^64-1", torch.tensor([1, 2**64 - 1, 3], dtype=torch.uint64), ValueError,
     r"spec_verify.{op}: draft_tokens\[1\] = 18446744073709551615 is outside the vocabulary \[0, 20\)"),
    ("uint64 2^63", torch.tensor([1, 2, 2**63], dtype=torch.uint64), ValueError,
     r"draft_tokens\[2\] = 9223372036854775808 is outside the vocabulary \[0, 20\)"),
    ("uint64 2^63, strided", torch.tensor([1, 0, 2**63, 0, 3, 0], dtype=torch.uint64)[::2], ValueError,
     r"draft_tokens\[1\] = 9223372036854775808 is outside"),
    ("int 2^64 in a list", [1, 2**64, 3], ValueError, r"spec_verify.{op}: draft_tokens\[1\] = 18446744073709551616 is outside the vocabulary \[0, 20\)"),
    ("int -2^63-1 in a list", [-2**63 - 1, 2, 3], ValueError, r"draft_tokens\[0\] = -9223372036854775809 is outside"),
    ("int 2^63 in a tuple", (1, 2, 2**63), ValueError, r"draft_tokens\[2\] = 9223372036854775808 is outside"),
    ("uint64 = V", torch.tensor([1, 2, V], dtype=torch.uint64), ValueError, r"draft_tokens\[2\] = 20 is outside the vocabulary"),
    ("NumPy uint64 2^64-1", np.array([1, 2**64 - 1, 3], dtype=np.uint64), ValueError,
     r"draft_tokens\[1\] = 18446744073709551615 is outside"),
    ("NumPy bools", np.array([True, False, True]), TypeError, r"draft_tokens must have an integer dtype, got torch.bool"),
    ("a dict", {1: 2}, TypeError, r"draft_tokens must be a 1-D integer tensor or a list of ints, got dict"),
]
GOOD_TOKENS = [  # all mean [1, 2, 3]
    [1, 2, 3], (1, 2, 3), [np.int64(1), np.uint8(2), torch.tensor(3)], [torch.tensor(1, dtype=torch.uint64), 2, 3],
    np.array([1, 2, 3]), np.array([1, 2, 3], dtype=np.uint64),
    torch.tensor([1, 2, 3], dtype=torch.uint64), torch.tensor([1, 2, 3], dtype=torch.uint8),
    torch.tensor([1, 2, 3], dtype=torch.int16), torch.tensor([1, 2, 3], dtype=torch.uint32),
]


def every_op(sv, tokens):
    p, q, _ = good()
    u = torch.full((K + 1,), 0.5, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    return {"verify_greedy": lambda: sv.verify_greedy(p, tokens),
            "accept": lambda: sv.accept(p, q, tokens, g),
            "accept_with_uniforms": lambda: sv.accept_with_uniforms(p, q, tokens, u)}


@pytest.mark.parametrize("case", TOKEN_CASES, ids=[c[0] for c in TOKEN_CASES])
def test_tokens_rejected_by_every_op(sv, case):
    _, tokens, exc, pattern = case
    for op, call in every_op(sv, tokens).items():
        with pytest.raises(exc, match=pattern.format(op=op)):
            call()


def test_tokens_accepted_in_every_form(sv):
    want = {op: call() for op, call in every_op(sv, torch.tensor([1, 2, 3])).items()}
    for tokens in GOOD_TOKENS:
        assert {op: call() for op, call in every_op(sv, tokens).items()} == want, tokens


LAYOUTS = {
    "sparse": lambda t: t.to_sparse(),
    "sparse_csr": lambda t: t.to_sparse_csr(),
    "mkldnn": lambda t: t.to_mkldnn(),
}


# Every layout for the rows; the 1-D integer tokens can only be COO-sparse.
NON_DENSE = [(layout, 0, "target_probs") for layout in LAYOUTS] + \
    [(layout, 1, "draft_probs") for layout in LAYOUTS] + [("sparse", 2, "draft_tokens")]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout,position,name", NON_DENSE)
def test_non_dense_tensors_raise_type_error_naming_them(sv, layout, position, name):
    """A sparse, CSR or mkldnn argument gets a TypeError naming it (not torch's "could not
    run ... with arguments from the 'SparseCPU' backend"), and the generator is untouched."""
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(4, 12, generator=g), -1)
    args = [p, p[:3].clone(), torch.tensor([1, 2, 3])]
    args[position] = LAYOUTS[layout](args[position])
    state = g.get_state()
    with pytest.raises(TypeError, match=rf"spec_verify.accept: {name} must be a dense \(strided\) tensor"):
        sv.accept(*args, generator=g)
    assert torch.equal(g.get_state(), state)
    if position == 0:
        with pytest.raises(TypeError, match=r"target_probs must be a dense"):
            sv.verify_greedy(args[0], args[2])
        with pytest.raises(TypeError, match=r"logits must be a dense"):
            sv.sample(args[0], temperature=0.7, generator=g)
        assert torch.equal(g.get_state(), state)


def test_ops_take_uniforms_not_a_generator(sv):
    """No op takes a generator: each op that samples takes `uniforms` where it took one (the
    Python layer draws them: spec_verify/_uniforms.py). Given, they decide the round; a
    generator in their place is refused by the op's schema, and nothing is drawn from it."""
    p, q, t = good()
    u = torch.full((K + 1,), 0.5, dtype=torch.float64)
    logits = p.log()
    tree = (torch.tensor([1, 2, 3]), torch.tensor([-1, 0, 1]))
    calls = {
        "accept": lambda u: sv.ops.accept(p, q, t, u, "token"),
        "sample": lambda u: sv.ops.sample(logits, 1.0, 0, 1.0, 0.0, u),
        "accept_logits": lambda u: sv.ops.accept_logits(logits, None, t, 1.0, 0, 1.0, 0.0, u, "token"),
        "verify_tree": lambda u: sv.ops.verify_tree(logits, *tree, None, 1.0, 0, 1.0, 0.0, u),
        "verify_tree_probs": lambda u: sv.ops.verify_tree_probs(p, *tree, None, False, u),
    }
    for name in list(calls) + ["_verify_tree_ints", "_verify_tree_probs_ints", "verify_batch", "verify_batch_probs"]:
        schema = str(getattr(sv.ops, name).default._schema)
        assert "Generator" not in schema and "Tensor? uniforms=None" in schema, schema
    for op, call in calls.items():
        call(u)  # the uniforms alone: accepted
        g = torch.Generator().manual_seed(7)
        before = g.get_state()
        with pytest.raises(RuntimeError, match=r"uniforms"):
            call(g)
        assert torch.equal(g.get_state(), before), op
