"""How many tokens to propose each round: the proposal length chosen from measured costs.

A round that proposes k tokens costs the drafter's time D(k) plus the target's time c(k+1)
to score k+1 positions, and emits 1 + E(k) tokens on average, where E(k) is the expected
number of accepted proposals. Plain decoding emits one token per c(1). So proposing k pays
only where (1 + E(k)) / (c(k+1) + D(k)) > 1 / c(1). On a CPU c(n) grows steeply with n
(llama.cpp's matmuls are compute-bound on two cores: scoring 9 positions with logits costs
5.5 to 9.6 one-token steps), so a fixed k loses wherever the text does not repeat.

`AdaptiveSchedule` measures c(n) for every n it has run (the first target call of each
generation, which evaluates the prompt, gives only a lower bound on the slope, which is also
its guess past the largest n measured), the
drafter's cost per proposed token, and the acceptance by position (P(accept position i |
position i reached), counts decayed by `decay` per observation so a change of text is
followed within a few rounds). Each round it takes the k in [0, k_max] with the highest
estimated rate, k = 0 (a plain target step) unless a k > 0 is estimated at least `margin`
faster.

While it chooses k = 0 it keeps learning:
- A drafter that says it may be shadowed (`shadowable = True`, as `PromptLookup` does: it
  proposes without probabilities, and a call costs under `cheap` of a target step) is still
  called, and its proposal is compared with the tokens the plain steps then emit ("shadow"
  proposals). With greedy decoding a proposed token matches the emitted one exactly when
  verification would accept it; when sampling, a one-hot draft token t is accepted with
  probability p(t), the probability that the plain step emits t. So shadows estimate the
  acceptance at no target cost. A measured cost that is high keeps its k off for good, since
  a k not run is not measured again: so after 16, 32, ... 256 rounds of k = 0 a "recheck"
  round runs the k that the shadows' acceptance makes best at the cheapest a position costs
  (the prompt's rate), if it would pay there, and its measurement replaces a higher kept cost.
- Any other drafter gets a probe round (k = `probe_k`) after 2, 4, 8, ... 256 rounds of
  k = 0, unless even a draft that is always accepted would not pay at the estimated costs, or
  could not repay over the tokens that remain what the draft model's catching up on the
  text it has not seen costs (then it is not run).

A drafter that gives per-token estimates (`confidences`: `SuffixDrafter`, `PromptLookup`)
and is shadowable is asked for k_max tokens every round, and `cut` keeps the first n, the
n of highest estimated rate on the measured cost curve with each token's acceptance its
calibrated estimate (0 unless it beats plain decoding by `margin`). The calibration: per
bucket of estimates, decayed counts of how often a proposed token matched the token
emitted at its position (`calibration()`), kept across generations like the costs.

While it chooses k > 0, c(1) is not measured, and every cost is kept in its units: a c(1)
measured high (another process during the first plain steps) makes every drafted round look
cheaper than it is, and a draft that loses kept running for whole runs. So after 16, 32, ...
256 rounds of k > 0 in a row a "refresh" round is a plain step, and a lower c(1) it measures
replaces the kept one.

Why the output law does not change. The k of a round (and a confidence cut) is a function
of the past only: earlier tokens, earlier proposals and their estimates, and measured
times, none of which depends on the uniforms of this or later rounds. Greedy verification
emits the target's greedy tokens whatever k is; speculative sampling emits, for any k
fixed before the round, tokens with the target's law given the prefix. So the output
stays greedy decoding of the target, or has the target's law, with any schedule. Shadow
proposals draw nothing from the generator. (With a fixed generator seed, sampled output
is reproducible only under `schedule="constant"`: measured times, and so the k chosen,
differ from run to run.)
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Dict, List, Optional, Tuple

def _best_length(alphas: List[float], ratios: List[float], margin: float) -> int:
    """The n in [0, len(alphas)] whose rate (1 + sum over i < n of alphas[0] ... alphas[i]) /
    ratios[n] is highest, in units of plain decoding's (ratios[0] = 1); 0 unless one beats
    1 + margin. O(len(alphas))."""
    best_n, best, total, reach = 0, 1.0 + margin, 1.0, 1.0
    for n, a in enumerate(alphas, start=1):
        reach *= a
        total += reach
        if total / ratios[n] > best:
            best_n, best = n, total / ratios[n]
    return best_n


def _settle(old: Optional[float], new: float) -> float:
    """A cost estimate moved towards a new measurement (EWMA, weight 0.3). A filter that
    moves down faster than up was tried: it biases c(1) low, so plain steps look faster
    than they are, and Gemma 3's code edit ran 1.18x instead of 1.56x."""
    return new if old is None else 0.7 * old + 0.3 * new


# Calibration: estimates in [0, 1] fall into CALIBRATION_BUCKETS equal buckets; counts decay by
# _CAL_DECAY per observation in the bucket; the estimate itself is the prior, weighing _CAL_PRIOR
# observations.
CALIBRATION_BUCKETS = 10
_CAL_DECAY = 0.98
_CAL_PRIOR = 2.0

def schedule_arg(what: str, schedule, kind: type, article: str = "an"):
    """A `schedule=` argument checked: the instance of `kind` given, else "adaptive" or
    "constant" (the decoders and `SuffixTreeDrafter` share it; `article` for the message).

    Raises:
        TypeError: neither a string nor a `kind`.
        ValueError: another string.
    """
    if isinstance(schedule, kind):
        return schedule
    expected = f"\"adaptive\", \"constant\" or {article} {kind.__name__}"
    if not isinstance(schedule, str):
        raise TypeError(f"{what}: schedule must be {expected}, got {type(schedule).__name__}")
    if schedule not in ("adaptive", "constant"):
        raise ValueError(f"{what}: schedule must be {expected}, got {schedule!r}")
    return schedule


REASONS = ("prefill", "measure", "pays", "refresh", "no gain", "recheck", "probe", "never pays", "max_new",
           "constant", "confidence")


class AdaptiveSchedule:
    """The proposal length of each round, chosen from measured costs and acceptance.

    Args:
        decay (`float`, *optional*, defaults to 0.85): weight of past acceptance
            observations per new one, in (0, 1).
        margin (`float`, *optional*, defaults to 0.03): a k > 0 is chosen only where its
            estimated rate exceeds plain decoding's by this fraction.
        prior_slope (`float`, *optional*, defaults to 0.5): before any n > 1 is measured,
            c(n) is estimated as c(1) * (1 + prior_slope * (n - 1)).
        cheap (`float`, *optional*, defaults to 0.02): a shadowable drafter is shadowed
            while its call costs under this fraction of a target step.
        probe_k (`int`, *optional*, defaults to 2): proposal length of a probe round.
        clock (`Callable[[], int]`, *optional*): nanoseconds, the decoder's time source
            (default `time.perf_counter_ns`); tests give a simulated clock. A reading that is
            not a real number is a TypeError, NaN or infinite a ValueError, each naming the
            clock; a step it measures as zero or negative (a clock that did not advance) is
            not a measurement: it is left out of the costs and counted in `costs()`'s
            "unmeasured_steps" (never measured, the costs keep their priors).

    Attributes:
        k_max (`int`): set by the decoder: its k.
    """

    def __init__(self, *, decay: float = 0.85, margin: float = 0.03, prior_slope: float = 0.5,
                 cheap: float = 0.02, probe_k: int = 2, clock: Optional[Callable[[], int]] = None):
        for name, value, low, high in (("decay", decay, 0.0, 1.0), ("cheap", cheap, 0.0, 1.0)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not low < value < high:
                raise ValueError(f"AdaptiveSchedule: {name} must be a number in ({low}, {high}), got {value!r}")
        for name, value in (("margin", margin), ("prior_slope", prior_slope)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < math.inf:
                raise ValueError(f"AdaptiveSchedule: {name} must be a finite number >= 0, got {value!r}")
        if type(probe_k) is not int or probe_k < 1:
            raise ValueError(f"AdaptiveSchedule: probe_k must be an int >= 1, got {probe_k!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"AdaptiveSchedule: clock must be callable or None, got {type(clock).__name__}")
        self.decay, self.margin, self.prior_slope, self.cheap, self.probe_k = decay, margin, prior_slope, cheap, probe_k
        self.clock = clock
        self.k_max = 0
        # Costs, kept across generations (same models, same machine). Every cost but c(1) is
        # kept in units of c(1), the latest one-position step, so that a machine that slows
        # down or speeds up as a whole (other processes, clocks) does not tilt the choice.
        self._c1: Optional[float] = None  # seconds of a target call scoring one position
        self._ratio: Dict[int, float] = {}  # c(n) / c(1) for n > 1
        self._prefill_token: Optional[float] = None  # seconds per prompt token / c(1): a floor on the slope
        self._draft_token: Optional[float] = None  # seconds per proposed token / c(1)
        self._draft_call: Optional[float] = None  # seconds per draft call / c(1)
        self.shadowable = False  # set by the decoder from its drafter
        self.draft_token_hint: Optional[Callable[[], float]] = None  # an adapter's estimate
        self.confident = False  # set by the decoder: its drafter leaves estimates in `confidences`
        # Calibration of the drafter's estimates: per bucket of estimates, decayed counts of
        # positions decided, of those accepted, and the sum of their estimates.
        self._cal_n = [0.0] * CALIBRATION_BUCKETS
        self._cal_acc = [0.0] * CALIBRATION_BUCKETS
        self._cal_est = [0.0] * CALIBRATION_BUCKETS
        self.reset()

    def reset(self) -> None:
        """Starts a generation: acceptance by position and probes afresh; costs and the
        calibration of a drafter's estimates kept (one decoder's requests share a target, a
        drafter and usually a kind of text)."""
        self._round = 0
        self._acc: List[float] = []
        self._dec: List[float] = []
        self._since_probe = 0
        self._gap = 2
        self._since_recheck, self._recheck_gap = 0, 16
        self._rechecking = False  # whether this round is a recheck
        self._since_plain, self._refresh_gap = 0, 16  # rounds of k > 0 in a row; the next refresh
        self._refreshing = False  # whether this round is a refresh
        self._draft_calls = 0
        self._unmeasured = 0  # steps this generation the clock measured as <= 0 seconds
        self._length = self._draft_len = 0  # the prefix's length now, and at the last draft call
        self._prompt: Optional[Tuple[float, int]] = None  # the prompt round's (seconds, tokens)
        self._shadow: Optional[Tuple[int, List[int]]] = None  # (start, tokens) awaiting comparison
        self._pending: List[list] = []  # [start, tokens, estimates, settled]: proposals to calibrate on

    # Estimates ------------------------------------------------------------------------------

    def target_cost(self, n: int) -> float:
        """Estimated seconds of a target call scoring n positions (NaN before c(1) is known)."""
        return math.nan if self._c1 is None else self._c1 * self._target_ratios(n)[n - 1]

    def _target_ratios(self, top: int) -> List[float]:
        # c(n) / c(1) for n = 1..top: measured, else interpolated linearly between measured
        # points (c(1) among them), and never below the prompt's cost per token for each
        # extra position. Past the last measured point: at the prompt's cost per token where
        # it is known (an optimistic guess: a position costs less the more are scored at once,
        # and the prompt's batch is the cheapest seen), else with the slope of the last two;
        # a larger n that would pay on this guess is tried once and then known. One pass, O(top).
        floor = self._prefill_token or 0.0
        points = [(1, 1.0)] + sorted(self._ratio.items())
        out, at = [], 0  # points[at] is the last measured point at or below n
        for n in range(1, top + 1):
            while at + 1 < len(points) and points[at + 1][0] <= n:
                at += 1
            a, ra = points[at]
            if a == n:
                out.append(ra)
                continue
            if at + 1 < len(points):
                b, rb = points[at + 1]
            elif at >= 1 and self._prefill_token is not None:
                out.append(ra + floor * (n - a))
                continue
            elif at >= 1:
                (a, ra), (b, rb) = points[at - 1], points[at]
            else:
                out.append(max(1.0 + floor * (n - 1), 1.0 + self.prior_slope * (n - 1)))
                continue
            slope = max((rb - ra) / (b - a), 0.0)
            out.append(max(1.0 + floor * (n - 1), ra + slope * (n - a)))
        return out

    def position_cost(self, k: int) -> Optional[float]:
        """Estimated cost of one more scored position, in one-position steps: (c(k + 1) - c(1))
        / (k c(1)) on the curve as measured so far (interpolated, extrapolated as
        `target_cost`); None before c(1) is measured. The decoder hands it to a drafter that
        reads it (`SuffixDrafter`'s length cap)."""
        if self._c1 is None or k < 1:
            return None
        return (self._target_ratios(k + 1)[k] - 1.0) / k

    def draft_cost(self, k: int) -> float:
        """Estimated seconds of a draft call proposing k tokens (0 if nothing is known)."""
        if k == 0 or self._c1 is None:
            return 0.0
        per = self._draft_token
        if per is None and self.draft_token_hint is not None:
            per = self._draft_token = float(self.draft_token_hint()) / self._c1
        return k * per * self._c1 if per is not None else 0.0

    def alphas(self, k: int) -> List[float]:
        """Estimated P(accept position i | position i reached), i < k: the decayed counts,
        each with one observation's weight of the previous position's estimate as its prior
        (0.5 before position 0), so that a position not yet reached starts where the one
        before it stands."""
        out, prior = [], 0.5
        for i in range(k):
            acc = self._acc[i] if i < len(self._acc) else 0.0
            dec = self._dec[i] if i < len(self._dec) else 0.0
            prior = (acc + prior) / (dec + 1.0)
            out.append(prior)
        return out

    def expected_tokens(self, k: int) -> float:
        """1 + E(k): tokens a round proposing k emits on average, by the estimated alphas."""
        total, reach = 1.0, 1.0
        for a in self.alphas(k):
            reach *= a
            total += reach
        return total

    def rates(self, cap: int, ratios: Optional[List[float]] = None) -> List[float]:
        """Estimated tokens per second of rounds proposing k, for k = 0..cap, in O(cap)
        (`ratios`: `_target_ratios(cap + 1)` if the caller has them)."""
        if self._c1 is None:
            return [math.nan] * (cap + 1)
        ratios = self._target_ratios(cap + 1) if ratios is None else ratios
        draft = self.draft_cost(1)
        out, total, reach = [], 1.0, 1.0
        for k, a in enumerate([1.0] + self.alphas(cap)):
            if k:
                reach *= a
                total += reach
            out.append(total / (self._c1 * ratios[k] + k * draft))
        return out

    def costs(self) -> dict:
        """What has been measured: target seconds by positions scored, seconds per prompt
        token, per draft token and per draft call, and the alphas by position."""
        c1 = self._c1
        scale = (lambda r: None if r is None or c1 is None else r * c1)
        return {"target_seconds_by_positions": {} if c1 is None else
                {1: c1, **{n: r * c1 for n, r in sorted(self._ratio.items())}},
                "prefill_seconds_per_token": scale(self._prefill_token),
                "draft_seconds_per_token": scale(self._draft_token),
                "draft_seconds_per_call": scale(self._draft_call),
                "alpha_by_position": [round(a, 4) for a in self.alphas(self.k_max)],
                "unmeasured_steps": self._unmeasured}

    def reading(self) -> int:
        """The clock's reading, checked (the decoder's time source when `clock` is given).

        Raises:
            TypeError: the clock returned something other than a real number.
            ValueError: the clock returned NaN or an infinity.
        """
        value = self.clock()
        if type(value) is int:
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"AdaptiveSchedule: clock() must return a number of nanoseconds, "
                            f"got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"AdaptiveSchedule: clock() must return a finite number of nanoseconds, got {value!r}")
        return value

    # The choice -----------------------------------------------------------------------------

    def choose(self, cap: int, remaining: Optional[int] = None, length: int = 0) -> Tuple[int, str, bool]:
        """This round's (k, reason, shadow): k in [0, cap], and whether to ask the drafter for
        a shadow proposal of k_max tokens (only when k = 0). `remaining`: tokens still to
        generate; `length`: the prefix's length (the drafter has seen what it was last
        called with)."""
        self._round += 1
        self._length = length
        if self._round == 1:
            return 0, "prefill", False  # the prompt's round: its first token as soon as plain's
        if cap == 0:
            return 0, "max_new", False
        if self._c1 is None:
            return 0, "measure", self.shadowable and self._shadow is None
        if self.confident and self._shadowing():
            # Every round drafts k_max; `cut` then keeps the positions that pay.
            if self._since_plain > self._refresh_gap:
                self._refresh_gap = min(2 * self._refresh_gap, 256)
                self._refreshing = True
                return 0, "refresh", False
            return cap, "confidence", False
        ratios = self._target_ratios(cap + 1)  # shared by the rates and the never-pays test
        rates = self.rates(cap, ratios)
        plain = rates[0]
        best_k, best = 0, plain * (1.0 + self.margin)
        for k in range(1, cap + 1):
            if rates[k] > best:
                best_k, best = k, rates[k]
        if best_k:
            self._since_probe, self._gap = 0, 2
            self._since_plain += 1
            if self._since_plain <= self._refresh_gap:
                return best_k, "pays", False
            self._refresh_gap = min(2 * self._refresh_gap, 256)
            self._refreshing = True
            return 0, "refresh", False
        if self._shadowing():
            k = self._recheck(cap, ratios)
            if k:
                return k, "recheck", False
            return 0, "no gain", self._shadow is None
        if self._never_pays(cap, remaining, ratios):
            return 0, "never pays", False
        self._since_probe += 1
        if self._since_probe >= self._gap:
            self._since_probe, self._gap = 0, min(2 * self._gap, 256)
            return min(self.probe_k, cap), "probe", False
        return 0, "no gain", False

    # Confidence: a drafter's per-token estimates -------------------------------------------

    def calibrated(self, estimate: float) -> float:
        """The acceptance observed for estimates like `estimate`: its bucket's decayed counts,
        with the estimate itself as a prior weighing `_CAL_PRIOR` observations."""
        e = min(max(float(estimate), 0.0), 1.0)
        b = min(int(e * CALIBRATION_BUCKETS), CALIBRATION_BUCKETS - 1)
        return (self._cal_acc[b] + _CAL_PRIOR * e) / (self._cal_n[b] + _CAL_PRIOR)

    def calibration(self) -> List[dict]:
        """Estimated against observed acceptance, per bucket of estimates that has seen any:
        `estimate` (the bucket's bounds), `mean_estimate`, `observed` (the share accepted) and
        `weight` (the decayed number of positions decided)."""
        out = []
        for b in range(CALIBRATION_BUCKETS):
            n = self._cal_n[b]
            if n > 0:
                out.append({"estimate": (b / CALIBRATION_BUCKETS, (b + 1) / CALIBRATION_BUCKETS),
                            "mean_estimate": round(self._cal_est[b] / n, 4),
                            "observed": round(self._cal_acc[b] / n, 4), "weight": round(n, 2)})
        return out

    def drafted(self, start: int, tokens: List[int], confidences) -> None:
        """A proposal for the positions from `start` on with one estimate per token, verified
        or not: each token is compared with the one emitted at its position (while the ones
        before it matched) to calibrate the estimates. With greedy verification a token
        matches exactly when it would be accepted; when sampling, a one-hot draft token t
        is accepted with probability p(t), the probability that t is emitted there."""
        if tokens:
            self._pending.append([start, list(tokens), [float(c) for c in confidences], 0])
            if len(self._pending) > 64:
                del self._pending[0]

    def cut(self, confidences) -> int:
        """The length of this round's proposal to verify, given the drafter's estimates: the
        n in [0, len] with the highest estimated rate on the measured cost curve, the
        acceptance of each token its calibrated estimate; 0 unless that rate beats plain
        decoding's by `margin`. After 16, 32, ... 256 cuts to 0 in a row a recheck round
        verifies the n that would pay at the prompt's cost per position."""
        alphas = [self.calibrated(e) for e in confidences]
        if not alphas or self._c1 is None:
            return 0
        return self._cut(len(alphas), lambda ratios: _best_length(alphas, ratios, self.margin))

    def _cut(self, size: int, best: Callable[[List[float]], int]) -> int:
        # What a chain's cut and a tree's cut (TreeSchedule.cut_tree) share: `best(ratios)`
        # is the size of highest rate on those costs (0..size positions after the first);
        # after 16, 32, ... 256 cuts to 0 in a row a recheck takes the size that would pay at
        # the prompt's cost per position, if the measured cost is above that.
        ratios = self._target_ratios(size + 1)
        n = best(ratios)
        if n == 0 and self._prefill_token is not None:
            self._since_recheck += 1
            if self._since_recheck >= self._recheck_gap:
                self._since_recheck, self._recheck_gap = 0, min(2 * self._recheck_gap, 256)
                low = [1.0 + self._prefill_token * i for i in range(size + 1)]
                n = best(low)
                n = n if n and ratios[n] > low[n] else 0
                self._rechecking = n > 0
        elif n:
            self._since_recheck = 0
        if n:
            self._since_plain += 1
        return n

    def _settle_pending(self, seq: List[int]) -> None:
        # Compares the pending proposals with the emitted tokens, each position once.
        have, keep = len(seq), []
        for entry in self._pending:
            start, tokens, estimates, i = entry
            while i < len(tokens) and start + i < have:
                ok = seq[start + i] == tokens[i]
                self._calibrate(estimates[i], ok)
                i = i + 1 if ok else len(tokens)
            entry[3] = i
            if i < len(tokens):
                keep.append(entry)
        self._pending = keep

    def _calibrate(self, estimate: float, accepted: bool) -> None:
        e = min(max(estimate, 0.0), 1.0)
        b = min(int(e * CALIBRATION_BUCKETS), CALIBRATION_BUCKETS - 1)
        self._cal_n[b] = _CAL_DECAY * self._cal_n[b] + 1.0
        self._cal_acc[b] = _CAL_DECAY * self._cal_acc[b] + (1.0 if accepted else 0.0)
        self._cal_est[b] = _CAL_DECAY * self._cal_est[b] + e

    def _recheck(self, cap: int, ratios: List[float]) -> int:
        # A cost that keeps its k off is never measured again, and one slow call (cold
        # weights, another process) had kept Gemma 3's code edit at k = 0 for whole runs while
        # the shadows saw every copy. So after 16, 32, ... 256 rounds of k = 0 the k that the
        # shadows' acceptance makes best at the cheapest costs a position can have (the
        # prompt's, `floor`) is run, if it would pay there and is not already estimated at
        # that cost; its measurement replaces a higher kept one (observe_target).
        self._since_recheck += 1
        if self._since_recheck < self._recheck_gap or self._prefill_token is None:
            return 0
        self._since_recheck, self._recheck_gap = 0, min(2 * self._recheck_gap, 256)
        d, floor = self.draft_cost(1) / self._c1, self._prefill_token
        best_k, best, total, reach = 0, 1.0 + self.margin, 1.0, 1.0
        for k, a in enumerate(self.alphas(cap), start=1):
            reach *= a
            total += reach
            low = 1.0 + floor * k
            if ratios[k] > low and total / (low + k * d) > best:
                best_k, best = k, total / (low + k * d)
        self._rechecking = best_k > 0
        return best_k

    def _shadowing(self) -> bool:
        return self.shadowable and (self._draft_call is None or self._draft_call < self.cheap)

    def _never_pays(self, cap: int, remaining: Optional[int], ratios: List[float]) -> bool:
        # In units of c(1): the time per token of drafts that are always accepted, with the
        # target costs as estimated (measured, interpolated, else `prior_slope` a position
        # until a call of several positions is measured). Never below 1: drafting does not
        # pay. Else it cannot repay, over the tokens that remain, the draft catching up on
        # the text it has not seen (its tokens at the target's ratio of prompt to decode
        # cost). With the prompt's cost per token for every extra position instead (the
        # cheapest a position gets), a fast prompt made a first probe look worth its
        # catch-up where a scored position costs most of a step (two threads, llama.cpp).
        if self._draft_token is None and self.draft_token_hint is None:
            return False
        d, floor = self.draft_cost(1) / self._c1, self._prefill_token or 0.0
        best = min((ratios[k] + k * d) / (k + 1) for k in range(1, cap + 1))
        if best >= 1.0:
            return True
        behind = max(self._length - self._draft_len, 0)
        return remaining is not None and (1.0 - best) * remaining <= behind * d * floor

    # Observations ---------------------------------------------------------------------------

    def observe_target(self, positions: int, seconds: float, prompt_tokens: int) -> None:
        """A target call scored `positions` positions in `seconds`."""
        if not seconds > 0:  # the clock did not advance: no measurement (a c(1) of 0 would divide)
            self._unmeasured += 1
            self._rechecking = self._refreshing = False
            return
        if self._round == 1:  # it evaluated the prompt: a floor on the slope, not c(n)
            self._prompt = (seconds, prompt_tokens)
            return
        if positions == 1:
            self._since_plain = 0
            if self._refreshing and self._c1 is not None and seconds < self._c1:
                self._c1 = seconds  # a kept c(1) that kept a draft on: a lower one replaces it
            else:
                self._c1 = _settle(self._c1, seconds)
            if self._prompt is not None:  # the prompt's cost per token, once c(1) is known
                t, n = self._prompt
                if n > 0:  # the least seen: a first call also pays for touching the weights
                    floor = t / n / self._c1
                    self._prefill_token = floor if self._prefill_token is None else min(self._prefill_token, floor)
                self._prompt = None
        elif self._c1 is not None:
            ratio = _settle(self._ratio.get(positions), seconds / self._c1)
            if self._rechecking:  # a kept cost that kept this k off: a lower one replaces it
                ratio = min(self._ratio.get(positions, math.inf), seconds / self._c1)
            self._ratio[positions] = ratio
        self._rechecking = self._refreshing = False

    def observe_draft(self, k: int, seconds: float) -> None:
        """A draft call asked for k tokens and took `seconds`."""
        self._draft_calls += 1
        self._draft_len = self._length + k
        if self._c1 is None or (self._draft_calls == 1 and not self.shadowable):
            return  # a model's first call of a generation catches up on the prompt: not its cost
        if not seconds > 0:  # the clock did not advance: no measurement
            self._unmeasured += 1
            return
        call, per = seconds / self._c1, seconds / k / self._c1
        self._draft_call = call if self._draft_call is None else 0.7 * self._draft_call + 0.3 * call
        self._draft_token = per if self._draft_token is None else 0.7 * self._draft_token + 0.3 * per

    def observe_round(self, proposed: int, accepted: int) -> None:
        """A verified round: `accepted` of `proposed` tokens were kept."""
        self._record(proposed, accepted)

    def shadow(self, start: int, tokens: List[int]) -> None:
        """A shadow proposal for the positions from `start` on, to compare with what follows."""
        if tokens:
            self._shadow = (start, list(tokens))

    def observe_emitted(self, seq: List[int]) -> None:
        """The sequence after a round: settles a pending shadow proposal once it is decided,
        and the calibration of the proposals with estimates."""
        if self._pending:
            self._settle_pending(seq)
        if self._shadow is None:
            return
        start, tokens = self._shadow
        have = len(seq) - start
        n = 0
        while n < len(tokens) and n < have and seq[start + n] == tokens[n]:
            n += 1
        if n < len(tokens) and n == have:
            return  # every emitted token matched so far: wait for more
        self._shadow = None
        self._record(len(tokens), n)

    def _record(self, proposed: int, accepted: int) -> None:
        if proposed == 0:
            return
        decided = min(proposed, accepted + 1)
        while len(self._dec) < decided:
            self._dec.append(0.0)
            self._acc.append(0.0)
        g = self.decay
        for i in range(decided):  # positions not reached keep what they knew
            self._dec[i] = g * self._dec[i] + 1.0
            self._acc[i] = g * self._acc[i] + (1.0 if i < accepted else 0.0)
