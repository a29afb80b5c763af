"""A draft without a draft model: continue the text by copying from earlier in the prefix.

`PromptLookup` is a `draft_step` for `SpeculativeDecoder` (prompt lookup decoding: Saxena,
2023). It pays off where the output repeats its prompt or itself: rewriting or editing a
document or a source file, answering with quotations, code with repeated identifiers.
It proposes tokens without probabilities, so the decoder verifies them as one-hot drafts
(greedy: `verify_greedy`; sampling: `accept(target_rows, None, tokens)`), and the output
is exactly what the target alone would give.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ._api import _index


def _extends(tokens: List[int], prefix: List[int], window: int) -> bool:
    """Whether `prefix` extends the indexed `tokens`, judged at their first token and their
    last `window` tokens (those an index's suffix keys are made of): O(window). A drafter's
    prefixes within a generation always extend the last one; anything else is a new one."""
    m = len(tokens)
    if m == 0:
        return True
    if len(prefix) < m or prefix[0] != tokens[0]:
        return False
    lo = max(0, m - window)
    return prefix[lo:m] == tokens[lo:]


def _ngram_size(value, what: str, low: int, high: Optional[int]) -> int:
    n = _index(value, f"PromptLookup: {what}")
    if n < low or (high is not None and n > high):
        raise ValueError(f"PromptLookup: {what} must be an int in [{low}, {'inf' if high is None else high}], "
                         f"got {n}")
    return n


class PromptLookup:
    """Drafts by prompt lookup: the continuation of the suffix n-gram's last earlier occurrence.

    Called as `draft_step(prefix, k)`, it takes the longest suffix of `prefix` of n tokens,
    `max_ngram >= n >= min_ngram`, that occurs earlier in `prefix`, and proposes the (up to)
    k tokens that followed its most recent earlier occurrence. The rule for ties: the
    longest n first, then, among that n-gram's earlier occurrences, the most recent (the one
    ending last before the end of `prefix`). An occurrence may overlap the suffix itself.
    The continuation is copied as it runs, so it may run into the suffix and then into the
    tokens it has just proposed: after the periodic text `a b c a b c a b`, the suffix
    `c a b` last occurred ending 3 tokens back, and the proposal for k = 5 is `c a b c a`,
    not only the 2 tokens written after that occurrence. No occurrence of any suffix of
    `min_ngram` tokens or more: no proposal (0 tokens), and the decoder runs a plain
    target step.

    Cost. An index per n maps each n-gram to where the continuation of its most recent
    occurrence starts; a call indexes only the tokens appended since the previous call and
    looks up at most `max_ngram - min_ngram + 1` suffixes, so a round costs
    O(max_ngram * (tokens appended + max_ngram - min_ngram + 1) + k), independent of the
    length of the prefix (indexing the prompt, once per generation, is O(len(prompt) *
    (max_ngram - min_ngram + 1))). `work` counts the n-gram keys formed (indexed and looked
    up), the unit of that cost.

    A new generation is recognised by its prefix: a prefix that is shorter than the indexed
    sequence, or differs from it at its first token or within the last `max_ngram + 1`
    indexed tokens, resets the index (the decoder's prefixes within a generation always
    extend the last one). Call `reset()` to start afresh in any case.

    Beside transformers and vLLM (both read late 2026):
      - transformers' `PromptLookupCandidateGenerator` (assisted generation with
        `prompt_lookup_num_tokens`): n from `max_matching_ngram_size` (default 2) down to 1,
        the earliest (leftmost) occurrence whose continuation is not empty, found by
        comparing every window of the input with the suffix on each call (O(length) per
        round); the continuation stops at the end of the input (and at an end-of-sequence
        token).
      - vLLM's n-gram proposer (`prompt_lookup_min` / `prompt_lookup_max`): the longest
        suffix n-gram with n in [min, max], found by a KMP pass over the reversed context on
        each call (O(length) per round), the earliest occurrence among those of that
        length, up to k following tokens, stopping at the end of the context.
    Here: the most recent occurrence (text that is being copied usually continues the way
    it did last), an incremental index (O(1) in the length per round), and a continuation
    that may run past the end of the prefix (periodic text yields a full proposal).

    Args:
        max_ngram (`int`, *optional*, defaults to 3): the longest suffix looked up, >= 1.
        min_ngram (`int`, *optional*, defaults to 1): the shortest, in [1, max_ngram].

    Raises:
        TypeError: a size that is not an int (bool is not one).
        ValueError: a size out of range.

    Example:
        >>> lookup = PromptLookup(max_ngram=3)
        >>> lookup([5, 6, 7, 8, 5, 6], 3)
        ([7, 8, 5], None)
    """

    # For spec_verify.schedule: proposals without probabilities, cheap, and no state that a
    # call in a round that verifies nothing could upset, so it may be shadowed.
    shadowable = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = _ngram_size(max_ngram, "max_ngram", 1, None)
        self.min_ngram = _ngram_size(min_ngram, "min_ngram", 1, self.max_ngram)
        self.work = 0
        # Its own record, kept across generations: per n-gram size and position in the
        # proposal, decayed counts of proposed tokens decided by the text that followed (while
        # the ones before them matched), and of those that matched.
        self._decided: List[List[float]] = [[] for _ in range(self.min_ngram, self.max_ngram + 1)]
        self._matched: List[List[float]] = [[] for _ in range(self.min_ngram, self.max_ngram + 1)]
        self.confidences: List[float] = []
        self.reset()

    def __repr__(self) -> str:
        return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"

    def reset(self) -> None:
        """Forgets the indexed sequence: the next call indexes its prefix from the start."""
        self._tokens: List[int] = []
        # _index[n - min_ngram]: n-gram (a tuple) -> start of the continuation of its most
        # recent occurrence. Holds every n-gram of _tokens except the suffix ones (those
        # ending at len(_tokens)), which have no continuation yet.
        self._index: List[Dict[Tuple[int, ...], int]] = [{} for _ in range(self.min_ngram, self.max_ngram + 1)]
        self._indexed_to = 0  # n-grams ending at positions < _indexed_to are in the index
        self._last: Optional[Tuple[int, List[int], int]] = None  # (start, tokens, n) of the last proposal

    def __call__(self, prefix: Sequence[int], k: int) -> Tuple[List[int], None]:
        """Proposes up to k tokens to follow `prefix`.

        Args:
            prefix (`Sequence[int]`): the token ids so far (a list of ints, as the decoder
                passes; other sequences of ints are converted).
            k (`int`): the most tokens to propose, >= 0.

        Returns:
            `Tuple[List[int], None]`: the proposal (0 to k ids) and None (no probabilities:
            one-hot drafts).

        Raises:
            TypeError: a token or k that is not an int.
            ValueError: a negative k.
        """
        if type(prefix) is not list:
            prefix = list(prefix)
        if type(k) is not int:
            k = _index(k, "PromptLookup: k")
        if k < 0:
            raise ValueError(f"PromptLookup: k must be an int >= 0, got {k}")
        self._follow(prefix)
        self._score_last()
        self.confidences = []
        if k == 0:
            return [], None
        tokens, length = self._tokens, len(self._tokens)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            self.work += 1
            start = self._index[n - self.min_ngram].get(tuple(tokens[length - n:]))
            if start is not None:
                # Copy forward from `start` (< length); past the end of the prefix the copy
                # reads what it has just written, so a periodic tail is extended periodically.
                out = tokens[start:start + k]
                for i in range(len(out), k):
                    out.append(out[i - (length - start)])
                self.confidences = self._estimates(n - self.min_ngram, k)
                self._last = (length, out, n - self.min_ngram)
                return out, None
        return [], None

    def _score_last(self) -> None:
        # The last proposal against the text that followed it (the tokens decided so far),
        # into the record of its n-gram size: O(k) per call.
        if self._last is None:
            return
        start, out, size = self._last
        self._last = None
        tokens, decided, matched = self._tokens, self._decided[size], self._matched[size]
        for j, t in enumerate(out):
            if start + j >= len(tokens):
                break
            if j == len(decided):
                decided.append(0.0)
                matched.append(0.0)
            ok = tokens[start + j] == t
            decided[j] = 0.9 * decided[j] + 1.0
            matched[j] = 0.9 * matched[j] + (1.0 if ok else 0.0)
            if not ok:
                break

    def _estimates(self, size: int, k: int) -> List[float]:
        # Per position, the share matched, with one observation's weight of the previous
        # position's estimate as its prior (0.5 before the first): O(k).
        decided, matched = self._decided[size], self._matched[size]
        out, prior = [], 0.5
        for j in range(k):
            if j < len(decided):
                prior = (matched[j] + prior) / (decided[j] + 1.0)
            out.append(prior)
        return out

    # The index ------------------------------------------------------------------------------

    def _follow(self, prefix: List[int]) -> None:
        # Brings the index up to `prefix`: every n-gram ending before len(prefix) is indexed.
        if not _extends(self._tokens, prefix, self.max_ngram + 1):
            self.reset()
        tokens = self._tokens
        new = prefix[len(tokens):]
        for i, t in enumerate(new):  # each token is checked once, when it is appended
            if type(t) is not int:
                new[i] = _index(t, f"PromptLookup: prefix[{len(tokens) + i}]")
        tokens.extend(new)
        self._index_range(max(self._indexed_to, self.min_ngram), len(tokens))
        self._indexed_to = max(self._indexed_to, len(tokens))

    def _index_range(self, first: int, length: int) -> None:
        # Indexes the n-grams ending at first..length-1 (PromptLookupTree keeps several ends).
        tokens, low, high = self._tokens, self.min_ngram, self.max_ngram
        for end in range(first, length):
            window = tuple(tokens[max(0, end - high):end])
            for n in range(low, min(high, end) + 1):
                self._index[n - low][window[len(window) - n:]] = end
            self.work += min(high, end) - low + 1


def _size(value, what: str, low: int) -> int:
    n = _index(value, f"PromptLookupTree: {what}")
    if n < low:
        raise ValueError(f"PromptLookupTree: {what} must be an int >= {low}, got {n}")
    return n


class PromptLookupTree(PromptLookup):
    """A `draft_tree` by prompt lookup: the continuations of several earlier matches, as a tree.

    Called as `draft_tree(prefix) -> (tokens, parents, None)` (for
    `TreeDecoder` / `TreeDecoder.from_logits`). The branches: for n from the
    longest suffix n-gram of `prefix` that occurs earlier (at most `max_ngram`) down to
    `min_ngram`, the continuations of that n-gram's most recent earlier occurrences (at most
    `matches` of them, the most recent first; a continuation already taken through a longer
    n-gram is not taken again), until `branches` branches are taken. Each continuation is
    `depth` tokens, copied as they run as `PromptLookup` copies them (periodic text extends
    periodically). The branches are merged into a prefix tree in that order: a branch shares
    the nodes of its longest common prefix with the branches before it and adds only the
    rest, so siblings hold distinct tokens (deterministic children, verified without draft
    rows) and a branch that repeats an earlier one adds nothing and does not count. The
    first branch (the most recent occurrence of the longest n-gram, `PromptLookup`'s
    proposal) is nodes 0..depth-1, a chain, and the first child tried at every level. At
    most `max_nodes` nodes: the branch that reaches the budget is cut there. No match: 0
    nodes (a plain target step).

    Cost. The index keeps, per n-gram, the continuation starts of its `matches` most recent
    occurrences (a list of at most `matches` ints, most recent last), so indexing a token
    costs O(max_ngram - min_ngram + 1) keys as in `PromptLookup` plus O(matches) to trim each
    list, and a round looks up at most `max_ngram - min_ngram + 1` keys and merges at most
    `max_ngram - min_ngram + 1` times `matches` continuations of `depth` tokens:
    O((max_ngram - min_ngram + 1) * matches * depth) plus the appended tokens' indexing,
    independent of the length of the prefix.

    Args:
        max_ngram (`int`, *optional*, defaults to 3), min_ngram (`int`, *optional*, defaults
            to 1): the suffix n-gram sizes, as for `PromptLookup`.
        branches (`int`, *optional*, defaults to 4): the most branches (distinct
            continuations), >= 1.
        depth (`int`, *optional*, defaults to 8): tokens per branch (the tree's depth), >= 1.
        max_nodes (`int`, *optional*): the most nodes, >= 1; defaults to `branches * depth`.
        matches (`int`, *optional*): occurrences kept per n-gram, >= 1; defaults to
            `branches`.

    Example:
        >>> tree = PromptLookupTree(max_ngram=2, branches=2, depth=2)
        >>> tree([1, 2, 3, 1, 2, 4, 1, 2])   # (1, 2) was followed by 4 and, before, by 3
        ([4, 1, 3, 1], [-1, 0, -1, 2], None)
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, branches: int = 4, depth: int = 8,
                 max_nodes: Optional[int] = None, matches: Optional[int] = None):
        self.branches = _size(branches, "branches", 1)
        self.depth = _size(depth, "depth", 1)
        self.max_nodes = self.branches * self.depth if max_nodes is None else _size(max_nodes, "max_nodes", 1)
        self.matches = self.branches if matches is None else _size(matches, "matches", 1)
        super().__init__(max_ngram, min_ngram)

    def __repr__(self) -> str:
        return (f"PromptLookupTree(max_ngram={self.max_ngram}, min_ngram={self.min_ngram}, branches={self.branches}, "
                f"depth={self.depth}, max_nodes={self.max_nodes}, matches={self.matches})")

    def _index_range(self, first: int, length: int) -> None:
        # As PromptLookup's, but each key keeps its `matches` most recent continuation starts.
        tokens, low, high, keep = self._tokens, self.min_ngram, self.max_ngram, self.matches
        for end in range(first, length):
            window = tuple(tokens[max(0, end - high):end])
            for n in range(low, min(high, end) + 1):
                table, key = self._index[n - low], window[len(window) - n:]
                ends = table.get(key)
                if ends is None:
                    table[key] = [end]
                else:
                    ends.append(end)
                    if len(ends) > keep:
                        del ends[0]
            self.work += min(high, end) - low + 1

    def __call__(self, prefix: Sequence[int]) -> Tuple[List[int], List[int], None]:  # type: ignore[override]
        """Proposes a tree of continuations of `prefix`.

        Args:
            prefix (`Sequence[int]`): the token ids so far.

        Returns:
            `Tuple[List[int], List[int], None]`: `(tokens, parents, None)`: the nodes in
            topological order (`parents[j]` in `[-1, j)`), no draft rows.

        Raises:
            TypeError: a token that is not an int.
        """
        if type(prefix) is not list:
            prefix = list(prefix)
        self._follow(prefix)
        tokens, length, depth = self._tokens, len(self._tokens), self.depth
        out_tokens: List[int] = []
        out_parents: List[int] = []
        children: Dict[Tuple[int, int], int] = {}  # (parent, token) -> node
        taken = set()
        branches = 0
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            self.work += 1
            ends = self._index[n - self.min_ngram].get(tuple(tokens[length - n:]))
            if not ends:
                continue
            for start in reversed(ends):  # the most recent first
                if start in taken:
                    continue
                taken.add(start)
                branch = tokens[start:start + depth]
                for i in range(len(branch), depth):
                    branch.append(branch[i - (length - start)])
                node, added = -1, False
                for t in branch:
                    child = children.get((node, t))
                    if child is None:
                        if len(out_tokens) == self.max_nodes:
                            break
                        child = children[(node, t)] = len(out_tokens)
                        out_tokens.append(t)
                        out_parents.append(node)
                        added = True
                    node = child
                branches += added
                if branches == self.branches or len(out_tokens) == self.max_nodes:
                    return out_tokens, out_parents, None
        return out_tokens, out_parents, None
