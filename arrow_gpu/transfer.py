"""Moving Arrow data between host and device: ``to_device`` and ``to_host``.

Between host and device, all buffers of all arrays (children and dictionaries included) move
in one coalesced, pipelined transfer into one allocation, planned and assembled in the
native core: the result is built in C++ and wrapped once, so a wide table costs no
per-column work in Python. Device-to-device copies go through pyarrow's ``copy_to``.
Results are plain pyarrow objects.

>>> import pyarrow as pa
>>> from arrow_gpu.transfer import to_device, to_host
>>> table = pa.table({"x": [1, None, 3], "s": ["a", "b", None]})
>>> on_gpu = to_device(table)
>>> to_host(on_gpu).equals(table)
True
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from arrow_gpu._cuda import Context, Event, Stream, _on_device, _to_device, _to_host, stream_handle
from arrow_gpu.c_device_interface import import_array, import_stream

__all__ = ["to_device", "to_host"]


def _as_pyarrow(obj: Any, stream: Any) -> Any:
    """A pyarrow object for ``obj``, imported through the capsule protocols if needed."""
    if isinstance(obj, (pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table)):
        return obj
    if hasattr(obj, "__arrow_c_device_array__"):
        try:
            return import_array(obj, stream=stream)
        except TypeError:
            if not hasattr(obj, "__arrow_c_device_stream__"):
                raise  # otherwise it is data that only streams (e.g. a table)
    if hasattr(obj, "__arrow_c_device_stream__"):
        return import_stream(obj, stream=stream)
    if hasattr(obj, "__arrow_c_array__"):
        return pa.Array._import_from_c_capsule(*obj.__arrow_c_array__())
    if hasattr(obj, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(obj).read_all()
    raise TypeError(f"cannot move a '{type(obj).__name__}': expected a pyarrow Array, "
                    "ChunkedArray, RecordBatch or Table, or an object with __arrow_c_array__, "
                    "__arrow_c_stream__ or __arrow_c_device_array__")


def _copy(data: Any, manager: pa.MemoryManager) -> Any:
    if isinstance(data, pa.ChunkedArray):
        return pa.chunked_array([chunk.copy_to(manager) for chunk in data.chunks], type=data.type)
    if isinstance(data, pa.Table):
        columns = [_copy(column, manager) for column in data.columns]
        return pa.Table.from_arrays(columns, schema=data.schema)
    if isinstance(data, pa.Array) and data.is_cpu:
        data.null_count  # noqa: B018 - counted on the host, so no one counts on the device later
    return data.copy_to(manager)


def to_device(obj: Any, device: int = 0, stream: Any = None) -> Any:
    """A copy of ``obj`` whose buffers live on CUDA device ``device``.

    ``stream`` (an int handle or an object with ``__cuda_stream__``) is where the caller
    will use the result (and, for device sources, where the source was produced): it
    waits for the copies without blocking the host.

    >>> import pyarrow as pa
    >>> to_device(pa.array([1, 2])).is_cpu
    False
    """
    stream_handle(stream)  # a bad stream fails before any copy
    context = Context(device)
    data = _as_pyarrow(obj, stream)
    if not _on_device(data):
        return _to_device(context, data)  # synchronous: done when it returns
    if stream is not None:
        Stream.wrap(stream, context).synchronize()  # the source is complete before we copy
    result = _copy(data, context.memory_manager)
    # Device-to-device copies may still run after copy_to returns: order them first.
    done = Event(context)
    done.record(0)
    if stream is None:
        done.synchronize()
    else:
        Stream.wrap(stream, context).wait_event(done)
    return result


def to_host(obj: Any, stream: Any = None) -> Any:
    """A copy of ``obj`` in host memory; ``stream`` is the stream that produced the data.

    >>> import pyarrow as pa
    >>> to_host(to_device(pa.array(["x", None]))).to_pylist()
    ['x', None]
    """
    stream_handle(stream)
    data = _as_pyarrow(obj, stream)
    if not _on_device(data):
        return _copy(data, pa.default_cpu_memory_manager())
    if stream is not None:
        Stream.wrap(stream).synchronize()
    return _to_host(data)
