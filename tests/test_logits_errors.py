"""Every bad parameter and bad row of the logits ops, one by one: the exception type, a
message naming the argument (and the row), and the generator unchanged after a call that
raises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

K, V = 3, 20
NAN, INF = float("nan"), float("inf")


def logits():
    g = torch.Generator().manual_seed(0)
    return torch.randn(K + 1, V, generator=g), torch.randn(K, V, generator=g), torch.tensor([1, 2, 3])


def with_value(t, index, value):
    t = t.clone()
    t[index] = value
    return t


P, Q, T = logits()
U = torch.full((K + 1,), 0.5, dtype=torch.float64)

OPS = ["warp", "sample", "sample_with_uniforms", "accept_logits", "accept_logits_with_uniforms"]


def call(sv, op, params, g=None, target=P, draft=Q, tokens=T, uniforms=None):
    """The op with its usual good arguments and `params` as keywords."""
    if op == "warp":
        return sv.warp(target, **params)
    if op == "sample":
        return sv.sample(target, generator=g, **params)
    if op == "sample_with_uniforms":
        shape = target.shape[:-1] if isinstance(target, torch.Tensor) else (K + 1,)
        u = uniforms if uniforms is not None else torch.full(shape, 0.5, dtype=torch.float64)
        return sv.sample_with_uniforms(target, u, **params)
    if op == "accept_logits":
        return sv.accept_logits(target, draft, tokens, generator=g, **params)
    return sv.accept_logits_with_uniforms(target, draft, tokens, U if uniforms is None else uniforms, **params)


BAD_PARAMS = [
    # (params, exception, message pattern)
    (dict(temperature=-1.0), ValueError, r"temperature must be a float >= 0.*got -1.0"),
    (dict(temperature=NAN), ValueError, r"temperature must be a float >= 0.*got nan"),
    (dict(temperature=INF), ValueError, r"temperature must be .*finite in float32, got inf"),
    (dict(temperature=1e39), ValueError, r"temperature must be .*finite in float32, got 1e\+39"),
    (dict(temperature=True), TypeError, r"temperature must be a float, got bool"),
    (dict(temperature=np.bool_(True)), TypeError, r"temperature must be a float, got bool"),
    (dict(temperature="1.0"), TypeError, r"temperature must be a float, got str"),
    (dict(temperature=None), TypeError, r"temperature must be a float, got NoneType"),
    (dict(temperature=torch.ones(2)), TypeError, r"temperature must be a float, got a torch.float32 tensor"),
    (dict(temperature=1 + 2j), TypeError, r"temperature must be a float, got complex"),
    (dict(top_k=-1), ValueError, r"top_k must be an int >= 0 \(0 = off\), got -1"),
    (dict(top_k=2 ** 63), ValueError, r"top_k must be an int >= 0 \(0 = off\), got 9223372036854775808"),
    (dict(top_k=1.5), TypeError, r"top_k must be an int, got float"),
    (dict(top_k=True), TypeError, r"top_k must be an int, got bool"),
    (dict(top_k="3"), TypeError, r"top_k must be an int, got str"),
    (dict(top_k=torch.tensor(2.0)), TypeError, r"top_k must be an int, got a torch.float32 tensor"),
    (dict(top_p=0.0), ValueError, r"top_p must be a float in \(0, 1\] \(1 = off\), got 0.0"),
    (dict(top_p=-0.5), ValueError, r"top_p must be a float in \(0, 1\]"),
    (dict(top_p=1.5), ValueError, r"top_p must be a float in \(0, 1\].*got 1.5"),
    (dict(top_p=NAN), ValueError, r"top_p must be a float in \(0, 1\].*got nan"),
    (dict(top_p=False), TypeError, r"top_p must be a float, got bool"),
    (dict(top_p=[0.5]), TypeError, r"top_p must be a float, got list"),
    (dict(min_p=1.0), ValueError, r"min_p must be a float in \[0, 1\) \(0 = off\), got 1.0"),
    (dict(min_p=-0.1), ValueError, r"min_p must be a float in \[0, 1\).*got -0.1"),
    (dict(min_p=NAN), ValueError, r"min_p must be a float in \[0, 1\).*got nan"),
    (dict(min_p=True), TypeError, r"min_p must be a float, got bool"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", BAD_PARAMS, ids=[f"{next(iter(c[0]))}={next(iter(c[0].values()))!r}"[:40]
                                                  for c in BAD_PARAMS])
def test_bad_parameter(sv, op, case):
    params, exc, pattern = case
    g = torch.Generator().manual_seed(1)
    state = g.get_state()
    with pytest.raises(exc, match=rf"^spec_verify\.{op}: " + pattern):
        call(sv, op, params, g)
    assert torch.equal(g.get_state(), state)


GOOD_PARAMS = [
    dict(temperature=1),  # an int is a number
    dict(temperature=np.float32(0.7), top_k=np.int64(5), top_p=np.float64(0.9), min_p=np.float16(0.01)),
    dict(temperature=torch.tensor(0.7), top_k=torch.tensor(5), top_p=torch.tensor(0.9, dtype=torch.float64)),
    dict(top_k=10 ** 12, top_p=1, min_p=0),  # top_k beyond V keeps everything
    dict(temperature=0),
    dict(temperature=np.int32(0)),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("params", GOOD_PARAMS, ids=range(len(GOOD_PARAMS)))
def test_numbers_of_every_kind_are_accepted(sv, op, params):
    plain = {k: (int(v) if k == "top_k" else float(v)) for k, v in params.items()}
    g1, g2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    a, b = call(sv, op, params, g1), call(sv, op, plain, g2)
    assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b)


def rows_cases():
    """(op, arguments, exception, pattern) for bad rows and bad tensors."""
    cases = []
    for op in ("warp", "sample", "sample_with_uniforms"):
        cases += [
            (op, dict(target=with_value(P, (2, 5), NAN)), ValueError, r"logits\[2, 5\] = nan is NaN"),
            (op, dict(target=with_value(P, (1, 0), INF)), ValueError,
             r"logits\[1, 0\] = inf is infinite; logits may be -inf"),
            (op, dict(target=with_value(P, 3, -INF)), ValueError, r"logits\[3\] has no finite value"),
            (op, dict(target=with_value(P, (0, 4), 3e38), params=dict(temperature=0.5)), ValueError,
             r"logits\[0, 4\] = 3e\+38 divided by the temperature overflows float32"),
            (op, dict(target=P.double()), TypeError, r"logits must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
            (op, dict(target=P.long()), TypeError, r"logits must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.int64"),
            (op, dict(target=torch.empty(0)), ValueError, r"logits must be \[V\] or \[R, V\] with V >= 1, got shape \[0\]"),
            (op, dict(target=P[None]), ValueError, r"logits must be \[V\] or \[R, V\]"),
            (op, dict(target=P.to("meta")), ValueError, r"logits must be on the CPU, got a tensor on meta"),
            (op, dict(target=P.tolist()), TypeError, r"logits must be a torch.Tensor, got list"),
        ]
    cases += [
        ("sample_with_uniforms", dict(uniforms=torch.full((K + 1,), 0.5)), TypeError,
         r"uniforms must have dtype torch.float64, got torch.float32"),
        ("sample_with_uniforms", dict(uniforms=torch.full((K,), 0.5, dtype=torch.float64)), ValueError,
         r"uniforms must have shape \[R\] = \[4\], got \[3\]"),
        ("sample_with_uniforms", dict(uniforms=torch.tensor([0.5, 0.5, 1.0, 0.5], dtype=torch.float64)),
         ValueError, r"uniforms\[2\] = 1 is outside \[0, 1\)"),
        ("sample_with_uniforms", dict(target=P[0], uniforms=torch.full((1,), 0.5, dtype=torch.float64)),
         ValueError, r"uniforms must have shape \[\] \(one row\), got \[1\]"),
        ("sample_with_uniforms", dict(uniforms=[0.5] * 4), TypeError, r"uniforms must be a torch.Tensor, got list"),
    ]
    for op in ("accept_logits", "accept_logits_with_uniforms"):
        cases += [
            (op, dict(target=with_value(P, (0, 5), NAN)), ValueError, r"target_logits\[0, 5\] = nan is NaN"),
            (op, dict(draft=with_value(Q, (0, 7), NAN)), ValueError, r"draft_logits\[0, 7\] = nan is NaN"),
            (op, dict(target=with_value(P, (0, 1), INF)), ValueError, r"target_logits\[0, 1\] = inf is infinite"),
            (op, dict(draft=with_value(Q, (0, 2), INF)), ValueError, r"draft_logits\[0, 2\] = inf is infinite"),
            (op, dict(target=with_value(P, 0, -INF)), ValueError, r"target_logits\[0\] has no finite value"),
            (op, dict(draft=with_value(Q, 0, -INF)), ValueError, r"draft_logits\[0\] has no finite value"),
            (op, dict(params=dict(temperature=0.8, method="blocks")), ValueError,
             r'method must be "token" or "block", got \'blocks\''),
            (op, dict(target=P.double()), TypeError, r"target_logits must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
            (op, dict(draft=Q.double()), TypeError, r"draft_logits must have dtype torch.float32, torch.float16 or torch.bfloat16, got torch.float64"),
            (op, dict(draft=P), ValueError, r"draft_logits must have shape \[K, V\] = \[3, 20\], got \[4, 20\]"),
            (op, dict(target=P[0]), ValueError, r"target_logits must be 2-D"),
            (op, dict(tokens=T[:2]), ValueError, r"draft_tokens must have shape \[K\] = \[3\]"),
            (op, dict(tokens=torch.tensor([1, 20, 3])), ValueError, r"draft_tokens\[1\] = 20 is outside the vocabulary"),
            (op, dict(tokens=[1, True, 3]), TypeError, r"draft_tokens\[1\] must be an int, got bool"),
            (op, dict(tokens=T.float()), TypeError, r"draft_tokens must have an integer dtype"),
            (op, dict(target=P.to("meta")), ValueError, r"target_logits must be on the CPU"),
            (op, dict(draft=Q.to("meta")), ValueError, r"draft_logits must be on the CPU"),
            (op, dict(draft=Q.tolist()), TypeError, r"draft_logits must be a torch.Tensor, got list"),
        ]
    cases += [
        ("accept_logits_with_uniforms", dict(uniforms=U.float()), TypeError, r"uniforms must have dtype torch.float64"),
        ("accept_logits_with_uniforms", dict(uniforms=U[:K]), ValueError, r"uniforms must have shape \[K\+1\] = \[4\]"),
        ("accept_logits_with_uniforms", dict(uniforms=with_value(U, 1, -0.25)), ValueError,
         r"uniforms\[1\] = -0.25 is outside \[0, 1\)"),
    ]
    return cases


ROW_CASES = rows_cases()


@pytest.mark.parametrize("case", ROW_CASES, ids=[f"{c[0]}-{c[2].__name__}-{i}" for i, c in enumerate(ROW_CASES)])
def test_bad_row_or_tensor(sv, case):
    op, args, exc, pattern = case
    args = dict(args)
    params = args.pop("params", dict(temperature=0.8, top_p=0.9))
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    before = {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor) and v.device.type == "cpu"}
    with pytest.raises(exc, match=rf"^spec_verify\.{op}: " + pattern):
        call(sv, op, params, g, **args)
    assert torch.equal(g.get_state(), state), "the generator advanced on a call that raised"
    for k, v in before.items():  # bit for bit (NaN payloads included)
        assert torch.equal(args[k].view(torch.uint8), v.view(torch.uint8)), f"{k} was written by a call that raised"


def test_generator_unchanged_when_a_later_row_is_bad(sv):
    """The uniforms are drawn before the rows are read: a bad row found late puts them back."""
    g = torch.Generator().manual_seed(4)
    state = g.get_state()
    x = with_value(P, (3, 19), NAN)  # rows 0-2 are sampled fine, row 3 is bad
    with pytest.raises(ValueError, match=r"logits\[3, 19\] = nan"):
        sv.sample(x, temperature=0.8, generator=g)
    assert torch.equal(g.get_state(), state)
    # accept_logits: draft rows equal to the target's accept every draft token, so the round
    # reads row K, which is bad.
    target = with_value(P, (K, 0), INF)
    tokens = P[:K].argmax(-1)
    with pytest.raises(ValueError, match=rf"target_logits\[{K}, 0\] = inf"):
        sv.accept_logits(target, P[:K].clone(), tokens, temperature=0.8, generator=g)
    assert torch.equal(g.get_state(), state)
    # ...while a round decided before the bad row draws its K+1 uniforms and succeeds.
    fine = with_value(P, (K, 0), INF)
    bad_token = with_value(P, (0, int(tokens[0])), -INF)  # token 0 has target probability 0
    bad_token[K, 0] = INF
    n, _ = sv.accept_logits(bad_token, P[:K].clone(), tokens, temperature=0.8, generator=g)
    assert n == 0 and not torch.equal(g.get_state(), state)
    del fine


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("which", ["target", "draft"])
@pytest.mark.parametrize("value", [NAN, INF])
def test_a_reused_buffer_is_read_again(sv, k, which, value):
    """A model that writes its logits into the same buffers every round: a round at
    temperature only must judge what the rows hold now. A bad value written into a row the
    round reads, at the address an earlier round last took bounds from (the draft's row 0
    with K = 1), is reported."""
    target, draft = P[: k + 1].clone(), P[:k].clone()  # every draft token accepted
    tokens = P[:k].argmax(-1)
    u = torch.full((k + 1,), 0.5, dtype=torch.float64)
    assert sv.accept_logits_with_uniforms(target, draft, tokens, u, temperature=0.8)[0] == k
    (target if which == "target" else draft)[0, 7] = value
    with pytest.raises(ValueError, match=rf"{which}_logits\[0, 7\] = {value}"):
        sv.accept_logits_with_uniforms(target, draft, tokens, u, temperature=0.8)


def test_bad_generator(sv):
    for op in ("sample", "accept_logits"):
        with pytest.raises(TypeError, match=rf"^spec_verify\.{op}: generator must be a torch.Generator or None, got int"):
            call(sv, op, {}, g=3)


def test_decoder_from_logits_rejects_bad_arguments(sv):
    step = lambda seq: torch.zeros(V)  # noqa: E731
    target = lambda prefix, proposed: torch.zeros(len(proposed) + 1, V)  # noqa: E731
    what = r"^SpeculativeDecoder\.from_logits: "
    with pytest.raises(TypeError, match=what + "draft_logits_step must be callable, got int"):
        sv.SpeculativeDecoder.from_logits(1, target, schedule="constant")
    with pytest.raises(TypeError, match=what + "target_logits_step must be callable, got NoneType"):
        sv.SpeculativeDecoder.from_logits(step, None, schedule="constant")
    with pytest.raises(ValueError, match=what + r"top_p must be a float in \(0, 1\]"):
        sv.SpeculativeDecoder.from_logits(step, target, top_p=0, schedule="constant")
    with pytest.raises(TypeError, match=what + "temperature must be a float, got bool"):
        sv.SpeculativeDecoder.from_logits(step, target, temperature=False, schedule="constant")
    with pytest.raises(TypeError, match=what + "generator must be a torch.Generator or None"):
        sv.SpeculativeDecoder.from_logits(step, target, generator=0, schedule="constant")
    with pytest.raises(ValueError, match=r"k must be an int in \[0, 1024\]"):
        sv.SpeculativeDecoder.from_logits(step, target, k=-1, schedule="constant")


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_decoder_from_logits_names_the_callback(sv, temperature):
    """Bad output of either logits callback raises naming that callback."""
    good_draft = lambda seq: torch.zeros(V)  # noqa: E731
    good_target = lambda prefix, proposed: torch.zeros(len(proposed) + 1, V)  # noqa: E731
    cases = [
        (lambda seq: torch.zeros(V).double(), good_target, TypeError, r"draft_logits_step returned logits of dtype torch.float64"),
        (lambda seq: torch.zeros(1, V), good_target, ValueError, r"draft_logits_step returned logits of shape \[1, 20\], expected \[V\]"),
        (lambda seq: [0.0] * V, good_target, TypeError, r"draft_logits_step returned a list"),
        (lambda seq: with_value(torch.zeros(V), 3, NAN), good_target, ValueError,
         r"the sampling op rejected draft_logits_step's logits after 2 tokens: spec_verify.sample: logits\[0, 3\] = nan"),
        (good_draft, lambda prefix, proposed: with_value(torch.zeros(len(proposed) + 1, V), (0, 2), NAN), ValueError,
         r"rejected target_logits_step's logits: spec_verify.accept_logits: target_logits\[0, 2\] = nan"),
        (good_draft, lambda prefix, proposed: torch.zeros(len(proposed) + 1, V).double(), TypeError,
         r"target_logits_step returned rows of dtype torch.float64"),
    ]
    if temperature:  # greedy never stacks the draft's rows: a V mismatch goes unnoticed then
        cases.append((good_draft, lambda prefix, proposed: torch.zeros(len(proposed) + 1, V + 1), ValueError,
                      r"draft_logits_step returned logits with V = 20 columns but target_logits_step "
                      r"returned rows with V = 21"))
    for draft, target, exc, pattern in cases:
        dec = sv.SpeculativeDecoder.from_logits(draft, target, k=2, temperature=temperature, schedule="constant")
        with pytest.raises(exc, match=pattern):
            dec.generate([1, 2], max_new=5)


def test_raw_op_rejects_a_temperature_beyond_float32(sv):
    """The op itself (not only the wrapper) refuses a temperature that rounds to +inf in
    float32: x / inf would flatten every row to uniform."""
    # Torch 2.15 hands every error of a stable-ABI kernel to Python as a RuntimeError (2.13
    # and 2.14 a value error as a ValueError); the Python API raises ValueErrors on every torch.
    raw = RuntimeError if stable_from_215(sv) else ValueError
    with pytest.raises(raw, match=r"temperature = 1e\+39 overflows float32"):
        sv.ops.warp(torch.tensor([1.0, 0.0]), 1e39, 0, 1.0, 0.0)


def stable_from_215(sv) -> bool:
    from pathlib import Path

    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return Path(sv.__file__).parent.name.startswith("torch-stable-abi") and version >= (2, 15)
