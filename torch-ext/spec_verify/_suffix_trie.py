"""The count trie behind `suffix.py`: every substring of at most `max_depth` tokens of a token
store, with its number of occurrences, its continuations and a suffix link, where a
substring that occurred once has no node of its own.

A node (`_Node`) is a substring that occurred at least twice (the root: the empty string).
`node.children[t]` is the child node for `node`'s string followed by t, or, when that string
occurred once, the int position (in the store) of that occurrence's last token: everything
below it is then read from the store. So a token appended costs one step per node among the
text's suffixes that occurred before (at most `max_depth`, usually a few), and the trie holds
O(repeated substrings) nodes instead of O(max_depth) per token.

A locus is a position in the trie, `(node, r, pos)`: `node`'s string followed by the r
tokens of the store ending at `pos` (r = 0: the node itself; r > 0: a string that occurred
once, its occurrence ending at `pos`, `node` its deepest prefix with a node).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import List, Mapping, Optional, Tuple, Union

# The children of a node that has none: shared and read-only.
_NO_CHILDREN: Mapping = MappingProxyType({})

Locus = Tuple["_Node", int, int]


class _Node:
    """A substring that occurred at least twice (or the root), of `depth` tokens."""

    __slots__ = ("children", "count", "out", "best", "stamp", "link", "depth")

    def __init__(self, depth: int, link: Optional["_Node"], count: int, stamp: int):
        self.children: Mapping[int, Union["_Node", int]] = _NO_CHILDREN
        self.count = count  # occurrences
        self.out = 0  # occurrences followed by a token: the children's counts summed
        self.best: Optional[int] = None  # the token of the child proposed (see _rank)
        self.stamp = stamp  # the store position where its latest occurrence ends
        self.link = link  # the node of the string without its first token (None at the root)
        self.depth = depth


def _rank(child) -> Tuple[int, int]:
    # The order of continuations: the most frequent, then the most recent.
    return (1, child) if type(child) is int else (child.count, child.stamp)


class _Trie:
    """The trie over `store` (a list of tokens, -1 between documents; position q of the store
    is `store[q - base]`, so a store trimmed at the front keeps its positions)."""

    def __init__(self, max_depth: int, store: List[int]):
        self.max_depth = max_depth
        self.store = store
        self.base = 0
        self.root = _Node(0, None, 0, 0)
        self.work = 0  # steps taken, the unit of the cost

    def token_at(self, q: int) -> int:
        """The token at position q, or -1 past the end (or at a separator)."""
        i = q - self.base
        return self.store[i] if 0 <= i < len(self.store) else -1

    # Counting --------------------------------------------------------------------------------

    def append(self, active: List[_Node], e: int) -> List[_Node]:
        """Counts the occurrence ending at position e of every suffix there: `active` holds the
        nodes of the suffixes ending at e - 1 (depths 0, 1, ..., all that have nodes), the
        result those ending at e. O(len(active))."""
        t, top = self.token_at(e), self.max_depth
        link, new = self.root, [self.root]
        for node in active:
            children = node.children
            child = children.get(t)
            if child is None:  # a first occurrence: so are the longer ones
                if children is _NO_CHILDREN:
                    children = node.children = {}
                children[t] = e
                count = 1
            elif type(child) is int:  # a second occurrence: the string gets its node
                made = children[t] = _Node(node.depth + 1, link, 2, e)
                nxt = self.token_at(child + 1)
                if made.depth < top and nxt >= 0:  # the first occurrence's continuation
                    made.children, made.out, made.best = {nxt: child + 1}, 1, nxt
                link, count = made, 2
                if made.depth < top:
                    new.append(made)
            else:
                child.count += 1
                child.stamp = e
                link, count = child, child.count
                if child.depth < top:
                    new.append(child)
            node.out += 1
            best = node.best
            if best != t and (best is None or count >= _rank(children[best])[0]):
                node.best = t  # the most recent wins ties
        self.work += len(active)
        return new

    def remove(self, active: List[_Node], e: int) -> List[_Node]:
        """Undoes `append` for the oldest occurrences (positions replayed in order): a string
        left with one occurrence loses its node (the one left is its latest, `stamp`)."""
        t, top = self.token_at(e), self.max_depth
        new = [self.root]
        for node in active:
            children = node.children
            child = children[t]
            if type(child) is int:
                del children[t]
            elif child.count == 2:
                children[t] = child.stamp
            else:
                child.count -= 1
                if child.depth < top:
                    new.append(child)
            node.out -= 1
            if node.best == t:
                node.best = max(children, key=lambda c: _rank(children[c])) if children else None
                self.work += len(children)
        self.work += len(active)
        return new

    # Reading ---------------------------------------------------------------------------------

    def continuation(self, locus: Locus) -> Tuple[int, int, int]:
        """(occurrences followed by a token, the proposed token, its count) at `locus`."""
        node, r, pos = locus
        if r == 0:
            best = node.best
            return (node.out, best, _rank(node.children[best])[0]) if best is not None else (0, -1, 0)
        nxt = self.token_at(pos + 1)
        return (1, nxt, 1) if nxt >= 0 and node.depth + r < self.max_depth else (0, -1, 0)

    def link(self, locus: Locus) -> Locus:
        """The locus of the string without its first token (not called at the root)."""
        node, r, pos = locus
        if r == 0:
            return node.link, 0, 0
        if node.link is not None:
            node = node.link
        else:
            r -= 1  # the root's string is empty: the tail loses the token
        while r > 0:  # down the tail while its prefixes have nodes
            self.work += 1
            child = node.children[self.token_at(pos - r + 1)]
            if type(child) is int:
                break
            node, r = child, r - 1
        return node, r, pos

    def walk(self, locus: Locus, t: int) -> Locus:
        """The deepest locus among the suffixes of (locus's string + t), given that `locus` is
        the deepest among a text's (amortised O(1): each link drops a token)."""
        while True:
            self.work += 1
            node, r, pos = locus
            if r == 0:
                child = node.children.get(t)
                if child is not None:
                    return (node, 1, child) if type(child) is int else (child, 0, 0)
                if node.link is None:
                    return locus
            elif node.depth + r < self.max_depth and self.token_at(pos + 1) == t:
                return node, r + 1, pos + 1
            locus = self.link(locus)

    def match(self, tokens) -> Locus:
        """The deepest locus that is a suffix of `tokens` (their last max_depth count)."""
        locus = (self.root, 0, 0)
        for t in tokens[max(0, len(tokens) - self.max_depth):]:
            locus = self.walk(locus, t)
        return locus
