"""PromptLookupTree: tree proposals from several earlier matches, their cost, and the decoder's
tree mode with it.

- Proposals on constructed prefixes against the rule as stated (the longest suffix n-gram
  first, its most recent occurrences first, then shorter n-grams; branches merged into a
  prefix tree), and against a brute-force statement of the rule on random prefixes grown
  round by round.
- Cost: the index work of each call is bounded by the tokens appended since the last call.
- Greedy output through TreeDecoder is plain greedy decoding of the target,
  and a tree accepts at least as much per round as its first branch alone (the chain).
"""
from __future__ import annotations

import random

import pytest
import torch

from toy_models import ToyLM, target_tree_rows


def brute_force(prefix, max_ngram, min_ngram, branches, depth, max_nodes, matches):
    """The rule, stated directly: O(length * max_ngram) per call."""
    length = len(prefix)
    starts = []
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = prefix[length - n:]
        ends = [e for e in range(n, length) if prefix[e - n:e] == suffix]
        starts += [e for e in reversed(ends[-matches:]) if e not in starts]
    tokens, parents, taken = [], [], 0
    for start in starts:
        branch = list(prefix)
        for j in range(depth):
            branch.append(branch[start + j])
        branch = branch[length:]
        node, added = -1, False
        for t in branch:
            child = next((c for c in range(len(tokens)) if parents[c] == node and tokens[c] == t), None)
            if child is None:
                if len(tokens) == max_nodes:
                    break
                tokens.append(t)
                parents.append(node)
                child, added = len(tokens) - 1, True
            node = child
        taken += added
        if taken == branches or len(tokens) == max_nodes:
            break
    return tokens, parents


@pytest.mark.parametrize("prefix,kwargs,want", [
    # (1, 2) was followed by 4 (most recently) and by 3
    ([1, 2, 3, 1, 2, 4, 1, 2], dict(max_ngram=2, branches=2, depth=2), ([4, 1, 3, 1], [-1, 0, -1, 2])),
    # shared prefixes merge: (5, 6) -> 7 9 recently, 7 8 before: one node 7 with children 9, 8
    ([5, 6, 7, 8, 5, 6, 7, 9, 5, 6], dict(max_ngram=2, branches=2, depth=2), ([7, 9, 8], [-1, 0, 0])),
    # one occurrence of the longest n-gram (2, 6); then the 1-gram (6): its most recent
    # occurrence is the same one (skipped), the one before it gives the second branch
    ([6, 1, 2, 6, 3, 2, 6], dict(max_ngram=2, branches=3, depth=2), ([3, 2, 1, 2], [-1, 0, -1, 2])),
    # a branch that repeats an earlier one adds nothing and does not count
    ([1, 5, 1, 5, 1, 7, 1], dict(max_ngram=1, branches=2, depth=1), ([7, 5], [-1, -1])),
    # max_nodes cuts the branch that reaches it
    ([1, 2, 3, 1, 2, 4, 1, 2], dict(max_ngram=2, branches=2, depth=2, max_nodes=3), ([4, 1, 3], [-1, 0, -1])),
    # periodic text: the first branch runs on through its own proposal
    ([1, 2, 3, 1, 2, 3, 1, 2], dict(max_ngram=3, branches=1, depth=5), ([3, 1, 2, 3, 1], [-1, 0, 1, 2, 3])),
    # matches = 1: only the most recent occurrence of each n-gram is kept
    ([1, 2, 3, 1, 2, 4, 1, 2], dict(max_ngram=2, min_ngram=2, branches=2, depth=1, matches=1), ([4], [-1])),
    # no match: no nodes
    ([1, 2, 3, 4], dict(), ([], [])),
    ([], dict(), ([], [])),
])
def test_proposals_on_constructed_prefixes(sv, prefix, kwargs, want):
    assert sv.PromptLookupTree(**kwargs)(prefix) == (want[0], want[1], None)


@pytest.mark.parametrize("vocab,max_ngram,min_ngram,branches,depth,max_nodes,matches", [
    (3, 3, 1, 4, 4, None, None), (5, 2, 1, 3, 6, 10, None), (4, 4, 2, 2, 3, None, 5), (8, 3, 1, 6, 2, 7, 2)])
def test_proposals_equal_the_rule_on_random_prefixes(sv, vocab, max_ngram, min_ngram, branches, depth, max_nodes,
                                                      matches):
    rng = random.Random(vocab * 100 + depth)
    lookup = sv.PromptLookupTree(max_ngram, min_ngram, branches, depth, max_nodes, matches)
    nodes = branches * depth if max_nodes is None else max_nodes
    kept = branches if matches is None else matches
    chain = sv.PromptLookup(max_ngram, min_ngram)
    for _ in range(4):
        prefix = [rng.randrange(vocab) for _ in range(rng.randrange(1, 8))]
        for _ in range(30):  # grown as the decoder grows it: a few tokens per round
            tokens, parents, rows = lookup(prefix)
            assert (tokens, parents) == brute_force(prefix, max_ngram, min_ngram, branches, depth, nodes, kept)
            assert rows is None and len(tokens) <= nodes
            # The first branch is PromptLookup's proposal (up to the node budget).
            first, node = [], -1
            for j, (t, p) in enumerate(zip(tokens, parents)):
                if p == node and len(first) < depth:
                    first.append(t)
                    node = j
            assert first == chain(prefix, min(depth, nodes))[0]
            prefix = prefix + [rng.randrange(vocab) for _ in range(rng.randrange(1, 4))]


@pytest.mark.parametrize("max_ngram,min_ngram,matches", [(3, 1, 4), (6, 2, 8)])
def test_work_per_call_does_not_grow_with_the_prefix(sv, max_ngram, min_ngram, matches):
    rng = random.Random(5)
    lookup = sv.PromptLookupTree(max_ngram, min_ngram, branches=matches, depth=4)
    prefix = [rng.randrange(4) for _ in range(2000)]  # small vocabulary: many matches per n-gram
    lookup(prefix)
    sizes = max_ngram - min_ngram + 1
    for _ in range(200):
        added = rng.randrange(1, 6)
        prefix += [rng.randrange(4) for _ in range(added)]
        before = lookup.work
        lookup(prefix)
        assert lookup.work - before <= sizes * added + sizes
    assert all(len(ends) <= matches for table in lookup._index for ends in table.values())


def test_argument_checks(sv):
    with pytest.raises(ValueError, match="PromptLookupTree: branches must be an int >= 1, got 0"):
        sv.PromptLookupTree(branches=0)
    with pytest.raises(TypeError, match="PromptLookupTree: depth must be an int"):
        sv.PromptLookupTree(depth=2.0)
    with pytest.raises(ValueError, match="PromptLookup: min_ngram"):
        sv.PromptLookupTree(max_ngram=2, min_ngram=3)
    assert repr(sv.PromptLookupTree()) == ("PromptLookupTree(max_ngram=3, min_ngram=1, branches=4, depth=8, "
                                           "max_nodes=32, matches=4)")


class DocumentLM:
    """A target that writes out a fixed document: its argmax after any sequence of length L is
    document[L]. The document is a seeded random sequence of a few phrases that share
    beginnings (1 2 3 is followed by 4 5 in one phrase and 6 7 in another), as lines of code
    or prose do: the most recent match of a suffix is often the wrong one, an earlier one right."""

    PHRASES = [[1, 2, 3, 4, 5, 0], [1, 2, 3, 6, 7, 0], [1, 2, 8, 9, 10, 0], [11, 3, 4, 12, 0]]
    VOCAB = 13

    def __init__(self, seed=0, phrases=120):
        rng = random.Random(seed)
        self.document = [t for _ in range(phrases) for t in rng.choice(self.PHRASES)]

    def row(self, length):
        return torch.nn.functional.one_hot(torch.tensor(self.document[length]), self.VOCAB).float() * 4.0

    def target_rows(self, prefix, proposed):
        return torch.stack([self.row(len(prefix) + i) for i in range(proposed.numel() + 1)])

    def target_tree_rows(self, prefix, tokens, parents):
        depth = []
        for p in parents.tolist():
            depth.append(1 if p < 0 else depth[p] + 1)
        return torch.stack([self.row(len(prefix))] + [self.row(len(prefix) + d) for d in depth])


def test_greedy_output_through_the_tree_decoder(sv):
    lm = DocumentLM()
    prompt, max_new = lm.document[:60], 400
    plain = lm.document[:60 + max_new]
    per_call = {}
    for branches in (1, 2, 4):
        lookup = sv.PromptLookupTree(max_ngram=3, branches=branches, depth=6)
        dec = sv.TreeDecoder(lookup, lm.target_tree_rows)
        assert dec.generate(prompt, max_new=max_new) == plain
        per_call[branches] = dec.stats.tokens_per_target_call
    chain = sv.SpeculativeDecoder(sv.PromptLookup(max_ngram=3), lm.target_rows, k=6, schedule="constant")
    assert chain.generate(prompt, max_new=max_new) == plain
    # One branch is the chain's proposal: the same rounds, token for token.
    assert per_call[1] == chain.stats.tokens_per_target_call
    assert per_call[1] < per_call[2] < per_call[4], per_call


def test_sampled_output_through_the_tree_decoder(sv):
    target = ToyLM(12, seed=7, sharpness=3.0)
    g = torch.Generator().manual_seed(0)
    dec = sv.TreeDecoder(sv.PromptLookupTree(), target_tree_rows(target), greedy=False,
                         generator=g)
    out = dec.generate([1, 2, 3, 1, 2], max_new=100)
    assert all(target.probs(out[:i])[out[i]] > 0 for i in range(5, len(out)))
    assert dec.stats.accepted > 0


def test_one_branch_is_the_chain_bit_for_bit_when_sampling(sv):
    """PromptLookupTree(branches=1) proposes PromptLookup's chain, and a chain tree draws the
    same uniforms as the chain op (N+1 = K+1, in the same order): with the same seed the two
    decoders emit the same sampled tokens, round for round."""
    target = ToyLM(12, seed=7, sharpness=3.0)
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 3]
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        tree = sv.TreeDecoder(sv.PromptLookupTree(max_ngram=3, branches=1, depth=5),
                              target_tree_rows(target), greedy=False, generator=g)
        a = list(tree.stream(prompt, max_new=80))
        g = torch.Generator().manual_seed(seed)
        chain = sv.SpeculativeDecoder(sv.PromptLookup(max_ngram=3), target.target_rows, k=5, greedy=False,
                                      generator=g, schedule="constant")
        assert a == list(chain.stream(prompt, max_new=80))
        assert tree.stats.accepted == chain.stats.accepted > 0
