"""Suffix decoding: drafts from the current request and from everything the process has generated.

`SuffixDrafter` is a `draft_step` (as `PromptLookup` is) over two structures: a count trie of
the current request (its prompt and the tokens generated so far) and a `SuffixCache`, a
count trie of earlier requests' outputs that outlives a request and may be shared between
drafters and decoders. Each proposed token carries an estimate of its probability of being
accepted, the share of the match's earlier continuations that it is; the decoder's schedule
reads those estimates (`confidences`) to choose how much of the proposal to verify.

The idea is SuffixDecoding's (Oliaro et al., arXiv 2411.04975; Snowflake ArcticInference):
match the end of the text against suffix trees of the request and of earlier outputs, follow
the most frequent continuation while its estimated probability stays above a threshold, and
cap the length by the match's length. Here the trees are count tries of the substrings of at
most `max_depth` tokens with suffix links, so that a round costs O(max_depth + tokens appended +
tokens proposed) whatever the length of the text (see `SuffixDrafter`; the trie is in
`_suffix_trie.py`).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Deque, List, Optional, Sequence, Tuple

from ._api import _index
from ._suffix_trie import Locus, _Trie
from .prompt_lookup import _extends


def _positive(value, what: str, low: int, high: Optional[int] = None) -> int:
    n = _index(value, what)
    if n < low or (high is not None and n > high):
        raise ValueError(f"{what} must be an int in [{low}, {'inf' if high is None else high}], got {n}")
    return n


def _number(value, what: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


# The default length cap: _CHEAP_FACTOR times the match's length where one more scored position
# costs under _CHEAP_POSITION of a one-position step, else once the match's length.
_CHEAP_POSITION = 0.1
_CHEAP_FACTOR = 4.0


class SuffixCache:
    """The outputs of earlier requests, as one count trie shared by every drafter given it.

    A request's generated tokens go in as one document (no substring spans two requests).
    When more than `max_requests` requests, or more than `max_tokens` tokens, are held, the
    oldest requests are dropped first and their counts removed, so the counts are always
    those of the requests held. A request longer than `max_tokens` keeps its last
    `max_tokens` tokens. Memory: the tokens held, and a trie node per substring of at most
    `max_depth` tokens that occurs twice or more among them.

    Args:
        max_requests (`int`, *optional*, defaults to 256): the most requests held, >= 1.
        max_tokens (`int`, *optional*): the most tokens held, >= 1; None: no limit.
        max_depth (`int`, *optional*, defaults to 24): the longest substring counted, >= 2.

    Attributes:
        version (`int`): changes whenever the counts do (drafters re-match then).

    Example:
        >>> cache = SuffixCache(max_requests=2)
        >>> cache.add([1, 2, 3]); cache.add([4, 5]); cache.add([6])
        >>> len(cache), cache.tokens
        (2, 3)
    """

    def __init__(self, max_requests: int = 256, max_tokens: Optional[int] = None, max_depth: int = 24):
        self.max_requests = _positive(max_requests, "SuffixCache: max_requests", 1)
        self.max_tokens = None if max_tokens is None else _positive(max_tokens, "SuffixCache: max_tokens", 1)
        self.max_depth = _positive(max_depth, "SuffixCache: max_depth", 2)
        self.version = 0
        self.clear()

    def __repr__(self) -> str:
        return (f"SuffixCache(max_requests={self.max_requests}, max_tokens={self.max_tokens}, "
                f"max_depth={self.max_depth}): {len(self)} requests, {self.tokens} tokens")

    def clear(self) -> None:
        """Drops every request."""
        self._trie = _Trie(self.max_depth, [])
        self._requests: Deque[int] = deque()  # each request's length, oldest first
        self._tokens = 0
        self.version += 1

    def __len__(self) -> int:
        """Requests held."""
        return len(self._requests)

    @property
    def tokens(self) -> int:
        """Tokens held (over every request)."""
        return self._tokens

    @property
    def work(self) -> int:
        """Trie nodes touched so far by insertions, removals and lookups."""
        return self._trie.work

    def add(self, tokens: Sequence[int]) -> None:
        """Adds one request's generated tokens (then drops the oldest requests over a limit).

        Args:
            tokens (`Sequence[int]`): the ids; an empty sequence adds nothing.

        Raises:
            TypeError: an id that is not an int.
            ValueError: a negative id.
        """
        doc = [_token(t, f"SuffixCache.add: tokens[{i}]") for i, t in enumerate(tokens)]
        if not doc:
            return
        if self.max_tokens is not None and len(doc) > self.max_tokens:
            doc = doc[len(doc) - self.max_tokens:]
        trie = self._trie
        store, active = trie.store, [trie.root]
        for t in doc:
            store.append(t)
            active = trie.append(active, trie.base + len(store) - 1)
        store.append(-1)  # no substring runs into the next request
        self._requests.append(len(doc))
        self._tokens += len(doc)
        while len(self._requests) > self.max_requests or (
                self.max_tokens is not None and self._tokens > self.max_tokens):
            self._drop_oldest()
        self.version += 1

    def _drop_oldest(self) -> None:
        length = self._requests.popleft()
        trie = self._trie
        active = [trie.root]
        for q in range(trie.base, trie.base + length):
            active = trie.remove(active, q)
        del trie.store[:length + 1]  # the request and its separator: positions stay
        trie.base += length + 1
        self._tokens -= length


class SuffixDrafter:
    """A `draft_step` by suffix decoding over the current request and a `SuffixCache`.

    Called as `draft_step(prefix, k) -> (tokens, None)` (one-hot drafts, as `PromptLookup`),
    it proposes up to k tokens and leaves in `confidences` one estimate per proposed token.

    The proposal. Two count tries are matched against the end of the text: the request's
    (every substring of at most `max_depth` tokens of `prefix`) and the cache's (of earlier
    requests' outputs, at most the cache's `max_depth`). In each, the match is the longest
    suffix of the text (with the tokens proposed so far), of one token or more, that
    occurred before with a token after it; its continuations are counted. The token
    proposed is the most frequent continuation of the deeper of the two matches (the tie rule: between tries, the deeper
    match, then the higher estimate, then the request's; within a trie, the most frequent
    token, then the one that followed most recently). Its estimate is its count over the
    match's continuations: the estimated probability that it is accepted once the tokens
    before it were. After each token the matches move on to the text with it (a match that
    cannot extend falls back to shorter suffixes), so a proposal may run past `max_depth`
    while the text keeps repeating. A proposal stops before the token where the product of
    the estimates (the estimated probability that everything up to it is accepted) falls
    under `min_token_prob`, where no match is left, and at `max_spec_factor * m +
    max_spec_offset` tokens (m: the first match's length) or k.

    The length cap by default (`max_spec_factor=None`) follows the target's cost curve: the
    factor is 4 where one more scored position costs under a tenth of a one-position step
    (`position_cost`, which `SpeculativeDecoder` sets before each call from its measured
    costs: a memory-bound target, as transformers in bfloat16 on a CPU), else 1 (compute-bound
    llama.cpp, or nothing measured yet). Past the match's length the counts keep their
    estimates while the continuation is less sure than they say, so a longer cap pays only
    where a rejected position costs little: simulated over recorded outputs, 4 beats 1 by 2%
    at a tenth of a step a position and by 12% at 0.02, and loses from 0.15 on.

    The cache. A new generation is recognised as `PromptLookup` recognises it (a prefix that
    does not extend the indexed one). The decoder calls `end_generation(sequence,
    prompt_length)` when a generation ends, which adds the generated tokens to the cache;
    a generation left without it (an abandoned stream) adds, when the next one starts, the
    tokens after the first prefix the drafter saw.

    Cost. Indexing a token costs a step per suffix of the text that occurred before (at
    most `max_depth`; only repeated substrings have trie nodes), matching the cache after the
    text it has not seen costs O(max_depth + tokens appended), and each proposed token
    follows suffix links amortised O(1) per token: a round costs at most O(max_depth *
    tokens appended + max_depth + k), independent of the text's length (the prompt is
    indexed once, at most O(max_depth * len(prompt))). `work` counts the steps.

    Args:
        cache (`SuffixCache`, `None` or `False`, *optional*): the cache of earlier outputs:
            None (the default) makes one for this drafter; pass one to share it; False: none.
        max_depth (`int`, *optional*, defaults to 24): the longest substring counted in the
            request's trie, >= 2.
        min_token_prob (`float`, *optional*, defaults to 0.1): in [0, 1].
        max_spec_factor (`float` or `None`, *optional*): >= 0; None (the default): 4.0 or 1.0
            by `position_cost`, as above.
        max_spec_offset (`int`, *optional*, defaults to 0): may be negative.

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range.

    Example:
        >>> drafter = SuffixDrafter(cache=False)
        >>> drafter([5, 6, 7, 5, 6, 7, 5, 6], 3)
        ([7, 5, 6], None)
        >>> drafter.confidences
        [1.0, 1.0, 1.0]
    """

    # For spec_verify.schedule: no probabilities, cheap, and state that depends only on the
    # prefixes (and the cache), so it may be called in rounds that verify nothing.
    shadowable = True

    def __init__(self, cache=None, *, max_depth: int = 24, min_token_prob: float = 0.1,
                 max_spec_factor: Optional[float] = None, max_spec_offset: int = 0):
        if cache is None:
            cache = SuffixCache(max_depth=max_depth)
        elif cache is not False and not isinstance(cache, SuffixCache):
            raise TypeError(f"SuffixDrafter: cache must be a SuffixCache, None or False, got {type(cache).__name__}")
        self.cache: Optional[SuffixCache] = None if cache is False else cache
        self.max_depth = _positive(max_depth, "SuffixDrafter: max_depth", 2)
        self.min_token_prob = _number(min_token_prob, "SuffixDrafter: min_token_prob", 0.0, 1.0)
        self.max_spec_factor = None if max_spec_factor is None else _number(
            max_spec_factor, "SuffixDrafter: max_spec_factor", 0.0, math.inf)
        self.position_cost: Optional[float] = None  # set by the decoder: see the length cap above
        self.max_spec_offset = _index(max_spec_offset, "SuffixDrafter: max_spec_offset")
        self.confidences: List[float] = []
        self.match_length = 0  # the last proposal's first match
        self._work = 0
        self.reset()

    def __repr__(self) -> str:
        cache = "False" if self.cache is None else repr(self.cache)
        return (f"SuffixDrafter(cache={cache}, max_depth={self.max_depth}, min_token_prob={self.min_token_prob}, "
                f"max_spec_factor={self.max_spec_factor}, max_spec_offset={self.max_spec_offset})")

    @property
    def work(self) -> int:
        """Trie nodes touched by this drafter's request tries and its lookups in the cache."""
        return self._work + self._trie.work

    def reset(self) -> None:
        """Forgets the current request without adding it to the cache."""
        if hasattr(self, "_trie"):
            self._work += self._trie.work
        self._tokens: List[int] = []
        self._trie = _Trie(self.max_depth, self._tokens)
        self._active = [self._trie.root]
        self._first = -1  # the length of the first prefix of this generation (-1: none yet)
        self._global: Optional[Locus] = None  # the text's deepest locus in the cache's trie
        self._global_at = (-1, 0)  # (cache version, tokens matched) behind _global

    def end_generation(self, sequence: Sequence[int], prompt_length: int) -> None:
        """A generation ended: its tokens after `prompt_length` go into the cache, and the next
        call starts a new request. Called by the decoder (`SpeculativeDecoder`).

        Args:
            sequence (`Sequence[int]`): the prompt and the generated tokens.
            prompt_length (`int`): the prompt's length.
        """
        if self.cache is not None:
            self.cache.add(list(sequence)[prompt_length:])
        self.reset()

    def __call__(self, prefix: Sequence[int], k: int) -> Tuple[List[int], None]:
        """Proposes up to k tokens to follow `prefix`; their estimates in `confidences`.

        Args:
            prefix (`Sequence[int]`): the token ids so far.
            k (`int`): the most tokens to propose, >= 0.

        Returns:
            `Tuple[List[int], None]`: the proposal (0 to k ids) and None (one-hot drafts).

        Raises:
            TypeError: a token or k that is not an int.
            ValueError: a negative k or token.
        """
        if type(prefix) is not list:
            prefix = list(prefix)
        if type(k) is not int:
            k = _index(k, "SuffixDrafter: k")
        if k < 0:
            raise ValueError(f"SuffixDrafter: k must be an int >= 0, got {k}")
        self._follow(prefix)
        self.confidences = out_conf = []
        self.match_length = 0
        if k == 0:
            return [], None
        trie, cache = self._trie, self.cache
        local: Locus = (self._active[-1], 0, 0)
        glob = self._match_cache() if cache is not None and cache.tokens else None
        gtrie = cache._trie if glob is not None else None
        out: List[int] = []
        cap, joint = k, 1.0
        factor = self.max_spec_factor
        if factor is None:
            cost = self.position_cost
            factor = _CHEAP_FACTOR if cost is not None and cost < _CHEAP_POSITION else 1.0
        while len(out) < cap:
            # The deepest suffix (of one token or more) with continuations in each trie; the
            # loci above it have none, so the walks below may start there (amortised O(1)).
            u, (n, token, count) = local, trie.continuation(local)
            while n == 0 and _depth(u):
                u = trie.link(u)
                n, token, count = trie.continuation(u)
            local, depth = u, _depth(u)
            if depth == 0:  # the root: no match
                n = 0
            if glob is not None:
                v, (gn, gtoken, gcount) = glob, gtrie.continuation(glob)
                while gn == 0 and _depth(v):
                    v = gtrie.link(v)
                    gn, gtoken, gcount = gtrie.continuation(v)
                glob = v
                # The deeper match (of one token or more), then the higher estimate, then the request's.
                gdepth = _depth(v)
                if gn and gdepth and (n == 0 or gdepth > depth or (gdepth == depth and gcount * n > count * gn)):
                    n, token, count, depth = gn, gtoken, gcount, gdepth
            if n == 0:
                break
            if not out:
                self.match_length = depth
                cap = min(k, int(math.floor(factor * depth + self.max_spec_offset + 1e-9)))
                if cap <= 0:
                    break
            estimate = count / n
            joint *= estimate
            if joint < self.min_token_prob:
                break
            out.append(token)
            out_conf.append(estimate)
            local = trie.walk(local, token)
            if glob is not None:
                glob = gtrie.walk(glob, token)
        return out, None

    # The request's trie ----------------------------------------------------------------------

    def _follow(self, prefix: List[int]) -> None:
        # Brings the request's trie up to `prefix` (O(max_depth) per appended token).
        if not _extends(self._tokens, prefix, self.max_depth + 1):
            if self.cache is not None and self._first >= 0:
                self.cache.add(self._tokens[self._first:])  # a generation without end_generation
            self.reset()
        tokens = self._tokens
        if self._first < 0:
            self._first = len(prefix)
        new = prefix[len(tokens):]
        for i, t in enumerate(new):
            if type(t) is not int or t < 0:
                new[i] = _token(t, f"SuffixDrafter: prefix[{len(tokens) + i}]")
        tokens.extend(new)
        trie, active = self._trie, self._active
        for e in range(len(tokens) - len(new), len(tokens)):
            active = trie.append(active, e)
        self._active = active

    def _match_cache(self) -> Locus:
        # The text's deepest locus in the cache's trie: moved over the tokens appended since
        # the last call while the cache is unchanged, else matched afresh over the last max_depth.
        cache, tokens = self.cache, self._tokens
        version, done = self._global_at
        trie = cache._trie
        if version != cache.version or self._global is None or done > len(tokens) or \
                len(tokens) - done > cache.max_depth:
            locus = trie.match(tokens)
        else:
            locus = self._global
            for t in tokens[done:]:
                locus = trie.walk(locus, t)
        self._global, self._global_at = locus, (cache.version, len(tokens))
        return locus


def _depth(locus: Locus) -> int:
    return locus[0].depth + locus[1]


def _token(value, what: str) -> int:
    n = _index(value, what)
    if n < 0:
        raise ValueError(f"{what} must be a token id >= 0, got {n}")
    return n
