"""The statistics of the decoders: `RoundStats`, what every decoder counts of its rounds,
and its two kinds, `DecodeStats` (chain rounds) and `TreeDecodeStats` (tree rounds).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Dict, List


@dataclass(kw_only=True)
class RoundStats:
    """What every decoder counts of one generation (`Decoder.stats`), round by round.

    Counts describe verification outcomes: a stop token inside an accepted block cuts the
    output (`new_tokens`) but not `accepted`. Times are nanoseconds spent inside the draft
    callback, inside the target callback, and in checking their output plus the verifier.

    Each kind defines `proposed`: the draft tokens (a chain's) or tree nodes given to the
    target, which `acceptance_rate` divides by.

    Attributes:
        accepted_length_counts (`List[int]`): rounds by number of draft tokens accepted (a
            chain's accepted prefix, a tree's accepted path).
        new_tokens (`int`): tokens emitted.
        draft_calls (`int`): calls of the draft callback.
        draft_ns, target_ns, verify_ns (`int`): nanoseconds in the draft callback, in the
            target callback, and in checking their output plus the verifier.
        stop_reason (`str`): `"max_new"`, `"stop_token"`, or `""` while running.
    """

    accepted_length_counts: List[int] = field(default_factory=list)
    new_tokens: int = 0
    draft_calls: int = 0
    draft_ns: int = 0
    target_ns: int = 0
    verify_ns: int = 0
    stop_reason: str = ""

    @property
    def rounds(self) -> int:
        """Verification rounds (each counts one accepted length)."""
        return sum(self.accepted_length_counts)

    @property
    def target_calls(self) -> int:
        """Calls of the target callback (one per round)."""
        return self.rounds

    @property
    def accepted(self) -> int:
        """Draft tokens accepted by the verifier (a tree's: the summed accepted path lengths)."""
        return sum(n * c for n, c in enumerate(self.accepted_length_counts))

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed (NaN if nothing was proposed); a tree's siblings compete, so a
        tree's rate is below a chain's for the same drafts."""
        p = self.proposed
        return self.accepted / p if p else math.nan

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per round (NaN before the first round)."""
        r = self.rounds
        return self.accepted / r if r else math.nan

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

    def _times(self) -> str:
        return (f"time draft {self.draft_seconds * 1e3:.1f} ms, target {self.target_seconds * 1e3:.1f} ms, "
                f"verify {self.verify_seconds * 1e3:.1f} ms; stopped by {self.stop_reason or '-'}")

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
class DecodeStats(RoundStats):
    """Statistics of one generation of chain rounds (`SpeculativeDecoder.stats`), updated
    round by round; the fields and properties of `RoundStats`, and these.

    The counters are kept as lists of k + 1 counts, so keeping them costs O(1) per round and
    O(k) memory, and every derived statistic (the properties) is read in O(k). The draft
    callback is `draft_step`, the target callback `target_step`.

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
        draft_calls (`int`): calls of draft_step (rounds that asked for at least one token,
            whatever it proposed).
        chosen_length_counts (`List[int]`): rounds by the proposal length the schedule chose,
            k = 0..k (the drafter may then propose fewer: `proposed_length_counts`).
        schedule_reasons (`Dict[str, int]`): rounds by the reason for their k
            (`spec_verify.schedule.REASONS`: "prefill", "measure", "pays", "refresh",
            "no gain", "recheck", "probe", "never pays", "max_new", "constant").
        costs (`dict`): the adaptive schedule's measurements when the generation stopped
            (`AdaptiveSchedule.costs()`); empty under `schedule="constant"`.
        calibration (`list`): with a drafter that gives estimates (`confidences`), the
            schedule's estimated against observed acceptance when the generation stopped
            (`AdaptiveSchedule.calibration()`); empty otherwise.
    """

    k: int
    proposed_length_counts: List[int] = field(default_factory=list)
    full_acceptance_counts: List[int] = field(default_factory=list)
    chosen_length_counts: List[int] = field(default_factory=list)
    schedule_reasons: Dict[str, int] = field(default_factory=dict)
    costs: dict = field(default_factory=dict)
    calibration: list = field(default_factory=list)

    def __post_init__(self):
        for name in ("proposed_length_counts", "accepted_length_counts", "full_acceptance_counts",
                     "chosen_length_counts"):
            if not getattr(self, name):
                setattr(self, name, [0] * (self.k + 1))

    @property
    def proposed(self) -> int:
        """Draft tokens proposed."""
        return sum(j * c for j, c in enumerate(self.proposed_length_counts))

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

    def summary(self) -> str:
        """The statistics in one line.

        Returns:
            `str`: tokens, rounds, acceptance (overall and by position) and times.
        """
        by_pos = ", ".join(f"{a:.2f}" for a in self.acceptance_by_position)
        return (f"{self.new_tokens} tokens in {self.rounds} rounds at K = {self.k}: "
                f"{self.tokens_per_target_call:.2f} tokens per target call; accepted "
                f"{self.accepted}/{self.proposed} drafts ({self.acceptance_rate:.1%}), "
                f"{self.mean_accepted:.2f} per round; by position [{by_pos}]; {self._times()}")


@dataclass
class TreeDecodeStats(RoundStats):
    """Statistics of one generation of tree rounds (`TreeDecoder.stats`), updated round by
    round; the fields and properties of `RoundStats` (a round's accepted length is its
    accepted path's, `proposed` counts nodes), and these. The draft callback is
    `draft_tree`, the target callback `target_tree_step` (or `target_tree_logits_step`).

    Attributes:
        node_counts (`List[int]`): rounds by the number of nodes N the target was given
            (after the nodes too deep for `max_new` were dropped); grows as needed.
        accepted_length_counts (`List[int]`): rounds by the length of the accepted path;
            grows as needed.
        depth_counts (`List[int]`): rounds by the depth of the tree the target was given
            (0: no nodes).
        pruned (`int`): nodes dropped because they were deeper than the tokens left.
    """

    node_counts: List[int] = field(default_factory=list)
    depth_counts: List[int] = field(default_factory=list)
    pruned: int = 0

    @property
    def proposed(self) -> int:
        """Tree nodes given to the target."""
        return sum(n * c for n, c in enumerate(self.node_counts))

    @property
    def mean_nodes(self) -> float:
        """Nodes per round (NaN before the first round)."""
        r = self.rounds
        return self.proposed / r if r else math.nan

    def summary(self) -> str:
        """The statistics in one line.

        Returns:
            `str`: tokens, rounds, nodes, accepted path length and times.
        """
        return (f"{self.new_tokens} tokens in {self.rounds} tree rounds: {self.tokens_per_target_call:.2f} tokens "
                f"per target call; {self.mean_nodes:.1f} nodes and an accepted path of {self.mean_accepted:.2f} "
                f"per round ({self.acceptance_rate:.1%} of nodes); {self._times()}")
