"""SuffixDrafter and SuffixCache: proposals and estimates against brute force, the cache's
limits, its isolation, and the cost of a round.

- Proposals: at every call, on random and periodic token streams fed as growing prefixes,
  the drafter's tokens and estimates equal a brute-force reference that scans the text for
  every occurrence of every suffix (tests/test_suffix.py `reference`): the deepest suffix
  of the text (with the tokens proposed so far) with continuations, in the request and in
  the cache's held requests; the most frequent continuation, ties to the one that followed
  most recently; between the two, the deeper match, then the higher estimate, then the
  request's; stops by min_token_prob (on the product of estimates), the match length cap
  and k.
- The cache: the requests and tokens held obey the limits, oldest first, and its counts
  are those of the requests held (compared with a cache built from them alone); clear()
  empties it; two caches never see each other's requests.
- Cost: the work of a round (trie nodes touched) is bounded by a constant times
  max_depth * (tokens appended + 1) + k on a text of thousands of tokens.
- Estimates converge: on a first-order Markov stream with known transition probabilities,
  each estimate is within 0.04 of the probability of the token proposed (binomial standard
  deviation under 0.008 at the sample sizes used: a false alarm needs a 5-sigma deviation,
  probability < 1e-6), while a stream with other probabilities (the power check) is not.
"""
from __future__ import annotations

import math
import random

import pytest


# Brute force -------------------------------------------------------------------------------

def continuations(docs, s, depth):
    """token -> (count, (doc, position) of its last occurrence) over every occurrence of s
    followed by a token within a document, for len(s) + 1 <= depth (the trie's depth)."""
    n = len(s)
    if n + 1 > depth:
        return {}
    out = {}
    for d, doc in enumerate(docs):
        for e in range(n, len(doc)):
            if doc[e - n:e] == s:
                count = out.get(doc[e], (0, None))[0]
                out[doc[e]] = (count + 1, (d, e))
    return out


def best_of(docs, ctx, depth):
    """(match length, token, estimate) of the deepest suffix of ctx with continuations."""
    for n in range(min(depth - 1, len(ctx)), 0, -1):
        cont = continuations(docs, ctx[len(ctx) - n:], depth)
        if cont:
            token = max(cont, key=lambda t: cont[t])  # count, then the most recent
            return n, token, cont[token][0] / sum(c for c, _ in cont.values())
    return None


def reference(prefix, held, k, depth=24, cache_depth=24, min_token_prob=0.1, factor=1.0, offset=0):
    ctx, out, est = list(prefix), [], []
    cap, joint = k, 1.0
    while len(out) < cap:
        a = best_of([list(prefix)], ctx, depth)
        b = best_of(held, ctx, cache_depth) if held else None
        if b is not None and (a is None or b[0] > a[0] or (b[0] == a[0] and b[2] > a[2])):
            a = b
        if a is None:
            break
        if not out:
            cap = min(k, int(math.floor(factor * a[0] + offset + 1e-9)))
            if cap <= 0:
                break
        joint *= a[2]
        if joint < min_token_prob:
            break
        out.append(a[1])
        est.append(a[2])
        ctx.append(a[1])
    return out, est


# Streams -----------------------------------------------------------------------------------

def random_stream(rng, length, vocab):
    return [rng.randrange(vocab) for _ in range(length)]


def periodic_stream(rng, length, period, vocab, noise):
    base = [rng.randrange(vocab) for _ in range(period)]
    return [base[i % period] if rng.random() >= noise else rng.randrange(vocab) for i in range(length)]


def streams(seed):
    rng = random.Random(seed)
    return [random_stream(rng, 120, 3), random_stream(rng, 150, 6), periodic_stream(rng, 150, 7, 9, 0.0),
            periodic_stream(rng, 160, 11, 20, 0.08), periodic_stream(rng, 140, 5, 4, 0.2)]


SETTINGS = [  # (max_depth, min_token_prob, max_spec_factor, max_spec_offset)
    (24, 0.1, 1.0, 0),
    (4, 0.1, 1.0, 0),
    (6, 0.0, 2.5, 1),
    (3, 0.5, 1.0, 2),
    (8, 0.3, 0.5, -1),
]


@pytest.mark.parametrize("depth,min_p,factor,offset", SETTINGS)
def test_request_proposals_equal_brute_force(sv, depth, min_p, factor, offset):
    rng = random.Random(depth * 31 + 7)
    for stream in streams(depth):
        drafter = sv.SuffixDrafter(cache=False, max_depth=depth, min_token_prob=min_p, max_spec_factor=factor,
                                   max_spec_offset=offset)
        end = 2
        while end <= len(stream):
            k = rng.choice([0, 1, 3, 8, 16])
            got = drafter(stream[:end], k)
            want, est = reference(stream[:end], [], k, depth, depth, min_p, factor, offset)
            assert got == (want, None), f"prefix length {end}, k = {k}"
            assert drafter.confidences == pytest.approx(est, abs=1e-12)
            end += rng.choice([1, 1, 2, 5])


@pytest.mark.parametrize("depth,min_p,factor,offset", SETTINGS[:3])
def test_proposals_with_a_cache_equal_brute_force(sv, depth, min_p, factor, offset):
    rng = random.Random(depth)
    docs = streams(depth + 1)
    for cache_depth in (depth, 5):
        cache = sv.SuffixCache(max_requests=3, max_depth=cache_depth)
        drafter = sv.SuffixDrafter(cache, max_depth=depth, min_token_prob=min_p, max_spec_factor=factor,
                                   max_spec_offset=offset)
        held = []
        for doc in docs:
            prompt = doc[:10]
            end = 12
            while end <= len(doc):
                k = rng.choice([1, 4, 16])
                got = drafter(doc[:end], k)
                want, est = reference(doc[:end], held, k, depth, cache_depth, min_p, factor, offset)
                assert got == (want, None), f"prefix length {end}, k = {k}, {len(held)} held"
                assert drafter.confidences == pytest.approx(est, abs=1e-12)
                end += rng.choice([1, 3, 7])
            drafter.end_generation(doc, len(prompt))
            held = (held + [doc[len(prompt):]])[-3:]
            assert len(cache) == len(held) and cache.tokens == sum(map(len, held))


def test_a_new_generation_without_end_generation_adds_what_was_seen(sv):
    cache = sv.SuffixCache()
    drafter = sv.SuffixDrafter(cache)
    drafter([1, 2, 3, 4], 2)
    drafter([1, 2, 3, 4, 5, 6, 7], 2)
    drafter([9, 8], 2)  # does not extend the request: a new one
    assert (len(cache), cache.tokens) == (1, 3)  # the tokens after the first prefix: 5 6 7
    assert drafter([0, 5, 6], 4) == ([7], None)


def held_after(docs, max_requests, max_tokens):
    held = []
    for doc in docs:
        held.append(doc if max_tokens is None else doc[max(0, len(doc) - max_tokens):])
        while len(held) > max_requests or (max_tokens is not None and sum(map(len, held)) > max_tokens):
            held.pop(0)
    return held


@pytest.mark.parametrize("max_requests,max_tokens", [(2, None), (10, 200), (4, 90), (1, 50)])
def test_the_cache_holds_its_limits_and_the_counts_of_the_requests_held(sv, max_requests, max_tokens):
    docs = streams(3) + streams(4)
    cache = sv.SuffixCache(max_requests=max_requests, max_tokens=max_tokens, max_depth=6)
    for i, doc in enumerate(docs):
        cache.add(doc)
        held = held_after(docs[:i + 1], max_requests, max_tokens)
        assert len(cache) == len(held) <= max_requests
        assert cache.tokens == sum(map(len, held)) and (max_tokens is None or cache.tokens <= max_tokens)
    # Counts after removals: proposals as from a cache that only ever held the same requests.
    fresh = sv.SuffixCache(max_requests=max_requests, max_tokens=max_tokens, max_depth=6)
    for doc in held:
        fresh.add(doc)
    a = sv.SuffixDrafter(cache, max_depth=6, min_token_prob=0.0)
    b = sv.SuffixDrafter(fresh, max_depth=6, min_token_prob=0.0)
    rng = random.Random(5)
    for _ in range(60):
        ctx = [7777] + rng.choice(docs)[:rng.randrange(1, 40)]
        a.reset(), b.reset()  # else a prefix that does not extend the last adds a request
        assert a(ctx, 8) == b(ctx, 8) == (reference(ctx, held, 8, 6, 6, 0.0)[0], None)
        assert a.confidences == b.confidences


def test_clear_empties_the_cache_and_caches_do_not_share(sv):
    one, two = sv.SuffixCache(), sv.SuffixCache()
    a, b, none = sv.SuffixDrafter(one), sv.SuffixDrafter(two), sv.SuffixDrafter(cache=False)
    one.add([1, 2, 3, 4, 5, 6])
    assert a([9, 1, 2, 3], 3) == ([4, 5, 6], None)
    assert b([9, 1, 2, 3], 3) == none([9, 1, 2, 3], 3) == ([], None)  # two never saw it
    a.end_generation([9, 1, 2, 3, 4], 1)
    assert len(one) == 2 and len(two) == 0
    one.clear()
    assert (len(one), one.tokens) == (0, 0)
    assert a([8, 1, 2, 3], 3) == ([], None)
    # A drafter's own cache (cache=None) is its alone.
    c, d = sv.SuffixDrafter(), sv.SuffixDrafter()
    c.end_generation([0, 1, 2, 3, 4], 1)
    assert c([5, 1, 2], 2) == ([3, 4], None) and d([5, 1, 2], 2) == ([], None)


def test_a_round_costs_the_same_on_a_long_text(sv):
    rng = random.Random(11)
    cache = sv.SuffixCache(max_depth=24)
    for _ in range(10):
        cache.add(periodic_stream(rng, 400, 37, 50, 0.05))
    drafter = sv.SuffixDrafter(cache, max_depth=24)
    text = periodic_stream(rng, 5000, 37, 50, 0.05)
    drafter(text[:100], 16)
    worst = {}
    for end in range(101, 5000, 3):
        before = drafter.work
        drafter(text[:end], 16)
        worst[end < 1000] = max(worst.get(end < 1000, 0), drafter.work - before)
    bound = 4 * (24 * (3 + 1) + 24 + 16)  # appended tokens 3, max_depth 24, k 16
    assert worst[True] <= bound and worst[False] <= bound, worst


def markov_stream(rng, length, table):
    out = [0]
    for _ in range(length - 1):
        row = table[out[-1]]
        out.append(rng.choices(range(len(row)), weights=row)[0])
    return out


TABLE = [[0.1, 0.7, 0.1, 0.1], [0.2, 0.2, 0.5, 0.1], [0.9, 0.05, 0.05, 0.0], [0.3, 0.3, 0.0, 0.4]]
OTHER = [[0.1, 0.55, 0.25, 0.1], [0.2, 0.2, 0.5, 0.1], [0.75, 0.2, 0.05, 0.0], [0.3, 0.3, 0.0, 0.4]]


@pytest.mark.parametrize("table,should_match", [(TABLE, True), (OTHER, False)], ids=["calibrated", "power"])
def test_estimates_converge_to_the_continuation_probabilities(sv, table, should_match):
    rng = random.Random(2026)
    stream = markov_stream(rng, 60_000, table)
    drafter = sv.SuffixDrafter(cache=False, max_depth=2, min_token_prob=0.0, max_spec_factor=1.0)
    for end in range(300, len(stream) + 1, 300):
        drafter(stream[:end], 1)
    errors = []
    for state in range(4):
        tokens, _ = drafter(stream + [state], 1)
        assert tokens == [max(range(4), key=lambda t: TABLE[state][t])]  # the most likely token
        errors.append(abs(drafter.confidences[0] - TABLE[state][tokens[0]]))
    assert (max(errors) < 0.04) == should_match, errors


@pytest.mark.parametrize("cost,factor", [(None, 1.0), (0.5, 1.0), (0.1, 1.0), (0.099, 4.0), (0.0, 4.0)])
def test_the_default_length_cap_follows_what_a_position_costs(sv, cost, factor):
    # max_spec_factor=None: 4 times the match's length where one more scored position costs
    # under a tenth of a step (`position_cost`, which the decoder sets), else once.
    rng = random.Random(11)
    longer = 0  # proposals past the first match's length: only a factor of 4 makes them
    for stream in streams(3):
        drafter = sv.SuffixDrafter(cache=False)
        drafter.position_cost = cost
        end = 2
        while end <= len(stream):
            k = rng.choice([1, 3, 8, 16])
            got = drafter(stream[:end], k)
            want, _ = reference(stream[:end], [], k, 24, 24, 0.1, factor, 0)
            assert got == (want, None), f"prefix length {end}, k = {k}"
            longer += len(want) > drafter.match_length
            end += rng.choice([1, 2, 5])
    assert (longer > 0) == (factor == 4.0), longer


def test_bad_arguments_are_refused(sv):
    for make, err, msg in [
        (lambda: sv.SuffixDrafter(cache=3), TypeError, "cache must be a SuffixCache, None or False"),
        (lambda: sv.SuffixDrafter(max_depth=1), ValueError, r"max_depth must be an int in \[2, inf\], got 1"),
        (lambda: sv.SuffixDrafter(min_token_prob=1.5), ValueError, r"min_token_prob must be a number in"),
        (lambda: sv.SuffixDrafter(max_spec_factor="1"), TypeError, "max_spec_factor must be a number"),
        (lambda: sv.SuffixCache(max_requests=0), ValueError, "max_requests must be an int in"),
        (lambda: sv.SuffixCache(max_tokens=2.5), TypeError, "max_tokens must be an int"),
        (lambda: sv.SuffixDrafter()([1, 2], -1), ValueError, "k must be an int >= 0"),
        (lambda: sv.SuffixDrafter()([1, 2.5], 2), TypeError, r"prefix\[1\] must be an int"),
        (lambda: sv.SuffixDrafter()([1, -2], 2), ValueError, r"prefix\[1\] must be a token id >= 0, got -2"),
        (lambda: sv.SuffixCache().add([3, -1]), ValueError, r"tokens\[1\] must be a token id >= 0"),
    ]:
        with pytest.raises(err, match=msg):
            make()
