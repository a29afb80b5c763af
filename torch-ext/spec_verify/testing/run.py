"""Running a verifier over a case: counting its outcomes, testing them against the law, and
shrinking a failure to the smallest case that still fails."""
from __future__ import annotations

import numbers
from typing import Callable, List, Optional, Tuple

import torch

from . import law as _law
from .cases import Case
from .report import CheckResult, SmallestCase

Verify = Callable[..., Tuple[int, int]]


class VerifierFault(Exception):
    """A call that raised or returned something other than a valid (n_accepted, next_token)."""

    def __init__(self, message: str, tokens: List[int]):
        super().__init__(message)
        self.tokens = tokens


def case_seed(seed: int, name: str) -> int:
    """A seed per (run seed, case): a case's draws do not depend on which other cases run."""
    return (seed * 1_000_003 + sum((i + 1) * ord(c) for i, c in enumerate(name))) % (2**63)


def _as_int(value, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} is a bool ({value}); expected an int")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
            raise TypeError(f"{what} is a tensor of shape {list(value.shape)} and dtype {value.dtype}; "
                            f"expected an int (or a one-element integer tensor)")
        return int(value.item())
    if isinstance(value, numbers.Integral):
        return int(value)
    raise TypeError(f"{what} is {type(value).__name__} ({value!r}); expected an int")


def outcome(result, k: int, vocab: int) -> Tuple[int, int]:
    """(n_accepted, next_token) from what a verifier returned, checked.

    Raises:
        TypeError: not a pair of ints.
        ValueError: n_accepted outside [0, K] or next_token outside [0, V).
    """
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"returned {type(result).__name__} {_short(result)}; expected a pair (n_accepted, next_token)")
    n = _as_int(result[0], "n_accepted")
    x = _as_int(result[1], "next_token")
    if not 0 <= n <= k:
        raise ValueError(f"n_accepted = {n} is outside [0, K] = [0, {k}]")
    if not 0 <= x < vocab:
        raise ValueError(f"next_token = {x} is outside the vocabulary [0, V) = [0, {vocab})")
    return n, x


def _short(value) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


def draw_tokens(case: Case, rounds: int, g: torch.Generator) -> torch.Tensor:
    """[rounds, K] int64: draft tokens t_i ~ tokens_from_i, independently."""
    rn = _law.normalise(case.tokens_from)
    if case.k == 0:
        return torch.empty(rounds, 0, dtype=torch.int64)
    return torch.stack([torch.multinomial(rn[i], rounds, replacement=True, generator=g) for i in range(case.k)], 1)


def count(verify: Verify, case: Case, rounds: int, seed: int) -> Tuple[torch.Tensor, Optional[str]]:
    """Counts [K+1, V] of (N, x) over `rounds` calls, and what the call did to its inputs.

    Returns:
        (counts, modified): modified names the first input found changed after the calls (None
        if none was).

    Raises:
        VerifierFault: a call raised or returned an invalid outcome.
    """
    g = torch.Generator().manual_seed(case_seed(seed, case.name))
    tokens = draw_tokens(case, rounds, g)
    pristine = [case.target.clone(), None if case.draft is None else case.draft.clone(), tokens.clone()]
    k, vocab = case.k, case.vocab
    cells = torch.empty(rounds, dtype=torch.int64)
    for i in range(rounds):
        row = tokens[i]
        try:
            result = verify(case.target, case.draft, row, g)
        except Exception as e:  # the verifier's own failure, reported, not propagated
            raise VerifierFault(f"verify raised {type(e).__name__}: {e} (call {i + 1})", row.tolist()) from e
        try:
            n, x = outcome(result, k, vocab)
        except (TypeError, ValueError) as e:
            raise VerifierFault(f"{e} (call {i + 1})", row.tolist()) from e
        cells[i] = n * vocab + x
    modified = None
    for name, now, before in (("target_probs", case.target, pristine[0]), ("draft_probs", case.draft, pristine[1]),
                              ("draft_tokens", tokens, pristine[2])):
        if before is not None and not torch.equal(now, before):
            at = (now != before).nonzero()[0].tolist()
            what = "draft_tokens of call" if name == "draft_tokens" else name
            modified = f"{what}{at} changed from {before[tuple(at)].item()!r} to {now[tuple(at)].item()!r}"
            break
    if modified is not None:  # put the rows back for the checks that follow
        case.target.copy_(pristine[0])
        if case.draft is not None:
            case.draft.copy_(pristine[1])
    return torch.bincount(cells, minlength=(k + 1) * vocab).reshape(k + 1, vocab), modified


def furthest_cell(counts: torch.Tensor, law: torch.Tensor) -> str:
    """The cell whose count is furthest from the law, in words."""
    rounds = int(counts.sum())
    expected = law / law.sum() * rounds
    impossible = (law == 0) & (counts > 0)
    if bool(impossible.any()):
        n, x = impossible.nonzero()[0].tolist()
        return (f"the law forbids (N = {n}, x = {x}) (probability exactly 0), observed {int(counts[n, x])} times "
                f"in {rounds} rounds")
    z = (counts.double() - expected) / expected.clamp(min=1e-12).sqrt()
    z[expected == 0] = 0
    n, x = divmod(int(z.abs().argmax()), law.shape[1])
    lines = [f"cell (N = {n}, x = {x}): observed {int(counts[n, x])}, the law expects {float(expected[n, x]):.1f} "
             f"(P = {float(law[n, x] / law.sum()):.4g}, z = {float(z[n, x]):+.1f})"]
    observed_n = counts.sum(1).double() / rounds
    lines.append("P(N = n), n = 0..K: observed " + str([round(float(v), 4) for v in observed_n])
                 + ", law " + str([round(float(v), 4) for v in law.sum(1) / law.sum()]))
    return "\n".join(lines)


def _law_holds(verify, case, rounds, seed, p_min) -> Tuple[bool, Optional[SmallestCase]]:
    try:
        counts, _ = count(verify, case, rounds, seed)
    except VerifierFault as e:
        return False, SmallestCase(case.k, case.vocab, case.target, case.draft, e.tokens, str(e))
    if _law.g_test(counts, case.law)[2] < p_min:
        return False, SmallestCase(case.k, case.vocab, case.target, case.draft, None, furthest_cell(counts, case.law))
    return True, None


def shrink(verify: Verify, case: Case, rounds: int, seed: int, p_min: float) -> Optional[SmallestCase]:
    """The failing case with the fewest draft positions among case's prefixes (K' = 0..K-1),
    tested with the same rounds; None if no shorter prefix fails."""
    for k in range(case.k):
        holds, smallest = _law_holds(verify, case.prefix(k), rounds, seed, p_min)
        if not holds:
            return smallest
    return None


def law_check(verify: Verify, case: Case, rounds: int, seed: int, p_min: float,
              shrink_failures: bool = True) -> Tuple[CheckResult, Optional[str]]:
    """The law check of one case, and what the calls changed in their inputs (None: nothing;
    see `count`)."""
    name = f"law/{case.name}"
    bias = _law.detectable_bias(case.law, rounds, p_min)
    try:
        counts, modified = count(verify, case, rounds, seed)
    except VerifierFault as e:
        smallest = SmallestCase(case.k, case.vocab, case.target, case.draft, e.tokens, "the call's outcome is above")
        for k in range(case.k) if shrink_failures else ():
            holds, found = _law_holds(verify, case.prefix(k), min(rounds, 2000), seed, p_min)
            if not holds:
                smallest = found
                break
        return CheckResult(name, False, case.what, message=f"check '{name}': {e}", smallest=smallest), None
    g, df, p_value = _law.g_test(counts, case.law)
    result = CheckResult(name, p_value >= p_min, case.what, rounds, g, df, p_value, counts,
                         case.law / case.law.sum() * rounds, bias)
    if not result.passed:
        result.message = (f"check '{name}': the counts of (N, x) do not follow the law (G-test p = {p_value:.3g} "
                          f"< {p_min:g})\n" + furthest_cell(counts, case.law))
        if shrink_failures:
            result.smallest = shrink(verify, case, rounds, seed, p_min) or SmallestCase(
                case.k, case.vocab, case.target, case.draft, None, furthest_cell(counts, case.law))
    return result, modified


def greedy_check(verify: Verify, rounds_list, name: str = "greedy") -> CheckResult:
    """One-hot target rows (temperature 0): every outcome is certain (the argmax stream)."""
    g = torch.Generator().manual_seed(0)
    bad = []
    for target, draft, tokens, want in rounds_list:
        k, vocab = target.shape[0] - 1, target.shape[1]
        try:
            got = outcome(verify(target, draft, tokens, g), k, vocab)
        except Exception as e:
            got = f"{type(e).__name__}: {e}"
        if got != want:
            bad.append((k * vocab, target, draft, tokens, want, got))
    what = "one-hot target rows: accept while the draft is the argmax, then emit the argmax"
    if not bad:
        return CheckResult(name, True, what, len(rounds_list))
    _, target, draft, tokens, want, got = min(bad, key=lambda b: b[0])
    smallest = SmallestCase(target.shape[0] - 1, target.shape[1], target, draft, tokens.tolist(),
                            f"the law allows only (n_accepted, next_token) = {want}; the verifier gave {got}")
    return CheckResult(name, False, what, len(rounds_list),
                       message=f"check '{name}': {len(bad)} of {len(rounds_list)} certain rounds differ", smallest=smallest)


def false_alarm_bound(n_tests: int, p_min: float) -> float:
    """Bonferroni: P(any of n_tests G-tests below p_min | every null true) <= n_tests * p_min."""
    return n_tests * p_min if n_tests else 0.0

