"""What every decoder shares: `Decoder`, the base class of `SpeculativeDecoder` (chain
rounds, `decoder.py`) and `TreeDecoder` (tree rounds, `tree_decoder.py`), which holds
`generate`, `stream` and the bookkeeping of a round (each decoder defines its `_loop`); the
checks of their arguments (prompt, stop tokens, counts) and of the callbacks' output (dense
tensors, token ranges, NumPy arrays); and the clock of the statistics. Neither decoder's
module imports the other's.
"""
from __future__ import annotations

import re
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import torch

from ._api import _INT64_MAX, _index, _int_list, _kind, _token_tensor, _type_name
from ._stats import RoundStats

StopTokens = Union[None, int, Iterable[int]]

_now = time.perf_counter_ns
_Tensor = torch.Tensor

# Which callback produced what a verification op rejected. Every error message of the ops
# begins "spec_verify.<op>: <argument>" (torch_binding.cpp and the op wrappers build each one
# that way), and a decoder always passes each callback's output as the same argument. So the
# argument name, read once at that fixed position of the message, picks the callback from the
# decoder's fixed table (decoder._CULPRITS, tree_decoder._TREE_CULPRITS); nothing else in the
# text is searched. An error of any other form (a custom verifier's own, or a uniform's) is not
# attributed and propagates unchanged.
_OP_ERROR = re.compile(r"spec_verify\.\w+: (\w+)")


def _culprit(error: Exception, table: Dict[str, str]) -> Optional[str]:
    m = _OP_ERROR.match(str(error))
    return table.get(m.group(1)) if m else None


# Argument checks ----------------------------------------------------------------------------

def _on_host(t: torch.Tensor, what: str) -> torch.Tensor:
    # Prompts and stop tokens are read once per generation: a tensor on an accelerator is
    # brought over; a meta tensor has no values.
    if t.device.type == "meta":
        raise ValueError(f"{what} must hold values, got a tensor on meta")
    return t if t.device.type == "cpu" else t.cpu()


def _non_negative(ids: List[int], what: str) -> List[int]:
    if ids and min(ids) < 0:
        i = next(i for i, t in enumerate(ids) if t < 0)
        raise ValueError(f"{what}[{i}] = {ids[i]} is negative; token ids are >= 0")
    return ids


def _stop_set(eos_token_id: StopTokens) -> frozenset:
    what = "eos_token_id"
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, torch.Tensor) or hasattr(eos_token_id, "__array__"):
        # Tensors, NumPy arrays and NumPy scalars: 0-d is one id, 1-D several.
        if isinstance(eos_token_id, torch.Tensor):
            eos_token_id = _on_host(eos_token_id, what)
        t = _token_tensor(eos_token_id, what)
        if t.dim() > 1:
            raise ValueError(f"{what} must be an int or a 1-D sequence of ints, got shape {list(t.shape)}")
        ids = t.reshape(-1).tolist()
    elif isinstance(eos_token_id, bool) or hasattr(type(eos_token_id), "__index__"):
        ids = [_index(eos_token_id, what)]
        if ids[0] > _INT64_MAX:  # as [2**64] is refused: no token could match it
            raise ValueError(f"{what} = {ids[0]} is outside the range of token ids [0, 2^63)")
    elif isinstance(eos_token_id, (str, bytes)) or not hasattr(eos_token_id, "__iter__"):
        raise TypeError(f"{what} must be an int, an iterable of ints or None, got {type(eos_token_id).__name__}")
    else:
        ids = _int_list(list(eos_token_id), what)
    return frozenset(_non_negative(ids, what))


def _prompt_list(prompt_ids) -> List[int]:
    what = "prompt_ids"
    if isinstance(prompt_ids, torch.Tensor) or hasattr(prompt_ids, "__array__"):
        if isinstance(prompt_ids, torch.Tensor):
            prompt_ids = _on_host(prompt_ids, what)
        t = _token_tensor(prompt_ids, what)
        if t.dim() == 2 and t.shape[0] == 1:  # a tokenizer's batch of one
            t = t[0]
        if t.dim() != 1:
            raise ValueError(f"{what} must be 1-D (or [1, L]), got shape {list(t.shape)}")
        ids = t.tolist()
    elif isinstance(prompt_ids, (str, bytes)) or not hasattr(prompt_ids, "__iter__"):
        raise TypeError(f"{what} must be a sequence of ints or a 1-D integer tensor, got "
                        f"{type(prompt_ids).__name__}")
    else:
        ids = _int_list(list(prompt_ids), what)
    return _non_negative(ids, what)


def _count(value, what: str, high: Optional[int] = None) -> int:
    # An int-like argument (see _api._index) in [0, high].
    n = _index(value, what)
    if n < 0 or (high is not None and n > high):
        raise ValueError(f"{what} must be an int in [0, {'inf' if high is None else high}], got {n}")
    return n


_METHODS = ("token", "block")


def _method(what: str, method) -> str:
    if not isinstance(method, str):
        raise TypeError(f"{what}: method must be a str, \"token\" or \"block\", got {type(method).__name__}")
    if method not in _METHODS:
        raise ValueError(f"{what}: method must be \"token\" or \"block\", got {method!r}")
    return method


def _dense(x: torch.Tensor, who: str, expected: str) -> None:
    """A nested or quantized tensor from a callback: a TypeError naming it (a nested tensor
    has no shape to read; a quantized one no float32 values)."""
    if x.is_nested or x.is_quantized:
        raise TypeError(f"{who} a {'nested' if x.is_nested else f'quantized {x.dtype}'} tensor, expected {expected}")


def _check_token_range(ids: List[int], vocab: Optional[int], who: str, source: str) -> None:
    """A drafter's token ids before they reach the target's callback: each in [0, V) where V
    is known (`source` names where from), else at least >= 0. `who` names the drafter's
    tokens ("draft_step's tokens")."""
    low, high = min(ids), max(ids)
    if low >= 0 and (vocab is None or high < vocab):
        return
    i = next(i for i, t in enumerate(ids) if t < 0 or (vocab is not None and t >= vocab))
    if vocab is None:
        raise ValueError(f"{who}[{i}] = {ids[i]} is negative; token ids are >= 0")
    raise ValueError(f"{who}[{i}] = {ids[i]} is outside the vocabulary [0, {vocab}) of {source}")



def _check_rows(rows, name: str, n: int, letter: str, of: str) -> int:
    """A target callback's output: float32 `[n+1, V]` on the CPU with V > 0; returns V. `name`
    names the callback; `letter` ("j", "N") and `of` ("proposed tokens", "tree nodes") say what
    the n rows after the first follow."""
    if not isinstance(rows, torch.Tensor):
        raise TypeError(f"{name} returned {_kind(rows)}, expected a float32 tensor [{letter}+1, V]")
    _dense(rows, f"{name} returned", f"a float32 tensor [{letter}+1, V]")
    if rows.dtype != torch.float32:
        raise TypeError(f"{name} returned rows of dtype {rows.dtype}, expected torch.float32")
    if rows.dim() != 2 or rows.shape[0] != n + 1 or rows.shape[1] == 0:
        raise ValueError(f"{name} returned rows of shape {list(rows.shape)}, expected [{letter}+1, V] = [{n + 1}, V] "
                         f"with V > 0 for the {letter} = {n} {of}")
    if not rows.is_cpu:
        raise ValueError(f"{name} returned rows on {rows.device}, expected a tensor on the CPU")
    return rows.shape[1]


def _from_array(x, who: str):
    """A NumPy array (or another array-like) returned by a callback as a tensor sharing its
    memory (`torch.as_tensor`: no copy); anything else unchanged, for the checks to judge.
    The dtype is kept, so a float64 array is refused as a float64 tensor would be."""
    if isinstance(x, _Tensor) or not hasattr(x, "__array__") or isinstance(x, (str, bytes)):
        return x
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(f"{who} {type(x).__name__} that torch cannot take without a copy ({e})") from None



def _estimates(draft_step, j: int) -> List[float]:
    """A drafter's estimates for its j tokens (its `confidences` right after the call):
    numbers in [0, 1], one per token."""
    estimates = getattr(draft_step, "confidences", None)
    if not isinstance(estimates, (list, tuple)) or len(estimates) != j:
        raise ValueError(f"draft_step.confidences must hold one estimate per proposed token (j = {j}), got "
                         f"{_kind(estimates)}" + (f" of length {len(estimates)}"
                                                  if isinstance(estimates, (list, tuple)) else ""))
    for e in estimates:
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0.0 <= e <= 1.0:
            raise ValueError(f"draft_step.confidences must be numbers in [0, 1], got {e!r}")
    return list(estimates)


def _check_callbacks(what: str, generator, verifier, **callbacks) -> None:
    """A decoder's constructor arguments that every decoder takes: its callbacks (by name),
    the generator and the verifier. `what` prefixes the messages ("TreeDecoder: "; the
    constructor of `SpeculativeDecoder` names the argument alone: "")."""
    for name, f in callbacks.items():
        if not callable(f):
            raise TypeError(f"{what}{name} must be callable, got {type(f).__name__}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{what}generator must be a torch.Generator or None, got {_type_name(generator)}")
    if verifier is not None and not callable(verifier):
        raise TypeError(f"{what}verifier must be callable or None, got {type(verifier).__name__}")


class Decoder:
    """A speculative decoder: each round a draft proposes, the target scores the proposal in
    one call and a verifier keeps what the target's law allows, plus one token of its own.

    The base class of `SpeculativeDecoder` (the proposal is a chain of tokens) and
    `TreeDecoder` (a tree of candidate continuations); it is not made directly. Every
    decoder has `generate` and `stream`, and these attributes.

    Attributes:
        greedy (`bool`): temperature-0 verification (output identical to greedy decoding of
            the target); otherwise exact sampling.
        generator (`torch.Generator` or None): the generator of the verifier's draws.
        verifier (`Callable`): the decision of a round (each subclass says its form).
        warping (`Warping` or None): the warping parameters of a decoder made by
            `from_logits`, checked (a named tuple: `temperature`, `top_k`, `top_p`, `min_p`;
            `_asdict()` gives them by name); None for one on probability rows.
        stats (`RoundStats`): the statistics of the current (or last) generation.
    """

    greedy: bool
    generator: Optional[torch.Generator]
    warping: Optional[tuple]
    stats: RoundStats
    # (stats, V): V of the target's rows in the generation that `stats` counts, once its
    # first target call returned them; draft tokens are checked against it.
    _vocab_seen: Optional[tuple] = None

    def _start_generation(self) -> RoundStats:
        """The statistics of a new generation (and whatever else a generation resets)."""
        raise NotImplementedError

    def _loop(self, seq: List[int], max_new: int, stop: frozenset, stats) -> Iterator[List[int]]:
        """The rounds: each yields its new tokens, which it has appended to `seq`."""
        raise NotImplementedError

    def _rounds(self, seq: List[int], max_new: int, eos_token_id: StopTokens) -> Iterator[List[int]]:
        # Argument errors surface at the call, not at the first next() of a stream.
        max_new = _count(max_new, "max_new")
        stop = _stop_set(eos_token_id)
        self.stats = stats = self._start_generation()
        if max_new == 0:
            stats.stop_reason = "max_new"
        return self._loop(seq, max_new, stop, stats)

    @staticmethod
    def _emit(seq: List[int], chunk: List[int], remaining: int, stop: frozenset, stats) -> int:
        """Appends a round's verified tokens to `seq`, cut after the first stop token; returns
        the tokens still to generate (0 ends the generation, `stats.stop_reason` says why)."""
        if stop and not stop.isdisjoint(chunk):
            del chunk[next(i for i, t in enumerate(chunk) if t in stop) + 1:]
            remaining = 0
            stats.stop_reason = "stop_token"
        else:
            remaining -= len(chunk)  # never below 0: no round proposes past max_new
            if remaining == 0:
                stats.stop_reason = "max_new"
        seq.extend(chunk)
        stats.new_tokens += len(chunk)
        return remaining

    def _known_vocab(self) -> Optional[int]:
        """V of the target's rows in this generation, once its first target call returned them."""
        seen = self._vocab_seen
        return seen[1] if seen is not None and seen[0] is self.stats else None

    def generate(
        self,
        prompt_ids: Union[Sequence[int], torch.Tensor],
        max_new: int = 128,
        eos_token_id: StopTokens = None,
        on_tokens: Optional[Callable[[List[int]], None]] = None,
    ) -> List[int]:
        """Generates up to `max_new` tokens after `prompt_ids`.

        Args:
            prompt_ids (`Sequence[int]` or `torch.Tensor`): the prompt: a sequence of ints
                (NumPy integers and 0-d integer tensors included), or a 1-D or `[1, L]`
                integer tensor or NumPy array. Ids are >= 0.
            max_new (`int`, *optional*, defaults to 128): new tokens to generate, >= 0.
            eos_token_id (`int` or `Iterable[int]`, *optional*): stop token(s). The output
                ends at the first one emitted, also inside a block of accepted draft tokens
                (the rest of the block is dropped); stop tokens in the prompt do not count.
            on_tokens (`Callable[[List[int]], None]`, *optional*): called with each round's
                new tokens as soon as the round is verified.

        Returns:
            `List[int]`: `prompt_ids` followed by the new tokens: exactly `max_new` of them,
            unless a stop token ends the output first.

        Raises:
            TypeError: an argument of the wrong type (bool is not an int); a callback's
                output of the wrong type or dtype (the message names the callback).
            ValueError: a negative `max_new` or token id; a callback's output of the wrong
                shape, or contents the verification op rejects (a token outside `[0, V)`,
                NaN, negative values, zero mass): the message names the callback.
        """
        if on_tokens is not None and not callable(on_tokens):
            raise TypeError(f"on_tokens must be callable or None, got {type(on_tokens).__name__}")
        seq = _prompt_list(prompt_ids)
        for chunk in self._rounds(seq, max_new, eos_token_id):
            if on_tokens is not None:
                on_tokens(chunk)
        return seq

    def stream(
        self,
        prompt_ids: Union[Sequence[int], torch.Tensor],
        max_new: int = 128,
        eos_token_id: StopTokens = None,
    ) -> Iterator[List[int]]:
        """Like `generate`, but yields each round's new tokens as soon as the round is verified.

        Arguments are checked at the call; nothing else runs before the first `next()`.

        Args:
            prompt_ids, max_new, eos_token_id: as for `generate`.

        Returns:
            `Iterator[List[int]]`: each round's new tokens (1 to k+1 ids); their
            concatenation is what `generate` would add after the prompt.

        Raises:
            TypeError, ValueError: as for `generate` (argument errors at the call, callback
                errors at the `next()` of their round).
        """
        return self._rounds(_prompt_list(prompt_ids), max_new, eos_token_id)
