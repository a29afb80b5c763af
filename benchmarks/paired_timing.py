"""Paired timing: columns timed block by block in rotating order, and their paired ratios.

A `Column` is one timed thing (a callable and the argument tuples it cycles through). For
every block, `run_blocks` times one chunk of every column, in rotating order and alternating
direction, with the garbage collector off. Absolute times on a shared machine are noise; the
ratios are taken block by block (every block times every column once) so that load and
frequency drift hit numerator and denominator alike, and the median and interquartile range
of those paired ratios are reported (`paired_ratio`, `fmt_iqr`). Each call is timed alone,
capped at CLIP times its median (`settle`), and the clock's own cost is subtracted.
`verdict` judges a paired ratio against a bar.

Used by compare.py (the cases in compare_cases.py) and batch.py.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

CLIP = 2.0  # a call counts at most this many times its median (see settle)


@dataclass
class Column:
    """One timed thing. A chunk calls fn(*args) once per entry of `calls`, after prepare().

    prepare() runs untimed: it forces the path and reseeds generators, so that a chunk of
    the mixed-outcome case replays exactly the rounds the floor was built for.
    """
    name: str
    fn: Callable
    rounds: list                       # argument tuples, cycled through
    prepare: Optional[Callable] = None
    fixed: bool = False                # chunk = exactly one pass over `rounds`
    calls: list = field(default_factory=list)
    raw: list = field(default_factory=list)       # per block: ns of every call in the chunk
    per_call_ns: list = field(default_factory=list)  # per block: the chunk's robust mean

    def chunk(self) -> list:
        if self.prepare is not None:
            self.prepare()
        fn, clock = self.fn, time.perf_counter_ns
        out = [0] * len(self.calls)
        for i, a in enumerate(self.calls):
            t0 = clock()
            fn(*a)
            out[i] = clock() - t0
        return out


def clock_overhead_ns() -> float:
    """What one timed interval adds to the call it brackets (the clock call itself)."""
    clock = time.perf_counter_ns
    gaps = []
    for _ in range(2000):
        t0 = clock()
        gaps.append(clock() - t0)
    return float(statistics.median(gaps))


def calibrate(col: Column, chunk_ns: float) -> None:
    if col.fixed:
        col.calls = list(col.rounds)
        return
    col.calls = [col.rounds[0]]
    for _ in range(2):
        col.chunk()
    one = min(col.chunk()[0] for _ in range(3))
    n = max(1, min(20000, round(chunk_ns / max(one, 1.0))))
    col.calls = [col.rounds[i % len(col.rounds)] for i in range(n)]


def settle(col: Column, overhead: float) -> None:
    """Per block, the chunk's mean time per call, with every call capped at CLIP times the
    median of the same call over the whole run. On a shared 2-core machine a call that the
    scheduler interrupts takes milliseconds; capped, it cannot move a chunk's mean far,
    while the mean still weighs the fast and slow rounds of the mixed case as they occur."""
    groups: dict = {}
    for times in col.raw:
        for j, t in enumerate(times):
            groups.setdefault(j % len(col.rounds), []).append(t)
    cap = {j: CLIP * statistics.median(ts) for j, ts in groups.items()}
    col.per_call_ns = [
        max(statistics.fmean(min(t, cap[j % len(col.rounds)]) for j, t in enumerate(times)) - overhead, 1.0)
        for times in col.raw
    ]


def run_blocks(cols: list, blocks: int, chunk_ns: float, overhead: float) -> None:
    for c in cols:
        calibrate(c, chunk_ns)
        c.chunk()  # warm caches and lazy initialisation outside the record
    gc.collect()
    gc.disable()
    try:
        for b in range(blocks):
            # Rotate and alternate direction so no column always follows the same one.
            order = cols[b % len(cols):] + cols[:b % len(cols)]
            if b % 2:
                order.reverse()
            for c in order:
                c.raw.append(c.chunk())
    finally:
        gc.enable()
    for c in cols:
        settle(c, overhead)


def quartiles(xs: list) -> tuple:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def summary_us(col: Column) -> dict:
    q1, med, q3 = quartiles([t / 1e3 for t in col.per_call_ns])
    return {"median_us": med, "q1_us": q1, "q3_us": q3, "calls_per_chunk": len(col.calls)}


def paired_ratio(num: Column, den: Column) -> dict:
    q1, med, q3 = quartiles([a / b for a, b in zip(num.per_call_ns, den.per_call_ns)])
    return {"median": med, "q1": q1, "q3": q3}


def fmt_iqr(r: dict, digits: int = 2) -> str:
    return f"{r['median']:.{digits}f} [{r['q1']:.{digits}f}-{r['q3']:.{digits}f}]"


def verdict(ratio: dict, bar: float, at_most: bool) -> str:
    ok = ratio["median"] <= bar if at_most else ratio["median"] >= bar
    inside = ratio["q1"] <= bar <= ratio["q3"]
    return ("PASS" if ok else "FAIL") + (" (bar inside IQR)" if inside else "")
