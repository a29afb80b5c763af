"""Speculative decoding with two Hugging Face transformers causal LMs, with KV caches.

    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(...)   # the same tokenizer and vocabulary
    draft = AutoModelForCausalLM.from_pretrained(...)
    dec = sv.transformers.speculative_decoder(draft, target, k=4, temperature=0.8, top_p=0.9,
                                              generator=torch.Generator().manual_seed(0))
    ids = dec.generate(tokenizer(prompt).input_ids, max_new=64, eos_token_id=tokenizer.eos_token_id)

    # No draft model: prompt lookup proposes, the target verifies.
    dec = sv.transformers.prompt_lookup_decoder(target, temperature=0)   # k = 16
    # Suffix trees over this request and earlier ones, where the measured curve says they pay.
    dec = sv.transformers.suffix_decoder(target, temperature=0, tree=True)

`speculative_decoder` is `SpeculativeDecoder.from_logits` over the two models' logits: the
decoder samples the draft tokens from the draft's warped rows and verifies with
`accept_logits`, so the output has the law of the target sampled with those parameters
(temperature 0: exactly the target's greedy decoding). `logits_steps` gives the two logits
callbacks alone. `prompt_lookup_decoder` and `suffix_decoder` are the same without a draft
model: `PromptLookup` (or a `SuffixDrafter`) proposes tokens, verified as one-hot drafts;
`suffix_decoder(..., tree=True)` is `tree_decoder` with a `SuffixTreeDrafter`. These four are
`sv.llama_cpp`'s too, with the same arguments and defaults (written once in `_adapters.py`,
over `CachedCausalLM`), but there `tree=True` is refused.

Each model keeps one KV cache and the token ids it holds. A call keeps the longest common
prefix of those ids and the new sequence and feeds only the rest. The decoder's contract
(each prefix extends the last verified prefix) makes that the whole verified prefix plus
the accepted draft tokens, so a round feeds the target k+1 tokens and the draft k (the last
draft token is never fed). The cache is transformers' `DynamicCache` for the model's config:
full-attention layers, and on sliding-window and hybrid models (Gemma 2 and 3, Mistral,
Qwen2 with a window, gpt-oss) sliding-window layers, which record their past as in
transformers' assisted decoding, so that rejected tokens can be dropped; each is trimmed back
to its window plus the tokens a later round may still drop (see `CachedCausalLM`). A cache
that cannot drop tokens from its end (recurrent state: Mamba and the other linear-attention
hybrids) is replaced and the whole sequence fed again, with a warning once and each such
re-feed counted (`CachedCausalLM.fallbacks`).

`tree_decoder(target_model, draft_model or draft_tree=...)` is the decoder's tree mode
(`TreeDecoder.from_logits`): the target scores a whole tree in one forward with
a 4-D attention mask (each node sees the prefix and its ancestors, at position prefix + its
depth) when the model accepts one, else in one forward per branch; see
`CachedCausalLM.tree_logits` for the cost and what the cache keeps.

How the cache drops, trims and reorders its entries, and the tree masks per layer type, are in
`_hf_cache.py` (`CachedCausalLM` derives from it); this module holds the model side.

transformers is imported only inside these functions: the package itself needs only torch.
"""
from __future__ import annotations

import inspect
from typing import Callable, List, Optional, Tuple

import torch

from ._adapters import ModelInterface, adapter_functions
from ._hf_cache import _CacheFollower, _layer_kinds
from ._logits import sample
from ._warping import Warping
from .tree_decoder import TreeDecoder


class CachedCausalLM(_CacheFollower):
    """One causal LM and its KV cache, following the sequences it is asked about.

    The cache is a `DynamicCache` for the model's config. Its sliding-window layers (Gemma 2
    and 3, Mistral, Qwen2 with a window, gpt-oss, the other hybrids) record their past, as in
    transformers' assisted decoding, so that tokens can be dropped from the end even once the
    window is full; after every forward each is trimmed to its window (`sliding_window - 1`
    entries, as transformers keeps) plus the entries after `keep`, the length below which no
    later call goes back (see `logits`). Full-attention layers keep everything, as always.

    A cache that cannot drop tokens from its end (a layer with a recurrent state, e.g.
    Mamba's; a layer type this adapter does not know whose `crop` refuses) is replaced and
    the whole sequence fed again: a warning says so once, naming the cache and layer types,
    and `fallbacks` counts every such re-feed (their tokens are in `fed`). A call that goes
    back below an earlier `keep` further than a sliding-window layer kept does the same,
    counted in `refills`.

    Args:
        model (`transformers.PreTrainedModel`): a causal LM (`AutoModelForCausalLM`); it is
            put in eval mode.
        what (`str`, *optional*): how messages name it ("target", "draft").

    Attributes:
        model: the model.
        ids (`List[int]`): the tokens whose keys and values the cache holds.
        fed (`int`): tokens fed to the model so far, a measure of the work done.
        forwards (`int`): forward passes.
        fallbacks (`int`): calls that found the cache unable to drop the tokens asked and fed
            the whole sequence to a new cache (never on the full-attention and sliding-window
            layers `DynamicCache` builds, under the decoder's prefix contract).
        refills (`int`): calls that went back below an earlier call's `keep`, further than a
            sliding-window layer kept, and fed their whole sequence to a new cache: a new
            generation from the same decoder does so once (its prompt fed again, as on its
            first call).
    """

    def __init__(self, model, what: str = "model"):
        from transformers import DynamicCache

        self.model = model.eval()
        self.what = what
        self._cache_class = DynamicCache
        # transformers 5 renamed the forward argument `past_key_values` to `cache`.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._logits_to_keep = "logits_to_keep" in params
        self._kinds = _layer_kinds()
        self.cache = None
        self.ids: List[int] = []
        self.fed = 0
        self.forwards = 0
        self.fallbacks = 0
        self.refills = 0
        self._warned = set()
        # False once the cache is known unable to drop tokens: its successors then do not
        # record their past (it would only grow), and every call that must drop tokens starts
        # a new cache.
        self._can_drop = True
        # After tree_logits: (tokens, parents, rows) of the tree whose nodes follow `ids` in
        # the cache (ids is then the tree's prefix); None otherwise (the cache holds ids).
        self._tree: Optional[Tuple[List[int], List[int], torch.Tensor]] = None
        # "mask" (one forward with a 4-D tree attention mask), "branches" (one forward per
        # branch), or "auto": checked once, then one of the two (see tree_logits).
        self.tree_attention = "auto"

    def reset(self) -> None:
        """Drops the cache (the next call feeds its whole sequence)."""
        self.cache, self.ids, self._tree = None, [], None

    def _forward(self, feed: List[int], keep: int, rows: int, **kwargs) -> torch.Tensor:
        # The logits of the last `rows` fed tokens, float32 [rows, V]; only those are computed
        # where the model takes logits_to_keep (a prompt's other rows would cost its length
        # times V, as generate's prefill avoids too).
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = rows
        out = self.model(input_ids=torch.tensor([feed], dtype=torch.int64), use_cache=True,
                         **{self._cache_arg: self.cache}, **kwargs)
        self.fed += len(feed)
        self.forwards += 1
        self._trim(keep)
        return out.logits[0, -rows:].float()

    @torch.no_grad()
    def logits(self, seq: List[int], first: int, keep: Optional[int] = None) -> torch.Tensor:
        """The next-token logits after `seq[:first+1]`, ..., after `seq`.

        Args:
            seq (`List[int]`): token ids.
            first (`int`): the first position whose output is returned, `0 <= first < len(seq)`.
            keep (`int`, *optional*, defaults to `first`): no later call keeps fewer than
                `keep` tokens of `seq` (a decoder's verified prefix): sliding-window layers
                keep the entries after it, to be dropped if need be, and may forget those
                beyond the window before it. A later call that goes below it may cost a
                re-feed of its whole sequence (counted in `refills`), never a wrong row.

        Returns:
            `torch.Tensor`: float32 `[len(seq) - first, V]`: the model's outputs at positions
            `first .. len(seq)-1`.

        Raises:
            ValueError: `first` out of range.
        """
        if not 0 <= first < len(seq):
            raise ValueError(f"need 0 <= first < len(seq), got first = {first}, len(seq) = {len(seq)}")
        start = self._continue(seq, first)
        rows = self._forward(seq[start:], first if keep is None else keep, len(seq) - first)
        self.ids = list(seq)
        return rows

    @torch.no_grad()
    def tree_logits(self, prefix: List[int], tokens: List[int], parents: List[int]) -> torch.Tensor:
        """The next-token logits after `prefix` and after the path to each node of a tree.

        The tree is laid out as the tree ops take it: node j holds `tokens[j]`, its parent is
        `parents[j]` in `[-1, j)` (-1: the root, the end of `prefix`). Later calls are taken
        to continue `prefix` (the `keep` of `logits` is `len(prefix)`).

        `tree_attention` "auto" (the default) tries the mask: if the model rejects it, or if on
        the first tree that is not a chain the masked rows differ from one forward per branch
        (by more than 1024 float epsilons of the model's dtype, at most 5%, times 1 + the
        largest |logit|), it switches to "branches" for good; else to "mask".

        With "mask": one forward over the part of `prefix` the cache lacks (at least its last
        token) and the N nodes, with a 4-D attention mask in which node j attends to the
        cache, the prefix and its own ancestors, at position `len(prefix) - 1 + depth(j)`;
        in a sliding-window layer, only to those of them less than the window before it (a
        mask per layer type, passed as transformers' mapping from layer type to mask when the
        model mixes types, as Gemma 3 does). A call with the same prefix and a tree that
        extends the last call's (the same first nodes) feeds only the new nodes (the draft
        side of a tree, grown level by level), unless a sliding-window layer is full: its
        last entries are then the earlier nodes, not the prefix the new ones need, and the
        whole tree is fed again. The next call that continues `prefix` down a path of the
        tree keeps that path's entries (moved into sequence order) and drops the other
        nodes', so a decoding round feeds the emitted token and the next tree only. With
        "branches": one forward per leaf over the nodes of its branch that the branch before
        it does not share.

        Args:
            prefix (`List[int]`): token ids, at least one.
            tokens, parents (`List[int]`): the tree, N nodes each.

        Returns:
            `torch.Tensor`: float32 `[N+1, V]`: row 0 after `prefix`, row j+1 after `prefix`
            and the path to node j.
        """
        if not prefix:
            raise ValueError("tree_logits needs a prefix of at least one token")
        if self.tree_attention == "branches":
            return self._tree_branches(prefix, tokens, parents)
        try:
            rows = self._tree_mask(prefix, tokens, parents)
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            if self.tree_attention == "mask":
                raise
            self.reset()  # the failed forward may have left part of its entries behind
            rows = self._tree_branches(prefix, tokens, parents)  # bad input raises here too
            self.tree_attention = "branches"  # this model cannot take a custom 4-D mask
            return rows
        if self.tree_attention == "auto" and any(p != j - 1 for j, p in enumerate(parents)):
            # Once, on the first tree that is not a chain: the masked rows against one forward
            # per branch, since a model could take the mask and ignore it.
            reference = self._tree_branches(prefix, tokens, parents)
            eps = torch.finfo(next(self.model.parameters()).dtype).eps
            tolerance = min(1024 * eps, 0.05) * (1.0 + float(reference.abs().max()))
            if torch.allclose(rows, reference, rtol=0.0, atol=tolerance):
                self.tree_attention = "mask"
            else:
                self.tree_attention = "branches"
                return reference
        return rows

    def _tree_mask(self, prefix, tokens, parents) -> torch.Tensor:
        n, length = len(tokens), len(prefix)
        old = self._tree
        if (old is not None and len(old[0]) <= n and self.ids == prefix and old[0] == tokens[:len(old[0])]
                and old[1] == parents[:len(old[1])] and (len(old[0]) == n or self._tree_growable())):
            # The same prefix and a larger tree: feed the new nodes only.
            have, done_rows = len(old[0]), old[2]
            if have == n:
                return done_rows
            start = length
        else:
            have, done_rows = 0, None
            start = self._continue(prefix, length - 1)
        past = start + have  # entries in the cache before this forward
        # ancestors[j]: node j and its ancestors, as a bool row over the n nodes.
        ancestors = torch.zeros(n, n, dtype=torch.bool)
        depth = []
        for j, p in enumerate(parents):
            if p >= 0:
                ancestors[j] = ancestors[p]
            ancestors[j, j] = True
            depth.append(1 if p < 0 else depth[p] + 1)
        head = length - start  # prefix tokens fed (0 when only new nodes are fed)
        feed = prefix[start:] + tokens[have:]
        width = past + len(feed)
        allow = torch.ones(len(feed), width, dtype=torch.bool).tril(past)  # causal over cache + feed
        # Columns: prefix token i at i, node j at length + j (cached or fed). A node's row
        # sees the whole prefix and its ancestors (itself included).
        allow[head:] = False
        allow[head:, :length] = True
        allow[head:, length:] = ancestors[have:]
        positions = list(range(start, length)) + [length - 1 + d for d in depth[have:]]
        col_pos = list(range(length)) + [length - 1 + d for d in depth[:have]] + positions[head:]
        mask = self._tree_attention_mask(allow, col_pos, positions)
        # From the last prefix token on: row 0, then the nodes (only the new nodes' rows when
        # only those are fed).
        logits = self._forward(feed, length, len(feed) - head + 1 if head else len(feed), attention_mask=mask,
                               position_ids=torch.tensor([positions], dtype=torch.int64))
        rows = logits if done_rows is None else torch.cat([done_rows, logits])
        self.ids = list(prefix)
        self._tree = (list(tokens), list(parents), rows)
        return rows

    def _tree_branches(self, prefix, tokens, parents) -> torch.Tensor:
        n, length = len(tokens), len(prefix)
        rows: List[Optional[torch.Tensor]] = [None] * (n + 1)
        has_child = [False] * n
        for p in parents:
            if p >= 0:
                has_child[p] = True
        for leaf in [j for j in range(n) if not has_child[j]] or [None]:
            path = []
            node = leaf
            while node is not None and node >= 0:
                path.append(node)
                node = parents[node]
            path.reverse()
            # Rows already known (row 0, and a shared beginning with an earlier branch) are
            # not asked again: the cache keeps the common prefix and feeds the rest.
            d0 = 0
            while d0 < len(path) and rows[path[d0] + 1] is not None:
                d0 += 1
            if rows[0] is not None and d0 == len(path):
                continue
            first = length + d0 if rows[0] is not None else length - 1
            out = self.logits(prefix + [tokens[j] for j in path], first, keep=length)
            for i, row in enumerate(out):
                d = first - (length - 1) + i  # depth of the node the row follows (0: the root)
                rows[0 if d == 0 else path[d - 1] + 1] = row
        return torch.stack(rows)


def _check_pair(draft_model, target_model) -> None:
    """Any two causal LMs can draft for each other here (each `CachedCausalLM` holds its own
    cache, even over one model); a difference of vocabulary shows in the rows' V."""


def _tree_decoder_over(what: str, target_model, draft_tree: Callable, warping: Warping,
                       generator: Optional[torch.Generator], tree_attention: str = "auto") -> TreeDecoder:
    """A `TreeDecoder` whose target scores each tree with `CachedCausalLM.tree_logits`
    (`tree_decoder`, and the `tree_decoder` of this adapter's `ModelInterface`, which
    `suffix_decoder(tree=True)` calls); `dec.target_cache` is the `CachedCausalLM`,
    `dec.draft_cache` None (`tree_decoder` sets its draft model's)."""
    target = CachedCausalLM(target_model, "target")
    target.tree_attention = tree_attention

    def target_tree_logits_step(prefix: List[int], tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        return target.tree_logits(prefix, tokens.tolist(), parents.tolist())

    dec = TreeDecoder._from_warping(what, draft_tree, target_tree_logits_step, warping, generator, None)
    dec.target_cache, dec.draft_cache = target, None
    return dec


# The adapter's functions, written once for both adapters (_adapters.py).
logits_steps, speculative_decoder, prompt_lookup_decoder, suffix_decoder = adapter_functions(ModelInterface(
    name="transformers", module=__name__, model="`transformers.PreTrainedModel` (a causal LM)",
    cached=CachedCausalLM, check_pair=_check_pair, tree_decoder=_tree_decoder_over))


def _tree_from_model(draft: CachedCausalLM, widths: Tuple[int, ...], draw: bool, warping: Warping,
                     generator: Optional[torch.Generator]) -> Callable:
    """A draft_tree grown level by level from a draft model: every node at depth d gets
    widths[d] children, the most probable distinct tokens of its row (draw False), or
    independent draws from its warped row (draw True; the draft logits rows are returned for
    the verifier). One draft forward per level, feeding that level's new nodes."""
    params = warping._asdict()

    def draft_tree(prefix: List[int]):
        tokens: List[int] = []
        parents: List[int] = []
        rows = draft.tree_logits(prefix, [], [])
        frontier = [-1]
        for d, width in enumerate(widths):
            new = []
            for node in frontier:
                row = rows[node + 1]
                if draw:
                    picks = sample(row.expand(width, -1).contiguous(), generator=generator, **params).tolist()
                else:
                    picks = torch.topk(row, min(width, row.numel())).indices.tolist()
                for t in picks:
                    tokens.append(t)
                    parents.append(node)
                    new.append(len(tokens) - 1)
            frontier = new
            if d + 1 < len(widths):
                rows = draft.tree_logits(prefix, tokens, parents)
        if not draw:
            return tokens, parents, None
        # The leaves' rows are never read by the verifier: zeros stand in for them.
        out = torch.zeros(len(tokens) + 1, rows.shape[1])
        out[:rows.shape[0]] = rows
        return tokens, parents, out

    return draft_tree


def tree_decoder(
    target_model,
    draft_model=None,
    *,
    draft_tree: Optional[Callable] = None,
    widths: Tuple[int, ...] = (2, 2, 1),
    draw_children: Optional[bool] = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: Optional[torch.Generator] = None,
    tree_attention: str = "auto",
) -> TreeDecoder:
    """A `TreeDecoder` (`TreeDecoder.from_logits`) over a Hugging Face causal LM.

    The target scores every tree with `CachedCausalLM.tree_logits`: with a custom 4-D
    attention mask when the model takes one (Llama and the other models whose mask creation
    passes a 4-D mask through, transformers 5; checked once against per-branch forwards),
    one forward over the tokens its cache lacks and the N nodes; otherwise (or with
    `tree_attention="branches"`) one forward per leaf,
    feeding the nodes of its branch that the branch before it does not share. Either way the
    cache keeps the verified prefix and the accepted path: its entries are moved into
    sequence order (for `DynamicCache`'s full-attention and sliding-window layers; with
    other caches, only the tree's leading chain is kept and the accepted nodes off it are
    fed again). On sliding-window and hybrid models (Gemma 3) the mask is one per layer
    type, as `CachedCausalLM.tree_logits` says.

    The tree comes from `draft_tree` (for example `spec_verify.PromptLookupTree()`; with a
    `SuffixTreeDrafter` it is what `suffix_decoder(target_model, tree=True)` makes), or is
    grown from `draft_model` with a fixed shape: each node at depth d gets `widths[d]`
    children, either the most probable distinct tokens of the draft's row (deterministic
    children; the default at temperature 0) or independent draws from its warped row (the
    default when sampling; verified with the draft rows, SpecInfer's rule).

    Args:
        target_model (`transformers.PreTrainedModel`): the target causal LM.
        draft_model (`transformers.PreTrainedModel`, *optional*): a draft causal LM with the
            target's vocabulary; or pass `draft_tree`.
        draft_tree (`Callable`, *optional*): a `draft_tree(prefix) -> (tokens, parents,
            draft_rows)` callback (draft rows: logits, warped like the target's, or None).
        widths (`Tuple[int, ...]`, *optional*, defaults to `(2, 2, 1)`): children per node
            at each depth, for `draft_model`.
        draw_children (`bool`, *optional*): draw the children (True) or take the top ones
            (False); defaults to `temperature > 0`. Ignored at temperature 0 (top tokens).
        temperature, top_k, top_p, min_p: the warping, as for `speculative_decoder`.
        generator (`torch.Generator`, *optional*): the generator of every draw.
        tree_attention (`str`, *optional*, defaults to `"auto"`): `"mask"`, `"branches"`, or
            `"auto"`: the mask, checked once against one forward per branch on the first
            tree that is not a chain, and branches for good if the model rejects the mask or
            its rows differ (see `CachedCausalLM.tree_logits`).

    Returns:
        `TreeDecoder`: its `target_cache` (and `draft_cache`, with a draft model) are
        the `CachedCausalLM`s: tokens `fed`, `forwards`, and `tree_attention` (the mode in
        use once a round has run).

    Raises:
        ValueError: neither or both of `draft_model` and `draft_tree`; bad widths or
            tree_attention. TypeError, ValueError: as `TreeDecoder.from_logits`.
    """
    if (draft_model is None) == (draft_tree is None):
        raise ValueError("tree_decoder: pass draft_model or draft_tree, not both or neither")
    what = "spec_verify.transformers.tree_decoder"
    warping = Warping(temperature, top_k, top_p, min_p, what=what)
    if tree_attention not in ("auto", "mask", "branches"):
        raise ValueError(f"tree_decoder: tree_attention must be \"auto\", \"mask\" or \"branches\", "
                         f"got {tree_attention!r}")
    draft = None
    if draft_model is not None:
        widths = tuple(widths)
        if not widths or any(type(w) is not int or w < 1 for w in widths):
            raise ValueError(f"tree_decoder: widths must be a non-empty tuple of ints >= 1, got {widths!r}")
        draft = CachedCausalLM(draft_model, "draft")
        draft.tree_attention = tree_attention
        draw = not warping.greedy and (draw_children is None or bool(draw_children))
        draft_tree = _tree_from_model(draft, widths, draw, warping, generator)
    dec = _tree_decoder_over(what, target_model, draft_tree, warping, generator, tree_attention)
    dec.draft_cache = draft
    return dec

