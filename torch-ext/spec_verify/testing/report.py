"""What a run of the suite found: one `CheckResult` per check, gathered in a `Report`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch


@dataclass
class SmallestCase:
    """The smallest failing input found, and what the law says there.

    Attributes:
        k, vocab: its number of draft tokens and vocabulary size.
        target, draft: the rows given to the verifier (draft None: one-hot drafts).
        tokens: the draft tokens of the failing call (None for a law failure: tokens drawn each round).
        law_says: one or more lines: the cell furthest from the law (observed against expected)
            or, for a single call, the outcomes the law allows.
    """

    k: int
    vocab: int
    target: torch.Tensor
    draft: Optional[torch.Tensor]
    tokens: Optional[List[int]]
    law_says: str

    def __str__(self) -> str:
        def rows(t):
            return "None (one-hot drafts)" if t is None else _rows(t)
        lines = [f"K = {self.k}, V = {self.vocab}", f"target rows {rows(self.target)}", f"draft rows {rows(self.draft)}"]
        if self.tokens is not None:
            lines.append(f"draft tokens {self.tokens}")
        lines.append(self.law_says)
        return "\n".join(lines)


def _rows(t: torch.Tensor) -> str:
    if t.numel() > 64:
        return f"[{t.shape[0]}, {t.shape[1]}] {t.dtype} (first row starts {[round(float(v), 4) for v in t[0, :6]]} ...)"
    return str([[float(f"{float(v):.4g}") for v in row] for row in t])


@dataclass
class CheckResult:
    """One check's verdict.

    Attributes:
        name: "law/<case>", "greedy", "inputs/<case>" or "outputs/<case>".
        passed: whether it passed.
        what: what the check holds the verifier to.
        rounds: calls made.
        statistic, df, p_value: the G-test's (law checks; None elsewhere).
        counts, expected: observed counts and the law's expected counts, [K+1, V] (law checks).
        detectable_bias: the smallest bias of position 0's acceptance probability this check
            detects with 99% power (law checks where one exists).
        message: why it failed (or a note).
        smallest: the smallest failing case found.
    """

    name: str
    passed: bool
    what: str = ""
    rounds: int = 0
    statistic: Optional[float] = None
    df: Optional[int] = None
    p_value: Optional[float] = None
    counts: Optional[torch.Tensor] = field(default=None, repr=False)
    expected: Optional[torch.Tensor] = field(default=None, repr=False)
    detectable_bias: Optional[float] = None
    message: str = ""
    smallest: Optional[SmallestCase] = None

    def line(self) -> str:
        """One line: verdict, name, rounds, G-test figures."""
        parts = [("PASS" if self.passed else "FAIL"), f"{self.name:<30}", f"rounds {self.rounds:>6}"]
        if self.p_value is not None:
            parts.append(f"G = {self.statistic:9.2f}  df = {self.df:>3}  p = {self.p_value:.3g}")
        if self.detectable_bias is not None:
            parts.append(f"(99% power at bias {self.detectable_bias:.3f})")
        return "  ".join(parts)

    def __str__(self) -> str:
        out = [self.line()]
        if self.message and not self.passed:
            out.append("    " + self.message.replace("\n", "\n    "))
        if self.smallest is not None:
            out.append("    smallest failing case: " + str(self.smallest).replace("\n", "\n      "))
        return "\n".join(out)


@dataclass
class Report:
    """The result of `check_verifier`: `passed` is true only if every check passed.

    Attributes:
        verifier: the verifier's name.
        checks: every `CheckResult`, in the order run.
        p_min: a law check fails when its p-value is below this.
        false_alarm_rate: an upper bound on the probability that a correct verifier fails a
            run (the number of G-tests times p_min; the other checks are exact).
        seconds: the run's wall time.
        notes: what the run did not check, or what the caller said about the verifier.
    """

    verifier: str
    checks: List[CheckResult]
    p_min: float
    false_alarm_rate: float
    seconds: float = 0.0
    notes: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failures(self) -> List[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def __str__(self) -> str:
        head = (f"{self.verifier}: {'PASSED' if self.passed else 'FAILED'} "
                f"({len(self.checks) - len(self.failures)}/{len(self.checks)} checks passed, {self.seconds:.1f} s; "
                f"a law check fails at p < {self.p_min:g}, a correct verifier fails a run with probability "
                f"< {self.false_alarm_rate:.2g})")
        return "\n".join([head] + [str(c) for c in self.checks] + [f"note: {n}" for n in self.notes])
