"""The draft/verify loop of speculative decoding, over user callbacks.

Contract with the callbacks (what a KV cache can rely on). Within one generation, every
round calls

    draft_step(prefix, k)          -> (tokens [k] integer, probs [k, V] float32 or None)
    target_step(prefix, proposed)  -> rows [k+1, V] float32

with the same `prefix`: a fresh list holding the prompt followed by every token emitted so
far (the verified prefix). The prefix of the next round is this prefix + proposed[:n] + [x],
where n is the number of accepted draft tokens and x the emitted token; so each prefix
extends the last verified one, and of what a callback fed its model last round, everything
up to len(prefix) + n is still valid. draft_step is not called when k = 0. A new
generation starts again from its prompt.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from ._api import accept, verify_greedy

DraftStep = Callable[[List[int], int], Tuple[torch.Tensor, Optional[torch.Tensor]]]
TargetStep = Callable[[List[int], torch.Tensor], torch.Tensor]
StopTokens = Union[None, int, Iterable[int]]

_now = time.perf_counter_ns


@dataclass
class DecodeStats:
    """Statistics of one generation (SpeculativeDecoder.stats), updated round by round.

    The counters describe verification outcomes: a stop token inside an accepted block cuts
    the output (`new_tokens`) but not `accepted`. Times are nanoseconds spent inside
    draft_step, inside target_step, and in checking their output plus the verification op.
    """

    k: int
    # outcomes[j][n]: rounds that proposed j draft tokens and accepted n of them. One
    # increment per round; every other count is derived from it when asked for.
    outcomes: List[List[int]] = field(default_factory=list)
    new_tokens: int = 0
    draft_ns: int = 0
    target_ns: int = 0
    verify_ns: int = 0
    stop_reason: str = ""  # "max_new", "stop_token", or "" while running

    def __post_init__(self):
        if not self.outcomes:
            self.outcomes = [[0] * (j + 1) for j in range(self.k + 1)]

    @property
    def rounds(self) -> int:
        return sum(sum(row) for row in self.outcomes)

    @property
    def target_calls(self) -> int:
        return self.rounds

    @property
    def draft_calls(self) -> int:
        return sum(sum(row) for row in self.outcomes[1:])

    @property
    def proposed(self) -> int:
        return sum(j * sum(row) for j, row in enumerate(self.outcomes))

    @property
    def accepted(self) -> int:
        return sum(n * c for row in self.outcomes for n, c in enumerate(row))

    @property
    def accepted_length_counts(self) -> List[int]:
        """Rounds by number of accepted draft tokens, n = 0..k."""
        counts = [0] * (self.k + 1)
        for row in self.outcomes:
            for n, c in enumerate(row):
                counts[n] += c
        return counts

    @property
    def decided_by_position(self) -> List[int]:
        """How often the verifier judged the draft token at position i (reached it)."""
        return [sum(c for row in self.outcomes[i + 1:] for n, c in enumerate(row) if n >= i)
                for i in range(self.k)]

    @property
    def accepted_by_position(self) -> List[int]:
        return [sum(c for row in self.outcomes for n, c in enumerate(row) if n > i)
                for i in range(self.k)]

    @property
    def acceptance_by_position(self) -> List[float]:
        """P(accept position i | position i reached): estimates alpha_i. NaN if never reached."""
        return [a / d if d else math.nan
                for a, d in zip(self.accepted_by_position, self.decided_by_position)]

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN if none was proposed)."""
        p = self.proposed
        return self.accepted / p if p else math.nan

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per round."""
        r = self.rounds
        return self.accepted / r if r else math.nan

    @property
    def tokens_per_target_call(self) -> float:
        t = self.target_calls
        return self.new_tokens / t if t else math.nan

    @property
    def draft_seconds(self) -> float:
        return self.draft_ns * 1e-9

    @property
    def target_seconds(self) -> float:
        return self.target_ns * 1e-9

    @property
    def verify_seconds(self) -> float:
        return self.verify_ns * 1e-9

    def as_dict(self) -> dict:
        keys = ["k", "rounds", "target_calls", "draft_calls", "proposed", "accepted", "new_tokens",
                "accepted_length_counts", "decided_by_position", "accepted_by_position",
                "acceptance_by_position", "acceptance_rate", "mean_accepted",
                "tokens_per_target_call", "draft_seconds", "target_seconds", "verify_seconds",
                "stop_reason"]
        return {key: getattr(self, key) for key in keys}

    def summary(self) -> str:
        by_pos = ", ".join(f"{a:.2f}" for a in self.acceptance_by_position)
        return (f"{self.new_tokens} tokens in {self.rounds} rounds at K = {self.k}: "
                f"{self.tokens_per_target_call:.2f} tokens per target call; accepted "
                f"{self.accepted}/{self.proposed} drafts ({self.acceptance_rate:.1%}), "
                f"{self.mean_accepted:.2f} per round; by position [{by_pos}]; time draft "
                f"{self.draft_seconds * 1e3:.1f} ms, target {self.target_seconds * 1e3:.1f} ms, "
                f"verify {self.verify_seconds * 1e3:.1f} ms; stopped by {self.stop_reason or '-'}")


def _stop_set(eos_token_id: StopTokens) -> frozenset:
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError(f"eos_token_id must be an int, an iterable of ints or None, got {eos_token_id!r}")
    return frozenset(ids)


def _prompt_list(prompt_ids) -> List[int]:
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise TypeError(f"prompt_ids must hold integer ids, got a tensor of dtype {prompt_ids.dtype}")
        if prompt_ids.dim() == 2 and prompt_ids.shape[0] == 1:  # a tokenizer's batch of one
            prompt_ids = prompt_ids[0]
        if prompt_ids.dim() != 1:
            raise ValueError(f"prompt_ids must be 1-D (or [1, L]), got shape {list(prompt_ids.shape)}")
        return prompt_ids.tolist()
    seq = list(prompt_ids)
    for t in seq:
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError(f"prompt_ids must be a sequence of ints, got an element {t!r}")
    return seq


def _kind(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {list(x.shape)}"
    return f"a {type(x).__name__}"


class SpeculativeDecoder:
    """Speculative decoding with any draft and target model.

    draft_step(prefix, k) -> (tokens, probs): k proposed token ids ([k] integer tensor or a
        list of ints) and, when sampling, the draft's probabilities each token was drawn
        from ([k, V] float32, unnormalised is fine; may be None when greedy=True).
    target_step(prefix, proposed) -> target_probs [k+1, V] float32: the target's
        probabilities (or logits, when greedy=True) at the k+1 positions after prefix,
        i.e. for prefix, prefix+proposed[:1], ..., prefix+proposed. `proposed` is an int64
        tensor [k].
    k: draft tokens per round. greedy: temperature-0 verification (output identical to
    greedy decoding of the target); otherwise speculative sampling with `generator`.

    See the module docstring for how prefixes evolve (what a KV cache may keep), and
    `DecodeStats` for the statistics left in `.stats` after (and during) each generation.
    """

    def __init__(
        self,
        draft_step: DraftStep,
        target_step: TargetStep,
        k: int = 4,
        greedy: bool = True,
        generator: Optional[torch.Generator] = None,
    ):
        if not callable(draft_step) or not callable(target_step):
            raise TypeError("draft_step and target_step must be callables")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.draft_step = draft_step
        self.target_step = target_step
        self.k = k
        self.greedy = bool(greedy)
        self.generator = generator
        self.stats = DecodeStats(k)

    def __repr__(self) -> str:
        return f"SpeculativeDecoder(k={self.k}, greedy={self.greedy})"

    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new: int = 128,
        eos_token_id: StopTokens = None,
        on_tokens: Optional[Callable[[List[int]], None]] = None,
    ) -> List[int]:
        """Returns prompt_ids followed by the new tokens, as a list of ints.

        Exactly max_new new tokens, unless a token in eos_token_id (an int or several) is
        emitted first: then the output ends with that token, even when it sits inside a
        block of accepted draft tokens. on_tokens, if given, receives each round's new
        tokens (a list) as soon as the round is verified.
        """
        seq = _prompt_list(prompt_ids)
        for chunk in self._rounds(seq, max_new, eos_token_id):
            if on_tokens is not None:
                on_tokens(chunk)
        return seq

    def stream(
        self,
        prompt_ids: Sequence[int],
        max_new: int = 128,
        eos_token_id: StopTokens = None,
    ) -> Iterator[List[int]]:
        """Like generate(), but yields each round's new tokens (a non-empty list) as soon as
        the round is verified. Their concatenation is what generate() would add."""
        return self._rounds(_prompt_list(prompt_ids), max_new, eos_token_id)

    # The loop ------------------------------------------------------------------------------

    def _rounds(self, seq: List[int], max_new: int, eos_token_id: StopTokens) -> Iterator[List[int]]:
        # Argument errors surface at the call, not at the first next() of a stream.
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
            raise ValueError(f"max_new must be an int >= 0, got {max_new!r}")
        stop = _stop_set(eos_token_id)
        self.stats = stats = DecodeStats(self.k)
        if max_new == 0:
            stats.stop_reason = "max_new"
        return self._loop(seq, max_new, stop, stats)

    def _loop(self, seq: List[int], max_new: int, stop: frozenset, stats: DecodeStats) -> Iterator[List[int]]:
        outcomes = stats.outcomes
        no_tokens = torch.empty(0, dtype=torch.int64)
        remaining = max_new
        while remaining > 0:
            # Never propose past max_new: the round's emitted token is always the last one.
            k = self.k if self.k < remaining else remaining - 1
            t0 = _now()
            if k:
                out = self.draft_step(list(seq), k)
                t1 = _now()
                tokens, probs = self._check_draft(out, k)
            else:
                t1 = t0
                tokens, probs = no_tokens, None
            t2 = _now()
            rows = self.target_step(list(seq), tokens)
            t3 = _now()
            self._check_target(rows, k)
            n, nxt = self._verify_checked(rows, probs, tokens, k)
            chunk = tokens[:n].tolist() if n else []
            chunk.append(nxt)
            if stop and not stop.isdisjoint(chunk):
                del chunk[next(j for j, t in enumerate(chunk) if t in stop) + 1:]
                remaining = 0
                stats.stop_reason = "stop_token"
            else:
                remaining -= len(chunk)  # never below 0: k <= remaining - 1
                if remaining == 0:
                    stats.stop_reason = "max_new"
            seq.extend(chunk)
            outcomes[k][n] += 1
            stats.new_tokens += len(chunk)
            t4 = _now()
            stats.draft_ns += t1 - t0
            stats.target_ns += t3 - t2
            stats.verify_ns += (t2 - t1) + (t4 - t3)
            yield chunk

    def _verify(self, target_probs: torch.Tensor, draft_probs: Optional[torch.Tensor],
                tokens: torch.Tensor) -> Tuple[int, int]:
        """One round's decision: (n_accepted, next_token). The single place the ops are called."""
        if self.greedy:
            return verify_greedy(target_probs, tokens)
        return accept(target_probs, draft_probs, tokens, self.generator)

    # Checks of the callbacks' output: cheap attribute checks here, row contents in the op.

    def _check_draft(self, out, k: int):
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"draft_step must return a pair (tokens, probs), got {_kind(out)}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        tokens, probs = out
        if isinstance(tokens, torch.Tensor):
            if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
                raise TypeError(f"draft_step returned tokens of dtype {tokens.dtype}, expected an integer dtype")
            if tokens.dim() != 1:
                raise ValueError(f"draft_step returned tokens of shape {list(tokens.shape)}, "
                                 f"expected a 1-D tensor of k = {k} ids")
        elif isinstance(tokens, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool)
                                                       for t in tokens):
            tokens = torch.tensor(tokens, dtype=torch.int64).reshape(len(tokens))
        else:
            raise TypeError(f"draft_step returned tokens as {_kind(tokens)}, "
                            "expected a 1-D integer tensor or a list of ints")
        if tokens.numel() != k:
            raise ValueError(f"draft_step returned {tokens.numel()} tokens, expected k = {k}")
        if self.greedy:
            return tokens, None
        if probs is None:
            raise ValueError("draft_step must return the draft probabilities when greedy=False, got None")
        if not isinstance(probs, torch.Tensor):
            raise TypeError(f"draft_step returned probs as {_kind(probs)}, expected a float32 tensor [k, V]")
        if probs.dtype != torch.float32:
            raise TypeError(f"draft_step returned probs of dtype {probs.dtype}, expected torch.float32")
        if probs.dim() != 2 or probs.shape[0] != k:
            raise ValueError(f"draft_step returned probs of shape {list(probs.shape)}, expected [k, V] "
                             f"with k = {k}")
        return tokens, probs

    def _check_target(self, rows, k: int) -> None:
        if not isinstance(rows, torch.Tensor):
            raise TypeError(f"target_step returned {_kind(rows)}, expected a float32 tensor [k+1, V]")
        if rows.dtype != torch.float32:
            raise TypeError(f"target_step returned rows of dtype {rows.dtype}, expected torch.float32")
        if rows.dim() != 2 or rows.shape[0] != k + 1 or rows.shape[1] == 0:
            raise ValueError(f"target_step returned rows of shape {list(rows.shape)}, expected "
                             f"[k+1, V] = [{k + 1}, V] with V > 0")

    def _verify_checked(self, rows, probs, tokens, k: int) -> Tuple[int, int]:
        if not self.greedy:
            if probs is None:  # k = 0: nothing was drafted
                probs = rows.new_empty((0, rows.shape[1]))
            elif probs.shape[1] != rows.shape[1]:
                raise ValueError(f"draft_step returned probs with V = {probs.shape[1]} columns but "
                                 f"target_step returned rows with V = {rows.shape[1]}")
        try:
            return self._verify(rows, probs, tokens)
        except (ValueError, TypeError) as e:
            # The op names its own arguments; say which callback produced the offending one.
            msg = str(e)
            culprits = [who for arg, who in (("draft_tokens", "draft_step's tokens"),
                                             ("draft_probs", "draft_step's probs"),
                                             ("target_probs", "target_step's rows")) if arg in msg]
            where = " or ".join(culprits) if culprits else "the output of draft_step or target_step"
            raise type(e)(f"SpeculativeDecoder: the verification op rejected {where}: {msg}") from e
