"""Driver handles (contexts, device pointers, streams) from the objects other libraries hold
them in: plain ints, ctypes pointers, cuda-bindings objects, stream objects.

Plain Python that imports nothing of arrow_gpu, so the compiled ``_cuda`` module can use it.
"""

from __future__ import annotations

import struct
from typing import Any

# The largest value a pointer, and so a CUstream, can hold.
_POINTER_MAX = (1 << (8 * struct.calcsize("P"))) - 1


def handle_value(handle: Any) -> int:
    """The integer value of a driver handle from ctypes, cuda-bindings or a plain int.

    None, like a null ctypes pointer, is 0.

    Examples
    --------
    >>> import ctypes
    >>> handle_value(ctypes.c_void_p(4096)), handle_value(ctypes.c_void_p()), handle_value(None)
    (4096, 0, 0)
    """
    if handle is None:
        return 0
    value = getattr(handle, "value", handle)  # ctypes.c_void_p
    return int(value or 0)


def stream_handle(stream: Any) -> int:
    """The raw ``CUstream`` of a stream given in any of the common spellings.

    Parameters
    ----------
    stream : int, Stream or stream object
        An int (0 is the legacy default stream), an arrow_gpu ``Stream``, an object with
        the ``__cuda_stream__`` protocol (cuda.core), a CuPy stream (``.ptr``), a PyTorch
        stream (``.cuda_stream``), or an object with a ``.handle``. None means 0.

    Returns
    -------
    int
        The ``CUstream`` handle, as an integer.

    Raises
    ------
    TypeError
        If ``stream`` is none of the spellings above.
    ValueError
        If the handle is negative or does not fit a pointer.

    Examples
    --------
    >>> stream_handle(0)
    0
    >>> from arrow_gpu import Context, Stream
    >>> stream = Stream(Context(0))
    >>> stream_handle(stream) == stream.handle
    True
    """
    if stream is None:
        return 0
    handle = stream if isinstance(stream, int) else _foreign_stream_handle(stream)
    # Every spelling ends up as a CUstream pointer: refuse what no pointer can be.
    if not 0 <= handle <= _POINTER_MAX:
        raise ValueError(f"a stream handle is a non-negative integer that fits a pointer, got "
                         f"{handle}")
    return handle


def _foreign_stream_handle(stream: Any) -> int:
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        version, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for attribute in ("cuda_stream", "ptr", "handle"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return handle_value(handle)
    raise TypeError(f"cannot use a '{type(stream).__name__}' object as a CUDA stream; pass an "
                    "int handle or an object with __cuda_stream__")
