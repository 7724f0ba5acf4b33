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
