"""Suffix decoding with trees: several likely continuations verified at once, where the cost
curve says a tree pays.

`SuffixTreeDrafter` is a `draft_tree` (for `TreeDecoder` / `TreeDecoder.from_logits`, or
`spec_verify.transformers.tree_decoder(model, draft_tree=...)`) over the
same two count tries as `SuffixDrafter` (the request's and a `SuffixCache` of earlier
outputs). Where the chain follows the most frequent continuation of each match, the tree
keeps every continuation whose estimated probability of being reached stays above
`min_token_prob`: a node's estimate is its count over its match's continuations (as the
chain's), its reach the product of the estimates on its path, and the nodes are the
`max_nodes` of highest reach (best first, so the tree is closed under parents). The chain
`SuffixDrafter` proposes is the tree's first path.

`TreeSchedule` decides each round how much of that tree to verify: the n nodes of highest
calibrated reach (a subtree) whose expected tokens per measured cost, (1 + sum of their
reaches) / c(n + 1), is highest, and nothing unless that beats plain decoding by `margin`.
On a steep curve (llama.cpp on two cores: c(9) = 6-10 steps) that keeps a short chain or
nothing; on a flat one (transformers bfloat16: c(17) = 1.6 steps) the side branches pay.
The costs are measured by the drafter itself, as the time between its calls (the target's
step and the verification in between), so it needs nothing from the decoder; the
decoder's `end_generation` call (when it makes one) closes the last round.
"""
from __future__ import annotations

import heapq
import math
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ._suffix_trie import Locus, _rank
from .prompt_lookup import _extends
from .schedule import _CAL_DECAY, _CAL_PRIOR, CALIBRATION_BUCKETS, AdaptiveSchedule, schedule_arg
from .suffix import SuffixDrafter, _depth, _positive


def _best_tree_size(reach: List[float], ratios: List[float], margin: float) -> int:
    """The n in [0, len(reach)] whose rate (1 + reach[0] + ... + reach[n-1]) / ratios[n] is
    highest (reach sorted from the highest: the best subtree of n nodes), in units of plain
    decoding's (ratios[0] = 1); 0 unless one beats 1 + margin. O(len(reach))."""
    best_n, best, total = 0, 1.0 + margin, 1.0
    for n, r in enumerate(reach, start=1):
        total += r
        if total / ratios[n] > best:
            best_n, best = n, total / ratios[n]
    return best_n


class TreeSchedule(AdaptiveSchedule):
    """`AdaptiveSchedule` for tree rounds: which nodes of a proposed tree to verify.

    The costs (c(n) for n positions scored, the prompt's cost per token, refresh rounds)
    and the calibration of estimates are `AdaptiveSchedule`'s; `choose` gives the round's
    kind (the prompt's round, a measuring plain step, a refresh, or "confidence"), and
    `cut_tree` the nodes kept in a "confidence" round. Arguments: `AdaptiveSchedule`'s.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.confident = self.shadowable = True  # proposals with estimates, free to compute
        # The calibration of side branches (a node that is not its parent's first child), kept
        # apart: on the recorded workloads of benchmarks/e2e_simulate.py a second continuation
        # with the estimate 0.26 was accepted 6% of the time where a first one was 30%.
        self._side_n = [0.0] * CALIBRATION_BUCKETS
        self._side_acc = [0.0] * CALIBRATION_BUCKETS
        self._side_est = [0.0] * CALIBRATION_BUCKETS

    def calibrated_side(self, estimate: float) -> float:
        """As `calibrated`, for a side branch's estimate."""
        b = _bucket(estimate)
        return (self._side_acc[b] + _CAL_PRIOR * min(max(float(estimate), 0.0), 1.0)) / (self._side_n[b] + _CAL_PRIOR)

    def calibration(self) -> List[dict]:
        """`AdaptiveSchedule.calibration()` (first children: the chain's tokens), then the side
        branches' buckets, each with `"side": True`."""
        out = super().calibration()
        for b in range(CALIBRATION_BUCKETS):
            n = self._side_n[b]
            if n > 0:
                out.append({"estimate": (b / CALIBRATION_BUCKETS, (b + 1) / CALIBRATION_BUCKETS),
                            "mean_estimate": round(self._side_est[b] / n, 4),
                            "observed": round(self._side_acc[b] / n, 4), "weight": round(n, 2), "side": True})
        return out

    def _calibrate_node(self, estimate: float, accepted: bool, side: bool) -> None:
        if not side:
            self._calibrate(estimate, accepted)
            return
        b = _bucket(estimate)
        self._side_n[b] = _CAL_DECAY * self._side_n[b] + 1.0
        self._side_acc[b] = _CAL_DECAY * self._side_acc[b] + (1.0 if accepted else 0.0)
        self._side_est[b] = _CAL_DECAY * self._side_est[b] + min(max(estimate, 0.0), 1.0)

    def cut_tree(self, estimates: Sequence[float], parents: Sequence[int]) -> List[int]:
        """The nodes of this round's tree to verify (indices, in topological order): the n of
        highest calibrated reach (each node's calibrated estimate times its parent's reach:
        never above its parent's, so they form a subtree; ties to the lower index), n of the
        highest estimated rate on the measured cost curve; none unless that beats plain
        decoding's by `margin`. As `cut`, after 16, 32, ... 256 cuts to nothing in a row a
        recheck round verifies what would pay at the prompt's cost per position.

        Args:
            estimates (`Sequence[float]`): per node, its estimated acceptance given its parent's.
            parents (`Sequence[int]`): per node, its parent (-1: the root), topological.

        Returns:
            `List[int]`: the kept nodes, ascending.
        """
        if not estimates or self._c1 is None:
            return []
        reach: List[float] = []
        for e, p, side in zip(estimates, parents, _sides(parents)):
            reach.append((self.calibrated_side(e) if side else self.calibrated(e)) * (reach[p] if p >= 0 else 1.0))
        order = sorted(range(len(reach)), key=lambda j: (-reach[j], j))
        ranked = [reach[j] for j in order]
        n = self._cut(len(reach), lambda ratios: _best_tree_size(ranked, ratios, self.margin))
        return sorted(order[:n])

    def reset(self) -> None:
        super().reset()
        self._trees: List[list] = []  # [start, tokens, parents, estimates, state per node]: to calibrate on
        self._costs: List[tuple] = []  # (length confirming it, positions, seconds, rechecking): unconfirmed

    def observe_tree(self, positions: int, seconds: float, prompt_tokens: int, start: int, depth: int) -> None:
        """A round that scored `positions` positions (a tree of depth `depth` after `start`
        tokens) took `seconds`. The decoder drops the nodes deeper than the tokens left, so a
        tree's cost is taken only once the sequence reaches start + depth + 1 tokens (then
        none was dropped; `observe_emitted`); the last rounds of a generation may never be."""
        if positions == 1:
            self.observe_target(1, seconds, prompt_tokens)
        else:
            self._costs.append((start + depth + 1, positions, seconds, self._rechecking))
            self._rechecking = self._refreshing = False

    def drafted_tree(self, start: int, tokens: List[int], parents: List[int], estimates: List[float]) -> None:
        """A proposed tree (verified or not) for the positions from `start` on, to calibrate
        the estimates on as the emitted tokens decide its nodes (`observe_emitted`)."""
        if tokens:
            self._trees.append([start, tokens, parents, [float(e) for e in estimates], [_UNDECIDED] * len(tokens)])
            if len(self._trees) > 64:
                del self._trees[0]

    def observe_emitted(self, seq: List[int]) -> None:
        """The sequence after a round: settles the pending trees' nodes it decides. A node is
        decided once its parent matched and `seq` reaches its position; it is accepted when
        its token is the one emitted there (as a chain's token is, `drafted`)."""
        super().observe_emitted(seq)
        if self._costs:
            waiting = []
            for cost in self._costs:
                if cost[0] <= len(seq):
                    self._rechecking = cost[3]  # a recheck's cost replaces a higher kept one
                    self.observe_target(cost[1], cost[2], 0)
                else:
                    waiting.append(cost)
            self._costs = waiting
        keep = []
        for entry in self._trees:
            start, tokens, parents, estimates, state = entry
            have, depth, open_ = len(seq) - start, [], False
            sides = _sides(parents)
            for j, (t, p) in enumerate(zip(tokens, parents)):
                depth.append(1 if p < 0 else depth[p] + 1)
                if state[j] != _UNDECIDED:
                    continue
                up = _MATCHED if p < 0 else state[p]
                if up == _MATCHED and depth[j] <= have:
                    ok = seq[start + depth[j] - 1] == t
                    self._calibrate_node(estimates[j], ok, sides[j])
                    state[j] = _MATCHED if ok else _MISSED
                elif up == _MISSED:
                    state[j] = _MISSED  # never reached: not decided, not counted
                else:
                    open_ = True
            if open_:
                keep.append(entry)
        self._trees = keep


def _bucket(estimate: float) -> int:
    return min(int(min(max(float(estimate), 0.0), 1.0) * CALIBRATION_BUCKETS), CALIBRATION_BUCKETS - 1)


def _sides(parents: Sequence[int]) -> List[bool]:
    """Per node, whether it is a side branch: not the first child (lowest index) of its parent."""
    seen, out = set(), []
    for p in parents:
        out.append(p in seen)
        seen.add(p)
    return out


# A pending tree node's state (TreeSchedule.observe_emitted).
_UNDECIDED, _MATCHED, _MISSED = 0, 1, 2


def _path_depth(parents: List[int], j: int) -> int:
    d = 0
    while j >= 0:
        d, j = d + 1, parents[j]
    return d


class SuffixTreeDrafter(SuffixDrafter):
    """A `draft_tree` by suffix decoding: the likely continuations of the text as a token tree.

    Called as `draft_tree(prefix) -> (tokens, parents, None)`: nodes in topological order,
    `parents[j]` in [-1, j), deterministic children (distinct sibling tokens, no draft rows).

    The tree (`propose`). The matches are `SuffixDrafter`'s: in the request's trie and the
    cache's, the deepest suffix of the text (with the path to the node) that has
    continuations, the deeper of the two taken (then the higher estimate of its most
    frequent continuation, then the request's). Each continuation of a node's match is a
    candidate child, with the estimate count / continuations and a reach (the product of
    the estimates from the root); the candidates enter best first by reach (ties: the
    earlier candidate, and a node's candidates in the chain's order: the most frequent,
    then the most recent), until `max_nodes` nodes, or the best reach left is under
    `min_token_prob`. No node is deeper than `floor(max_spec_factor * m + max_spec_offset)`
    (m: the root's match length). So the first child of each node is the chain's token, and
    with budget enough the tree's first path is `SuffixDrafter`'s proposal.

    The round (`__call__`): with `schedule` (a `TreeSchedule`; "adaptive", the default,
    makes one), the prompt's round and the measuring rounds propose nothing, and otherwise
    the schedule's `cut_tree` keeps the nodes that pay (a chain, a tree, or nothing); with
    "constant" the whole tree is proposed. Each round's whole tree, kept or not, calibrates
    the estimates against the tokens emitted. The target's cost of n positions is the time
    from this call's return to the next call (or to `end_generation`), as the schedule's
    clock reads it.

    Generations: a new one is recognised when the prefix does not extend the last one, or
    grew by more than the last tree's depth + 1 tokens (a round emits at most that); the
    decoder's `end_generation(sequence, prompt_length)`, when it calls it, adds the
    generated tokens to the cache and closes the last round.

    Args:
        cache, max_depth, min_token_prob, max_spec_offset: `SuffixDrafter`'s.
        max_spec_factor (`float`, *optional*, defaults to 4.0): >= 0, as `SuffixDrafter`'s,
            whose default is 1: trees are verified where scoring positions is cheap (the
            transformers adapter; llama.cpp has no tree path), and there the simulated
            decoder ran 3.00x plain against 2.75x with 1 (`benchmarks/e2e_simulate.py`).
        max_nodes (`int`, *optional*, defaults to 16): the most nodes a tree has, >= 1.
        schedule (`str` or `TreeSchedule`, *optional*, defaults to `"adaptive"`): `"adaptive"`
            (a `TreeSchedule` of its own), `"constant"` (always the whole tree) or a
            `TreeSchedule`.

    Attributes:
        rounds (`dict`): rounds by what was proposed: "none", "chain", "tree".

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range.

    Example:
        >>> tree = SuffixTreeDrafter(cache=False, schedule="constant", min_token_prob=0.2, max_spec_factor=1)
        >>> tree([1, 2, 3, 1, 2, 4, 1, 2])   # (1, 2) was followed by 3 and by 4, 4 last
        ([4, 3, 1, 1], [-1, -1, 0, 1], None)
    """

    def __init__(self, cache=None, *, max_depth: int = 24, min_token_prob: float = 0.1,
                 max_spec_factor: float = 4.0, max_spec_offset: int = 0, max_nodes: int = 16,
                 schedule="adaptive"):
        super().__init__(cache, max_depth=max_depth, min_token_prob=min_token_prob,
                         max_spec_factor=max_spec_factor, max_spec_offset=max_spec_offset)
        self.max_nodes = _positive(max_nodes, "SuffixTreeDrafter: max_nodes", 1)
        schedule = schedule_arg("SuffixTreeDrafter", schedule, TreeSchedule, "a")
        self.schedule: Optional[TreeSchedule] = (TreeSchedule() if schedule == "adaptive" else
                                                 None if schedule == "constant" else schedule)
        if self.schedule is not None:
            self.schedule.k_max = self.max_nodes
        self.rounds: Dict[str, int] = {"none": 0, "chain": 0, "tree": 0}
        # The last round: (prefix length, tree tokens, parents, estimates, nodes sent, depth
        # sent, clock reading at return), or None.
        self._last: Optional[tuple] = None

    def __repr__(self) -> str:
        return super().__repr__().replace("SuffixDrafter(", "SuffixTreeDrafter(", 1)[:-1] + \
            f", max_nodes={self.max_nodes})"

    def _now(self) -> int:
        s = self.schedule
        return s.reading() if s is not None and s.clock is not None else time.perf_counter_ns()

    # The round -----------------------------------------------------------------------------

    def __call__(self, prefix: Sequence[int]) -> Tuple[List[int], List[int], None]:  # type: ignore[override]
        """Proposes the tree to verify after `prefix` (see the class).

        Args:
            prefix (`Sequence[int]`): the token ids so far.

        Returns:
            `Tuple[List[int], List[int], None]`: `(tokens, parents, None)`.

        Raises:
            TypeError: a token that is not an int. ValueError: a negative token.
        """
        now = self._now()
        if type(prefix) is not list:
            prefix = list(prefix)
        self._close_round(prefix, now)
        tokens, parents, estimates = self.propose(prefix)
        schedule = self.schedule
        if schedule is None:
            keep = list(range(len(tokens)))
        else:
            _, reason, _ = schedule.choose(len(tokens), None, len(prefix))
            keep = schedule.cut_tree(estimates, parents) if reason == "confidence" else []
            if reason != "prefill":  # as the chain decoder, which asks its drafter nothing then
                schedule.drafted_tree(len(prefix), tokens, parents, estimates)
        out_tokens, out_parents = _subtree(tokens, parents, keep)
        chain = all(p == j - 1 for j, p in enumerate(out_parents))
        self.rounds["none" if not keep else "chain" if chain else "tree"] += 1
        depth = max((_path_depth(out_parents, j) for j in range(len(out_parents))), default=0)
        self._last = (len(prefix), tokens, parents, estimates, len(out_tokens), depth, self._now())
        return out_tokens, out_parents, None

    def _close_round(self, prefix: List[int], now: int) -> None:
        # The last round's cost and calibration if `prefix` continues it; else a new generation.
        last = self._last
        if last is not None:
            start, tokens, parents, estimates, sent, depth, returned = last
            grown = len(prefix) - start
            if 1 <= grown <= depth + 1 and _extends(self._tokens, prefix, self.max_depth + 1):
                self._observe(last, prefix, now, start)
                return
        if self._tokens and (last is not None or not _extends(self._tokens, prefix, self.max_depth + 1)):
            if self.cache is not None and self._first >= 0:
                self.cache.add(self._tokens[self._first:])
            self.reset()
        if last is not None and self.schedule is not None:
            self.schedule.reset()
        self._last = None

    def _observe(self, last, seq: Sequence[int], now: int, prompt_tokens: int) -> None:
        start, tokens, parents, estimates, sent, depth, returned = last
        schedule = self.schedule
        if schedule is not None:
            schedule.observe_tree(sent + 1, (now - returned) * 1e-9, prompt_tokens, start, depth)
            schedule.observe_emitted(list(seq))

    def end_generation(self, sequence: Sequence[int], prompt_length: int) -> None:
        """A generation ended (called by the decoder): the last round's cost and calibration,
        the generated tokens into the cache, and the next call starts a new request.

        Args:
            sequence (`Sequence[int]`): the prompt and the generated tokens.
            prompt_length (`int`): the prompt's length.
        """
        now = self._now()
        if self._last is not None:
            self._observe(self._last, list(sequence), now, self._last[0])
        super().end_generation(sequence, prompt_length)
        if self.schedule is not None:
            self.schedule.reset()
        self._last = None

    # The tree ------------------------------------------------------------------------------

    def propose(self, prefix: Sequence[int]) -> Tuple[List[int], List[int], List[float]]:
        """The whole tree after `prefix` by the counts (see the class), before any cut.

        Args:
            prefix (`Sequence[int]`): the token ids so far.

        Returns:
            `Tuple[List[int], List[int], List[float]]`: `(tokens, parents, estimates)`, each
            node's estimate its count over its match's continuations.
        """
        if type(prefix) is not list:
            prefix = list(prefix)
        self._follow(prefix)
        self.confidences = []
        self.match_length = 0
        trie, cache = self._trie, self.cache
        glob = self._match_cache() if cache is not None and cache.tokens else None
        gtrie = cache._trie if glob is not None else None
        tokens: List[int] = []
        parents: List[int] = []
        estimates: List[float] = []
        # Candidates: (-reach, order, parent, token, estimate, depth, parent's loci).
        frontier: list = []
        order = 0
        cap = self.max_nodes  # the depth cap, set by the root's match

        def expand(parent: int, reach: float, depth: int, local: Locus, glob_locus: Optional[Locus]) -> None:
            nonlocal order, cap
            if depth >= cap:
                return
            chosen, n, children, local, glob_locus = self._continuations(trie, local, gtrie, glob_locus)
            if n == 0:
                return
            if parent < 0:
                self.match_length = chosen
                cap = min(cap, int(math.floor(self.max_spec_factor * chosen + self.max_spec_offset + 1e-9)))
                if cap <= 0:
                    return
            for rank, token in children:
                estimate = rank[0] / n
                if reach * estimate < self.min_token_prob:
                    break  # ranked by count: the rest reach less
                heapq.heappush(frontier, (-reach * estimate, order, parent, token, estimate, depth + 1, local,
                                          glob_locus))
                order += 1

        expand(-1, 1.0, 0, (self._active[-1], 0, 0), glob)
        while frontier and len(tokens) < self.max_nodes:
            neg, _, parent, token, estimate, depth, local, glob_locus = heapq.heappop(frontier)
            tokens.append(token)
            parents.append(parent)
            estimates.append(estimate)
            local = trie.walk(local, token)
            if glob_locus is not None:
                glob_locus = gtrie.walk(glob_locus, token)
            expand(len(tokens) - 1, -neg, depth, local, glob_locus)
        return tokens, parents, estimates

    def _continuations(self, trie, local: Locus, gtrie, glob: Optional[Locus]):
        # (match length, continuations counted, [(rank, token)] most frequent then most recent
        # first, the two loci moved to their deepest suffix with continuations), the match
        # chosen between the tries as SuffixDrafter's.
        local, n, top = _with_continuations(trie, local)
        depth = _depth(local) if n else 0
        children = _ranked(trie, local, self.max_depth) if n else []
        if glob is not None:
            glob, gn, gtop = _with_continuations(gtrie, glob)
            gdepth = _depth(glob)
            if gn and gdepth and (n == 0 or gdepth > depth or (gdepth == depth and gtop * n > top * gn)):
                return gdepth, gn, _ranked(gtrie, glob, gtrie.max_depth), local, glob
        return depth, n, children, local, glob


def _with_continuations(trie, locus: Locus) -> Tuple[Locus, int, int]:
    # The deepest suffix of locus's string (one token or more) with continuations: (locus,
    # continuations, the top count); (root, 0, 0) if none.
    n, _, count = trie.continuation(locus)
    while n == 0 and _depth(locus):
        locus = trie.link(locus)
        n, _, count = trie.continuation(locus)
    if _depth(locus) == 0:
        return locus, 0, 0
    return locus, n, count


def _ranked(trie, locus: Locus, max_depth: int) -> List[Tuple[Tuple[int, int], int]]:
    # The continuations at `locus` as (rank, token), best first (count, then recency).
    node, r, pos = locus
    if r == 0:
        return sorted(((_rank(child), t) for t, child in node.children.items()), reverse=True)
    nxt = trie.token_at(pos + 1)
    return [((1, pos + 1), nxt)] if nxt >= 0 and node.depth + r < max_depth else []


def _subtree(tokens: List[int], parents: List[int], keep: List[int]) -> Tuple[List[int], List[int]]:
    """The nodes `keep` (ascending, closed under parents), renumbered."""
    index: Dict[int, int] = {}
    out_tokens, out_parents = [], []
    for j in keep:
        p = parents[j]
        index[j] = len(out_tokens)
        out_tokens.append(tokens[j])
        out_parents.append(-1 if p < 0 else index[p])
    return out_tokens, out_parents
