"""SuffixTreeDrafter and TreeSchedule: tree proposals against brute force, the schedule on fake
cost curves, and greedy decoding through the tree decoder.

- Proposals: on random and periodic streams fed as growing prefixes (with and without a
  cache of earlier requests), every node of the tree is a continuation the brute-force counts
  give (tests/test_suffix.py: the deepest suffix of the text and the node's path with
  continuations, in the request and in the cache, the deeper of the two), its estimate their
  count ratio and its reach the product on its path at least `min_token_prob`; the nodes are
  the `max_nodes` of highest reach among all such continuations (none left out reaches more
  than one taken), no deeper than the length cap; siblings are ranked as the chain ranks
  (the most frequent, then the most recent); with budget enough the first path is
  `SuffixDrafter`'s proposal.
- The schedule (`cut_tree`) on fake cost curves: the kept nodes are the subtree of highest
  estimated rate among every subtree of the proposal (brute force over all subtrees of small
  random trees), nothing where nothing pays, a chain where branching does not pay, branches
  where a flat curve makes them pay.
- Through the decoder (`TreeDecoder`, greedy): the output is plain greedy
  decoding whatever the curve, each request goes into the cache, and the schedule refuses
  trees on a steep curve and proposes them on a flat one; the costs the drafter keeps are the
  target's (a tree cut near max_new is not taken for the whole tree: taking it at once fails
  the test); a new request is recognised without `end_generation`.
"""
from __future__ import annotations

import itertools
import random

import pytest
import torch

from test_schedule import SimClock
from test_suffix import continuations, streams
from test_suffix_law import filled_cache
from toy_models import ToyLM, target_tree_rows


# Brute force -------------------------------------------------------------------------------

def distribution(prefix, held, ctx, depth, cache_depth):
    """(match length, {token: (count, recency)}, total) of the match SuffixDrafter would take
    after ctx: the deeper of the request's and the cache's, then the higher top estimate,
    then the request's; None if neither has one."""
    def deepest(docs, d):
        for n in range(min(d - 1, len(ctx)), 0, -1):
            cont = continuations(docs, ctx[len(ctx) - n:], d)
            if cont:
                return n, cont, sum(c for c, _ in cont.values())
        return None
    a = deepest([list(prefix)], depth)
    b = deepest(held, cache_depth) if held else None
    if b is not None:
        top = (lambda m: max(c for c, _ in m[1].values()) / m[2])
        if a is None or b[0] > a[0] or (b[0] == a[0] and top(b) > top(a)):
            return b
    return a


def all_nodes(prefix, held, depth, cache_depth, min_p, factor, offset, cap_nodes):
    """path (tuple) -> (estimate, reach) for every continuation with reach >= min_p within
    the depth cap, and the chain's ranking of each node's children: path -> [tokens]."""
    first = distribution(prefix, held, list(prefix), depth, cache_depth)
    if first is None:
        return {}, {}
    cap = min(cap_nodes, int(factor * first[0] + offset + 1e-9))
    nodes, ranking = {}, {}
    todo = [((), 1.0)]
    while todo:
        path, reach = todo.pop()
        if len(path) >= cap:
            continue
        got = distribution(prefix, held, list(prefix) + list(path), depth, cache_depth)
        if got is None:
            continue
        _, cont, total = got
        ranking[path] = sorted(cont, key=lambda t: cont[t], reverse=True)  # count, then recency
        for t, (count, _) in cont.items():
            estimate = count / total
            if reach * estimate >= min_p:  # the product as the chain forms it
                nodes[path + (t,)] = (estimate, reach * estimate)
                todo.append((path + (t,), reach * estimate))
    return nodes, ranking


def paths(tokens, parents):
    out = []
    for t, p in zip(tokens, parents):
        out.append((out[p] if p >= 0 else ()) + (t,))
    return out


def check_tree(tree, prefix, held, depth, cache_depth, min_p, factor, offset, max_nodes):
    tokens, parents, estimates = tree
    assert all(-1 <= p < j for j, p in enumerate(parents))
    want, ranking = all_nodes(prefix, held, depth, cache_depth, min_p, factor, offset, max_nodes)
    got = paths(tokens, parents)
    assert len(set(got)) == len(got)  # distinct siblings
    assert len(got) == min(max_nodes, len(want))
    reach = {}
    for path, e in zip(got, estimates):
        assert path in want, f"{path} is not a continuation by the counts"
        assert e == pytest.approx(want[path][0], abs=1e-12)
        reach[path] = want[path][1]
    if got:  # no continuation left out reaches more than one taken
        assert max((r for p, (_, r) in want.items() if p not in reach), default=0.0) <= min(reach.values()) + 1e-12
    for path in got:  # siblings in the chain's order: a lower index, a higher rank
        siblings = [q[-1] for q in got if q[:-1] == path[:-1]]
        order = ranking[path[:-1]]
        assert siblings == sorted(siblings, key=order.index)


SETTINGS = [  # (max_depth, min_token_prob, max_spec_factor, max_spec_offset, max_nodes)
    (24, 0.1, 1.0, 0, 16),
    (4, 0.05, 2.0, 1, 6),
    (6, 0.2, 4.0, 0, 30),
    (3, 0.1, 1.0, 2, 3),
]


@pytest.mark.parametrize("depth,min_p,factor,offset,max_nodes", SETTINGS)
def test_request_trees_equal_brute_force(sv, depth, min_p, factor, offset, max_nodes):
    rng = random.Random(depth * 17 + max_nodes)
    for stream in streams(depth + 3):
        drafter = sv.SuffixTreeDrafter(cache=False, max_depth=depth, min_token_prob=min_p, max_spec_factor=factor,
                                       max_spec_offset=offset, max_nodes=max_nodes, schedule="constant")
        end = 2
        while end <= len(stream):
            tree = drafter.propose(stream[:end])
            check_tree(tree, stream[:end], [], depth, depth, min_p, factor, offset, max_nodes)
            end += rng.choice([1, 2, 5, 9])


@pytest.mark.parametrize("depth,min_p,factor,offset,max_nodes", SETTINGS[:3])
def test_trees_with_a_cache_equal_brute_force(sv, depth, min_p, factor, offset, max_nodes):
    rng = random.Random(depth)
    cache = sv.SuffixCache(max_requests=3, max_depth=5)
    drafter = sv.SuffixTreeDrafter(cache, max_depth=depth, min_token_prob=min_p, max_spec_factor=factor,
                                   max_spec_offset=offset, max_nodes=max_nodes, schedule="constant")
    held = []
    for doc in streams(depth + 11):
        end = 12
        while end <= len(doc):
            tree = drafter.propose(doc[:end])
            check_tree(tree, doc[:end], held, depth, 5, min_p, factor, offset, max_nodes)
            end += rng.choice([1, 3, 7, 13])
        drafter.end_generation(doc, 10)
        held = (held + [doc[10:]])[-3:]


def test_the_first_path_is_the_chain(sv):
    cache = filled_cache(sv, 6, 5, requests=10, length=40)
    for stream in streams(9):
        chain = sv.SuffixDrafter(cache, max_depth=8, max_spec_factor=2.0)
        tree = sv.SuffixTreeDrafter(cache, max_depth=8, max_spec_factor=2.0, max_nodes=10_000, schedule="constant")
        for end in range(3, len(stream), 4):
            want, _ = chain(stream[:end], 10_000)
            tokens, parents, estimates = tree.propose(stream[:end])
            node, first = -1, []
            while True:  # the first child of each node, from the root down
                node = next((j for j, p in enumerate(parents) if p == node), None)
                if node is None:
                    break
                first.append(node)
            assert [tokens[j] for j in first] == want
            assert [estimates[j] for j in first] == pytest.approx(chain.confidences, abs=1e-12)


def test_the_call_returns_the_tree_and_counts_its_kind(sv):
    drafter = sv.SuffixTreeDrafter(cache=False, schedule="constant", min_token_prob=0.2, max_spec_factor=1)
    assert drafter([1, 2, 3, 1, 2, 4, 1, 2]) == ([4, 3, 1, 1], [-1, -1, 0, 1], None)
    assert drafter.rounds == {"none": 0, "chain": 0, "tree": 1}
    assert drafter([9]) == ([], [], None)  # a new request, no match
    assert drafter.rounds["none"] == 1


def test_bad_arguments_are_refused(sv):
    with pytest.raises(ValueError, match="max_nodes"):
        sv.SuffixTreeDrafter(max_nodes=0)
    with pytest.raises(TypeError, match="max_nodes"):
        sv.SuffixTreeDrafter(max_nodes=2.5)
    with pytest.raises(ValueError, match="schedule"):
        sv.SuffixTreeDrafter(schedule="fixed")
    with pytest.raises(TypeError, match="schedule"):
        sv.SuffixTreeDrafter(schedule=sv.AdaptiveSchedule())


# The schedule ------------------------------------------------------------------------------

def schedule_on(sv, ratio):
    """A TreeSchedule that measured c(n) = ratio(n) * c(1) for n = 1..33 (the prompt cheap)."""
    s = sv.TreeSchedule()
    s.choose(1, None, 10)  # the prompt's round
    s.observe_target(1, 0.0001, 10)
    s.choose(1, None, 11)
    for n in range(1, 34):
        s.observe_target(n, 0.01 * ratio(n), 0)
    return s


def best_subtree_rate(estimates, parents, ratio, margin=0.03):
    """The highest rate over every subtree (closed under parents), and 1 + margin for none."""
    reach = []
    for e, p in zip(estimates, parents):
        reach.append(e * (reach[p] if p >= 0 else 1.0))
    best = 1.0 + margin
    for size in range(1, len(parents) + 1):
        for keep in itertools.combinations(range(len(parents)), size):
            if all(parents[j] < 0 or parents[j] in keep for j in keep):
                best = max(best, (1.0 + sum(reach[j] for j in keep)) / ratio(size + 1))
    return best, reach


def random_tree(rng, n):
    parents, estimates = [], []
    for j in range(n):
        parents.append(rng.randrange(-1, j))
        estimates.append(rng.choice([1.0, rng.random(), rng.random() ** 3]))
    return estimates, parents


@pytest.mark.parametrize("ratio", [lambda n: 1.0 + 0.02 * (n - 1), lambda n: 1.0 + 0.3 * (n - 1),
                                   lambda n: 1.0 + 0.9 * (n - 1), lambda n: n ** 0.5],
                         ids=["flat", "moderate", "steep", "sqrt"])
def test_the_cut_keeps_the_best_subtree(sv, ratio):
    rng = random.Random(3)
    s = schedule_on(sv, ratio)
    for _ in range(60):
        estimates, parents = random_tree(rng, rng.randrange(1, 9))
        keep = s.cut_tree(estimates, parents)
        best, reach = best_subtree_rate(estimates, parents, ratio)
        assert keep == sorted(keep) and all(parents[j] < 0 or parents[j] in keep for j in keep)
        rate = (1.0 + sum(reach[j] for j in keep)) / ratio(len(keep) + 1) if keep else 1.03
        assert rate == pytest.approx(best, rel=1e-9)


def test_nothing_a_chain_or_branches_by_the_curve(sv):
    # A chain of four likely tokens (0.9 each) and, at the root, a second branch of 0.3 with
    # a sure child: estimates as the drafter gives them, node order best first.
    estimates = [0.9, 0.9, 0.9, 0.3, 0.9, 1.0]
    parents = [-1, 0, 1, -1, 2, 3]
    assert sv.TreeSchedule().cut_tree(estimates, parents) == []  # no cost measured yet
    assert schedule_on(sv, lambda n: float(n)).cut_tree(estimates, parents) == []  # c(n) = n: nothing pays
    chain = schedule_on(sv, lambda n: 1.0 + 0.3 * (n - 1)).cut_tree(estimates, parents)
    assert chain == [0, 1, 2, 4]  # the chain pays, the branch (0.3, 0.3) does not
    assert schedule_on(sv, lambda n: 1.0 + 0.01 * (n - 1)).cut_tree(estimates, parents) == [0, 1, 2, 3, 4, 5]


def test_the_cut_reads_calibrated_estimates(sv):
    # Estimates of 0.9 that are never right: once calibrated, a flat curve keeps none.
    s = schedule_on(sv, lambda n: 1.0 + 0.01 * (n - 1))
    assert s.cut_tree([0.9, 0.9], [-1, 0]) == [0, 1]
    for _ in range(200):
        s._calibrate(0.9, False)
    assert s.cut_tree([0.9, 0.9], [-1, 0]) == []


# Through the decoder -----------------------------------------------------------------------

def timed_tree_target(model, clock, ratio, prefill=0.00001):
    """target_tree_step spending ratio(n) ms for n positions (the prompt: prefill a token)."""
    rows = target_tree_rows(model)
    seen = {"len": None}

    def step(prefix, tokens, parents):
        fresh = seen["len"] is None
        clock.spend(len(prefix) * prefill if fresh else 0.001 * ratio(tokens.numel() + 1))
        seen["len"] = len(prefix)
        return rows(prefix, tokens, parents)
    step.reset = lambda: seen.update(len=None)
    return step


@pytest.mark.parametrize("ratio,kind", [(lambda n: 1.0 + 0.9 * (n - 1), "steep"),
                                        (lambda n: 1.0 + 0.01 * (n - 1), "flat")])
def test_greedy_tree_decoding_is_plain_greedy_decoding(sv, ratio, kind):
    for seed, vocab in ((1, 12), (2, 6)):
        target = ToyLM(vocab, seed=seed, sharpness=3.0)  # sharp: its text loops
        cache = filled_cache(sv, vocab, seed, max_requests=8)
        clock = SimClock()
        drafter = sv.SuffixTreeDrafter(cache, max_depth=6, max_nodes=12, schedule=sv.TreeSchedule(clock=clock))
        step = timed_tree_target(target, clock, ratio)
        dec = sv.TreeDecoder(drafter, step, greedy=True)
        for prompt in ([3], [1, 2, 3, 1, 2], [4, 4, 4, 0], [3], [5, 1]):
            step.reset()
            held = len(cache)
            assert dec.generate(prompt, max_new=60) == target.greedy_decode(prompt, 60)
            assert len(cache) == min(held + 1, 8)  # the request went into the cache
        rounds = drafter.rounds
        if kind == "steep":  # a tree never pays: at most a size not measured yet is tried
            assert rounds["tree"] <= 2 and rounds["chain"] > 5 * rounds["tree"], rounds
        else:
            assert rounds["tree"] >= 3, rounds  # the looping text branches rarely
        assert drafter.schedule.calibration()


def test_end_generation_is_called_once_per_generation(sv):
    seen = []

    class Drafter:
        def __call__(self, prefix):
            return [], [], None

        def end_generation(self, sequence, prompt_length):
            seen.append((list(sequence), prompt_length))
    target = ToyLM(5, seed=1)
    dec = sv.TreeDecoder(Drafter(), target_tree_rows(target), greedy=True)
    out = dec.generate([1, 2], max_new=5)
    assert seen == [(out, 2)]
    dec.generate([1, 2], max_new=0)
    assert seen[-1] == ([1, 2], 2)
    out = dec.generate([1, 2], max_new=9, eos_token_id=out[3])  # stops at the token
    assert seen[-1] == (out, 2) and len(seen) == 3


def test_tree_rows_stay_valid_with_torch_tensors(sv):
    # The decoder hands the tree to the target as int64 tensors (the drafter returns lists).
    drafter = sv.SuffixTreeDrafter(cache=False, schedule="constant")
    got = {}

    def step(prefix, tokens, parents):
        got["t"] = (tokens.dtype, parents.dtype)
        return torch.full((tokens.numel() + 1, 8), 1.0)
    sv.TreeDecoder(drafter, step, greedy=True).generate([1, 2, 1, 2, 1], max_new=3)
    assert got["t"] == (torch.int64, torch.int64)


def test_costs_are_the_target_s_per_positions_scored(sv):
    # The drafter times the target from its return to the next call. On a simulated clock
    # where n positions cost exactly ratio(n) ms, every cost it keeps is that, including
    # near max_new where the decoder drops the deepest nodes (those rounds are not taken).
    ratio = (lambda n: 1.0 + 0.05 * (n - 1))
    target = ToyLM(6, seed=2, sharpness=3.0)
    clock = SimClock()
    drafter = sv.SuffixTreeDrafter(filled_cache(sv, 6, 2, max_requests=8), max_depth=6, max_nodes=12,
                                   schedule=sv.TreeSchedule(clock=clock))
    step = timed_tree_target(target, clock, ratio)
    dec = sv.TreeDecoder(drafter, step, greedy=True)
    for prompt, max_new in (([3], 40), ([1, 2, 3, 1, 2], 7), ([4, 4, 4, 0], 25), ([5, 1], 5)):
        step.reset()
        dec.generate(prompt, max_new=max_new)
    costs = drafter.schedule.costs()["target_seconds_by_positions"]
    assert len(costs) > 3, costs
    for n, seconds in costs.items():
        assert seconds == pytest.approx(0.001 * ratio(n), rel=1e-6), (n, seconds)


def test_a_new_request_is_recognised_without_end_generation(sv):
    cache = sv.SuffixCache()
    drafter = sv.SuffixTreeDrafter(cache, schedule="constant")
    drafter([7, 1, 2, 3, 1, 2])
    drafter([7, 1, 2, 3, 1, 2, 3])
    drafter([9, 9])  # does not extend: the last request's tokens after its first prefix go in
    assert len(cache) == 1 and cache.tokens == 1
    s = sv.TreeSchedule()
    drafter = sv.SuffixTreeDrafter(cache, schedule=s)
    drafter([1, 2, 3])
    drafter([1, 2, 3, 4])
    assert s._round == 2
    drafter([1, 2, 3, 4] + [5] * 30)  # grew by more than one round can emit: a new request
    assert s._round == 1 and len(cache) == 2
