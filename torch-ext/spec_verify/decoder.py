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

Three optional drafter attributes. `draft_step.confidences`, read right after each call when
the schedule is adaptive: one float in [0, 1] per proposed token, the drafter's estimate
that the token is accepted once the tokens before it were (`SuffixDrafter`, `PromptLookup`);
the schedule then verifies only the first n tokens, those whose calibrated estimates pay on
the measured cost curve (`AdaptiveSchedule.cut`), so `target_step` may receive fewer tokens
than the drafter proposed. `draft_step.end_generation(sequence, prompt_length)`: called once
at the end of each generation (`SuffixDrafter` adds the output to its cache).
`draft_step.position_cost`: where the drafter has it and the schedule is adaptive, set
before each call to the schedule's estimate of what one more scored position costs, in
one-position steps (`AdaptiveSchedule.position_cost(k)`; None until c(1) is measured):
`SuffixDrafter`'s default length cap reads it.

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

from typing import Callable, Iterator, List, Optional, Tuple, Union

import torch

from ._api import _flag, _index, _kind, _token_tensor
from ._chains import accept, verify_greedy
from ._logits import _accept_logits
from ._decoding import (Decoder, _check_callbacks, _check_rows, _check_token_range, _count, _culprit, _dense,
                        _estimates, _from_array, _method, _now)
from ._from_logits import sampling_draft_step
from ._stats import DecodeStats
from ._warping import Warping
from .schedule import AdaptiveSchedule, schedule_arg

DraftStep = Callable[[List[int], int], Tuple[torch.Tensor, Optional[torch.Tensor]]]
TargetStep = Callable[[List[int], torch.Tensor], torch.Tensor]
DraftLogitsStep = Callable[[List[int]], torch.Tensor]
Verifier = Callable[[torch.Tensor, Optional[torch.Tensor], torch.Tensor, Optional[torch.Generator]],
                    Tuple[int, int]]

_Tensor = torch.Tensor
_int64 = torch.int64
_float32 = torch.float32


# The callback behind each op argument the decoder passes (_decoding._culprit).
_CULPRITS = {
    "target_probs": "target_step's rows",
    "draft_probs": "draft_step's probs",
    "draft_tokens": "draft_step's tokens",
    # from_logits: accept_logits gets target_logits_step's rows and the stacked draft logits.
    "target_logits": "target_logits_step's logits",
    "draft_logits": "draft_logits_step's logits",
}


def _greedy_verifier(target_rows, draft_probs, tokens, generator):
    """The default verifier with greedy=True: `verify_greedy` (probs and generator unused)."""
    return verify_greedy(target_rows, tokens)


def _schedule(what: str, schedule, k: int, draft_step) -> Optional[AdaptiveSchedule]:
    """The decoder's schedule: an AdaptiveSchedule of its own, or None for "constant"."""
    chosen = schedule_arg(what, schedule, AdaptiveSchedule)
    if chosen == "constant" or (chosen == "adaptive" and k == 0):
        return None
    if chosen == "adaptive":
        chosen = AdaptiveSchedule()
    chosen.k_max = k
    chosen.shadowable = getattr(draft_step, "shadowable", False) is True
    chosen.confident = hasattr(draft_step, "confidences")
    return chosen


def _accept_verifier(method: str) -> Verifier:
    """The default verifier when sampling: `accept` itself for token-wise verification (draft
    probs None: one-hot drafts), or `accept` with method="block"."""
    if method == "token":
        return accept

    def block_verifier(target_rows, draft_probs, tokens, generator):
        return accept(target_rows, draft_probs, tokens, generator, method=method)
    return block_verifier


class SpeculativeDecoder(Decoder):
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
            `accept` (with `method`) otherwise; other rules plug in here.
        method (`str`, *optional*, defaults to `"token"`): the default verifier's rule when
            sampling: `"token"` (token-wise rejection sampling) or `"block"` (block
            verification, Sun et al. 2025: the same law, at least as many accepted tokens
            on average, every position read). Greedy verification has one rule and ignores
            it; with a custom `verifier` it must stay `"token"`.
        schedule (`str` or `AdaptiveSchedule`, *optional*, defaults to `"adaptive"`): how
            many tokens each round proposes. `"adaptive"` (or an `AdaptiveSchedule` with
            its own parameters): chosen each round in `[0, k]` from the measured costs of
            both callbacks and the acceptance so far (for a drafter with `confidences`, from
            its per-token estimates as calibrated so far), 0 (a plain target step) where
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
        _check_callbacks("", generator, verifier, draft_step=draft_step, target_step=target_step)
        k = _count(k, "k", self.MAX_K)
        greedy = _flag(greedy, "greedy")
        method = _method("SpeculativeDecoder", method)
        if verifier is None:
            verifier = _greedy_verifier if greedy else _accept_verifier(method)
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
        # The warping parameters when made by from_logits, else None.
        self.warping: Optional[Warping] = None
        self._target_name = "target_step"
        self._draft_rows_name = "draft_step returned probs"

    def __repr__(self) -> str:
        method = "" if self.method == "token" else f", method={self.method!r}"
        sched = "" if self.schedule is not None else ", schedule='constant'"
        if self.warping is not None:
            return f"SpeculativeDecoder.from_logits(k={self.k}, {self.warping}{method}{sched})"
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
            `SpeculativeDecoder`: with `greedy = (temperature == 0)` and `warping` the four
            parameters, checked (a named tuple: `warping.top_p`, `warping._asdict()`);
            `generate` and `stream` work as for any decoder.

        Raises:
            TypeError: a callback that is not callable; a parameter, k, generator or method
                of the wrong type (bool is not a number).
            ValueError: a parameter, k or method out of range; both or neither of
                `draft_logits_step` and `draft_step`. While generating, a callback's output
                of the wrong type, shape or contents raises naming the callback.
        """
        what = "SpeculativeDecoder.from_logits"
        warping = Warping(temperature, top_k, top_p, min_p, what=what)
        return cls._from_warping(what, draft_logits_step, target_logits_step, k, warping, generator, draft_step,
                                 method, schedule)

    @classmethod
    def _from_warping(cls, what: str, draft_logits_step, target_logits_step, k, warping: Warping, generator,
                      draft_step, method, schedule) -> "SpeculativeDecoder":
        # from_logits for a Warping already built (the adapters build theirs before they wrap
        # their models); `what` prefixes the messages.
        if draft_step is not None and draft_logits_step is not None:
            raise ValueError(f"{what}: pass draft_logits_step or draft_step, not both")
        drafter = {"draft_logits_step": draft_logits_step} if draft_step is None else {"draft_step": draft_step}
        _check_callbacks(what + ": ", generator, None, **drafter, target_logits_step=target_logits_step)
        method = _method(what, method)
        greedy = warping.greedy
        # At temperature 0 both methods are the greedy rule: accept_logits gets "token".
        verify_method = "token" if greedy else method

        def verifier(rows, draft_rows, tokens, gen):
            return _accept_logits("accept_logits", rows, draft_rows, tokens, warping, gen, verify_method)
        if draft_step is None:
            draft_step = sampling_draft_step(draft_logits_step, lambda: dec._known_vocab(), warping, generator)
            rows_name = "draft_logits_step returned logits"
        else:  # one-hot drafts (or drafts with their own logits) on the target's warped rows
            rows_name = "draft_step returned logits"
        # Greedy too goes through accept_logits (verify_greedy at temperature 0), so that a bad
        # row is reported as target_logits_step's.
        dec = cls(draft_step, target_logits_step, k, greedy=greedy, generator=generator, verifier=verifier,
                  schedule=schedule)
        if (draft_logits_step is not None and dec.schedule is not None
                and callable(getattr(draft_logits_step, "token_seconds", None))):
            dec.schedule.draft_token_hint = draft_logits_step.token_seconds
        dec.method = method
        dec.warping = warping
        dec._target_name = "target_logits_step"
        dec._draft_rows_name = rows_name
        return dec

    # The loop ------------------------------------------------------------------------------

    def _start_generation(self) -> DecodeStats:
        if self.schedule is not None:
            self.schedule.reset()
        return DecodeStats(self.k)

    def _loop(self, seq: List[int], max_new: int, stop: frozenset, stats: DecodeStats) -> Iterator[List[int]]:
        proposed_counts = stats.proposed_length_counts
        accepted_counts = stats.accepted_length_counts
        full_counts = stats.full_acceptance_counts
        no_tokens = torch.empty(0, dtype=torch.int64)
        remaining = max_new
        schedule = self.schedule
        now = _now if schedule is None or schedule.clock is None else schedule.reading
        prompt_len = len(seq)
        reasons, chosen_counts = stats.schedule_reasons, stats.chosen_length_counts
        # A drafter that learns from whole requests (SuffixDrafter) hears when one ends.
        end_generation = getattr(self.draft_step, "end_generation", None)
        # A drafter whose proposal length depends on the target's cost curve is told it.
        tell_cost = schedule is not None and hasattr(self.draft_step, "position_cost")
        if max_new == 0 and end_generation is not None:
            end_generation(seq, prompt_len)
        while remaining > 0:
            # Never propose past max_new: the round's emitted token is always the last one.
            cap = self.k if self.k < remaining else remaining - 1
            if schedule is None:
                k, reason, shadow = cap, "constant", False
            else:
                k, reason, shadow = schedule.choose(cap, remaining, len(seq))
            if tell_cost and (k or shadow):
                self.draft_step.position_cost = schedule.position_cost(self.k)
            t0 = now()
            if k or shadow:
                out = self.draft_step(list(seq), k or self.k)
                t1 = now()
                stats.draft_calls += 1
                tokens, probs = self._check_draft(out, k or self.k)
                if schedule is not None:
                    schedule.observe_draft(k or self.k, (t1 - t0) * 1e-9)
                    if schedule.confident:
                        estimates = _estimates(self.draft_step, tokens.shape[0])
                        schedule.drafted(len(seq), tokens.tolist(), estimates)
                        if reason == "confidence":  # keep the positions that pay
                            k = schedule.cut(estimates)
                            reason = "pays" if k else "no gain"
                            tokens = tokens[:k]
                            probs = None if probs is None else probs[:k]
                if shadow:  # compared with what the plain steps emit; nothing is verified
                    schedule.shadow(len(seq), tokens.tolist())
                    tokens, probs = no_tokens, None
                j = tokens.shape[0]  # 0 <= j <= k proposed
            else:
                t1 = t0
                tokens, probs, j = no_tokens, None, 0
            chosen_counts[k] += 1
            reasons[reason] = reasons.get(reason, 0) + 1
            t2 = now()
            rows = self.target_step(list(seq), tokens)
            t3 = now()
            if schedule is not None:
                schedule.observe_target(j + 1, (t3 - t2) * 1e-9, prompt_len)
            n, nxt = self._verify(rows, probs, tokens, j)
            chunk = tokens[:n].tolist() if n else []
            chunk.append(nxt)
            remaining = self._emit(seq, chunk, remaining, stop, stats)  # k <= remaining - 1
            if schedule is not None:
                schedule.observe_round(j, n)
                schedule.observe_emitted(seq)
                if remaining == 0:
                    stats.costs = schedule.costs()
                    stats.calibration = schedule.calibration()
            if remaining == 0 and end_generation is not None:
                end_generation(seq, prompt_len)
            proposed_counts[j] += 1
            accepted_counts[n] += 1
            if n == j:
                full_counts[j] += 1
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
            # dtype= by keyword, as TreeDecoder._check_tree does (a positional dtype leaves name
            # strings in CPython's type cache).
            tokens = _token_tensor(tokens, "draft_step's tokens").to(dtype=_int64)
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

    def _verify(self, rows, probs, tokens, k: int) -> Tuple[int, int]:
        """One round's decision, (n_accepted, next_token), for k proposed tokens: the
        callbacks' output checked, the verifier called, its errors attributed and its result
        checked."""
        if type(rows) is not _Tensor:
            rows = _from_array(rows, f"{self._target_name} returned")
        vocab = _check_rows(rows, self._target_name, k, "j", "proposed tokens")
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
            who = _culprit(e, _CULPRITS)
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

