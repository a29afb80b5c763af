"""The KV-cache handling of the transformers adapter (`transformers.CachedCausalLM`): dropping
tokens from the end of a `DynamicCache` (full-attention and sliding-window layers, which record
their past; other layers through their own crop, if they can), trimming sliding-window layers
back to their window, moving a tree's accepted path into sequence order, and the tree attention
masks per layer type of sliding-window and hybrid models (Gemma 2 and 3, Mistral, Qwen2 with a
window, gpt-oss). A cache that cannot drop tokens is replaced, with a warning once.

transformers is imported only inside these functions.
"""
from __future__ import annotations

import warnings
from typing import List, Optional, Tuple

import torch

from ._adapters import _common_prefix


def _layer_kinds():
    # The cache layer classes this adapter drops tokens from itself, by exact type (a subclass
    # may keep more state: LinearAttentionAndSlidingWindowAttentionLayer also has a recurrent
    # one). Anything else goes through its own crop, if it says it can.
    from transformers import cache_utils

    kinds = {}
    for name, kind in (("DynamicLayer", "full"), ("DynamicSlidingWindowLayer", "sliding"), ("DummyLayer", "none")):
        cls = getattr(cache_utils, name, None)
        if cls is not None:
            kinds[cls] = kind
    return kinds


def _held(layer) -> int:
    keys = getattr(layer, "keys", None)
    return 0 if keys is None or keys.dim() < 2 else keys.shape[-2]


class _CacheFollower:
    """The cache half of `CachedCausalLM`, which sets the attributes these methods use: `model`,
    `what`, `cache`, `ids`, `_cache_class`, `_kinds`, `_can_drop`, `_warned`, `_tree`, `fallbacks` and
    `refills` (see its docstring)."""

    def _new_cache(self):
        cache = self._cache_class(config=self.model.config)
        if self._can_drop and hasattr(cache, "activate_past_recording"):
            # Sliding-window (and linear-attention) layers keep what they would evict until
            # the next trim, so the tokens of a round can be dropped again.
            cache.activate_past_recording()
        return cache

    def _describe(self) -> str:
        layers = getattr(self.cache, "layers", None) or []
        names = sorted({type(layer).__name__ for layer in layers})
        return f"{type(self.cache).__name__}" + (f" of {', '.join(names)}" if names else "")

    def _fall_back(self, reason: str, detail: str) -> None:
        # The cache cannot be brought back to the tokens asked: the caller starts a new one.
        if reason == "window":
            # Below `keep`, which the call's own caller set: a new generation from the same
            # decoder (its prompt is fed again, as a first call would), or a caller that
            # went back on its word. Counted apart, not warned.
            self.refills += 1
            return
        self.fallbacks += 1
        if reason not in self._warned:
            self._warned.add(reason)
            if reason == "stale":
                what = (f"the {self.what}'s cache ({self._describe()}) no longer holds what this adapter fed it "
                        f"({detail}: was it used elsewhere?), so this call starts a new cache and feeds the whole "
                        f"sequence again")
            else:
                what = (f"the {self.what}'s cache ({self._describe()}) cannot drop tokens from its end ({detail}), so "
                        f"every call that drops rejected tokens starts a new cache and feeds the whole sequence "
                        f"again")
            warnings.warn(f"spec_verify.transformers: {what}; counted in CachedCausalLM.fallbacks", RuntimeWarning,
                          stacklevel=4)

    def _drop(self, total: int, length: int) -> bool:
        """Drops the cache's entries after its first `length` tokens (it holds `total`).
        False, with the fallback counted and warned, if the cache cannot; it is then to be
        replaced."""
        m = total - length
        if m <= 0:
            return True
        if not self._can_drop:
            self._fall_back("cannot", "known from an earlier call")
            return False
        layers = getattr(self.cache, "layers", None)
        if layers is None:  # a cache without layers: its own crop, if it has one that works
            try:
                self.cache.crop(-m)
                return True
            except (AttributeError, ValueError, RuntimeError, NotImplementedError) as e:
                self._can_drop = False
                self._fall_back("cannot", f"{type(self.cache).__name__}.crop: {e}")
                return False
        plan = []
        for layer in layers:
            kind = self._kinds.get(type(layer), "other")
            if kind == "none":
                continue
            if kind == "full":
                held = _held(layer)
                if held == 0 and not getattr(layer, "is_initialized", False):
                    continue  # never written (a layer reading another's cache)
                if held != total:
                    self._fall_back("stale", f"a {type(layer).__name__} holds {held} tokens, not {total}")
                    return False
                plan.append((layer, kind, held))
            elif kind == "sliding":
                held, cum = _held(layer), layer.cumulative_length
                if cum != total:
                    self._fall_back("stale", f"a {type(layer).__name__} has seen {cum} tokens, not {total}")
                    return False
                # What the next forward reads: the last min(length, window - 1) entries.
                if held - m < min(length, layer.sliding_window - 1):
                    self._fall_back("window", f"{held} entries of a {type(layer).__name__} with window "
                                              f"{layer.sliding_window}, {m} to drop")
                    return False
                plan.append((layer, kind, held))
            else:
                if not getattr(layer, "is_croppable", False):
                    self._can_drop = False
                    self._fall_back("cannot", f"{type(layer).__name__} is not croppable")
                    return False
                plan.append((layer, kind, None))
        for layer, kind, held in plan:
            if kind == "other":
                try:
                    layer.crop(-m)
                except (ValueError, RuntimeError, NotImplementedError) as e:
                    self._can_drop = False
                    self._fall_back("cannot", f"{type(layer).__name__}.crop: {e}")
                    return False
                continue
            layer.keys = layer.keys[..., :held - m, :]
            layer.values = layer.values[..., :held - m, :]
            if kind == "sliding":
                layer.cumulative_length -= m
        return True

    def _trim(self, keep: int) -> None:
        # Each sliding-window layer back to what the next forward reads (window - 1 entries)
        # plus its entries after `keep`, which a later call may still drop: memory stays
        # bounded by the window plus a round's tokens, as in transformers' assisted decoding.
        for layer in getattr(self.cache, "layers", None) or ():
            if self._kinds.get(type(layer)) == "sliding":
                held, cum = _held(layer), layer.cumulative_length
                need = min(cum, layer.sliding_window - 1 + max(0, cum - keep))
                if held > need:
                    layer.keys = layer.keys[..., held - need:, :]
                    layer.values = layer.values[..., held - need:, :]

    def _continue(self, seq: List[int], first: int) -> int:
        """Brings the cache to the longest common prefix of `ids` and `seq` (at most `first`
        tokens) and returns its length: where feeding starts."""
        self._settle(seq)
        start = min(_common_prefix(self.ids, seq), first)
        if self.cache is None or start == 0:
            self.cache, start = self._new_cache(), 0
        elif not self._drop(len(self.ids), start):
            self.cache, start = self._new_cache(), 0
        return start

    def _settle(self, upcoming: Optional[List[int]] = None) -> None:
        # Back to a cache holding exactly `ids`, after a tree. `upcoming` (the next sequence
        # asked about) tells which path of the tree was accepted: the nodes it follows down
        # from the root. Their entries are moved into sequence order right after the prefix
        # (O(path) copied; full-attention and sliding-window layers) and the rest dropped;
        # else the cache keeps the tree's leading chain (nodes 0..m-1 with parents[i] = i - 1,
        # already in sequence order) and the common-prefix rule feeds the rest again.
        if self._tree is None:
            return
        tokens, parents, _ = self._tree
        self._tree = None
        length = len(self.ids)
        path: List[int] = []
        if upcoming is not None and len(upcoming) > length and upcoming[:length] == self.ids:
            node = -1
            for t in upcoming[length:]:
                child = next((c for c in range(node + 1, len(tokens)) if parents[c] == node and tokens[c] == t), None)
                if child is None:
                    break
                path.append(child)
                node = child
        if path and path != list(range(len(path))) and self._gather(length, path, len(tokens)):
            self.ids = self.ids + [tokens[c] for c in path]
            return
        m = 0
        while m < len(tokens) and parents[m] == m - 1:
            m += 1
        if not self._drop(length + len(tokens), length + m):
            self.cache, self.ids = None, []
            return
        self.ids = self.ids + tokens[:m]

    def _gather(self, length: int, path: List[int], n: int) -> bool:
        layers = getattr(self.cache, "layers", None)
        if not layers:
            return False
        total, end = length + n, length + len(path)
        moves = []
        for layer in layers:
            kind = self._kinds.get(type(layer), "other")
            if kind == "none":
                continue
            held = _held(layer)
            if kind == "full":
                if held == 0 and not getattr(layer, "is_initialized", False):
                    continue
                if held != total:
                    return False
                base = 0  # the token position of entry 0
            elif kind == "sliding":
                if layer.cumulative_length != total:
                    return False
                base = total - held
                # The path's entries and the window before it must be held.
                if base > min(length, max(0, end - (layer.sliding_window - 1))):
                    return False
            else:
                return False
            moves.append((layer, kind, base))
        source = torch.tensor(path, dtype=torch.int64) + length
        for layer, kind, base in moves:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                t[..., length - base:end - base, :] = t.index_select(-2, source - base)  # a copy first: no overlap
                setattr(layer, name, t[..., :end - base, :])
            if kind == "sliding":
                layer.cumulative_length = end
        return True

    def _attention_layers(self) -> Tuple[List[str], List[Optional[int]], bool]:
        # The model's attention per layer, as its masks see it: the layer type names (the keys
        # of the mask mapping of models that mix types), each sliding-window layer's window
        # (None: full attention), and whether the config names the types itself.
        config = self.model.config
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        window = getattr(text, "sliding_window", None)
        types = getattr(text, "layer_types", None)
        named = bool(types)
        if not named:
            kind = "sliding_attention" if window is not None else (
                "chunked_attention" if getattr(text, "attention_chunk_size", None) is not None else "full_attention")
            types = [kind] * text.num_hidden_layers
        windows = []
        for t in types:
            if t == "sliding_attention":
                windows.append(window)
            elif t in ("full_attention", "moe", "mlp"):  # the last two: no attention at all
                windows.append(None)
            else:
                raise ValueError(f"no tree attention mask for {t!r} layers")
        return list(types), windows, named

    def _tree_attention_mask(self, allow: torch.Tensor, col_pos: List[int], row_pos: List[int]):
        """The attention mask of a tree forward. `allow` [q, width] says which of the cache's
        slots and the fed tokens each fed token sees (causal, or the prefix and its ancestors);
        a sliding-window layer of the model sees, of those, only the positions less than its
        window before the row's, and its cache layer (a `DynamicSlidingWindowLayer`) gives it
        only its last window - 1 slots and the feed, so its mask has those columns. A tensor
        when every layer takes the same mask, else transformers' mapping from the model's
        layer types (Gemma 2 and 3, Qwen2 with max_window_layers, gpt-oss take one)."""
        dtype = next(self.model.parameters()).dtype
        q, width = allow.shape
        layers = getattr(self.cache, "layers", None) or []
        types, windows, named = self._attention_layers()
        cols = torch.tensor(col_pos, dtype=torch.int64)
        rows = torch.tensor(row_pos, dtype=torch.int64)
        masks = {}  # (first column, window) -> mask
        by_type = {}
        for i, (name, window) in enumerate(zip(types, windows)):
            offset = 0
            if i < len(layers):
                kind = self._kinds.get(type(layers[i]), "other")
                if kind == "sliding":
                    kv_length, offset = layers[i].get_mask_sizes(q)
                    if kv_length + offset != width:
                        raise ValueError(f"a {type(layers[i]).__name__} reads {kv_length} slots from {offset}, "
                                         f"not {width}")
                elif kind == "other" or (kind == "none" and window is not None):
                    raise ValueError(f"no tree attention mask for a {type(layers[i]).__name__} cache layer")
            key = (offset, window)
            if key not in masks:
                ok = allow[:, offset:]
                if window is not None:
                    ok = ok & (cols[offset:][None, :] > rows[:, None] - window)
                masks[key] = torch.zeros(1, 1, *ok.shape, dtype=dtype).masked_fill_(~ok, torch.finfo(dtype).min)
            if by_type.setdefault(name, key) != key:
                raise ValueError(f"layers of type {name!r} take different tree masks")
        if len(masks) == 1:
            return next(iter(masks.values()))
        if not named:
            raise ValueError("the layers take different tree masks but the config names no layer_types")
        return {name: masks[key] for name, key in by_type.items()}

    def _tree_growable(self) -> bool:
        # New nodes can be fed after the cached ones unless a sliding-window layer is full:
        # it reads only its last window - 1 entries, the earlier nodes, not the prefix.
        for layer in getattr(self.cache, "layers", None) or ():
            if self._kinds.get(type(layer)) == "sliding" and layer.cumulative_length >= layer.sliding_window:
                return False
        return True
