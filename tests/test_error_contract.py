"""The error contract's last holes (issue 35), one reproducer each: logits rows read at
temperature 0 obey the rules of every temperature; nested and quantized tensors are a
TypeError naming the argument (or the callback); a drafter's tokens are checked before
they reach the target's callback; draft arguments of greedy calls are validated; stop tokens beyond int64 and
NumPy generators get the errors their kin get."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

NAN, INF = float("nan"), float("inf")
K, V = 3, 16


def logits(seed=0, rows=K + 1, dtype=torch.float32):
    return (torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * 2).to(dtype)


def with_value(t, index, value):
    t = t.clone()
    t[index] = value
    return t


U1 = torch.full((K + 1,), 0.5, dtype=torch.float64)


def logits_calls(sv, x, temperature):
    """Every op that reads logits rows, on rows x ([K+1, V]); row 0 is read by each."""
    t = dict(temperature=temperature)
    chain, parents = [int(i) for i in x[:K].argmax(-1) + 1], list(range(-1, K - 1))  # row 0's argmax missed
    chain = [c % V for c in chain]
    return [
        ("warp", lambda: sv.warp(x, **t)),
        ("sample", lambda: sv.sample(x, generator=torch.Generator().manual_seed(0), **t)),
        ("sample_with_uniforms", lambda: sv.sample_with_uniforms(x, U1, **t)),
        ("accept_logits", lambda: sv.accept_logits(x, None, chain, **t)),
        ("accept_logits_with_uniforms", lambda: sv.accept_logits_with_uniforms(x, x[:K].clone(), chain, U1, **t)),
        ("verify_tree", lambda: sv.verify_tree(x, chain, parents, **t)),
        ("verify_tree_with_uniforms", lambda: sv.verify_tree_with_uniforms(x, chain, parents, None, U1, **t)),
        ("verify_batch", lambda: sv.verify_batch(x, chain, [K], **t)),
    ]


BAD_ROWS = [  # (row 0 made so, the message after "<name>[0")
    ("masked", lambda x: with_value(x, 0, -INF), r"\] has no finite value \(every entry is -inf\)"),
    ("+inf", lambda x: with_value(with_value(x, (0, 5), INF), (0, 9), INF),
     r", 5\] = inf is infinite; logits may be -inf \(a masked token\) but not \+inf"),
    ("+inf in a masked row", lambda x: with_value(with_value(x, 0, -INF), (0, 11), INF), r", 11\] = inf is infinite"),
    ("NaN", lambda x: with_value(x, (0, 7), NAN), r", 7\] = nan is NaN"),
    ("NaN and +inf", lambda x: with_value(with_value(x, (0, 2), INF), (0, 7), NAN), r", 7\] = nan is NaN"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_temperature_0_reads_rows_by_the_rules_of_every_temperature(sv, isa, case, dtype):
    """The reproducer: a masked row at temperature 0 emitted token 0 where 1.0 raises. Now
    every logits op raises at 0 what it raises at 0.8, word for word, on every path."""
    _, make, pattern = case
    x = make(logits(1, dtype=dtype))
    for temperature in (0.0, 0.8):
        for op, call in logits_calls(sv, x, temperature):
            name = "logits" if op in ("warp", "sample", "sample_with_uniforms") else "target_logits"
            where = "sequence 0: " if op == "verify_batch" else ""
            with pytest.raises(ValueError, match=rf"^spec_verify\.{op}: {where}{name}\[0" + pattern):
                call()


def test_the_issue_reproducer(sv):
    row = torch.full((2, 16), -INF)
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"target_logits\[0\] has no finite value"):
            sv.accept_logits(row, None, [5], temperature=temperature)


def test_temperature_0_reads_no_row_after_the_deciding_one(sv, isa):
    """Rows after the deciding position stay unread at temperature 0: a masked row 2 when
    row 0 decides is no error (and the later row's error when it is read)."""
    x = logits(2)
    top = int(x[0].argmax())
    bad = with_value(x, 2, -INF)
    assert sv.accept_logits(bad, None, [(top + 1) % V, 0, 0], temperature=0.0) == (0, top)
    with pytest.raises(ValueError, match=r"target_logits\[2\] has no finite value"):
        sv.accept_logits(bad, None, [int(t) for t in x[:K].argmax(-1)], temperature=0.0)
    path, token = sv.verify_tree(bad, [(top + 1) % V, 0, 0], [-1, 0, 1], temperature=0.0)
    assert path.tolist() == [] and token == top
    # verify_greedy takes probabilities (or logits) as they are: +inf is its argmax.
    assert sv.verify_greedy(with_value(x, (0, 3), INF), [3, 0, 0])[0] >= 1


def test_greedy_sequences_of_a_batch_name_their_row(sv):
    x = torch.cat([logits(3, rows=2), with_value(logits(4, rows=2), (1, 4), INF)])
    tokens = [int(x[0].argmax()), int(x[2].argmax())]
    with pytest.raises(ValueError, match=r"^spec_verify\.verify_batch: sequence 1: target_logits\[3, 4\] = inf"):
        sv.verify_batch(x, tokens, [1, 2], temperature=[0.8, 0.0])


# Nested and quantized tensors -----------------------------------------------------------------

def nested(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor(list(t))


def jagged(t):
    return torch.nested.nested_tensor(list(t), layout=torch.jagged)


def quantized(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if t.dtype.is_floating_point:
            return torch.quantize_per_tensor(t.float(), 0.01, 0, torch.quint8)
        return torch.quantize_per_tensor(t.float(), 1.0, 0, torch.qint32)


KINDS = {"nested": (nested, "a dense \\(strided\\) tensor, got a nested tensor"),
         "jagged": (jagged, "a dense \\(strided\\) tensor, got a nested tensor"),
         "quantized": (quantized, "a dense tensor, not quantized, got a quantized tensor of dtype torch.q")}


def tensor_calls(sv):
    """(op, argument name, call(replace)) for each tensor argument of each op; replace(name,
    t) gives the argument, converted for the one under test."""
    p = torch.softmax(logits(5), -1)
    q, t, u = p[:K].clone(), torch.tensor([1, 2, 3]), U1.clone()
    g = torch.Generator().manual_seed(0)
    return [
        ("verify_greedy", "target_probs", lambda r: sv.verify_greedy(r("target_probs", p), t)),
        ("verify_greedy", "draft_tokens", lambda r: sv.verify_greedy(p, r("draft_tokens", t))),
        ("accept", "target_probs", lambda r: sv.accept(r("target_probs", p), q, t, g)),
        ("accept", "draft_probs", lambda r: sv.accept(p, r("draft_probs", q), t, g)),
        ("accept_with_uniforms", "uniforms", lambda r: sv.accept_with_uniforms(p, q, t, r("uniforms", u))),
        ("warp", "logits", lambda r: sv.warp(r("logits", p), temperature=0.0)),
        ("sample", "logits", lambda r: sv.sample(r("logits", p), generator=g)),
        ("sample_with_uniforms", "logits", lambda r: sv.sample_with_uniforms(r("logits", p), u)),
        ("accept_logits", "target_logits", lambda r: sv.accept_logits(r("target_logits", p), q, t, temperature=0.0)),
        ("accept_logits", "draft_logits", lambda r: sv.accept_logits(p, r("draft_logits", q), t, generator=g)),
        ("verify_tree", "target_logits", lambda r: sv.verify_tree(r("target_logits", p), t, [-1, 0, 1])),
        ("verify_tree", "draft_logits", lambda r: sv.verify_tree(p, t, [-1, 0, 1], r("draft_logits", p))),
        ("verify_tree_probs", "target_probs",
         lambda r: sv.verify_tree_probs(r("target_probs", p), t, torch.tensor([-1, 0, 1]), greedy=True)),
        ("verify_batch", "target_logits", lambda r: sv.verify_batch(r("target_logits", p), t, [K])),
        ("verify_batch", "draft_logits", lambda r: sv.verify_batch(p, t, [K], draft_logits=r("draft_logits", q))),
        ("verify_batch_probs", "target_probs", lambda r: sv.verify_batch_probs(r("target_probs", p), t, [K])),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_nested_and_quantized_tensors_are_a_type_error_naming_them(sv, kind):
    """The reproducers: NotImplementedError ... AutogradNestedTensor / QuantizedCPU before."""
    convert, what = KINDS[kind]
    g = torch.Generator().manual_seed(9)
    state = g.get_state()
    for op, name, call in tensor_calls(sv):
        if kind == "quantized" and name == "uniforms":
            continue  # float64 has no quantized form that keeps it float64; dtype is checked
        if kind == "jagged" and name in ("draft_tokens", "uniforms"):
            continue  # 1-D: a jagged tensor has ragged rows of at least one dimension
        with pytest.raises(TypeError, match=rf"^spec_verify\.{op}: {name} must be {what}"):
            call(lambda n, t: convert(t) if n == name else t)
    assert torch.equal(g.get_state(), state)


def test_the_nested_reproducers(sv):
    nt = nested(torch.softmax(torch.randn(3, 10), -1))
    with pytest.raises(TypeError, match=r"verify_greedy: target_probs must be a dense \(strided\) tensor"):
        sv.verify_greedy(nt, torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"accept: target_probs must be a dense tensor, not quantized"):
        sv.accept(quantized(torch.rand(3, 10)), None, [1, 2])


def tiny_target(vocab=V, calls=None):
    def target_step(prefix, proposed):
        if calls is not None:
            calls.append(proposed.tolist())
        g = torch.Generator().manual_seed(len(prefix))
        return torch.softmax(torch.randn(len(proposed) + 1, vocab, generator=g), -1)
    return target_step


@pytest.mark.parametrize("kind", ["nested", "quantized"])
def test_a_callback_returning_one_is_named(sv, kind):
    convert = KINDS[kind][0]
    target = tiny_target()
    dec = sv.SpeculativeDecoder(lambda prefix, k: ([1] * k, None), lambda p, d: convert(target(p, d)), k=2, schedule="constant")
    what = "a nested tensor" if kind == "nested" else "a quantized torch.quint8 tensor"
    with pytest.raises(TypeError, match=rf"^target_step returned {what}, expected a float32 tensor \[j\+1, V\]"):
        dec.generate([1], max_new=4)
    probs = lambda prefix, k: (torch.tensor([1] * k), convert(torch.full((k, V), 1.0 / V)))  # noqa: E731
    dec = sv.SpeculativeDecoder(probs, target, k=2, greedy=False, schedule="constant")
    with pytest.raises(TypeError, match=rf"^draft_step returned probs as {what}, expected"):
        dec.generate([1], max_new=4)
    step = lambda seq: convert(torch.zeros(2, V) if kind == "nested" else torch.zeros(V))  # noqa: E731
    dec = sv.SpeculativeDecoder.from_logits(step, lambda p, d: target(p, d).log(), k=2, temperature=0.5, schedule="constant")
    with pytest.raises(TypeError, match=rf"^draft_logits_step returned {what}, expected a float32 tensor \[V\]"):
        dec.generate([1], max_new=4)
    tree = sv.TreeDecoder(lambda prefix: ([1], [-1], None),
                          lambda p, t, par: convert(target(p, t)))
    with pytest.raises(TypeError, match=rf"^target_tree_step returned {what}, expected"):
        tree.generate([1], max_new=4)


# A drafter's tokens ----------------------------------------------------------------------------

def drafter(rounds):
    """A draft_step proposing rounds[i] in round i (then nothing)."""
    it = iter(rounds)

    def draft_step(prefix, k):
        return torch.tensor(next(it, [])[:k], dtype=torch.int64), None
    return draft_step


@pytest.mark.parametrize("greedy", [True, False])
def test_bad_draft_tokens_never_reach_target_step(sv, greedy):
    """The reproducer: a token >= V in round 2 reached the user's model (an IndexError of
    theirs); now draft_step is named, with the index, the value and V, and target_step
    never sees the token."""
    calls = []
    dec = sv.SpeculativeDecoder(drafter([[1, 2], [3, V + 4]]), tiny_target(calls=calls), k=2, greedy=greedy,
                                generator=torch.Generator().manual_seed(0), schedule="constant")
    with pytest.raises(ValueError, match=rf"^draft_step's tokens\[1\] = {V + 4} is outside the vocabulary "
                                         rf"\[0, {V}\) of target_step's rows$"):
        dec.generate([1], max_new=20)
    assert len(calls) == 1 and all(max(c) < V for c in calls)
    # A negative id is refused from the first round, before any target call.
    calls.clear()
    dec = sv.SpeculativeDecoder(drafter([[1, -3]]), tiny_target(calls=calls), k=2, greedy=greedy, schedule="constant")
    with pytest.raises(ValueError, match=r"^draft_step's tokens\[1\] = -3 is negative"):
        dec.generate([1], max_new=20)
    assert calls == []


def test_draft_tokens_are_checked_against_the_draft_rows_in_round_1(sv):
    calls = []
    step = lambda prefix, k: (torch.tensor([2, V]), torch.full((2, V), 1.0 / V))  # noqa: E731
    dec = sv.SpeculativeDecoder(step, tiny_target(calls=calls), k=2, greedy=False, schedule="constant")
    with pytest.raises(ValueError, match=rf"^draft_step's tokens\[1\] = {V} is outside the vocabulary \[0, {V}\) "
                                         r"of draft_step's rows$"):
        dec.generate([1], max_new=4)
    assert calls == []


def test_a_new_generation_learns_v_again(sv):
    """V is the current generation's: a decoder whose target changes V between generations
    checks each generation's tokens against its own target's rows."""
    dec = sv.SpeculativeDecoder(drafter([[V + 2], [V + 2]]), tiny_target(), k=1, schedule="constant")
    dec.generate([1], max_new=1)  # one round, k = 0 (no draft): V = 16 seen
    dec.target_step = tiny_target(vocab=V + 8)
    # Round 1 proposes V + 2: no V known in this generation yet, and V + 2 < V + 8.
    assert len(dec.generate([1], max_new=3)) == 4


def test_from_logits_draft_logits_step_changing_v(sv):
    """The reproducer: a V change within a round raised torch.stack's 'stack expects each
    tensor to be equal size'; across rounds (greedy too) the target's V is the reference."""
    target = lambda prefix, proposed: torch.zeros(len(proposed) + 1, V)  # noqa: E731
    widths = iter([V, V + 1] * 10)
    dec = sv.SpeculativeDecoder.from_logits(lambda seq: torch.zeros(next(widths)), target, k=2, temperature=0.7, schedule="constant")
    with pytest.raises(ValueError, match=rf"^draft_logits_step returned logits of shape \[{V + 1}\] after 2 tokens, "
                                         rf"but of shape \[{V}\] after 1 in the same round"):
        dec.generate([1], max_new=5)
    # Greedy stacks no rows: round 1 (V not known yet) passes with argmax tokens in range,
    # round 2 names the mismatch before target_logits_step is called.
    calls = []
    counting = lambda prefix, proposed: calls.append(1) or target(prefix, proposed)  # noqa: E731
    wide = lambda seq: with_value(torch.zeros(V + 4), 2, 1.0)  # noqa: E731
    dec = sv.SpeculativeDecoder.from_logits(wide, counting, k=2, temperature=0.0, schedule="constant")
    with pytest.raises(ValueError, match=rf"^draft_logits_step returned logits with V = {V + 4} columns but "
                                         rf"target_logits_step returned rows with V = {V}"):
        dec.generate([1], max_new=8)
    assert len(calls) == 1
    # In round 1 a token beyond the target's V can only be caught by the op: named as drawn
    # from draft_logits_step (not draft_step, which the user never passed).
    wide = lambda seq: with_value(torch.zeros(V + 4), V + 2, 1.0)  # noqa: E731  (its argmax: V + 2)
    dec = sv.SpeculativeDecoder.from_logits(wide, target, k=2, temperature=0.0, schedule="constant")
    with pytest.raises(ValueError, match=rf"^SpeculativeDecoder: the verification op rejected draft_logits_step's "
                                         rf"tokens: spec_verify.accept_logits: draft_tokens\[0\] = {V + 2} is outside"):
        dec.generate([1], max_new=8)


def test_prompt_lookup_style_draft_step_of_from_logits(sv):
    dec = sv.SpeculativeDecoder.from_logits(None, lambda p, d: torch.zeros(len(d) + 1, V), k=2, temperature=0.0,
                                            draft_step=drafter([[1], [V]]), schedule="constant")
    with pytest.raises(ValueError, match=rf"^draft_step's tokens\[0\] = {V} is outside the vocabulary \[0, {V}\) "
                                         r"of target_logits_step's rows$"):
        dec.generate([1], max_new=8)


def test_tree_drafts_are_checked_too(sv):
    trees = iter([([1, 2], [-1, -1]), ([3, V], [-1, 0])])
    calls = []

    def target_tree_step(prefix, tokens, parents):
        calls.append(tokens.tolist())
        return torch.softmax(torch.randn(len(tokens) + 1, V), -1)
    dec = sv.TreeDecoder(lambda prefix: (*next(trees), None), target_tree_step)
    with pytest.raises(ValueError, match=rf"^draft_tree's tokens\[1\] = {V} is outside the vocabulary \[0, {V}\) "
                                         r"of target_tree_step's rows$"):
        dec.generate([1], max_new=10)
    assert len(calls) == 1


# Greedy calls, stop tokens, generators ----------------------------------------------------------

def test_greedy_calls_check_their_draft_arguments(sv):
    x = logits(6)
    t = [int(i) for i in x[:K].argmax(-1)]
    bad = [(x[:K].double(), TypeError, r"draft_logits must have dtype torch.float32, torch.float16 or torch.bfloat16, "
                                       r"got torch.float64"),
           (x[:K].to_sparse(), TypeError, r"draft_logits must be a dense \(strided\) tensor"),
           (x, ValueError, r"draft_logits must have shape \[K, V\] = \[3, 16\], got \[4, 16\]")]
    for draft, exc, pattern in bad:
        with pytest.raises(exc, match=r"^spec_verify\.accept_logits: " + pattern):
            sv.accept_logits(x, draft, t, temperature=0.0)
        with pytest.raises(exc, match=r"^spec_verify\.accept_logits_with_uniforms: " + pattern):
            sv.accept_logits_with_uniforms(x, draft, t, U1, temperature=0.0)
    parents = [-1, 0, 1]
    for draft, exc, pattern in [(x.double(), TypeError, r"draft_logits must have dtype"),
                                (x[:K], ValueError, r"draft_logits must have shape \[N\+1, V\]")]:
        with pytest.raises(exc, match=r"^spec_verify\.verify_tree: " + pattern):
            sv.verify_tree(x, t, parents, draft, temperature=0.0)
        with pytest.raises(exc, match=r"^spec_verify\.verify_tree_probs: " + pattern.replace("logits", "probs")):
            sv.verify_tree_probs(x, t, parents, draft, greedy=True)
    # Well-formed draft rows are still unread: the outcome is verify_greedy's.
    assert sv.accept_logits(x, with_value(x[:K], 0, -INF), t, temperature=0.0) == sv.verify_greedy(x, t)


def test_stop_token_beyond_int64(sv):
    dec = sv.SpeculativeDecoder(drafter([]), tiny_target(), k=1, schedule="constant")
    for eos in (2**64, 2**63):
        with pytest.raises(ValueError, match=rf"^eos_token_id = {eos} is outside the range of token ids \[0, 2\^63\)"):
            dec.generate([1], max_new=2, eos_token_id=eos)
        with pytest.raises(ValueError, match=rf"^eos_token_id\[0\] = {eos} is outside"):
            dec.generate([1], max_new=2, eos_token_id=[eos])
    assert len(dec.generate([1], max_new=2, eos_token_id=2**63 - 1)) == 3


def test_a_numpy_generator_is_named_with_its_module(sv):
    rng = np.random.default_rng(0)
    name = r"numpy\.random\._generator\.Generator$"
    x = logits(7)
    for call, prefix in [(lambda: sv.sample(x, generator=rng), r"spec_verify\.sample: generator"),
                         (lambda: sv.accept(x.softmax(-1), None, [1, 2, 3], rng), r"spec_verify\.accept: generator"),
                         (lambda: sv.verify_batch(x, [1, 2, 3], [3], generators=[rng]),
                          r"spec_verify\.verify_batch: generators\[0\]"),
                         (lambda: sv.SpeculativeDecoder(drafter([]), tiny_target(), k=1, generator=rng, schedule="constant"), "generator"),
                         (lambda: sv.TreeDecoder(lambda p: ([], [], None), tiny_target(),
                                                 generator=rng), r".*TreeDecoder: generator")]:
        with pytest.raises(TypeError, match=rf"^{prefix} must be a torch.Generator or None, got {name}"):
            call()
