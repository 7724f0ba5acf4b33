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

import functools
import logging
import os
from collections.abc import Iterable
from typing import Any, overload

import pyarrow as pa

import arrow_gpu.streaming as streaming
from arrow_gpu._compute.layouts import downloaded, no_columns, uploaded
from arrow_gpu._compute.select import filter_rows, take_rows
from arrow_gpu._cuda import _cpu_memory_manager
from arrow_gpu._util.arrow_data import Kind, buffers, kind_of, map_arrays
from arrow_gpu.c_device_interface import import_array, import_stream
from arrow_gpu.device import DeviceLike, Stream, as_context, context_of, stream_handle
from arrow_gpu.transfer_options import get_transfer_options

# DeviceLike lives in arrow_gpu.device; it stays importable from here.
__all__ = ["DeviceLike", "to_device", "to_host"]

_log = logging.getLogger("arrow_gpu")


def _as_pyarrow(obj: Any, stream: Any) -> Any:
    """A pyarrow object for ``obj``, imported through the capsule protocols if needed."""
    if kind_of(obj) is not None:
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
    if hasattr(obj, "__cuda_array_interface__"):
        hint = ("it is a CUDA array: wrap it without a copy with arrow_gpu.from_cuda_array(obj), "
                "which gives a device pyarrow Array")
    elif isinstance(obj, (str, os.PathLike)):
        hint = ("to read a file onto the device, use arrow_gpu.loading.read_parquet(path) or "
                "arrow_gpu.loading.read_ipc(path) (Arrow IPC, Feather)")
    elif hasattr(obj, "__dlpack__"):
        hint = ("it is a DLPack tensor: wrap a CUDA one without a copy with "
                "arrow_gpu.from_dlpack(obj), or make a pyarrow Array of a host one first")
    else:
        hint = "make a pyarrow object of it first, e.g. to_device(pa.array(obj))"
    raise TypeError(f"cannot move a '{type(obj).__name__}': expected a pyarrow Array, "
                    "ChunkedArray, RecordBatch or Table, or an object with __arrow_c_array__, "
                    f"__arrow_c_stream__ or __arrow_c_device_array__; {hint}")


_COALESCED = "one coalesced transfer, pipelined through pinned staging when large"


def _log_plan(operation: str, data: Any, target: str, plan: str) -> None:
    """A DEBUG record of what a transfer is about to do, for users tuning or debugging it."""
    if _log.isEnabledFor(logging.DEBUG):
        # Buffer sizes, not nbytes, which reads device memory; newer pyarrow refuses
        # get_total_buffer_size on device data, so the buffers are summed here.
        nbytes = sum(buffer.size for buffer in buffers(data))
        _log.debug("%s: %s of %d bytes to %s: %s (options %s)", operation, type(data).__name__,
                   nbytes, target, plan, get_transfer_options())


def _copy(data: Any, manager: pa.MemoryManager) -> Any:
    kind = kind_of(data)
    if kind in (Kind.RECORD_BATCH, Kind.TABLE) and data.num_columns == 0:
        # No memory to copy: a batch's label alone says where its rows are.
        return no_columns(data.schema, data.num_rows, table=kind is Kind.TABLE,
                          on_device=not manager.is_cpu)

    def copy(array: pa.Array) -> pa.Array:
        if array.is_cpu:  # counted on the host, so no one counts on the device later
            array.null_count  # noqa: B018
        return array.copy_to(manager)

    return map_arrays(data, copy)


def _selected(data: Any, mask: Any, indices: Any, stream: Any) -> Any:
    """The rows of ``data`` that ``mask`` or ``indices`` selects, where the data is (on the
    device: on ``stream``, after its queued work)."""
    if context_of(data) is not None:  # some buffer is on a device
        return (filter_rows(data, mask, "drop", stream) if indices is None
                else take_rows(data, indices, stream))
    # Host data: pyarrow selects, reading the selection's buffers on the host, so a
    # selection on the device comes to the host first (pyarrow would crash on it).
    selection = mask if indices is None else indices
    if kind_of(selection) is not None and context_of(selection) is not None:
        selection = to_host(selection, stream)
    return data.filter(selection) if indices is None else data.take(selection)


# pyarrow publishes no types: its containers are Any to a type checker, and an overload per
# container could not be told apart. The readers are typed; Arrow data keeps its own type.
@overload
def to_device(obj: streaming.HostReader | Iterable[pa.RecordBatch], device: DeviceLike = ...,
              stream: Any = ..., *, prefetch: int | None = ..., total_bytes: int | None = ...
              ) -> streaming.DeviceReader: ...
@overload
def to_device(obj: Any, device: DeviceLike = ..., stream: Any = ..., *,
              prefetch: int | None = ..., total_bytes: int | None = ...) -> Any: ...
def to_device(obj: Any, device: DeviceLike = 0, stream: Any = None, *,
              prefetch: int | None = None, total_bytes: int | None = None) -> Any:
    """A copy of ``obj`` whose buffers live on a CUDA device.

    Parameters
    ----------
    obj : pyarrow.Array, ChunkedArray, RecordBatch or Table, Arrow-exporting object, or stream
        The data; objects with ``__arrow_c_array__`` or
        ``__arrow_c_device_array__``/``__arrow_c_device_stream__`` are imported first. A
        stream (a ``pyarrow.RecordBatchReader``, an object with ``__arrow_c_stream__``, a
        ``pyarrow.dataset`` Scanner or Dataset, an iterator of record batches) is not read
        here: it gives a ``DeviceReader`` that copies its batches as they are read.
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts (a device
        number, a Context, a pyarrow MemoryManager or Device, ...); a device number goes
        to the device's primary context.
    stream : stream-like, optional
        Where the caller will use the result (and, for device sources, where the source was
        produced), in any spelling ``stream_handle`` accepts. With a stream, the stream
        waits for the copies without blocking the host; without one, the copies are
        complete when this returns.
    prefetch : int, default 2
        For a stream: how many copied batches may wait for the consumer (at least 1).
    total_bytes : int, optional
        For a stream: its bytes when the caller knows them, for ``transfer_progress``.

    Returns
    -------
    pyarrow.Array, ChunkedArray, RecordBatch, Table or arrow_gpu.streaming.DeviceReader
        The same type as ``obj`` (a pyarrow object for an imported one), on the device; a
        DeviceReader for a stream.

    Raises
    ------
    TypeError
        If ``obj`` is not Arrow data, or ``device``, ``stream`` or ``prefetch`` is of the
        wrong type; or ``prefetch`` or ``total_bytes`` is given for data that is not a
        stream.
    ValueError
        If ``device`` names a device that is not CUDA, or the stream handle is negative
        (``pyarrow.ArrowInvalid`` if no CUDA device has that number); or ``prefetch`` is
        below 1, or an iterator is empty (no schema).
    MemoryError
        If the device has not enough free memory (``pyarrow.ArrowMemoryError``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> to_device(pa.array([1, 2])).is_cpu
    False
    >>> ctx = Context(0)
    >>> to_device(pa.table({"x": [1]}), device=ctx.memory_manager)["x"].chunk(0).device_type
    <DeviceAllocationType.CUDA: 2>
    >>> batches = (pa.record_batch({"x": [i]}) for i in range(5))
    >>> to_device(batches, prefetch=4).read_all().num_rows
    5
    """
    stream_handle(stream)  # a bad stream fails before any copy
    context = as_context(device)
    host_reader = None if kind_of(obj) is not None else streaming.as_host_reader(obj)
    if host_reader is not None:  # each batch complete when handed over: no stream to order
        return streaming.device_reader(
            host_reader, functools.partial(to_device, device=context), context,
            prefetch=streaming.DEFAULT_PREFETCH if prefetch is None else prefetch,
            total_bytes=total_bytes)
    if prefetch is not None or total_bytes is not None:
        raise TypeError("prefetch= and total_bytes= are for streams of batches, and this is a "
                        f"'{type(obj).__name__}': leave them out to copy it at once")
    data = _as_pyarrow(obj, stream)
    copy = uploaded(context, data, stream)  # synchronous: done when it returns
    if copy is not None:  # it was host data
        _log_plan("to_device", data, f"device {context.device_number}", _COALESCED)
        return copy
    _log_plan("to_device", data, f"device {context.device_number}",
              "device-to-device copy_to of each buffer")
    if stream is not None:
        Stream.wrap(stream, context).synchronize()  # the source is complete before we copy
    result = _copy(data, context.memory_manager)
    # Device-to-device copies, queued on the legacy default stream, may still run after
    # copy_to returns: order them first.
    copies = Stream.wrap(0, context)
    if stream is None:
        copies.synchronize()
    else:
        Stream.wrap(stream, context).wait(copies.record())
    return result


@overload
def to_host(obj: streaming.DeviceReader, stream: Any = ..., *, filter: None = ...,
            indices: None = ..., memory_pool: pa.MemoryPool | None = ...
            ) -> streaming.HostReader: ...
@overload
def to_host(obj: Any, stream: Any = ..., *, filter: Any = ..., indices: Any = ...,
            memory_pool: pa.MemoryPool | None = ...) -> Any: ...
def to_host(obj: Any, stream: Any = None, *, filter: Any = None, indices: Any = None,
            memory_pool: pa.MemoryPool | None = None) -> Any:
    """A copy of ``obj`` in host memory, complete when this returns.

    Parameters
    ----------
    obj : pyarrow.Array, ChunkedArray, RecordBatch or Table, Arrow-exporting object, or DeviceReader
        The data, on a device or on the host. A ``DeviceReader`` gives a ``HostReader``
        whose batches are copied back as they are read.
    stream : stream-like, optional
        The stream that produced the data, in any spelling ``stream_handle`` accepts: its
        queued work finishes before the copy.
    filter : pyarrow.Array or ChunkedArray of booleans, or CUDA array of bools, optional
        Copy only the rows where it is true (``arrow_gpu.compute.filter``, on the device
        for device data, on ``stream``): the other rows never cross the bus.
    indices : pyarrow.Array or ChunkedArray of integers, or CUDA array, optional
        Copy only these rows, in this order (``arrow_gpu.compute.take``).
    memory_pool : pyarrow.MemoryPool, optional
        Where the copy's memory comes from (pyarrow's current pool, which
        ``pyarrow.set_memory_pool`` sets, if omitted), as for
        pyarrow's ``copy_to_host``. With ``arrow_gpu.pinned_memory_pool()`` the device
        writes the result directly, with no staging, and repeated downloads reuse the
        pool's pinned memory instead of faulting in fresh pages (see the user guide's
        "Downloads"); ``arrow_gpu.trim()`` gives what the pool keeps back.

    Returns
    -------
    pyarrow.Array, ChunkedArray, RecordBatch, Table or arrow_gpu.streaming.HostReader
        The same type as ``obj`` (a pyarrow object for an imported one), in host memory; a
        HostReader for a DeviceReader.

    Raises
    ------
    TypeError
        If ``obj`` is not Arrow data, or ``stream`` is of the wrong type.
        Also if ``memory_pool`` is not a ``pyarrow.MemoryPool``.
    ValueError
        If the stream handle is negative or does not fit a pointer, or both ``filter`` and
        ``indices`` are given.

    Examples
    --------
    >>> import pyarrow as pa
    >>> to_host(to_device(pa.array(["x", None])), stream=0).to_pylist()
    ['x', None]
    >>> to_host(to_device(pa.array([1, 2, 3])), indices=to_device(pa.array([2]))).to_pylist()
    [3]
    >>> from arrow_gpu import pinned_memory_pool
    >>> to_host(to_device(pa.array([1, 2])), memory_pool=pinned_memory_pool()).to_pylist()
    [1, 2]
    """
    stream_handle(stream)
    if filter is not None and indices is not None:
        raise ValueError("to_host takes filter= or indices=, not both")
    if memory_pool is not None and not isinstance(memory_pool, pa.MemoryPool):
        raise TypeError(f"memory_pool must be a pyarrow.MemoryPool (such as "
                        f"arrow_gpu.pinned_memory_pool()), not {type(memory_pool).__name__}")
    if isinstance(obj, streaming.DeviceReader):  # each batch complete: no stream to order
        if filter is not None or indices is not None:
            raise TypeError("filter= and indices= select rows of data, not of a stream")
        return streaming.host_reader(obj, functools.partial(to_host, memory_pool=memory_pool))
    data = _as_pyarrow(obj, stream)
    if filter is not None or indices is not None:
        data = _selected(data, filter, indices, stream)
    # ordered after the stream's queued work, on the GPU
    copy = downloaded(data, stream, memory_pool)
    if copy is not None:  # it was device data
        _log_plan("to_host", data, "the host", _COALESCED)
        return copy
    _log_plan("to_host", data, "the host", "already there: a host-to-host copy_to")
    return _copy(data, _cpu_memory_manager(memory_pool))
