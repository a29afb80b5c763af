"""The oracle replay of the multi-request benchmark (benchmarks/e2e_multi.py): what a drafter
could buy at best on an engine, from recorded outputs and the engine's measured cost curve.

1. `measure_llama` / `measure_hf`: the engine's cost curve, seconds of one target call that
   scores n positions with logits at every one (a verification round proposing n - 1
   tokens), n = 1, 2, 3, 5, 9, 17, after a real context, on this machine, methods
   interleaved within each repeat, the median kept.
2. `replay`: a drafter is asked, at every position of the recorded (plain, greedy) outputs
   of a workload's requests in order, for its proposal after the prompt and the recorded
   tokens so far; it learns each request's output once that request is done, as it would in
   a live process. An oracle then chooses each round's proposal length by dynamic
   programming: the least total cost to emit the recorded sequence, where a round at
   position i proposing k tokens accepts the prefix of the proposal that matches the
   recorded continuation, emits it plus one target token, and costs c(k + 1) plus the
   drafter's measured time (k = 0: a plain step, c(1), no drafter). The ratio of plain
   decoding's cost (one c(1) per token) to that least cost is the drafter's ceiling on that
   engine: no schedule choosing lengths from the past can do better with that drafter.

Drafters for the replay are objects with `propose(prefix, k) -> list of ids` and
`learn(prompt, output)` (called after each request): `CurrentLookup` (prompt lookup over
the current request), `HistoryLookup` (the same plus an index of earlier outputs) and
`StepDrafter` (any `draft_step`, e.g. the package's suffix drafter, told each finished
request through a callable).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

POSITIONS = (1, 2, 3, 5, 9, 17)


def _curve(call: Callable[[int], None], repeats: int) -> Dict[int, float]:
    # Median seconds of call(n) per n, the n interleaved within each repeat (one untimed pass
    # first: the first evaluation after loading touches the weights).
    times: Dict[int, List[float]] = {n: [] for n in POSITIONS}
    for rep in range(repeats + 1):
        for n in POSITIONS:
            t0 = time.perf_counter()
            call(n)
            if rep:
                times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(ts) for n, ts in times.items()}


def measure_llama(sv, llm, context: List[int], repeats: int = 5) -> Dict[int, float]:
    """Seconds of one llama.cpp call scoring n positions with logits at all n, after
    `context` (the verification call of `sv.llama_cpp`: its `CachedLlama`).

    Args:
        sv: the loaded kernel module.
        llm (`llama_cpp.Llama`): the target, made as plain decoding makes it.
        context (`List[int]`): the tokens before the scored ones (a real prompt).
        repeats (`int`): timed repeats after one untimed pass.

    Returns:
        `Dict[int, float]`: n -> median seconds, n in `POSITIONS`.
    """
    cached = sv.llama_cpp.CachedLlama(llm, "target")
    cached.reset()
    cached.logits(context, len(context) - 1)
    filler = context[-17:]  # real tokens, so the attention pattern is a typical one
    return _curve(lambda n: cached.logits(context + filler[:n - 1], len(context) - 1), repeats)


def measure_hf(sv, model, context: List[int], repeats: int = 5) -> Dict[int, float]:
    """As `measure_llama` for a Hugging Face causal LM (`sv.transformers.CachedCausalLM`)."""
    import torch

    cached = sv.transformers.CachedCausalLM(model)
    with torch.no_grad():
        cached.logits(context, len(context) - 1)
        filler = context[-17:]
        return _curve(lambda n: cached.logits(context + filler[:n - 1], len(context) - 1), repeats)


def relative(curve: Dict[int, float]) -> Dict[int, float]:
    """c(n) / c(1)."""
    return {n: t / curve[1] for n, t in curve.items()}


def cost_at(curve: Dict[int, float], n: int) -> float:
    """c(n), linear between the measured n (and beyond the last, along its last segment)."""
    if n in curve:
        return curve[n]
    ns = sorted(curve)
    lo = max((m for m in ns if m < n), default=ns[0])
    hi = min((m for m in ns if m > n), default=ns[-1])
    if hi == lo:
        lo, hi = ns[-2], ns[-1]
    return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)


def position_cost(curve: Dict[int, float], k: int = 16) -> float:
    """What one more scored position costs in one-position steps, (c(k + 1) - c(1)) / (k c(1)):
    `AdaptiveSchedule.position_cost(k)` once the schedule has measured this curve, which the
    replays hand to a suffix drafter so that its default length cap is the live decoder's."""
    return (cost_at(curve, k + 1) - curve[1]) / (k * curve[1])


class CurrentLookup:
    """Prompt lookup over the current request (`sv.PromptLookup`, the default's drafter)."""

    name = "lookup, current request"

    def __init__(self, sv):
        self.lookup = sv.PromptLookup()

    def propose(self, prefix: List[int], k: int) -> List[int]:
        return self.lookup(prefix, k)[0]

    def learn(self, prompt: List[int], output: List[int]) -> None:
        self.lookup.reset()


class HistoryLookup(CurrentLookup):
    """Prompt lookup over the earlier requests' outputs followed by the current request: the
    most recent occurrence wins, so a match in the current request is preferred and an
    earlier output is the fallback (a simple index of what the process generated)."""

    name = "lookup + earlier outputs"

    def __init__(self, sv):
        super().__init__(sv)
        self.history: List[int] = []

    def propose(self, prefix: List[int], k: int) -> List[int]:
        return self.lookup(self.history + prefix, k)[0]

    def learn(self, prompt: List[int], output: List[int]) -> None:
        self.history = self.history + list(output)
        self.lookup.reset()


class StepDrafter:
    """Any `draft_step(prefix, k) -> (tokens, probs)`; `finish(prompt, output)` tells it a
    request is done (e.g. adds the output to a suffix drafter's process-wide cache)."""

    def __init__(self, name: str, draft_step: Callable, finish: Optional[Callable] = None):
        self.name, self.draft_step, self.finish = name, draft_step, finish

    def propose(self, prefix: List[int], k: int) -> List[int]:
        tokens = self.draft_step(list(prefix), k)[0]
        return [int(t) for t in (tokens.tolist() if hasattr(tokens, "tolist") else tokens)]

    def learn(self, prompt: List[int], output: List[int]) -> None:
        if self.finish is not None:
            self.finish(list(prompt), list(output))


def _matched(proposal: Sequence[int], recorded: Sequence[int]) -> int:
    m = 0
    for a, b in zip(proposal, recorded):
        if a != b:
            break
        m += 1
    return m


def oracle_cost(matches: List[int], lengths: List[int], curve: Dict[int, float], draft_seconds: float) -> float:
    """The least cost of emitting a recorded sequence of len(matches) tokens.

    Args:
        matches: at each position i, how many tokens of the drafter's proposal there match the
            recorded continuation.
        lengths: at each position, how many tokens the drafter proposed (the most k there).
        curve: c(n), seconds by positions scored (`cost_at` between measured n).
        draft_seconds: the drafter's time per round.

    Returns:
        `float`: seconds, over the best choice of k at every round (dynamic programming from
        the end: best[i] = min over k of c(k + 1) + [k > 0] draft + best[i + min(k, m_i) + 1]).
    """
    total = len(matches)
    best = [0.0] * (total + 1)
    cost = {n: cost_at(curve, n) for n in range(1, max(lengths, default=0) + 2)}
    for i in range(total - 1, -1, -1):
        b = cost[1] + best[i + 1]
        for k in range(1, lengths[i] + 1):
            b = min(b, cost[k + 1] + draft_seconds + best[min(total, i + min(k, matches[i]) + 1)])
        best[i] = b
    return best[0]


def replay(drafter, prompts: List[List[int]], outputs: List[List[int]], curve: Dict[int, float],
           k_max: int = 16) -> Dict:
    """The oracle's ceiling for one drafter over a workload's recorded outputs.

    Args:
        drafter: `CurrentLookup`, `HistoryLookup`, `StepDrafter` or alike.
        prompts, outputs: the workload's prompts and recorded plain outputs, request order.
        curve: the engine's cost curve, seconds by positions scored.
        k_max: the most tokens a round proposes (c(k_max + 1) must be measured or near).

    Returns:
        `Dict`: `per_request` (ceiling speed-up of each request's decoding), `decode` (over
        the workload's decoding: plain cost / oracle cost), `plain_seconds` and
        `oracle_seconds` (the workload's decoding), `draft_seconds` (the drafter's mean time
        per call) and `calls`.
    """
    per_request, match_lists, length_lists = [], [], []
    draft_time, calls = 0.0, 0
    for prompt, output in zip(prompts, outputs):
        matches, lengths = [], []
        for i in range(len(output)):
            t0 = time.perf_counter()
            proposal = drafter.propose(prompt + output[:i], k_max)
            draft_time += time.perf_counter() - t0
            calls += 1
            lengths.append(len(proposal))
            matches.append(_matched(proposal, output[i:]))
        drafter.learn(prompt, output)
        match_lists.append(matches)
        length_lists.append(lengths)
    draft_seconds = draft_time / max(calls, 1)
    plain = oracle = 0.0
    for matches, lengths in zip(match_lists, length_lists):
        p = len(matches) * curve[1]
        o = oracle_cost(matches, lengths, curve, draft_seconds)
        per_request.append(p / o if o else 1.0)
        plain, oracle = plain + p, oracle + o
    return dict(per_request=per_request, decode=plain / oracle if oracle else 1.0, plain_seconds=plain,
                oracle_seconds=oracle, draft_seconds=draft_seconds, calls=calls)


def whole_run_ceiling(result: Dict, prefill_seconds: float) -> float:
    """The ceiling over whole runs: prefill (plain's, the same for every method) plus decoding."""
    return (prefill_seconds + result["plain_seconds"]) / (prefill_seconds + result["oracle_seconds"])
