"""The decoder takes NumPy arrays wherever it takes tensors (llama.cpp hands out arrays):
callbacks' tokens, rows, probs and logits, prompts and stop tokens; without a copy where
the dtype is the expected one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from toy_models import ToyLM


def pair(vocab=40, noise=0.7):
    target = ToyLM(vocab, seed=11)
    return target, ToyLM(vocab, seed=12, base=target, noise=noise)


def as_numpy_callbacks(target, draft, token_dtype, use_logits=False, sampling_gen=None):
    """The toy pair's callbacks, returning NumPy arrays; `seen` records each target array."""
    seen = []

    def draft_step(prefix, k):
        if sampling_gen is None:
            tokens, probs = draft.greedy_draft(prefix, k)
        else:
            tokens, probs = draft.sampling_draft(sampling_gen)(prefix, k)
        return tokens.numpy().astype(token_dtype), None if probs is None else probs.numpy()

    def target_step(prefix, proposed):
        rows = target.target_rows(prefix, proposed, use_logits).numpy()
        seen.append(rows)
        return rows

    return draft_step, target_step, seen


@pytest.mark.parametrize("token_dtype", [np.int64, np.intc, np.uint16])
def test_greedy_with_numpy_callbacks_prompt_and_stop_tokens(sv, token_dtype):
    target, draft = pair()
    draft_step, target_step, _ = as_numpy_callbacks(target, draft, token_dtype)
    ref_dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, schedule="constant")
    dec = sv.SpeculativeDecoder(draft_step, target_step, k=3, schedule="constant")
    for prompt in ([3], [1, 2, 3], [39, 0]):
        expect = target.greedy_decode(prompt, 30)
        assert ref_dec.generate(prompt, max_new=30) == expect
        assert dec.generate(np.array(prompt, dtype=token_dtype), max_new=30) == expect
        assert dec.generate(np.array([prompt], dtype=np.int64), max_new=30) == expect  # [1, L]
        stop = expect[len(prompt) + 5]
        cut = expect[:expect.index(stop, len(prompt)) + 1]
        assert dec.generate(prompt, max_new=30, eos_token_id=np.array([stop, 10**3], dtype=token_dtype)) == cut
        assert dec.generate(prompt, max_new=30, eos_token_id=np.array(stop)) == cut


def test_sampling_with_numpy_rows_equals_tensor_rows(sv):
    # The same draws from the same seeds: arrays change nothing but the type.
    target, draft = pair(noise=1.0)
    outs = []
    for numpy_out in (False, True):
        g = torch.Generator().manual_seed(5)
        if numpy_out:
            draft_step, target_step, _ = as_numpy_callbacks(target, draft, np.intc, sampling_gen=g)
        else:
            draft_step, target_step = draft.sampling_draft(g), target.target_rows
        dec = sv.SpeculativeDecoder(draft_step, target_step, k=4, greedy=False, generator=g, schedule="constant")
        outs.append(dec.generate([2, 7], max_new=60))
    assert outs[0] == outs[1]


def test_rows_are_not_copied(sv):
    # The verifier receives a tensor over the callback's own float32 array (and the draft's
    # int64 tokens over theirs): torch.as_tensor shares their memory.
    target, draft = pair()
    draft_step, target_step, seen = as_numpy_callbacks(target, draft, np.int64)
    pointers = []

    def verifier(rows, probs, tokens, gen):
        pointers.append((rows.data_ptr(), seen[-1].ctypes.data))
        return sv.verify_greedy(rows, tokens)

    dec = sv.SpeculativeDecoder(draft_step, target_step, k=3, verifier=verifier, schedule="constant")
    dec.generate([1, 2], max_new=12)
    assert pointers and all(a == b for a, b in pointers)


def test_from_logits_with_numpy_logits(sv):
    target, draft = pair()
    g_np, g_t = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    numpy_dec = sv.SpeculativeDecoder.from_logits(
        lambda seq: draft.logits(seq).numpy(),
        lambda prefix, proposed: target.target_rows(prefix, proposed, True).numpy(),
        k=3, temperature=0.9, top_k=20, generator=g_np, schedule="constant")
    tensor_dec = sv.SpeculativeDecoder.from_logits(
        draft.logits, lambda prefix, proposed: target.target_rows(prefix, proposed, True),
        k=3, temperature=0.9, top_k=20, generator=g_t, schedule="constant")
    assert numpy_dec.generate([4], max_new=50) == tensor_dec.generate([4], max_new=50)
    greedy = sv.SpeculativeDecoder.from_logits(
        lambda seq: draft.logits(seq).numpy(),
        lambda prefix, proposed: target.target_rows(prefix, proposed, True).numpy(), k=3, temperature=0, schedule="constant")
    assert greedy.generate([4], max_new=30) == target.greedy_decode([4], 30)


def test_numpy_arrays_of_the_wrong_dtype_or_shape_are_refused_like_tensors(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(draft.greedy_draft,
                                lambda prefix, proposed: target.target_rows(prefix, proposed).double().numpy(), k=2, schedule="constant")
    with pytest.raises(TypeError, match="target_step returned rows of dtype torch.float64"):
        dec.generate([1], max_new=5)
    dec = sv.SpeculativeDecoder(draft.greedy_draft,
                                lambda prefix, proposed: target.target_rows(prefix, proposed).numpy()[:, ::-1], k=2, schedule="constant")
    with pytest.raises(TypeError, match="target_step returned ndarray that torch cannot take without a copy"):
        dec.generate([1], max_new=5)
    g = torch.Generator().manual_seed(0)
    sampler = draft.sampling_draft(g)
    dec = sv.SpeculativeDecoder(lambda prefix, k: (sampler(prefix, k)[0], sampler(prefix, k)[1][:, :5].numpy()),
                                target.target_rows, k=2, greedy=False, generator=g, schedule="constant")
    with pytest.raises(ValueError, match="draft_step returned probs with V = 5 columns"):
        dec.generate([1], max_new=5)
    dec = sv.SpeculativeDecoder(lambda prefix, k: (np.array([1.5] * k), None), target.target_rows, k=2, schedule="constant")
    with pytest.raises(TypeError, match="draft_step's tokens must have an integer dtype"):
        dec.generate([1], max_new=5)
