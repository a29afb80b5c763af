"""SpeculativeDecoder's argument checks over toy models (tests/toy_models.py): what the
constructor, generate, stream and from_logits refuse, what the callbacks and the verifier may
not return, and the messages naming the argument or callback at fault; the integer forms
(NumPy, tensors of any integer dtype, NumPy bools) they accept instead."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from toy_models import pair, scripted, truncate_at


def test_bad_callback_output(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(lambda prefix, k: (torch.zeros(k + 1, dtype=torch.int64), None),
                                target.target_rows, k=3, schedule="constant")
    with pytest.raises(ValueError, match="draft_step returned 4 tokens, expected at most k = 3"):
        dec.generate([1], max_new=10)


def test_constructor_checks(sv):
    target, draft = pair()
    d, t = draft.greedy_draft, target.target_rows
    cases = [  # (keyword arguments, exception, message)
        (dict(k=-1), ValueError, r"k must be an int in \[0, 1024\], got -1"),
        (dict(k=sv.SpeculativeDecoder.MAX_K + 1), ValueError, r"k must be an int in \[0, 1024\], got 1025"),
        (dict(k="4"), TypeError, "k must be an int, got str"),
        (dict(k=4.0), TypeError, "k must be an int, got float"),
        (dict(k=True), TypeError, "k must be an int, got bool"),
        (dict(k=torch.tensor([4])), TypeError, r"k must be an int, got a torch.int64 tensor of shape \[1\]"),
        (dict(greedy="yes"), TypeError, "greedy must be a bool, got str"),
        (dict(generator=123), TypeError, "generator must be a torch.Generator or None, got int"),
        (dict(verifier=3), TypeError, "verifier must be callable or None, got int"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            sv.SpeculativeDecoder(d, t, **kwargs, schedule="constant")
    with pytest.raises(TypeError, match="draft_step must be callable, got NoneType"):
        sv.SpeculativeDecoder(None, t, schedule="constant")
    with pytest.raises(TypeError, match="target_step must be callable, got int"):
        sv.SpeculativeDecoder(d, 3, schedule="constant")
    # Integers of other kinds are ints: NumPy scalars, 0-d integer tensors.
    for k in (np.int64(3), np.uint8(3), torch.tensor(3), torch.tensor(3, dtype=torch.uint64)):
        dec = sv.SpeculativeDecoder(d, t, k=k, schedule="constant")
        assert type(dec.k) is int and dec.k == 3
        assert dec.generate([1], max_new=9) == target.greedy_decode([1], 9)
    assert sv.SpeculativeDecoder(d, t, k=sv.SpeculativeDecoder.MAX_K, schedule="constant").k == 1024


def test_bad_callback_output_names_the_callback(sv):
    target, draft = pair(vocab=10)
    good_tokens = lambda k: torch.zeros(k, dtype=torch.int64)
    rows = lambda prefix, proposed: target.target_rows(prefix, proposed)
    q = lambda k: torch.full((k, 10), 0.1)
    u64 = lambda values: torch.tensor(values, dtype=torch.uint64)
    cases = [
        # (draft_step, target_step, greedy, exception, message)
        (lambda p, k: good_tokens(k), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (good_tokens(k), None, None), rows, True, TypeError, "draft_step must return a pair"),
        (lambda p, k: (torch.zeros(k), None), rows, True, TypeError,
         "draft_step's tokens must have an integer dtype, got torch.float32"),
        (lambda p, k: (torch.zeros(k, dtype=torch.bool), None), rows, True, TypeError,
         "draft_step's tokens must have an integer dtype, got torch.bool"),
        (lambda p, k: ([True] * k, None), rows, True, TypeError, r"draft_step's tokens\[0\] must be an int, got bool"),
        (lambda p, k: ([0, 1.0, 2][:k], None), rows, True, TypeError, r"draft_step's tokens\[1\] must be an int, got float"),
        (lambda p, k: (torch.zeros(1, k, dtype=torch.int64), None), rows, True, ValueError,
         r"draft_step's tokens must be 1-D, at most k = 3 ids, got shape \[1, 3\]"),
        (lambda p, k: ("abc", None), rows, True, TypeError,
         "draft_step's tokens must be a 1-D integer tensor or a list of ints, got str"),
        (lambda p, k: (good_tokens(k + 1), None), rows, True, ValueError,
         "draft_step returned 4 tokens, expected at most k = 3"),
        (lambda p, k: (good_tokens(k).to("meta"), None), rows, True, ValueError,
         "draft_step's tokens must be on the CPU, got a tensor on meta"),
        # Values beyond int64 are reported as they are, not wrapped or overflowed.
        (lambda p, k: (u64([0, 2**64 - 1, 0][:k]), None), rows, True, ValueError,
         r"draft_step's tokens\[1\] = 18446744073709551615 is outside the range of token ids"),
        (lambda p, k: (u64([0, 0, 2**63][:k]), None), rows, True, ValueError,
         r"draft_step's tokens\[2\] = 9223372036854775808 is outside"),
        (lambda p, k: ([0, 2**64, 0][:k], None), rows, True, ValueError, r"draft_step's tokens\[1\] = 18446744073709551616 is outside"),
        (lambda p, k: ([-2**63 - 1, 0, 0][:k], None), rows, True, ValueError,
         r"draft_step's tokens\[0\] = -9223372036854775809 is outside"),
        (lambda p, k: ([0] * k, None), lambda p, t: None, True, TypeError, "target_step returned a NoneType"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t).double(), True, TypeError,
         "target_step returned rows of dtype torch.float64"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[:-1], True, ValueError,
         r"target_step returned rows of shape \[3, 10\], expected \[j\+1, V\] = \[4, V\] with V > 0 for the j = 3 "
         "proposed tokens"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t)[None], True, ValueError,
         r"target_step returned rows of shape \[1, 4, 10\]"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t).to("meta"), True, ValueError,
         "target_step returned rows on meta, expected a tensor on the CPU"),
        # Contents only the op sees: the op's error, attributed to the callback.
        (lambda p, k: ([0, 99, 0][:k], None), lambda p, t: rows(p, torch.zeros_like(t)), True, ValueError,
         r"the verification op rejected draft_step's tokens: spec_verify.verify_greedy: draft_tokens\[1\] = 99"),
        (lambda p, k: (u64([0, 10, 0][:k]), None), lambda p, t: rows(p, torch.zeros_like(t)), True, ValueError,
         r"rejected draft_step's tokens: .*draft_tokens\[1\] = 10 is outside the vocabulary \[0, 10\)"),
        (lambda p, k: ([0] * k, None), lambda p, t: rows(p, t) * float("nan"), True, ValueError,
         r"the verification op rejected target_step's rows: spec_verify.verify_greedy: target_probs\[0, 0\] = nan"),
        (lambda p, k: (good_tokens(k), q(k).double()), rows, False, TypeError,
         "draft_step returned probs of dtype torch.float64"),
        (lambda p, k: (good_tokens(k), q(k + 1)), rows, False, ValueError,
         r"draft_step returned probs of shape \[4, 10\], expected \[j, V\] with j = 3, the number of tokens"),
        # Fewer tokens than k are fine, but the probs must have one row per token.
        (lambda p, k: (good_tokens(k - 1), q(k)), rows, False, ValueError,
         r"draft_step returned probs of shape \[3, 10\], expected \[j, V\] with j = 2"),
        (lambda p, k: (good_tokens(0), q(1)), rows, False, ValueError,
         r"draft_step returned probs of shape \[1, 10\], expected \[j, V\] with j = 0"),
        (lambda p, k: (good_tokens(k), [[0.1] * 10] * k), rows, False, TypeError, "draft_step returned probs as a list"),
        (lambda p, k: (good_tokens(k), torch.full((k, 9), 0.1)), rows, False, ValueError,
         "draft_step returned probs with V = 9 columns but target_step returned rows with V = 10"),
        (lambda p, k: (good_tokens(k), q(k).to("meta")), rows, False, ValueError,
         "draft_step returned probs on meta, expected a tensor on the CPU"),
        (lambda p, k: (good_tokens(k), -q(k)), rows, False, ValueError,
         r"the verification op rejected draft_step's probs: spec_verify.accept: draft_probs\[0, 0\]"),
        (lambda p, k: (good_tokens(k), q(k)), lambda p, t: rows(p, t) * 0, False, ValueError,
         r"the verification op rejected target_step's rows: spec_verify.accept: target_probs\[0\] has zero mass"),
    ]
    for d, t, greedy, exc, msg in cases:
        dec = sv.SpeculativeDecoder(d, t, k=3, greedy=greedy, schedule="constant")
        with pytest.raises(exc, match=msg):
            dec.generate([1], max_new=10)


def test_target_step_gets_int64_contiguous_tokens(sv):
    # Whatever integer form draft_step returns its tokens in, target_step sees an int64 [k]
    # contiguous CPU tensor with the same values.
    target, draft = pair(vocab=10)
    wanted = [3, 1, 4]
    forms = [
        torch.tensor(wanted, dtype=torch.int32),
        torch.tensor(wanted, dtype=torch.uint8),
        torch.tensor(wanted, dtype=torch.uint64),
        torch.tensor([[3, 0], [1, 0], [4, 0]])[:, 0],  # a strided view
        wanted,
        tuple(wanted),
        [np.int64(3), np.uint16(1), torch.tensor(4)],
        np.array(wanted, dtype=np.int32),
    ]
    for form in forms:
        seen = []

        def target_step(prefix, proposed):
            seen.append(proposed)
            return target.target_rows(prefix, proposed)

        dec = sv.SpeculativeDecoder(lambda p, k: (form[:k], None), target_step, k=3, schedule="constant")
        dec.generate([1], max_new=4)  # one round of k = 3 (at least)
        proposed = seen[0]
        assert type(proposed) is torch.Tensor and proposed.dtype == torch.int64, form
        assert proposed.is_contiguous() and proposed.device.type == "cpu" and proposed.shape == (3,)
        assert proposed.tolist() == wanted


def test_argument_checks(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=2, schedule="constant")
    cases = [  # (generate's keyword arguments, exception, message)
        (dict(max_new=-1), ValueError, r"max_new must be an int in \[0, inf\], got -1"),
        (dict(max_new=2.0), TypeError, "max_new must be an int, got float"),
        (dict(max_new=True), TypeError, "max_new must be an int, got bool"),
        (dict(max_new="3"), TypeError, "max_new must be an int, got str"),
        (dict(eos_token_id="2"), TypeError, "eos_token_id must be an int, an iterable of ints or None, got str"),
        (dict(eos_token_id=2.0), TypeError, "eos_token_id must be an int, an iterable of ints or None, got float"),
        (dict(eos_token_id=True), TypeError, "eos_token_id must be an int, got bool"),
        (dict(eos_token_id=[3, False]), TypeError, r"eos_token_id\[1\] must be an int, got bool"),
        (dict(eos_token_id=torch.tensor(3.0)), TypeError, "eos_token_id must have an integer dtype, got torch.float32"),
        (dict(eos_token_id=torch.tensor([[3]])), ValueError, r"eos_token_id must be an int or a 1-D sequence of ints, got shape \[1, 1\]"),
        (dict(eos_token_id=-1), ValueError, r"eos_token_id\[0\] = -1 is negative"),
        (dict(eos_token_id=torch.tensor(3).to("meta")), ValueError, "eos_token_id must hold values"),
        (dict(prompt_ids=None), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got NoneType"),
        (dict(prompt_ids=7), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got int"),
        (dict(prompt_ids="abc"), TypeError, "prompt_ids must be a sequence of ints or a 1-D integer tensor, got str"),
        (dict(prompt_ids=[1.0]), TypeError, r"prompt_ids\[0\] must be an int, got float"),
        (dict(prompt_ids=[1, True]), TypeError, r"prompt_ids\[1\] must be an int, got bool"),
        (dict(prompt_ids=[2**64]), ValueError, r"prompt_ids\[0\] = 18446744073709551616 is outside"),
        (dict(prompt_ids=[4, -2]), ValueError, r"prompt_ids\[1\] = -2 is negative"),
        (dict(prompt_ids=torch.tensor([1.0])), TypeError, "prompt_ids must have an integer dtype, got torch.float32"),
        (dict(prompt_ids=torch.tensor([True])), TypeError, "prompt_ids must have an integer dtype, got torch.bool"),
        (dict(prompt_ids=torch.tensor([[1, 2], [3, 4]])), ValueError, r"prompt_ids must be 1-D \(or \[1, L\]\), got shape \[2, 2\]"),
        (dict(prompt_ids=torch.tensor([2**64 - 1], dtype=torch.uint64)), ValueError,
         r"prompt_ids\[0\] = 18446744073709551615 is outside"),
        (dict(prompt_ids=np.array([1.5])), TypeError, "prompt_ids must have an integer dtype, got torch.float64"),
        (dict(on_tokens=3), TypeError, "on_tokens must be callable or None, got int"),
    ]
    for kwargs, exc, msg in cases:
        kwargs = dict(dict(prompt_ids=[1], max_new=3), **kwargs)
        with pytest.raises(exc, match=msg):
            dec.generate(**kwargs)
        on_tokens = kwargs.pop("on_tokens", None)
        if on_tokens is None:  # stream checks its arguments at the call, not at the first next()
            with pytest.raises(exc, match=msg):
                dec.stream(**kwargs)
    # Integers of other kinds: NumPy scalars and arrays, 0-d integer tensors, any integer dtype.
    want = target.greedy_decode([3, 4], 5)
    for prompt in ([3, 4], (3, 4), torch.tensor([[3, 4]]), torch.tensor([3, 4], dtype=torch.uint8),
                   torch.tensor([3, 4], dtype=torch.uint64), np.array([3, 4]), np.array([[3, 4]], dtype=np.uint32),
                   [np.int64(3), torch.tensor(4)], range(3, 5)):
        for max_new in (5, np.int32(5), torch.tensor(5)):
            assert dec.generate(prompt, max_new=max_new) == want, (prompt, max_new)
    free = target.greedy_decode([3, 4], 30)
    stop = free[10]
    cut = truncate_at(free, 2, {stop})
    for eos in (stop, np.int64(stop), torch.tensor(stop), torch.tensor([stop]), np.array([stop, 9999]),
                [np.int16(stop)], (torch.tensor(stop, dtype=torch.uint64),), {stop}):
        assert dec.generate([3, 4], max_new=30, eos_token_id=eos) == cut, eos
    assert dec.generate([3, 4], max_new=30, eos_token_id=[]) == free


# The verifier's output, errors of the verification op ---------------------------------------

def test_verifier_output_is_checked(sv):
    target, draft = pair(vocab=10)
    cases = [
        (lambda r, p, t, g: (t.numel() + 1, 0), ValueError,
         r"the verifier returned \(n_accepted, next_token\) = \(4, 0\), expected 0 <= n_accepted <= j = 3 \(the "
         r"proposed tokens\)"),
        (lambda r, p, t, g: (-1, 0), ValueError, r"= \(-1, 0\)"),
        (lambda r, p, t, g: (0, 10), ValueError, r"0 <= next_token < V = 10"),
        (lambda r, p, t, g: 0, TypeError, "the verifier must return a pair"),
        (lambda r, p, t, g: (0, 1, 2), TypeError, "the verifier must return a pair"),
        (lambda r, p, t, g: (0.0, 1), TypeError, "the verifier's n_accepted must be an int, got float"),
        (lambda r, p, t, g: (0, True), TypeError, "the verifier's next_token must be an int, got bool"),
    ]
    for verifier, exc, msg in cases:
        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=verifier, schedule="constant")
        with pytest.raises(exc, match=msg):
            dec.generate([1], max_new=10)
    # Pairs of other integer kinds are fine.
    for result in ([0, 3], (np.int64(0), torch.tensor(3))):
        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=lambda r, p, t, g: result, schedule="constant")
        assert dec.generate([1], max_new=4) == [1, 3, 3, 3, 3]


def test_op_errors_are_attributed_by_the_argument_named_first(sv):
    # Only the argument right after the "spec_verify.<op>: " prefix counts: a message that
    # goes on to mention another argument is still attributed to the first. Messages of
    # any other form propagate unchanged.
    target, draft = pair(vocab=10)
    messages = [
        ("spec_verify.accept: target_probs[2] has zero mass (see draft_tokens and draft_probs)",
         "the verification op rejected target_step's rows: spec_verify.accept: target_probs[2]"),
        ("spec_verify.verify_greedy: draft_tokens must have shape [K] = [3] (K = target_probs.shape[0] - 1)",
         "the verification op rejected draft_step's tokens: "),
        ("spec_verify.accept: draft_probs[0, 1] = -1 is negative",
         "the verification op rejected draft_step's probs: "),
        ("spec_verify.accept_with_uniforms: uniforms[0] = 2 is outside [0, 1)", None),
        ("my verifier dislikes draft_tokens and target_probs", None),
        ("target_probs: spec_verify.accept: draft_probs", None),
    ]
    for message, wrapped in messages:
        def verifier(rows, probs, tokens, generator, message=message):
            raise ValueError(message)

        dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, verifier=verifier, schedule="constant")
        with pytest.raises(ValueError) as info:
            dec.generate([1], max_new=10)
        if wrapped is None:
            assert str(info.value) == message
        else:
            assert str(info.value).startswith("SpeculativeDecoder: " + wrapped), str(info.value)
            assert str(info.value).endswith(message)


# The verification method, from_logits with a token drafter, NumPy bools ---------------------

def test_method_argument(sv):
    target, draft = pair()
    d, t = draft.greedy_draft, target.target_rows
    assert sv.SpeculativeDecoder(d, t, schedule="constant").method == "token"
    assert sv.SpeculativeDecoder(d, t, greedy=False, schedule="constant").verifier is sv.accept
    dec = sv.SpeculativeDecoder(d, t, method="block", schedule="constant")
    assert dec.method == "block" and repr(dec) == "SpeculativeDecoder(k=4, greedy=True, method='block', schedule='constant')"
    # Greedy verification has one rule: "block" gives plain greedy decoding too.
    assert dec.generate([3], max_new=30) == target.greedy_decode([3], 30)
    cases = [
        (dict(method="tree"), ValueError, "SpeculativeDecoder: method must be \"token\" or \"block\", got 'tree'"),
        (dict(method=None), TypeError, "SpeculativeDecoder: method must be a str, \"token\" or \"block\", got NoneType"),
        (dict(method="block", verifier=sv.accept), ValueError,
         "method='block' chooses the default verifier's rule; a custom verifier decides its own"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            sv.SpeculativeDecoder(d, t, **kwargs, schedule="constant")
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    with pytest.raises(ValueError, match="SpeculativeDecoder.from_logits: method must be"):
        sv.SpeculativeDecoder.from_logits(draft.logits, logits, method="Block", schedule="constant")
    dec = sv.SpeculativeDecoder.from_logits(draft.logits, logits, 3, temperature=0, method="block", schedule="constant")
    assert "method='block'" in repr(dec) and dec.generate([3], max_new=20) == target.greedy_decode([3], 20)


def test_from_logits_with_a_token_drafter(sv):
    target, draft = pair(vocab=20)
    logits = lambda p, proposed: target.target_rows(p, proposed, logits=True)  # noqa: E731
    step, calls = scripted(draft, [3, 0, 1])
    dec = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0, draft_step=step, schedule="constant")
    assert dec.generate([4], max_new=40) == target.greedy_decode([4], 40)
    assert dec.stats.proposed == sum(j for *_, j in calls) and dec.stats.proposed_length_counts[0] > 0
    what = "SpeculativeDecoder.from_logits"
    with pytest.raises(ValueError, match=f"{what}: pass draft_logits_step or draft_step, not both"):
        sv.SpeculativeDecoder.from_logits(draft.logits, logits, draft_step=step, schedule="constant")
    with pytest.raises(TypeError, match=f"{what}: draft_step must be callable, got int"):
        sv.SpeculativeDecoder.from_logits(None, logits, draft_step=3, schedule="constant")
    with pytest.raises(TypeError, match=f"{what}: draft_logits_step must be callable, got NoneType"):
        sv.SpeculativeDecoder.from_logits(None, logits, schedule="constant")
    # Draft logits with the wrong number of rows are reported as draft_step's logits.
    bad = sv.SpeculativeDecoder.from_logits(None, logits, 3, temperature=0.5,
                                            draft_step=lambda p, k: ([1, 2], torch.zeros(3, 20)), schedule="constant")
    with pytest.raises(ValueError, match=r"draft_step returned logits of shape \[3, 20\], expected \[j, V\] with j = 2"):
        bad.generate([1], max_new=5)


def test_numpy_bools_where_bools_go(sv):
    """greedy=np.bool_(True) is greedy=True (NumPy bools come from configs read with
    NumPy); a NumPy integer is not a bool, and the message names its NumPy type."""
    np = pytest.importorskip("numpy")
    target, draft = pair()
    prompt = [1, 2]
    want = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=True, schedule="constant").generate(prompt, max_new=20)
    got = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=np.bool_(True), schedule="constant").generate(
        prompt, max_new=20)
    assert got == want
    with pytest.raises(TypeError, match=r"^greedy must be a bool, got numpy\.int64$"):
        sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=np.int64(1), schedule="constant")
