"""verify_greedy against a torch.argmax reference; early exit; logits and infinities."""
from __future__ import annotations

import pytest
import torch


def greedy_reference(target: torch.Tensor, tokens: torch.Tensor):
    best = target.argmax(-1)  # ties to the lowest index
    for i, t in enumerate(tokens.tolist()):
        if t != int(best[i]):
            return i, int(best[i])
    return len(tokens), int(best[-1])


def cases(seed: int, count: int):
    g = torch.Generator().manual_seed(seed)
    for c in range(count):
        k = int(torch.randint(0, 7, (1,), generator=g))
        vocab = int(torch.randint(1, 300, (1,), generator=g))
        kind = c % 5
        if kind == 0:  # probabilities
            target = torch.softmax(torch.randn(k + 1, vocab, generator=g), -1)
        elif kind == 1:  # logits, negative values
            target = torch.randn(k + 1, vocab, generator=g) * 10 - 5
        elif kind == 2:  # many ties: few distinct values
            target = torch.randint(0, 3, (k + 1, vocab), generator=g).float()
        elif kind == 3:  # infinities
            target = torch.randn(k + 1, vocab, generator=g)
            target[torch.rand(k + 1, vocab, generator=g) < 0.2] = float("-inf")
            target[torch.rand(k + 1, vocab, generator=g) < 0.02] = float("inf")
        else:  # constant rows, signed zeros
            target = torch.zeros(k + 1, vocab)
            target[torch.rand(k + 1, vocab, generator=g) < 0.5] = -0.0
        best = target.argmax(-1)
        # Drafts that match for a random prefix, then (maybe) miss.
        match = int(torch.randint(0, k + 1, (1,), generator=g))
        tokens = best[:k].clone()
        if match < k:
            tokens[match] = (tokens[match] + 1 + int(torch.randint(0, max(vocab - 1, 1), (1,), generator=g))) % vocab
        yield target, tokens


@pytest.mark.slow
def test_matches_argmax_reference(sv, isa):
    outcomes = set()
    for target, tokens in cases(seed=3, count=3000):
        got = sv.verify_greedy(target, tokens)
        assert got == greedy_reference(target, tokens), (target, tokens)
        outcomes.add((len(tokens), got[0]))
    # The cases reach every outcome: for each K = 0..6, a miss at every position i < K and
    # all K drafts accepted (so a verify_greedy that, say, always stopped at 0 or never
    # stopped would have been compared on the outcomes it gets wrong).
    assert outcomes == {(k, n) for k in range(7) for n in range(k + 1)}


def test_full_vocabulary_ties_at_every_offset(sv, isa):
    """V = 32000; the maximum appears twice, the first copy at every offset near block edges."""
    vocab = 32000
    for first in [0, 1, 7, 15, 16, 17, 255, 256, 257, 1023, 1024, 1025, 31983, 31998]:
        row = torch.zeros(1, vocab)
        row[0, first] = 5.0
        row[0, -1] = 5.0
        assert sv.verify_greedy(row, torch.empty(0, dtype=torch.int64)) == (0, first)


def test_all_minus_infinity_row(sv, isa):
    row = torch.full((1, 100), float("-inf"))
    assert sv.verify_greedy(row, []) == (0, 0)


def test_rows_after_the_decision_are_not_read(sv, isa):
    g = torch.Generator().manual_seed(0)
    target = torch.randn(5, 1000, generator=g)
    best = target.argmax(-1)
    tokens = best[:4].clone()
    tokens[1] = (tokens[1] + 1) % 1000  # miss at position 1
    target[2:] = float("nan")
    assert sv.verify_greedy(target, tokens) == (1, int(best[1]))


def test_nan_in_a_read_row_is_an_error(sv, isa):
    target = torch.randn(3, 50)
    target[1, 17] = float("nan")
    tokens = target[:2].argmax(-1)
    with pytest.raises(ValueError, match=r"target_probs\[1, 17\].*NaN"):
        sv.verify_greedy(target, tokens)


def test_strided_rows(sv, isa):
    """A view with a row stride larger than V, and one with a non-unit element stride."""
    g = torch.Generator().manual_seed(1)
    big = torch.randn(5, 2000, generator=g)
    for target in (big[:, 100:1100], big[:, ::2], big.t().contiguous().t()[:, :7]):
        tokens = target[:4].argmax(-1)
        tokens[3] = (tokens[3] + 1) % target.shape[1]
        assert sv.verify_greedy(target, tokens) == greedy_reference(target, tokens)
