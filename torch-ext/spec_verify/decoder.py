"""The draft/verify loop of speculative decoding, over user callbacks.

Contract with the callbacks (what a KV cache can rely on). Within one generation, every
round calls

    draft_step(prefix, k)          -> (tokens [j] integer, probs [j, V] float32 or None), 0 <= j <= k
    target_step(prefix, proposed)  -> rows [j+1, V] float32, proposed = the j tokens

with the same `prefix`: a fresh list holding the prompt followed by every token emitted so
far (the verified prefix). A draft may propose fewer than k tokens, none included (a
prompt-lookup draft that finds no match); a round with no proposal is a plain target step,
target_step(prefix, []) -> [1, V]. `probs` None when sampling means one-hot drafts (tokens
proposed without a distribution): the verification accepts t_i with probability
p_i(t_i) and on rejection draws from p_i without t_i. The prefix of the next round is
this prefix + proposed[:n] + [x], where n is the number of accepted draft tokens and x the
emitted token; so each prefix extends the last verified one, and of what a callback fed its
model last round, everything up to len(prefix) + n is still valid. draft_step is not
called when k = 0 (near max_new, or a decoder made with k = 0). A new generation starts
again from its prompt.

NumPy arrays are taken wherever a tensor is (llama.cpp and other engines hand them out):
a callback may return its tokens, rows, probs or logits as arrays, and prompts and stop
tokens may be arrays. They are read through `torch.as_tensor`, which shares the array's
memory: no copy when the dtype is the one expected (float32 rows; int64 tokens, while
other integer tokens are widened to int64); other dtypes are refused as for tensors.

`SpeculativeDecoder.from_logits` builds both callbacks' plumbing from two logits functions,

    draft_logits_step(seq)                 -> [V] float32 logits after seq
    target_logits_step(prefix, proposed)   -> [j+1, V] float32 logits

sampling the draft tokens from the draft's warped rows (`sample`) and verifying with
`accept_logits`, both with the same warping parameters. Within a round draft_logits_step
is called with prefix, prefix + [t_0], ..., prefix + [t_0, ..., t_{k-2}] (a fresh list
each time), so the same KV-cache reasoning holds. Given `draft_step=` instead (a drafter
of tokens without logits, such as `PromptLookup`), it verifies one-hot drafts on the
target's warped rows.
"""
from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from .schedule import AdaptiveSchedule
from ._api import _INT64_MAX, _flag, _index, _int_list, _kind, _token_tensor, _type_name, _warp_params
from ._calls import SAMPLE, SAMPLE_WITH_BOUNDS
from ._chains import accept, verify_greedy
from ._logits import accept_logits

DraftStep = Callable[[List[int], int], Tuple[torch.Tensor, Optional[torch.Tensor]]]
TargetStep = Callable[[List[int], torch.Tensor], torch.Tensor]
DraftLogitsStep = Callable[[List[int]], torch.Tensor]
Verifier = Callable[[torch.Tensor, Optional[torch.Tensor], torch.Tensor, Optional[torch.Generator]],
                    Tuple[int, int]]
StopTokens = Union[None, int, Iterable[int]]

_now = time.perf_counter_ns
_Tensor = torch.Tensor
_int64 = torch.int64
_float32 = torch.float32


class _RateStats:
    """What both decoders' statistics derive the same way from new_tokens, target_calls and
    the nanosecond counters (draft_ns, target_ns, verify_ns) of a dataclass."""

    @property
    def tokens_per_target_call(self) -> float:
        """Tokens emitted per target callback call (plain decoding: 1; NaN before the first round)."""
        t = self.target_calls
        return self.new_tokens / t if t else math.nan

    @property
    def draft_seconds(self) -> float:
        """Seconds inside the draft callback."""
        return self.draft_ns * 1e-9

    @property
    def target_seconds(self) -> float:
        """Seconds inside the target callback."""
        return self.target_ns * 1e-9

    @property
    def verify_seconds(self) -> float:
        """Seconds checking the callbacks' output and inside the verifier."""
        return self.verify_ns * 1e-9

    def as_dict(self) -> dict:
        """Every field and every public property, by name.

        Returns:
            `dict`: field and property names to their values (lists are copies).
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for klass in reversed(type(self).__mro__):
            for name, attr in vars(klass).items():
                if isinstance(attr, property) and not name.startswith("_"):
                    out[name] = getattr(self, name)
        return {name: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v
                for name, v in out.items()}


@dataclass
class DecodeStats(_RateStats):
    """Statistics of one generation (`SpeculativeDecoder.stats`), updated round by round.

    The counters describe verification outcomes: a stop token inside an accepted block cuts
    the output (`new_tokens`) but not `accepted`. They are kept as three lists of k + 1
    counts, so keeping them costs O(1) per round and O(k) memory, and every derived
    statistic (the properties) is read in O(k). Times are nanoseconds spent inside
    draft_step, inside target_step, and in checking their output plus the verifier.

    Args:
        k (`int`): the decoder's draft tokens per round; the lists below have k + 1 entries
            (made as zeros when not given).

    Attributes:
        k (`int`): as above.
        proposed_length_counts (`List[int]`): rounds by number of draft tokens proposed,
            j = 0..k (j < k near `max_new`, or when draft_step proposed fewer; j = 0 is a
            plain target step: draft_step was not called or proposed nothing).
        accepted_length_counts (`List[int]`): rounds by number of draft tokens accepted,
            n = 0..k.
        full_acceptance_counts (`List[int]`): rounds that proposed j draft tokens and
            accepted all of them, by j = 0..k.
        new_tokens (`int`): tokens emitted.
        draft_calls (`int`): calls of draft_step (rounds that asked for at least one token,
            whatever it proposed).
        draft_ns, target_ns, verify_ns (`int`): nanoseconds in draft_step, in target_step,
            and in checking their output plus the verifier.
        stop_reason (`str`): `"max_new"`, `"stop_token"`, or `""` while running.
        chosen_length_counts (`List[int]`): rounds by the proposal length the schedule chose,
            k = 0..k (the drafter may then propose fewer: `proposed_length_counts`).
        schedule_reasons (`Dict[str, int]`): rounds by the reason for their k
            (`spec_verify.schedule.REASONS`: "prefill", "measure", "pays", "no gain",
            "probe", "never pays", "max_new", "constant").
        costs (`dict`): the adaptive schedule's measurements when the generation stopped
            (`AdaptiveSchedule.costs()`); empty under `schedule="constant"`.
    """

    k: int
    proposed_length_counts: List[int] = field(default_factory=list)
    accepted_length_counts: List[int] = field(default_factory=list)
    full_acceptance_counts: List[int] = field(default_factory=list)
    new_tokens: int = 0
    draft_calls: int = 0
    draft_ns: int = 0
    target_ns: int = 0
    verify_ns: int = 0
    stop_reason: str = ""
    chosen_length_counts: List[int] = field(default_factory=list)
    schedule_reasons: Dict[str, int] = field(default_factory=dict)
    costs: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("proposed_length_counts", "accepted_length_counts", "full_acceptance_counts",
                     "chosen_length_counts"):
            if not getattr(self, name):
                setattr(self, name, [0] * (self.k + 1))

    @property
    def rounds(self) -> int:
        """Verification rounds."""
        return sum(self.proposed_length_counts)

    @property
    def target_calls(self) -> int:
        """Calls of target_step (one per round)."""
        return self.rounds

    @property
    def proposed(self) -> int:
        """Draft tokens proposed."""
        return sum(j * c for j, c in enumerate(self.proposed_length_counts))

    @property
    def accepted(self) -> int:
        """Draft tokens accepted by the verifier."""
        return sum(n * c for n, c in enumerate(self.accepted_length_counts))

    def _accepted_at_least(self) -> List[int]:
        # [rounds that accepted >= n for n = 0..k+1]: suffix sums, O(k).
        return list(accumulate(reversed(self.accepted_length_counts)))[::-1] + [0]

    @property
    def decided_by_position(self) -> List[int]:
        """Per draft position i = 0..k-1, rounds in which the verifier judged the token at i:
        rounds that proposed more than i tokens and accepted at least i."""
        # Accepting n >= i of j >= n proposals misses position i only when j = n = i.
        at_least = self._accepted_at_least()
        return [at_least[i] - self.full_acceptance_counts[i] for i in range(self.k)]

    @property
    def accepted_by_position(self) -> List[int]:
        """Per draft position i = 0..k-1, rounds that accepted the token at i (accepted > i)."""
        return self._accepted_at_least()[1:self.k + 1]

    @property
    def acceptance_by_position(self) -> List[float]:
        """P(accept position i | position i reached), i = 0..k-1: estimates alpha_i (NaN if
        never reached)."""
        return [a / d if d else math.nan
                for a, d in zip(self.accepted_by_position, self.decided_by_position)]

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens / proposed draft tokens (NaN if none was proposed)."""
        p = self.proposed
        return self.accepted / p if p else math.nan

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per round (NaN before the first round)."""
        r = self.rounds
        return self.accepted / r if r else math.nan

    def summary(self) -> str:
        """The statistics in one line.

        Returns:
            `str`: tokens, rounds, acceptance (overall and by position) and times.
        """
        by_pos = ", ".join(f"{a:.2f}" for a in self.acceptance_by_position)
        return (f"{self.new_tokens} tokens in {self.rounds} rounds at K = {self.k}: "
                f"{self.tokens_per_target_call:.2f} tokens per target call; accepted "
                f"{self.accepted}/{self.proposed} drafts ({self.acceptance_rate:.1%}), "
                f"{self.mean_accepted:.2f} per round; by position [{by_pos}]; time draft "
                f"{self.draft_seconds * 1e3:.1f} ms, target {self.target_seconds * 1e3:.1f} ms, "
                f"verify {self.verify_seconds * 1e3:.1f} ms; stopped by {self.stop_reason or '-'}")


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


# Which callback produced what a verification op rejected. Every error message of the ops
# begins "spec_verify.<op>: <argument>" (torch_binding.cpp and _api.py build each one that
# way), and the decoder always passes target_step's rows as target_probs, draft_step's
# probs as draft_probs and its tokens as draft_tokens. So the argument name, read once at
# that fixed position of the message, picks the callback from this fixed table; nothing
# else in the text is searched. An error of any other form (a custom verifier's own, or a
# uniform's) is not attributed and propagates unchanged.
_CULPRITS = {
    "target_probs": "target_step's rows",
    "draft_probs": "draft_step's probs",
    "draft_tokens": "draft_step's tokens",
    # from_logits: accept_logits gets target_logits_step's rows and the stacked draft logits.
    "target_logits": "target_logits_step's logits",
    "draft_logits": "draft_logits_step's logits",
}
_OP_ERROR = re.compile(r"spec_verify\.\w+: (\w+)")


def _culprit(error: Exception) -> Optional[str]:
    m = _OP_ERROR.match(str(error))
    return _CULPRITS.get(m.group(1)) if m else None


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


def _check_draft_logits(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"draft_logits_step returned {_kind(x)}, expected a float32 tensor [V]")
    _dense(x, "draft_logits_step returned", "a float32 tensor [V]")
    if x.dtype != torch.float32:
        raise TypeError(f"draft_logits_step returned logits of dtype {x.dtype}, expected torch.float32")
    if x.dim() != 1:
        raise ValueError(f"draft_logits_step returned logits of shape {list(x.shape)}, expected [V]")
    if not x.is_cpu:
        raise ValueError(f"draft_logits_step returned logits on {x.device}, expected a tensor on the CPU")


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


def _greedy_verifier(target_rows, draft_probs, tokens, generator):
    """The default verifier with greedy=True: `verify_greedy` (probs and generator unused)."""
    return verify_greedy(target_rows, tokens)


def _schedule(what: str, schedule, k: int, draft_step) -> Optional[AdaptiveSchedule]:
    """The decoder's schedule: an AdaptiveSchedule of its own, or None for "constant"."""
    if isinstance(schedule, AdaptiveSchedule):
        chosen = schedule
    elif not isinstance(schedule, str):
        raise TypeError(f"{what}: schedule must be \"adaptive\", \"constant\" or an AdaptiveSchedule, got "
                        f"{type(schedule).__name__}")
    elif schedule not in ("adaptive", "constant"):
        raise ValueError(f"{what}: schedule must be \"adaptive\", \"constant\" or an AdaptiveSchedule, got "
                         f"{schedule!r}")
    elif schedule == "constant" or k == 0:
        return None
    else:
        chosen = AdaptiveSchedule()
    chosen.k_max = k
    chosen.shadowable = getattr(draft_step, "shadowable", False) is True
    return chosen


_METHODS = ("token", "block")


def _method(what: str, method) -> str:
    if not isinstance(method, str):
        raise TypeError(f"{what}: method must be a str, \"token\" or \"block\", got {type(method).__name__}")
    if method not in _METHODS:
        raise ValueError(f"{what}: method must be \"token\" or \"block\", got {method!r}")
    return method


def _accept_verifier(method: str) -> Verifier:
    """The default verifier when sampling: `accept` itself for token-wise verification (draft
    probs None: one-hot drafts), or `accept` with method="block"."""
    if method == "token":
        return accept

    def block_verifier(target_rows, draft_probs, tokens, generator):
        return accept(target_rows, draft_probs, tokens, generator, method=method)
    return block_verifier


class SpeculativeDecoder:
    """Speculative decoding with any draft and target model, given as two callbacks.

    Each round the draft proposes up to k tokens (j, possibly 0), the target scores the j+1
    positions in one call, and the verifier decides which prefix of the proposal to keep and
    which token to add. See the module docstring for how prefixes evolve (what a KV cache may keep), and
    `DecodeStats` for the statistics left in `.stats` after (and during) each generation.

    Args:
        draft_step (`Callable[[List[int], int], tuple]`): `draft_step(prefix, k) -> (tokens,
            probs)`: up to k proposed ids, j of them with 0 <= j <= k (a `[j]` tensor of any
            integer dtype on the CPU, or a list of ints), and the float32 `[j, V]` rows they
            were drawn from (row i the draft's distribution after `prefix + tokens[:i]`;
            unnormalised is fine) or None. None when sampling means one-hot drafts: tokens
            proposed without a distribution (prompt lookup, n-grams, a greedy draft model),
            verified by `accept(target_rows, None, tokens)`; None is always fine when
            `greedy=True`, where probs are not used. `PromptLookup()` is a draft_step. Not
            called when k = 0.
        target_step (`Callable[[List[int], torch.Tensor], torch.Tensor]`):
            `target_step(prefix, proposed) -> rows`: float32 `[j+1, V]` on the CPU, the
            target's rows after `prefix`, `prefix + proposed[:1]`, ..., `prefix + proposed`.
            `proposed` is a contiguous int64 `[j]` CPU tensor (`[0]` in a round without
            proposals). Logits are fine with `greedy=True`; probabilities (unnormalised is
            fine) when sampling.
        k (`int`, *optional*, defaults to 4): draft tokens per round, in `[0, MAX_K]`
            (`MAX_K = 1024`; see below): the most the schedule chooses, and every round's
            under `schedule="constant"`. Fewer near `max_new`.
        greedy (`bool`, *optional*, defaults to `True`): temperature-0 verification (output
            identical to greedy decoding of the target); otherwise speculative sampling.
        generator (`torch.Generator`, *optional*): the generator the verifier draws from
            when sampling (the default generator when None).
        verifier (`Callable`, *optional*): the decision of a round,
            `verifier(target_rows, draft_probs, tokens, generator) -> (n_accepted,
            next_token)`: `target_rows` as target_step returned them, `draft_probs` the
            float32 `[j, V]` rows from draft_step when `greedy=False` (an empty `[0, V]`
            tensor when j = 0; None for one-hot drafts) and None when `greedy=True`,
            `tokens` the int64 `[j]` proposal, `generator` the decoder's. It returns how
            many proposed tokens to keep (`0 <= n_accepted <= j`) and the token to add
            (`0 <= next_token < V`). Defaults to `verify_greedy` with `greedy=True` and
            `accept` (with `method`) otherwise; other rules (tree verification) plug in here.
        method (`str`, *optional*, defaults to `"token"`): the default verifier's rule when
            sampling: `"token"` (token-wise rejection sampling) or `"block"` (block
            verification, Sun et al. 2025: the same law, at least as many accepted tokens
            on average, every position read). Greedy verification has one rule and ignores
            it; with a custom `verifier` it must stay `"token"`.
        schedule (`str` or `AdaptiveSchedule`, *optional*, defaults to `"adaptive"`): how
            many tokens each round proposes. `"adaptive"` (or an `AdaptiveSchedule` with
            its own parameters): chosen each round in `[0, k]` from the measured costs of
            both callbacks and the acceptance so far, 0 (a plain target step) where
            proposing does not pay (`spec_verify.schedule`; the output law is unchanged).
            `"constant"`: always k, as transformers' `num_assistant_tokens_schedule =
            "constant"`. With the adaptive schedule a drafter with `shadowable = True`
            (`PromptLookup`) is also called in rounds of k = 0, its proposal only compared
            with the tokens that follow.

    The bound on k: each round runs k draft steps and scores k+1 positions, while the
    expected number of accepted tokens is at most alpha / (1 - alpha) for a draft accepted
    with probability alpha per token (999 at alpha = 0.999), so a larger k only adds
    wasted draft steps; the statistics and the verification scratch grow with k.

    Raises:
        TypeError: a callback or verifier that is not callable, k not an int (bool is not
            one; NumPy integers and 0-d integer tensors are), greedy not a bool, generator
            not a `torch.Generator`, method not a str.
        ValueError: k outside `[0, MAX_K]`; method neither `"token"` nor `"block"`, or
            `"block"` with a custom verifier; schedule neither `"adaptive"`, `"constant"`
            nor an `AdaptiveSchedule`.
    """

    MAX_K = 1024

    def __init__(
        self,
        draft_step: DraftStep,
        target_step: TargetStep,
        k: int = 4,
        greedy: bool = True,
        generator: Optional[torch.Generator] = None,
        verifier: Optional[Verifier] = None,
        *,
        method: str = "token",
        schedule: Union[str, AdaptiveSchedule] = "adaptive",
    ):
        for name, f in (("draft_step", draft_step), ("target_step", target_step)):
            if not callable(f):
                raise TypeError(f"{name} must be callable, got {type(f).__name__}")
        k = _count(k, "k", self.MAX_K)
        greedy = _flag(greedy, "greedy")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {_type_name(generator)}")
        method = _method("SpeculativeDecoder", method)
        if verifier is None:
            verifier = _greedy_verifier if greedy else _accept_verifier(method)
        elif not callable(verifier):
            raise TypeError(f"verifier must be callable or None, got {type(verifier).__name__}")
        elif method != "token":
            raise ValueError(f"SpeculativeDecoder: method={method!r} chooses the default verifier's rule; "
                             f"a custom verifier decides its own (leave method=\"token\")")
        self.draft_step = draft_step
        self.target_step = target_step
        self.k = k
        self.greedy = greedy
        self.generator = generator
        self.verifier = verifier
        self.method = method
        self.schedule = _schedule("SpeculativeDecoder", schedule, k, draft_step)
        self.stats = DecodeStats(k)
        # The warping parameters when made by from_logits (a dict), else None.
        self.warping: Optional[dict] = None
        self._target_name = "target_step"
        self._draft_rows_name = "draft_step returned probs"
        # (stats, V): V of the target's rows in the generation that `stats` counts, once its
        # first target call returned them (_verify); draft tokens are checked against it.
        self._vocab_seen: Optional[tuple] = None

    def __repr__(self) -> str:
        method = "" if self.method == "token" else f", method={self.method!r}"
        if self.warping is not None:
            params = ", ".join(f"{name}={value}" for name, value in self.warping.items())
            sched = "" if self.schedule is not None else ", schedule='constant'"
            return f"SpeculativeDecoder.from_logits(k={self.k}, {params}{method}{sched})"
        sched = "" if self.schedule is not None else ", schedule='constant'"
        return f"SpeculativeDecoder(k={self.k}, greedy={self.greedy}{method}{sched})"

    @classmethod
    def from_logits(
        cls,
        draft_logits_step: Optional[DraftLogitsStep],
        target_logits_step: TargetStep,
        k: int = 4,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        draft_step: Optional[DraftStep] = None,
        method: str = "token",
        schedule: Union[str, AdaptiveSchedule] = "adaptive",
    ) -> "SpeculativeDecoder":
        """A decoder over two logits functions: the decoder samples and verifies.

        Each round calls `draft_logits_step` k times, samples every draft token from the
        draft's warped row with `sample` (one uniform each, from `generator`), stacks the k
        draft rows into `[k, V]` and verifies the round with `accept_logits` (K+1 uniforms),
        every row warped with the same parameters (see `spec_verify.warp`). The output then
        has the law of the target's warped rows, as plain sampling from the target with
        these parameters would. `temperature` 0 is greedy: draft tokens by argmax,
        `verify_greedy`, and output identical to plain greedy decoding of the target.

        A drafter without logits (`PromptLookup`, an n-gram table) goes in as `draft_step`
        instead, with `draft_logits_step` None: each round it proposes 0..k tokens, verified
        as one-hot drafts on the target's warped rows (`accept_logits(target_logits, None,
        tokens, ...)`). The output has the same law.

        Args:
            draft_logits_step (`Callable[[List[int]], torch.Tensor]`): `draft_logits_step(seq)
                -> logits`: float32 `[V]` on the CPU, the draft's next-token logits after the
                ids `seq` (a fresh list: the verified prefix, then the round's draft tokens
                so far). None when `draft_step` is given.
            target_logits_step (`Callable[[List[int], torch.Tensor], torch.Tensor]`):
                `target_logits_step(prefix, proposed) -> logits`: float32 `[k+1, V]` on the
                CPU, the target's logits after `prefix + proposed[:i]` for i = 0..k, as
                `target_step` of the constructor.
            k (`int`, *optional*, defaults to 4): draft tokens per round, in `[0, MAX_K]`.
            temperature (`float`, *optional*, defaults to 1.0): >= 0; 0 = greedy.
            top_k (`int`, *optional*, defaults to 0): >= 0; 0 = off.
            top_p (`float`, *optional*, defaults to 1.0): in (0, 1]; 1 = off.
            min_p (`float`, *optional*, defaults to 0.0): in [0, 1); 0 = off.
            generator (`torch.Generator`, *optional*): the generator of every draw (draft
                tokens and verification); the default generator when None.
            draft_step (`Callable[[List[int], int], tuple]`, *optional*): instead of
                `draft_logits_step`, a drafter of tokens: `draft_step(prefix, k) -> (tokens,
                logits)`, 0..k tokens and None (one-hot drafts), or the `[j, V]` draft
                logits the tokens were sampled from with these warping parameters.
            method (`str`, *optional*, defaults to `"token"`): `"token"` or `"block"`,
                passed to `accept_logits`.
            schedule (`str` or `AdaptiveSchedule`, *optional*, defaults to `"adaptive"`): as
                for the constructor. A `draft_logits_step` with a `token_seconds()`
                attribute (the llama.cpp adapter's) tells the schedule one draft token's
                cost before the draft model has run.

        Returns:
            `SpeculativeDecoder`: with `greedy = (temperature == 0)` and `warping` the dict
            of the four parameters; `generate` and `stream` work as for any decoder.

        Raises:
            TypeError: a callback that is not callable; a parameter, k, generator or method
                of the wrong type (bool is not a number).
            ValueError: a parameter, k or method out of range; both or neither of
                `draft_logits_step` and `draft_step`. While generating, a callback's output
                of the wrong type, shape or contents raises naming the callback.
        """
        what = "SpeculativeDecoder.from_logits"
        if draft_step is not None and draft_logits_step is not None:
            raise ValueError(f"{what}: pass draft_logits_step or draft_step, not both")
        callbacks = (("draft_logits_step", draft_logits_step) if draft_step is None else ("draft_step", draft_step),
                     ("target_logits_step", target_logits_step))
        for name, f in callbacks:
            if not callable(f):
                raise TypeError(f"{what}: {name} must be callable, got {type(f).__name__}")
        temperature, top_k, top_p, min_p = _warp_params(what, temperature, top_k, top_p, min_p)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"{what}: generator must be a torch.Generator or None, got {_type_name(generator)}")
        method = _method(what, method)
        greedy = temperature == 0.0
        # accept_logits learns `method` with block verification; "token" is its default, and
        # at temperature 0 both are the greedy rule.
        method_kw = {} if method == "token" or greedy else {"method": method}

        # The draft rows draft_step below built last, and their draft bounds (DESIGN.md,
        # "Draft bounds"): the verifier passes those along for exactly those rows.
        handed = {"rows": None, "bounds": None}

        def verifier(rows, draft_rows, tokens, gen):
            bounds = handed["bounds"] if draft_rows is not None and draft_rows is handed["rows"] else None
            handed["rows"] = handed["bounds"] = None
            return accept_logits(rows, draft_rows, tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                                 min_p=min_p, generator=gen, draft_bounds=bounds, **method_kw)

        if draft_step is not None:
            # One-hot drafts (or drafts with their own logits) on the target's warped rows.
            dec = cls(draft_step, target_logits_step, k, greedy=greedy, generator=generator, verifier=verifier,
                      schedule=schedule)
            dec.method = method
            dec.warping = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
            dec._target_name = "target_logits_step"
            dec._draft_rows_name = "draft_step returned logits"
            return dec

        def draft_step(prefix: List[int], k: int):
            seq, start, rows, bounds = prefix, len(prefix), None, []  # prefix: the loop's own fresh copy
            vocab = None  # the round's first V: rows of another V could not be stacked
            for i in range(k):
                x = draft_logits_step(seq[:])
                if not (type(x) is _Tensor and x.dtype is _float32 and x.dim() == 1 and x.is_cpu):
                    x = _from_array(x, "draft_logits_step returned")
                    _check_draft_logits(x)
                if vocab is None:
                    vocab = x.shape[0]
                    known = dec._known_vocab()  # greedy too: argmax tokens of a wider row could not fit
                    if known is not None and vocab != known:
                        raise ValueError(f"draft_logits_step returned logits with V = {vocab} columns but "
                                         f"target_logits_step returned rows with V = {known}")
                elif x.shape[0] != vocab:
                    raise ValueError(f"draft_logits_step returned logits of shape [{x.shape[0]}] after {len(seq)} "
                                     f"tokens, but of shape [{vocab}] after {start} in the same round: V must "
                                     f"not change")
                if not greedy:
                    # Copied at once: a callback may hand out a view of a buffer that its next
                    # call overwrites (the llama.cpp adapter does).
                    if rows is None:
                        rows = torch.empty((k, vocab), dtype=_float32)
                    rows[i].copy_(x)
                try:
                    if greedy:
                        t = int(SAMPLE.overload(x, temperature, top_k, top_p, min_p, generator))
                    else:
                        token, bound = SAMPLE_WITH_BOUNDS.overload(x, None, temperature, top_k, top_p, min_p, generator)
                        t = int(token)
                        bounds.append(bound)
                except (ValueError, TypeError) as e:
                    raise type(e)(f"SpeculativeDecoder: the sampling op rejected draft_logits_step's "
                                  f"logits after {len(seq)} tokens: {e}") from e
                seq.append(t)
            handed["rows"], handed["bounds"] = rows, (torch.stack(bounds) if bounds else None)
            return torch.tensor(seq[start:], dtype=_int64), rows

        # Greedy too goes through accept_logits (verify_greedy at temperature 0), so that a bad
        # row is reported as target_logits_step's.
        dec = cls(draft_step, target_logits_step, k, greedy=greedy, generator=generator, verifier=verifier,
                  schedule=schedule)
        if dec.schedule is not None and callable(getattr(draft_logits_step, "token_seconds", None)):
            dec.schedule.draft_token_hint = draft_logits_step.token_seconds
        dec.method = method
        dec.warping = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
        dec._target_name = "target_logits_step"
        dec._draft_rows_name = "draft_logits_step returned logits"
        return dec

    @classmethod
    def from_tree(
        cls,
        draft_tree: Callable,
        target_tree_step: Callable,
        *,
        greedy: bool = True,
        generator: Optional[torch.Generator] = None,
        verifier: Optional[Callable] = None,
    ) -> "SpeculativeDecoder":
        """A decoder whose rounds verify a tree of candidates (`verify_tree_probs`).

        Each round calls `draft_tree(prefix) -> (tokens [N], parents [N], draft_rows)` and
        `target_tree_step(prefix, tokens, parents) -> rows [N+1, V]`, and keeps the path the
        verifier accepts plus its emitted token. The layout is the ops' (Note [Tree
        verification]): `parents[j]` in `[-1, j)` (-1: a child of the root), row 0 after
        `prefix`, row j+1 after `prefix` and the path to node j. N = 0 is a plain target step.
        See `spec_verify.tree_decoder` for the KV-cache contract.

        Args:
            draft_tree (`Callable[[List[int]], tuple]`): the tree: `tokens` and `parents` as
                1-D integer tensors or lists of ints, and `draft_rows` None or float32
                `[N+1, V]` (row j+1: the distribution node j's children were drawn from,
                independently; rows of leaves are never read). None when sampling means
                deterministic children (candidates such as top-k or prompt-lookup matches),
                whose siblings must hold distinct tokens. Not called with one token left.
            target_tree_step (`Callable[[List[int], torch.Tensor, torch.Tensor], torch.Tensor]`):
                float32 `[N+1, V]` on the CPU; `tokens` and `parents` are contiguous int64
                CPU tensors. Probabilities (unnormalised is fine); logits when greedy.
            greedy (`bool`, *optional*, defaults to `True`): greedy verification (output
                identical to greedy decoding of the target); else exact sampling.
            generator (`torch.Generator`, *optional*): the verifier's generator.
            verifier (`Callable`, *optional*): `verifier(target_rows, draft_rows, tokens,
                parents, generator) -> (path, next_token)` instead of `verify_tree_probs`;
                its path is checked to run from the root down.

        Returns:
            `SpeculativeDecoder`: a `tree_decoder.TreeDecoder`, whose `stats` is a
            `TreeDecodeStats`.

        Raises:
            TypeError: a callback, verifier or generator of the wrong type; greedy not a bool.
                While generating, output of the wrong kind raises naming the callback, and
                contents the op rejects (a parent out of order, repeated sibling tokens
                without draft rows, a token outside the vocabulary) raise its ValueError
                prefixed with the callback.
        """
        from .tree_decoder import from_tree
        return from_tree(draft_tree, target_tree_step, greedy=greedy, generator=generator, verifier=verifier)

    @classmethod
    def from_tree_logits(
        cls,
        draft_tree: Callable,
        target_tree_logits_step: Callable,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        generator: Optional[torch.Generator] = None,
        verifier: Optional[Callable] = None,
    ) -> "SpeculativeDecoder":
        """`from_tree` on logits rows, verified by `verify_tree` with these warping parameters
        (temperature 0: greedy). Draft rows, when given, are logits too, and the children
        must have been sampled from them warped alike (`sv.sample` with the same parameters).

        Args:
            draft_tree, verifier, generator: as for `from_tree`.
            target_tree_logits_step: as `target_tree_step` of `from_tree`, returning float32
                logits `[N+1, V]`.
            temperature, top_k, top_p, min_p: as for `from_logits`.

        Raises:
            TypeError, ValueError: as for `from_tree`, and for bad warping parameters.
        """
        from .tree_decoder import from_tree_logits
        return from_tree_logits(draft_tree, target_tree_logits_step, temperature=temperature, top_k=top_k,
                                top_p=top_p, min_p=min_p, generator=generator, verifier=verifier)

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

    # The loop ------------------------------------------------------------------------------

    def _rounds(self, seq: List[int], max_new: int, eos_token_id: StopTokens) -> Iterator[List[int]]:
        # Argument errors surface at the call, not at the first next() of a stream.
        max_new = _count(max_new, "max_new")
        stop = _stop_set(eos_token_id)
        self.stats = stats = DecodeStats(self.k)
        if self.schedule is not None:
            self.schedule.reset()
        if max_new == 0:
            stats.stop_reason = "max_new"
        return self._loop(seq, max_new, stop, stats)

    def _loop(self, seq: List[int], max_new: int, stop: frozenset, stats: DecodeStats) -> Iterator[List[int]]:
        proposed_counts = stats.proposed_length_counts
        accepted_counts = stats.accepted_length_counts
        full_counts = stats.full_acceptance_counts
        no_tokens = torch.empty(0, dtype=torch.int64)
        remaining = max_new
        schedule = self.schedule
        now = _now if schedule is None or schedule.clock is None else schedule.clock
        prompt_len = len(seq)
        reasons, chosen_counts = stats.schedule_reasons, stats.chosen_length_counts
        while remaining > 0:
            # Never propose past max_new: the round's emitted token is always the last one.
            cap = self.k if self.k < remaining else remaining - 1
            if schedule is None:
                k, reason, shadow = cap, "constant", False
            else:
                k, reason, shadow = schedule.choose(cap, remaining, len(seq))
            chosen_counts[k] += 1
            reasons[reason] = reasons.get(reason, 0) + 1
            t0 = now()
            if k or shadow:
                out = self.draft_step(list(seq), k or self.k)
                t1 = now()
                stats.draft_calls += 1
                tokens, probs = self._check_draft(out, k or self.k)
                if schedule is not None:
                    schedule.observe_draft(k or self.k, (t1 - t0) * 1e-9)
                if shadow:  # compared with what the plain steps emit; nothing is verified
                    schedule.shadow(len(seq), tokens.tolist())
                    tokens, probs = no_tokens, None
                j = tokens.shape[0]  # 0 <= j <= k proposed
            else:
                t1 = t0
                tokens, probs, j = no_tokens, None, 0
            t2 = now()
            rows = self.target_step(list(seq), tokens)
            t3 = now()
            if schedule is not None:
                schedule.observe_target(j + 1, (t3 - t2) * 1e-9, prompt_len)
            n, nxt = self._verify(rows, probs, tokens, j)
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
            if schedule is not None:
                schedule.observe_round(j, n)
                schedule.observe_emitted(seq)
                if remaining == 0:
                    stats.costs = schedule.costs()
            proposed_counts[j] += 1
            accepted_counts[n] += 1
            if n == j:
                full_counts[j] += 1
            stats.new_tokens += len(chunk)
            t4 = now()
            stats.draft_ns += t1 - t0
            stats.target_ns += t3 - t2
            stats.verify_ns += (t2 - t1) + (t4 - t3)
            yield chunk

    # Checks of the callbacks' output: cheap attribute checks here, row contents in the op.

    def _check_draft(self, out, k: int):
        """draft_step's output as (tokens, probs): an int64 [j] contiguous CPU tensor with
        j <= k, and float32 [j, V] rows or None (greedy: always None)."""
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"draft_step must return a pair (tokens, probs), got {_kind(out)}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        tokens, probs = out
        # target_step is promised an int64 [j] contiguous CPU tensor: the common case (a
        # tensor that already is one) costs a few attribute reads.
        if not (type(tokens) is _Tensor and tokens.dtype is _int64 and tokens.is_cpu):
            tokens = _token_tensor(tokens, "draft_step's tokens").to(_int64)
        _dense(tokens, "draft_step returned tokens as", "a 1-D integer tensor or a list of ints")
        if tokens.dim() != 1:
            raise ValueError(f"draft_step's tokens must be 1-D, at most k = {k} ids, got shape {list(tokens.shape)}")
        j = tokens.shape[0]
        if j > k:
            raise ValueError(f"draft_step returned {j} tokens, expected at most k = {k}")
        if not tokens.is_contiguous():
            tokens = tokens.contiguous()
        if self.greedy or probs is None:  # greedy: probs unused; sampling: one-hot drafts
            if j:
                self._check_proposed(tokens, None)
            return tokens, None
        rows = self._draft_rows_name  # "draft_step returned probs" (or logits, from_logits)
        probs = _from_array(probs, rows + " as")
        if not isinstance(probs, torch.Tensor):
            raise TypeError(f"{rows} as {_kind(probs)}, expected a float32 tensor [j, V] or None")
        _dense(probs, rows + " as", "a float32 tensor [j, V] or None")
        if probs.dtype != torch.float32:
            raise TypeError(f"{rows} of dtype {probs.dtype}, expected torch.float32")
        if probs.dim() != 2 or probs.shape[0] != j:
            raise ValueError(f"{rows} of shape {list(probs.shape)}, expected [j, V] with j = {j}, "
                             f"the number of tokens it returned")
        if not probs.is_cpu:
            raise ValueError(f"{rows} on {probs.device}, expected a tensor on the CPU")
        if j:
            self._check_proposed(tokens, probs)
        return tokens, probs

    def _known_vocab(self) -> Optional[int]:
        """V of the target's rows in this generation, once its first target call returned them."""
        seen = self._vocab_seen
        return seen[1] if seen is not None and seen[0] is self.stats else None

    def _check_proposed(self, tokens: torch.Tensor, probs: Optional[torch.Tensor]) -> None:
        """The j > 0 draft tokens in [0, V) before target_step sees them: V of the target's rows
        once this generation has had them (the draft's rows must have it too), else of the
        draft's rows if any; else >= 0."""
        vocab, source = self._known_vocab(), f"{self._target_name}'s rows"
        if probs is not None:
            if vocab is not None and probs.shape[1] != vocab:
                raise ValueError(f"{self._draft_rows_name} with V = {probs.shape[1]} columns but "
                                 f"{self._target_name} returned rows with V = {vocab}")
            vocab, source = probs.shape[1], f"{self._draft_rows_name.partition(' ')[0]}'s rows"
        who = f"{self._draft_rows_name.partition(' ')[0]}'s tokens"  # draft_step's (draft_logits_step's)
        _check_token_range(tokens.tolist(), vocab, who, source)

    def _check_target(self, rows, k: int) -> int:
        if not isinstance(rows, torch.Tensor):
            raise TypeError(f"{self._target_name} returned {_kind(rows)}, expected a float32 tensor [j+1, V]")
        _dense(rows, f"{self._target_name} returned", "a float32 tensor [j+1, V]")
        if rows.dtype != torch.float32:
            raise TypeError(f"{self._target_name} returned rows of dtype {rows.dtype}, expected torch.float32")
        if rows.dim() != 2 or rows.shape[0] != k + 1 or rows.shape[1] == 0:
            raise ValueError(f"{self._target_name} returned rows of shape {list(rows.shape)}, expected "
                             f"[j+1, V] = [{k + 1}, V] with V > 0 for the j = {k} proposed tokens")
        if not rows.is_cpu:
            raise ValueError(f"{self._target_name} returned rows on {rows.device}, expected a tensor on the CPU")
        return rows.shape[1]

    def _verify(self, rows, probs, tokens, k: int) -> Tuple[int, int]:
        """One round's decision, (n_accepted, next_token), for k proposed tokens: the
        callbacks' output checked, the verifier called, its errors attributed and its result
        checked."""
        if type(rows) is not _Tensor:
            rows = _from_array(rows, f"{self._target_name} returned")
        vocab = self._check_target(rows, k)
        self._vocab_seen = (self.stats, vocab)  # for the next rounds' draft tokens (_check_proposed)
        if not self.greedy:
            if probs is None:
                if k == 0:  # nothing was drafted: an empty [0, V], whoever drafts
                    probs = rows.new_empty((0, vocab))
                # else one-hot drafts: the verifier gets None
            elif probs.shape[1] != vocab:
                raise ValueError(f"{self._draft_rows_name} with V = {probs.shape[1]} columns but "
                                 f"{self._target_name} returned rows with V = {vocab}")
        try:
            result = self.verifier(rows, probs, tokens, self.generator)
        except (ValueError, TypeError) as e:
            who = _culprit(e)
            if who is None:
                raise
            if who.startswith("draft_step"):  # from_logits: the drafter may be draft_logits_step
                who = self._draft_rows_name.partition(" ")[0] + who[len("draft_step"):]
            raise type(e)(f"SpeculativeDecoder: the verification op rejected {who}: {e}") from e
        if not (type(result) is tuple and len(result) == 2):
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise TypeError(f"the verifier must return a pair (n_accepted, next_token), got {_kind(result)}")
        n, nxt = result
        if type(n) is not int or type(nxt) is not int:
            n, nxt = _index(n, "the verifier's n_accepted"), _index(nxt, "the verifier's next_token")
        if not (0 <= n <= k and 0 <= nxt < vocab):
            raise ValueError(f"the verifier returned (n_accepted, next_token) = ({n}, {nxt}), expected "
                             f"0 <= n_accepted <= j = {k} (the proposed tokens) and 0 <= next_token < V = {vocab}")
        return n, nxt
