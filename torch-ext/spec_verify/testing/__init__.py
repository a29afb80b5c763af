"""spec_verify.testing: a conformance suite that checks any speculative verifier against the exact law.

A verifier is a plain callable with the interface of `spec_verify.accept`:

    verify(target_probs, draft_probs, draft_tokens, generator) -> (n_accepted, next_token)

target_probs `[K+1, V]` and draft_probs `[K, V]` rows (float32; float16 and bfloat16 in the
half-precision cases; not necessarily normalised; draft_probs None for one-hot drafts),
draft_tokens an int64 tensor `[K]`, generator a `torch.Generator` to draw from. Example:

    import torch
    from spec_verify.testing import check_verifier

    report = check_verifier(my_verify)          # or sv.testing.check_verifier with get_kernel
    print(report)                               # per check: PASS/FAIL, counts, p-value
    assert report.passed, report

Other interfaces through adapters (adapters.py): `with_uniforms` (a verifier taking its K+1
uniforms), `seeding_global_rng` (one drawing from torch's global generator), `from_batch`
(one taking [B, ...] batches); logits with warping parameters through
`check_logits_verifier`:

    report = check_logits_verifier(lambda p, q, t, g, **warp: my_verify(p, q, t, generator=g, **warp),
                                   warps=("temperature", "top_k"))

What is checked (`report.checks`, by name):
- `law/<case>`: the joint law of (accepted length N, emitted token x) over every cell, by a
  G-test of `rounds` rounds against exact expected counts computed in float64 from the rows
  (law.py); a case per situation where verifiers go wrong (cases.py): unnormalised rows,
  a drafted token of draft probability 0, masked tokens, ties at the top, K = 0, a draft
  identical to / disjoint from the target, V = 263, float16 and bfloat16 rows, one-hot drafts.
- `inputs`: the rows and tokens given are unchanged after the calls, in every law case.
- `greedy`: one-hot target rows, where every outcome is certain (the argmax stream).
Every call's result must be a pair of ints with 0 <= n_accepted <= K and 0 <= next_token < V;
a verifier that raises or returns anything else fails the check it was in, with a message
naming the check.

Statistics: each law check fails at p < p_min (1e-8); with n law checks a correct verifier
fails a run with probability at most n * p_min (`report.false_alarm_rate`, about 2e-7 by
default). Each law check states the smallest bias of position 0's acceptance probability it
detects with 99% power at its sample size (`detectable_bias`); a bias below that may pass.

Nothing here calls an op of spec-verify: the laws are computed from the rows in float64 with
torch, so the folder can be vendored into another project's tests (its imports are relative
and within itself).
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, List, Optional, Sequence

from . import adapters, law
from .adapters import from_batch, reference_accept, reference_accept_with_uniforms, seeding_global_rng, with_uniforms
from .cases import greedy_rows, probability_cases
from .logits import WARPS, greedy_logits_rounds, logits_cases
from .report import CheckResult, Report, SmallestCase
from .run import false_alarm_bound, greedy_check, law_check

ROUNDS = 20_000
P_MIN = 1e-8

__all__ = ["check_verifier", "check_logits_verifier", "Report", "CheckResult", "SmallestCase", "with_uniforms",
           "seeding_global_rng", "from_batch", "reference_accept", "reference_accept_with_uniforms", "law",
           "adapters", "ROUNDS", "P_MIN"]


def _check_options(verify, rounds, seed, p_min, method, checks):
    if not callable(verify):
        raise TypeError(f"verify must be callable, got {type(verify).__name__}")
    if isinstance(rounds, bool) or not isinstance(rounds, int):
        raise TypeError(f"rounds must be an int, got {type(rounds).__name__}")
    if rounds < 100:
        raise ValueError(f"rounds must be at least 100, got {rounds}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not isinstance(p_min, float) or not 0.0 < p_min < 1.0:
        raise ValueError(f"p_min must be a float in (0, 1), got {p_min!r}")
    if method not in ("token", "block"):
        raise ValueError(f"method must be 'token' or 'block', got {method!r}")
    if checks is not None and (isinstance(checks, str) or not all(isinstance(c, str) for c in checks)):
        raise TypeError("checks must be an iterable of check names (str), e.g. ['smooth', 'greedy']")


def _run(verifier_name, cases, greedy, rounds, seed, p_min, checks, shrink, notes, bind) -> Report:
    start = time.monotonic()
    wanted = None if checks is None else set(checks)
    known = {c.name for c in cases} | {"greedy"}
    if wanted is not None and not wanted <= known:
        raise ValueError(f"checks names unknown checks {sorted(wanted - known)}; known: {sorted(known)}")
    results: List[CheckResult] = []
    modified = []
    for case in cases:
        if wanted is None or case.name in wanted:
            result, changed = law_check(bind(case), case, rounds, seed, p_min, shrink)
            results.append(result)
            if changed:
                modified.append(f"{case.name}: {changed}")
    n_tests = len(results)
    if n_tests:
        results.append(CheckResult("inputs", not modified, "target rows, draft rows and tokens unchanged by every call",
                                   sum(r.rounds for r in results),
                                   message="check 'inputs': the verifier wrote to its inputs\n" + "\n".join(modified)))
    if greedy is not None and (wanted is None or "greedy" in wanted):
        results.append(greedy())
    return Report(verifier_name, results, p_min, false_alarm_bound(n_tests, p_min), time.monotonic() - start,
                  list(notes))


def check_verifier(verify: Callable, *, rounds: int = ROUNDS, seed: int = 0, p_min: float = P_MIN,
                   draft_rows: bool = True, one_hot: bool = True, half: bool = True, greedy: bool = True,
                   method: str = "token", checks: Optional[Iterable[str]] = None, shrink: bool = True,
                   name: Optional[str] = None, notes: Sequence[str] = ()) -> Report:
    """Check a verifier of probability rows against the exact law of speculative sampling.

    Args:
        verify (`Callable`): `verify(target_probs, draft_probs, draft_tokens, generator) ->
            (n_accepted, next_token)`, as `spec_verify.accept`.
        rounds (`int`): calls per law case (default 20000).
        seed (`int`): the run's seed; a case's draws depend only on it and the case's name.
        p_min (`float`): a law check fails at a G-test p-value below this (default 1e-8).
        draft_rows (`bool`): run the cases with draft rows.
        one_hot (`bool`): run the cases with `draft_probs=None` (one-hot drafts).
        half (`bool`): run the float16 and bfloat16 cases.
        greedy (`bool`): run the greedy check (one-hot target rows, certain outcomes).
        method (`str`): "token" (token-wise verification) or "block" (block verification, Sun et
            al. 2025: another joint law; the V = 263 case is left out, its law costs V^K terms).
        checks (iterable of `str`, optional): run only these (case names, or "greedy").
        shrink (`bool`): look for the smallest failing case (fewest draft positions).
        name (`str`, optional): the verifier's name in the report.
        notes (sequence of `str`): lines added to the report (e.g. "relaxes the law on purpose").

    Returns:
        `Report`: `passed` is true only if every check passed; `print(report)` reads it out.

    Raises:
        TypeError: `verify` not callable, or an option of the wrong type.
        ValueError: an option out of range, or an unknown check name.
    """
    _check_options(verify, rounds, seed, p_min, method, checks)
    cases = probability_cases(draft_rows=draft_rows, one_hot=one_hot, half=half, method=method)
    notes = list(notes)
    if method == "block":
        cases = [c for c in cases if c.name != "odd_vocab"]
    skipped = [what for what, on in (("draft rows", draft_rows), ("one-hot drafts", one_hot),
                                      ("float16/bfloat16 rows", half), ("greedy", greedy)) if not on]
    if skipped:
        notes.append("not checked: " + ", ".join(skipped))
    rows = [r for r in greedy_rows() if (r[1] is None and one_hot) or (r[1] is not None and draft_rows)]
    return _run(name or getattr(verify, "__name__", "verify"), cases,
                (lambda: greedy_check(verify, rows)) if greedy and rows else None,
                rounds, seed, p_min, checks, shrink, notes, bind=lambda case: verify)


def check_logits_verifier(verify: Callable, *, warps: Sequence[str] = WARPS, rounds: int = ROUNDS, seed: int = 0,
                          p_min: float = P_MIN, greedy: bool = True, method: str = "token",
                          checks: Optional[Iterable[str]] = None, shrink: bool = True, name: Optional[str] = None,
                          notes: Sequence[str] = ()) -> Report:
    """Check a verifier of logits rows with warping parameters against the law of the warped rows.

    Args:
        verify (`Callable`): `verify(target_logits [K+1, V], draft_logits [K, V], draft_tokens [K],
            generator, **params) -> (n_accepted, next_token)`; params are keywords among
            `temperature`, `top_k`, `top_p`, `min_p` (only those a case uses are passed; an
            unwarped case passes none). The draft tokens come from the draft's warped rows.
        warps (sequence of `str`): the parameters the verifier supports; cases using others are
            left out. Default: all four.
        greedy (`bool`): with "temperature" in warps, check temperature 0 on rows with ties at
            the top: the argmax stream, ties to the lowest index.
        rounds, seed, p_min, method, checks, shrink, name, notes: as in `check_verifier`.

    Returns:
        `Report`.

    Raises:
        TypeError: `verify` not callable, or an option of the wrong type.
        ValueError: an option out of range, an unknown parameter in `warps` or check name.
    """
    _check_options(verify, rounds, seed, p_min, method, checks)
    if isinstance(warps, str) or not set(warps) <= set(WARPS):
        raise ValueError(f"warps must be a subset of {WARPS}, got {warps!r}")
    cases = logits_cases(warps, method)
    notes = list(notes)
    left_out = [w for w in WARPS if w not in warps]
    if left_out:
        notes.append("not checked: " + ", ".join(left_out))

    def bind(case):
        return lambda p, q, t, g: verify(p, q, t, g, **case.params)

    def greedy_run():
        rows = [(p, q, t, want) for p, q, t, want in greedy_logits_rounds()]
        return greedy_check(lambda p, q, t, g: verify(p, q, t, g, temperature=0.0), rows)

    use_greedy = greedy and "temperature" in warps
    result = _run(name or getattr(verify, "__name__", "verify"), cases, greedy_run if use_greedy else None,
                  rounds, seed, p_min, checks, shrink, notes, bind)
    return result
