"""Leak checks that walk only the objects a test made.

A full ``gc.collect()`` walks every object of the process: in a worker that has imported
PyTorch, JAX and CuPy it takes a tenth of a second or more, and the checks below run around
every test that allocates and every Hypothesis example. Freezing the objects that exist
when a check starts (``gc.freeze``) leaves the collection after the test only the test's
own objects to walk; garbage made before it cannot be freed meanwhile, so the baseline holds.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


_frozen_depth = 0  # gc.freeze does not nest: the outermost check freezes and unfreezes


@contextmanager
def new_objects_only() -> Iterator[None]:
    """Within: ``gc.collect()`` collects only the objects made since entering (the
    outermost entry, where checks nest: an inner one must not free what an outer one
    counted in its baseline)."""
    global _frozen_depth
    if _frozen_depth == 0:
        gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()


@contextmanager
def gives_back(allocated: Callable[[], int], what: str) -> Iterator[None]:
    """Fails unless ``allocated()`` reads the same after the block, its garbage collected,
    as before it."""
    with new_objects_only():
        baseline = allocated()
        yield
        gc.collect()
        assert allocated() == baseline, what


def released(live: Callable[[], int]) -> bool:
    """Whether ``live()`` reads 0, collecting garbage only where it does not at first."""
    if live() == 0:
        return True
    gc.collect()
    return live() == 0
