"""Checks of arguments that the compiled core passes on as C integers.

Plain Python that imports nothing of arrow_gpu, so the compiled ``_cuda`` module can use it.
"""

from __future__ import annotations

import operator
from typing import Any


def as_int(name: str, value: Any) -> int:
    """``value`` as an int; a C-typed argument would silently truncate a float instead.

    Raises TypeError naming the argument ``name`` for a bool or anything that is not an int.

    Examples
    --------
    >>> as_int("nbytes", 8)
    8
    >>> as_int("nbytes", 8.0)
    Traceback (most recent call last):
    ...
    TypeError: nbytes must be an int, got 'float'
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got '{type(value).__name__}'") from None
