"""Tree rounds: `TreeDecoder`, a `Decoder` whose rounds verify a tree of candidate
continuations. `TreeDecoder(draft_tree, target_tree_step)` verifies probability rows (or
logits when greedy), `TreeDecoder.from_logits` logits warped as
`SpeculativeDecoder.from_logits` warps them.

Contract with the callbacks (what a KV cache can rely on). Within one generation, every
round calls

    draft_tree(prefix)                        -> (tokens [N], parents [N], draft_rows [N+1, V] or None)
    target_tree_step(prefix, tokens, parents) -> rows [N+1, V] float32

with the same `prefix`, a fresh list: the prompt followed by every token emitted so far.
The tree is laid out as the ops take it (Note [Tree verification]): node j holds
`tokens[j]`, its parent is `parents[j]` in [-1, j) (-1: a child of the root, i.e. of the
end of `prefix`); target row 0 is the distribution after `prefix`, row j+1 the one after
`prefix` + the tokens on the path from the root to node j (node j included). Draft rows,
when given, are laid out alike: row j+1 is the distribution node j's children were drawn
from. A tree may have 0 nodes (a plain target step: one row).

The next round's prefix is `prefix + [tokens[i] for i in path] + [x]`, the accepted path
and the emitted token. So each prefix extends the last verified one, and of what
target_tree_step fed its model last round (the prefix and the N nodes, each attending to
its ancestors), only the prefix and the nodes of the accepted path stay valid: a cache
keeps the prefix's entries, keeps (or recomputes) the accepted nodes' entries in path
order, and drops every other node's. Near `max_new` the decoder drops the nodes deeper
than the tokens left (remaining - 1) before calling target_tree_step, which then sees the
smaller tree; with one token left draft_tree is not called (a 0-node round).
`draft_tree.end_generation(sequence, prompt_length)`, if the drafter has it, is called once
at the end of each generation (as `SpeculativeDecoder` calls a draft_step's).
"""
from __future__ import annotations

from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch

from ._api import _flag, _index, _kind, _token_tensor
from ._decoding import Decoder, _check_callbacks, _check_rows, _check_token_range, _culprit, _dense, _now
from ._stats import TreeDecodeStats
from ._trees import _verify_tree, verify_tree_probs
from ._warping import Warping

DraftTree = Callable[[List[int]], Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]
TargetTreeStep = Callable[[List[int], torch.Tensor, torch.Tensor], torch.Tensor]
TreeVerifier = Callable[[torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor,
                         Optional[torch.Generator]], Tuple[Sequence[int], int]]

_Tensor = torch.Tensor
_int64 = torch.int64
_float32 = torch.float32


def _grow(counts: List[int], i: int) -> None:
    if i >= len(counts):
        counts.extend([0] * (i + 1 - len(counts)))
    counts[i] += 1


# The callback behind each op argument the tree decoder passes (_decoding._culprit). {target}
# is the target callback's name.
_TREE_CULPRITS = {
    "target_probs": "{target}'s rows",
    "target_logits": "{target}'s logits",
    "draft_probs": "draft_tree's rows",
    "draft_logits": "draft_tree's rows",
    "tokens": "draft_tree's tokens",
    "parents": "draft_tree's parents",
}


def _depths(parents: List[int]) -> List[int]:
    """Node depths (a child of the root: 1), checking that parents are topological."""
    depth = []
    for j, p in enumerate(parents):
        if not -1 <= p < j:
            raise ValueError(f"draft_tree's parents[{j}] = {p} must be in [-1, {j}): nodes in topological order, "
                             f"-1 for a child of the root")
        depth.append(1 if p < 0 else depth[p] + 1)
    return depth


class TreeDecoder(Decoder):
    """Speculative decoding whose rounds verify a tree of candidates (`verify_tree_probs`).

    Each round calls `draft_tree(prefix) -> (tokens [N], parents [N], draft_rows)` and
    `target_tree_step(prefix, tokens, parents) -> rows [N+1, V]`, and keeps the path the
    verifier accepts plus its emitted token. The layout is the ops' (Note [Tree
    verification]): `parents[j]` in `[-1, j)` (-1: a child of the root), row 0 after
    `prefix`, row j+1 after `prefix` and the path to node j. N = 0 is a plain target step.
    See `spec_verify.tree_decoder` for the KV-cache contract; `generate` and `stream` work as
    for any `Decoder`, and `.stats` is a `TreeDecodeStats`.

    Args:
        draft_tree (`Callable[[List[int]], tuple]`): the tree: `tokens` and `parents` as 1-D
            integer tensors or lists of ints, and `draft_rows` None or float32 `[N+1, V]`
            (row j+1: the distribution node j's children were drawn from, independently;
            rows of leaves are never read). None when sampling means deterministic children
            (candidates such as top-k or prompt-lookup matches), whose siblings must hold
            distinct tokens. Not called with one token left.
        target_tree_step (`Callable[[List[int], torch.Tensor, torch.Tensor], torch.Tensor]`):
            float32 `[N+1, V]` on the CPU; `tokens` and `parents` are contiguous int64 CPU
            tensors. Probabilities (unnormalised is fine); logits when greedy.
        greedy (`bool`, *optional*, defaults to `True`): greedy verification (output
            identical to greedy decoding of the target); else exact sampling.
        generator (`torch.Generator`, *optional*): the verifier's generator.
        verifier (`Callable`, *optional*): `verifier(target_rows, draft_rows, tokens, parents,
            generator) -> (path, next_token)` instead of `verify_tree_probs`; its path is
            checked to run from the root down.

    Raises:
        TypeError: a callback, verifier or generator of the wrong type; greedy not a bool.
            While generating, output of the wrong kind raises naming the callback, and
            contents the op rejects (a parent out of order, repeated sibling tokens without
            draft rows, a token outside the vocabulary) raise its ValueError prefixed with
            the callback.
    """

    def __init__(self, draft_tree: DraftTree, target_tree_step: TargetTreeStep, *, greedy: bool = True,
                 generator: Optional[torch.Generator] = None, verifier: Optional[TreeVerifier] = None):
        greedy = _flag(greedy, "TreeDecoder: greedy")
        self._setup("TreeDecoder", draft_tree, target_tree_step, greedy, generator, verifier, None,
                    "target_tree_step")

    @classmethod
    def from_logits(
        cls,
        draft_tree: DraftTree,
        target_tree_logits_step: TargetTreeStep,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        verifier: Optional[TreeVerifier] = None,
    ) -> "TreeDecoder":
        """A tree decoder on logits rows, verified by `verify_tree` with these warping
        parameters (temperature 0: greedy). Draft rows, when given, are logits too, and the
        children must have been sampled from them warped alike (`sv.sample` with the same
        parameters).

        Args:
            draft_tree, verifier, generator: as for the constructor.
            target_tree_logits_step (`Callable`): as `target_tree_step` of the constructor,
                returning float32 logits `[N+1, V]`.
            temperature, top_k, top_p, min_p: as for `SpeculativeDecoder.from_logits`.

        Returns:
            `TreeDecoder`: with `greedy = (temperature == 0)` and `warping` the four
            parameters, checked (a named tuple, as `SpeculativeDecoder.from_logits` keeps them).

        Raises:
            TypeError, ValueError: as for the constructor, and for bad warping parameters.
        """
        what = "TreeDecoder.from_logits"
        warping = Warping(temperature, top_k, top_p, min_p, what=what)
        return cls._from_warping(what, draft_tree, target_tree_logits_step, warping, generator, verifier)

    @classmethod
    def _from_warping(cls, what: str, draft_tree, target_tree_logits_step, warping: Warping, generator,
                      verifier) -> "TreeDecoder":
        # from_logits for a Warping already built (transformers.tree_decoder builds its own
        # before it wraps its models); `what` prefixes the messages.
        dec = cls.__new__(cls)
        dec._setup(what, draft_tree, target_tree_logits_step, warping.greedy, generator, verifier, warping,
                   "target_tree_logits_step")
        return dec

    def _setup(self, what: str, draft_tree, target_tree_step, greedy: bool, generator, verifier,
               warping: Optional[Warping], target_name: str) -> None:
        _check_callbacks(what + ": ", generator, verifier, draft_tree=draft_tree, **{target_name: target_tree_step})
        self.draft_tree = draft_tree
        self.target_tree_step = target_tree_step
        self.greedy = greedy
        self.generator = generator
        self.warping = warping
        self.custom_verifier = verifier is not None
        self.verifier = verifier if verifier is not None else self._default_verifier()
        self.stats = TreeDecodeStats()
        self._target_name = target_name

    def __repr__(self) -> str:
        if self.warping is not None:
            return f"TreeDecoder.from_logits({self.warping})"
        return f"TreeDecoder(greedy={self.greedy})"

    def _default_verifier(self) -> TreeVerifier:
        if self.warping is not None:
            warping = self.warping  # checked once, at construction

            def verify(rows, draft_rows, tokens, parents, generator):
                return _verify_tree(rows, tokens, parents, draft_rows, warping, generator)
        else:
            greedy = self.greedy

            def verify(rows, draft_rows, tokens, parents, generator):
                return verify_tree_probs(rows, tokens, parents, draft_rows, greedy=greedy, generator=generator)
        return verify

    # The loop ------------------------------------------------------------------------------

    def _start_generation(self) -> TreeDecodeStats:
        return TreeDecodeStats()

    def _loop(self, seq: List[int], max_new: int, stop: frozenset, stats: TreeDecodeStats) -> Iterator[List[int]]:
        empty = torch.empty(0, dtype=_int64)
        remaining = max_new
        # A drafter that learns from whole requests (SuffixTreeDrafter) hears when one ends.
        end_generation, prompt_len = getattr(self.draft_tree, "end_generation", None), len(seq)
        if max_new == 0 and end_generation is not None:
            end_generation(seq, prompt_len)
        while remaining > 0:
            t0 = _now()
            if remaining > 1:
                out = self.draft_tree(list(seq))
                t1 = _now()
                stats.draft_calls += 1
                tokens, parents, draft_rows = self._check_tree(out)
                token_list, parent_list = tokens.tolist(), parents.tolist()
                depth = 0
                if token_list:
                    # Never accept past max_new: drop the nodes deeper than remaining - 1.
                    depths = _depths(parent_list)
                    depth = max(depths)
                    if depth > remaining - 1:
                        tokens, parents, draft_rows, token_list, parent_list = self._prune(
                            depths, remaining - 1, token_list, parent_list, draft_rows)
                        stats.pruned += len(depths) - len(token_list)
                        depth = remaining - 1 if token_list else 0
            else:
                t1 = t0
                tokens, parents, draft_rows, token_list, parent_list, depth = empty, empty, None, [], [], 0
            t2 = _now()
            rows = self.target_tree_step(list(seq), tokens, parents)
            t3 = _now()
            path, nxt = self._verify(rows, draft_rows, tokens, parents, parent_list)
            chunk = [token_list[i] for i in path]
            chunk.append(nxt)
            remaining = self._emit(seq, chunk, remaining, stop, stats)  # the tree is at most remaining - 1 deep
            if remaining == 0 and end_generation is not None:
                end_generation(seq, prompt_len)
            _grow(stats.node_counts, len(token_list))
            _grow(stats.accepted_length_counts, len(path))
            _grow(stats.depth_counts, depth)
            t4 = _now()
            stats.draft_ns += t1 - t0
            stats.target_ns += t3 - t2
            stats.verify_ns += (t2 - t1) + (t4 - t3)
            yield chunk

    @staticmethod
    def _prune(depths, limit, token_list, parent_list, draft_rows):
        # Topological order: a kept node's parent is shallower, hence kept and renumbered first.
        new_index, tokens, parents = {}, [], []
        for j, d in enumerate(depths):
            if d <= limit:
                p = parent_list[j]
                new_index[j] = len(tokens)
                tokens.append(token_list[j])
                parents.append(-1 if p < 0 else new_index[p])
        if draft_rows is not None:
            draft_rows = draft_rows[[0] + [j + 1 for j in new_index]]
        return (torch.tensor(tokens, dtype=_int64), torch.tensor(parents, dtype=_int64), draft_rows, tokens,
                parents)

    # Checks of the callbacks' output -------------------------------------------------------

    def _check_tree(self, out):
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise TypeError(f"draft_tree must return a triple (tokens, parents, draft_rows), got {_kind(out)}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        tokens, parents, rows = out
        ids = []
        for name, x in (("tokens", tokens), ("parents", parents)):
            if not (type(x) is _Tensor and x.dtype is _int64 and x.is_cpu):
                # dtype= by keyword: a positional dtype makes torch look up __torch_function__ on
                # it by a fresh name string, which CPython 3.11's type cache then keeps (DESIGN.md,
                # "Testing", Memory).
                x = _token_tensor(x, f"draft_tree's {name}").to(dtype=_int64)
            _dense(x, f"draft_tree returned {name} as", "a 1-D integer tensor or a list of ints")
            if x.dim() != 1:
                raise ValueError(f"draft_tree's {name} must be 1-D, got shape {list(x.shape)}")
            ids.append(x.contiguous())
        tokens, parents = ids
        n = tokens.shape[0]
        if parents.shape[0] != n:
            raise ValueError(f"draft_tree returned {n} tokens but {parents.shape[0]} parents")
        vocab = self._known_vocab()
        if self.greedy or rows is None:  # greedy: draft rows unused; sampling: deterministic children
            if n:
                _check_token_range(tokens.tolist(), vocab, "draft_tree's tokens", f"{self._target_name}'s rows")
            return tokens, parents, None
        what = "draft_tree's rows"
        if not isinstance(rows, torch.Tensor):
            raise TypeError(f"{what}: got {_kind(rows)}, expected a float32 tensor [N+1, V] or None")
        _dense(rows, "draft_tree returned rows as", "a float32 tensor [N+1, V] or None")
        if rows.dtype != _float32:
            raise TypeError(f"{what} have dtype {rows.dtype}, expected torch.float32")
        if rows.dim() != 2 or rows.shape[0] != n + 1:
            raise ValueError(f"{what} have shape {list(rows.shape)}, expected [N+1, V] with N = {n}, the number "
                             f"of nodes it returned")
        if not rows.is_cpu:
            raise ValueError(f"{what} are on {rows.device}, expected a tensor on the CPU")
        if vocab is not None and rows.shape[1] != vocab:
            raise ValueError(f"draft_tree's rows have V = {rows.shape[1]} columns but {self._target_name} "
                             f"returned rows with V = {vocab}")
        if n:
            _check_token_range(tokens.tolist(), rows.shape[1], "draft_tree's tokens", "draft_tree's rows")
        return tokens, parents, rows

    def _verify(self, rows, draft_rows, tokens, parents, parent_list) -> Tuple[List[int], int]:
        n = len(parent_list)
        vocab = _check_rows(rows, self._target_name, n, "N", "tree nodes")
        self._vocab_seen = (self.stats, vocab)  # for the next rounds' draft tokens (_check_tree)
        if draft_rows is not None and draft_rows.shape[1] != vocab:
            raise ValueError(f"draft_tree's rows have V = {draft_rows.shape[1]} columns but {self._target_name} "
                             f"returned rows with V = {vocab}")
        try:
            result = self.verifier(rows, draft_rows, tokens, parents, self.generator)
        except (ValueError, TypeError) as e:
            who = _culprit(e, _TREE_CULPRITS)
            if who is None:
                raise
            who = who.format(target=self._target_name)
            raise type(e)(f"TreeDecoder: the tree verification op rejected {who}: {e}") from e
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"the tree verifier must return a pair (path, next_token), got {_kind(result)}")
        path, nxt = result
        path = path.tolist() if isinstance(path, torch.Tensor) else [_index(i, "the verifier's path") for i in path]
        nxt = _index(nxt, "the verifier's next_token")
        node = -1
        for i in path:  # the path runs from the root down: each node a child of the one before
            if not (0 <= i < n and parent_list[i] == node):
                raise ValueError(f"the tree verifier returned the path {path}, which is not a path from the root "
                                 f"in the tree with parents {parent_list}")
            node = i
        if not 0 <= nxt < vocab:
            raise ValueError(f"the tree verifier returned next_token = {nxt}, outside [0, V = {vocab})")
        return path, nxt

