"""SpeculativeDecoder over small prefix-dependent toy models (tests/toy_models.py)."""
from __future__ import annotations

import pytest
import torch

from toy_models import ToyLM


def pair(vocab=50, noise=0.7):
    target = ToyLM(vocab, seed=1)
    draft = ToyLM(vocab, seed=2, base=target, noise=noise)
    return target, draft


@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_greedy_output_equals_plain_greedy_decoding(sv, isa, k):
    target, draft = pair()
    for use_logits in (False, True):
        dec = sv.SpeculativeDecoder(draft.greedy_draft,
                                    lambda prefix, proposed: target.target_rows(prefix, proposed, use_logits),
                                    k=k, greedy=True)
        for prompt in ([3], [1, 2, 3], [49, 0]):
            assert dec.generate(prompt, max_new=40) == target.greedy_decode(prompt, 40)


def test_max_new_respected_exactly(sv):
    target, draft = pair()
    g = torch.Generator().manual_seed(0)
    for greedy in (True, False):
        dec = sv.SpeculativeDecoder(draft.greedy_draft if greedy else draft.sampling_draft(g),
                                    target.target_rows, k=5, greedy=greedy, generator=g)
        for max_new in [0, 1, 2, 5, 6, 7, 33]:
            out = dec.generate([4, 2], max_new=max_new)
            assert len(out) == 2 + max_new and out[:2] == [4, 2]


def test_sampling_tokens_in_vocabulary_with_positive_probability(sv):
    target, draft = pair(vocab=30, noise=1.5)
    g = torch.Generator().manual_seed(1)
    dec = sv.SpeculativeDecoder(draft.sampling_draft(g), target.target_rows, k=4, greedy=False, generator=g)
    out = dec.generate([0], max_new=200)
    for i in range(1, len(out)):
        assert target.probs(out[:i])[out[i]] > 0


def test_bad_callback_output(sv):
    target, draft = pair()
    dec = sv.SpeculativeDecoder(lambda prefix, k: (torch.zeros(k + 1, dtype=torch.int64), None),
                                target.target_rows, k=3)
    with pytest.raises(ValueError, match="draft_step returned 4 tokens, expected k = 3"):
        dec.generate([1], max_new=10)
    dec = sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=3, greedy=False)
    with pytest.raises(ValueError, match="must return the draft probabilities"):
        dec.generate([1], max_new=10)


def test_constructor_checks(sv):
    target, draft = pair()
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        sv.SpeculativeDecoder(draft.greedy_draft, target.target_rows, k=-1)
    with pytest.raises(TypeError, match="callables"):
        sv.SpeculativeDecoder(None, target.target_rows)
