"""The uniforms the ops take, as the Python layer draws them (spec_verify/_uniforms.py): the
stream `torch.rand(n, dtype=torch.float64, generator=g)` gives, in every build (the ops of the
stable and the versioned build draw nothing; this file runs under both: `make pytest`,
`make variants`, `make emulated`).

Each call with a generator must equal the same call with its uniforms given (the
*_with_uniforms function, or the op itself for a batch), those uniforms drawn by torch.rand
from a generator seeded alike, and leave its generator exactly where torch.rand leaves the
other: no uniform more, none fewer, none where the op draws nothing (temperature 0, greedy).
Deterministic checks over 20 seeds each.
"""
from __future__ import annotations

import pytest
import torch

K, V, SEEDS = 4, 40, range(20)


def pair(seed):
    return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)


def rows(seed, n, vocab=V):
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(n, vocab, generator=g) * 2


def test_draw_is_torch_rand(sv):
    for seed in SEEDS:
        for n in (1, K + 1, 300, ()):
            g, h = pair(seed)
            assert torch.equal(sv._uniforms.draw(n, g), torch.rand(n, dtype=torch.float64, generator=h))
            assert torch.equal(g.get_state(), h.get_state())


@pytest.mark.parametrize("op", ["accept", "accept one-hot block", "accept_logits", "accept_logits block",
                                "sample", "sample one row", "verify_tree", "verify_tree_probs"])
def test_a_call_with_a_generator_is_the_call_with_torch_rand_uniforms(sv, op):
    for seed in SEEDS:
        target, draft = rows(seed, K + 1), rows(seed + 50, K)
        p, q = target.softmax(-1), draft.softmax(-1)
        tokens = draft.argmax(-1)
        tree_tokens, parents = torch.tensor([1, 2, 3, 4]), [-1, 0, -1, 2]
        g, h = pair(seed)
        if op == "accept":
            got = sv.accept(p, q, tokens, g)
            want = sv.accept_with_uniforms(p, q, tokens, torch.rand(K + 1, dtype=torch.float64, generator=h))
        elif op == "accept one-hot block":
            got = sv.accept(p, None, tokens, g, method="block")
            want = sv.accept_with_uniforms(p, None, tokens, torch.rand(K + 1, dtype=torch.float64, generator=h),
                                           method="block")
        elif op.startswith("accept_logits"):
            method = "block" if op.endswith("block") else "token"
            got = sv.accept_logits(target, draft, tokens, temperature=0.8, top_p=0.9, generator=g, method=method)
            want = sv.accept_logits_with_uniforms(target, draft, tokens,
                                                  torch.rand(K + 1, dtype=torch.float64, generator=h),
                                                  temperature=0.8, top_p=0.9, method=method)
        elif op == "sample":
            got = sv.sample(target, temperature=0.7, generator=g)
            want = sv.sample_with_uniforms(target, torch.rand(K + 1, dtype=torch.float64, generator=h),
                                           temperature=0.7)
        elif op == "sample one row":
            got = sv.sample(target[0], generator=g)
            want = sv.sample_with_uniforms(target[0], torch.rand((), dtype=torch.float64, generator=h))
        elif op == "verify_tree":
            got = sv.verify_tree(target, tree_tokens, parents, temperature=0.9, generator=g)
            want = sv.verify_tree_with_uniforms(target, tree_tokens, parents, None,
                                                torch.rand(K + 1, dtype=torch.float64, generator=h), temperature=0.9)
        else:
            tree_q = rows(seed + 70, K + 1).softmax(-1)  # row j+1: node j's children's distribution
            got = sv.verify_tree_probs(p, tree_tokens, parents, tree_q, generator=g)
            want = sv.verify_tree_probs_with_uniforms(p, tree_tokens, parents, tree_q,
                                                      torch.rand(K + 1, dtype=torch.float64, generator=h))
        if isinstance(got, torch.Tensor):
            assert torch.equal(got, want), (op, seed)
        elif isinstance(got[0], torch.Tensor):
            assert torch.equal(got[0], want[0]) and got[1] == want[1], (op, seed)
        else:
            assert tuple(got) == tuple(want), (op, seed)
        assert torch.equal(g.get_state(), h.get_state()), (op, seed)


def test_nothing_is_drawn_where_nothing_is_sampled(sv):
    target, draft = rows(0, K + 1), rows(1, K)
    tokens = draft.argmax(-1)
    g = torch.Generator().manual_seed(9)
    before = g.get_state()
    sv.accept_logits(target, draft, tokens, temperature=0.0, generator=g)
    sv.sample(target, temperature=0.0, generator=g)
    sv.verify_tree(target, torch.tensor([1, 2, 3, 4]), [-1, 0, -1, 2], temperature=0.0, generator=g)
    sv.verify_tree_probs(target.softmax(-1), torch.tensor([1, 2, 3, 4]), [-1, 0, -1, 2], greedy=True, generator=g)
    sv.verify_batch(torch.cat([target, target]), torch.cat([tokens, tokens]), torch.tensor([K, 2 * K]),
                    temperature=0.0, generator=g)
    assert torch.equal(g.get_state(), before)


@pytest.mark.parametrize("form", ["logits", "probs"])
def test_a_batch_draws_each_sampled_sequence_from_its_generator_in_batch_order(sv, form):
    """B = 4 sequences, K_b = 2, 0, 3, 1, the second greedy; generators [a, None, None, b]
    beside a shared one: a's 3 uniforms, then the shared one's 4, then b's 2."""
    greedy = [False, True, False, False]
    cu = torch.tensor([2, 2, 5, 6])
    for seed in SEEDS:
        target, draft = rows(seed, 6 + 4), rows(seed + 50, 6)
        tokens = draft.argmax(-1)
        a, a2 = pair(seed)
        b, b2 = pair(seed + 100)
        shared, shared2 = pair(seed + 200)
        u = torch.cat([torch.rand(3, dtype=torch.float64, generator=a2),
                       torch.rand(4, dtype=torch.float64, generator=shared2),
                       torch.rand(2, dtype=torch.float64, generator=b2)])
        if form == "logits":
            temperature = torch.tensor([0.8, 0.0, 1.0, 0.6])
            got = sv.verify_batch(target, tokens, cu, draft_logits=draft, temperature=temperature, generator=shared,
                                  generators=[a, None, None, b])
            want = sv.ops.verify_batch(target, tokens, cu, draft, temperature, uniforms=u)
        else:
            flags = torch.tensor(greedy)
            got = sv.verify_batch_probs(target.softmax(-1), tokens, cu, draft_probs=draft.softmax(-1), greedy=flags,
                                        generator=shared, generators=[a, None, None, b])
            want = sv.ops.verify_batch_probs(target.softmax(-1), tokens, cu, draft.softmax(-1), flags, uniforms=u)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed
        for x, y in ((a, a2), (b, b2), (shared, shared2)):
            assert torch.equal(x.get_state(), y.get_state()), seed
