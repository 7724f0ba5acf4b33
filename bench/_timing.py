"""Timing helpers shared by the benchmark scripts (run as ``python bench/<script>.py``)."""

import time
from typing import Callable


def best(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` runs after one warm-up, in seconds."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_alternating(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Best wall time of each of ``fns`` over ``repeat`` rounds that run each once, in turn,
    after one warm-up round: a host whose speed drifts during the run moves every one of
    them alike, so their ratios measure the ways, not the drift."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [min(spent) for spent in times]
