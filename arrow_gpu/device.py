"""CUDA devices at the Python surface: contexts, streams, events, and which device is which.

``Context``, ``Stream`` and ``Event`` are defined in the compiled core and live here; the
other modules of the package take them from here.

>>> from arrow_gpu.device import Context, Stream
>>> stream = Stream(Context(0))
>>> stream.wait(Stream.wrap(0).record())
>>> stream.synchronize()
"""

from typing import Any, Optional

import pyarrow as pa

from arrow_gpu._cuda import Context, CudaBuffer, Event, Stream, using_simulator
from arrow_gpu._handles import stream_handle

__all__ = ["Context", "Event", "Stream", "context_of", "device_count", "is_available",
           "stream_handle", "using_simulator"]


def device_count() -> int:
    """The number of CUDA devices visible to this process (simulated ones under the simulator).

    Returns
    -------
    int
        How many devices there are.

    Raises
    ------
    OSError
        If there is no driver and the simulator is off; see ``is_available``.

    Examples
    --------
    >>> device_count() >= 1
    True
    """
    count: int = Context.get_num_devices()
    return count


def is_available() -> bool:
    """Whether a CUDA device can be used: a driver with a device, or the simulator.

    Unlike ``device_count`` it does not raise when there is no driver.

    Returns
    -------
    bool
        True when at least one device can be used.

    Raises
    ------
    pyarrow.ArrowInvalid
        If an ``ARROW_GPU_*`` environment variable is malformed: that is a mistake to fix,
        not an absent GPU.

    Examples
    --------
    >>> is_available()
    True
    """
    try:
        return device_count() > 0
    except OSError:
        return False


def context_of(data: Any) -> Optional[Context]:
    """The context of the first device buffer of some Arrow data.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        The data to look at.

    Returns
    -------
    Context or None
        The Context of that buffer's memory; None when all of it is in host memory.

    Raises
    ------
    pyarrow.ArrowTypeError
        If the first device buffer is device memory that is not CUDA memory.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import to_device
    >>> context_of(to_device(pa.table({"x": [1]}))).device_number
    0
    >>> context_of(pa.array([1])) is None
    True
    """
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        parts = data.columns
    elif isinstance(data, pa.ChunkedArray):
        parts = data.chunks
    else:
        parts = [data]
    for part in parts:
        if isinstance(part, pa.ChunkedArray):
            context = context_of(part)
            if context is not None:
                return context
            continue
        for buffer in part.buffers():
            if buffer is not None and not buffer.is_cpu:
                found: Context = CudaBuffer.from_buffer(buffer).context
                return found
    return None
