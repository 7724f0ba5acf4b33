"""Streams of record batches moved between host and device batch by batch, reading and
copying overlapped.

A :class:`DeviceReader` takes a host stream (a ``pyarrow.RecordBatchReader``, anything with
``__arrow_c_stream__``, a ``pyarrow.dataset`` Scanner or Dataset, an iterator of record
batches). From its first read on, a background thread takes the source's next batch
(reading, decoding and decompressing it: pyarrow releases the GIL meanwhile), moves it with
the function it was given (``arrow_gpu.to_device``, which copies through the copy engine and
also releases the GIL) and drops the host batch, while the consumer works on earlier ones.
At most ``prefetch`` moved batches wait for the consumer, so the host memory held stays at
about one batch and the device memory at ``prefetch + 1`` batches, whatever the size of the
data. Small batches that the source yields quickly travel in groups (``arrow_gpu._streams.movers``
says how small and how many): one copy and one handoff for the group, each batch as it was.
A source that copies its own batches ahead, on threads of its own (``read_parquet``'s
decoders), is read on the consumer's thread instead: there is nothing for a thread to overlap.
Users get one through ``arrow_gpu.to_device(stream)`` (``prefetch=`` says how many batches
it copies ahead); ``arrow_gpu.to_host`` of one streams back the same way, as a
:class:`HostReader`.

>>> import pyarrow as pa
>>> from arrow_gpu import to_device, to_host
>>> host = pa.RecordBatchReader.from_batches(
...     pa.schema({"x": pa.int64()}), [pa.record_batch({"x": [1, 2]}), pa.record_batch({"x": [3]})])
>>> with to_device(host) as reader:
...     [batch.num_rows for batch in reader]
[2, 1]
>>> to_host(to_device(iter([pa.record_batch({"x": [4]})]))).read_all()["x"].to_pylist()
[4]
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import pyarrow as pa

from arrow_gpu._streams.movers import InPlace, Move, Prefetcher
from arrow_gpu.c_device_interface import DeviceData
from arrow_gpu.device import Context
from arrow_gpu.transfer_options import expect_transfer

__all__ = ["DEFAULT_PREFETCH", "DeviceReader", "HostReader", "as_host_reader",
           "device_reader", "host_reader"]

#: How many moved batches wait for the consumer unless told otherwise.
DEFAULT_PREFETCH = 2


class _MovedStream:
    """Batches moved from a source by a producer thread (or by the source itself), read one
    at a time.

    Iterate it for the batches; close it (or leave its ``with`` block, or drop it) to stop
    the producer early: the thread ends and its prefetched batches are freed. Read it from
    one thread.
    """

    __slots__ = ("__weakref__", "_batches", "_finalizer", "bytes_moved", "context",
                 "schema", "total_bytes")

    schema: pa.Schema
    context: Context
    bytes_moved: int
    total_bytes: int | None
    _batches: Prefetcher | InPlace
    _finalizer: weakref.finalize[[], _MovedStream]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"a {type(self).__name__} is made by arrow_gpu.to_device(reader, "
                        "device, prefetch=...) or arrow_gpu.to_host(device_reader)")

    @classmethod
    def _open(cls, source: Iterator[pa.RecordBatch], schema: pa.Schema, move: Move | None,
              context: Context, prefetch: int, total_bytes: int | None,
              close_source: Callable[[], object],
              interrupt_source: Callable[[], object] | None = None) -> Any:
        self = object.__new__(cls)
        self.schema = schema
        self.context = context
        self.bytes_moved = 0
        self.total_bytes = total_bytes
        owner = weakref.ref(self)

        def count(nbytes: int) -> None:  # on the producer thread; the owner may be gone
            alive = owner()
            if alive is not None:
                alive.bytes_moved += nbytes

        check_prefetch(prefetch)
        if move is None:
            self._batches = InPlace(source, schema, count, close_source, interrupt_source)
        else:
            direction = "to device" if cls is DeviceReader else "to host from device"
            self._batches = Prefetcher(
                source, schema, move, prefetch, count,
                name=f"arrow_gpu {direction} {context.device_number}",
                close_source=close_source, interrupt_source=interrupt_source)
        self._finalizer = weakref.finalize(self, self._batches.close)
        self._finalizer.atexit = False  # at exit the daemon thread goes; a read may not end
        if total_bytes is not None:
            expect_transfer(total_bytes)
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> pa.RecordBatch:
        return self._batches.next()

    def read_next_batch(self) -> pa.RecordBatch:
        """The next batch.

        Raises
        ------
        StopIteration
            At the end of the stream.
        ValueError
            If the reader is closed.
        """
        return self._batches.next()

    def read_all(self) -> pa.Table:
        """The rest of the stream, as a Table (one chunk per batch)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def close(self) -> None:
        """Stop reading: the producer thread ends and prefetched batches are dropped."""
        self._finalizer()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<arrow_gpu.{type(self).__name__} device={self.context.device_number} "
                f"bytes_moved={self.bytes_moved}>")


class DeviceReader(_MovedStream):
    """A stream of device record batches, copied from a host stream while they are read.

    Made by ``arrow_gpu.to_device(host_stream)`` and ``arrow_gpu.loading.read_ipc``/
    ``read_parquet`` with ``stream=True``. Iterate it for the
    batches; close it (or leave its ``with`` block, or drop it) to stop the producer early:
    the thread ends and its prefetched batches are freed. Read it from one thread.
    ``read_all()`` gives the rest as a device Table.

    Attributes
    ----------
    schema : pyarrow.Schema
        The schema of every batch.
    context : Context
        The device context the batches are on.
    bytes_moved : int
        The bytes of the buffers copied to the device so far (prefetched batches included).
    total_bytes : int or None
        The bytes of the whole stream when known up front (e.g. an uncompressed IPC file).

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> reader = arrow_gpu.to_device(pa.table({"x": [1, 2, 3]}).to_reader())
    >>> table = reader.read_all()
    >>> table.num_rows, table["x"].chunk(0).is_cpu, reader.bytes_moved
    (3, False, 24)
    """

    __slots__ = ()

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """Export the rest of the stream as an ``arrow_device_array_stream`` capsule.

        The consumer's reads come from this reader (and so from its producer thread).

        Parameters
        ----------
        requested_schema : PyCapsule, optional
            An ``arrow_schema`` capsule; it must have the stream's layout (nothing is cast).
        **kwargs
            Keywords of later versions of the protocol; only None values are accepted.

        Returns
        -------
        PyCapsule
            The ``arrow_device_array_stream`` capsule.
        """
        # Every batch is complete on the device when it is handed over: no stream to wait on.
        batches = pa.RecordBatchReader.from_batches(self.schema, self)
        return DeviceData(batches).__arrow_c_device_stream__(requested_schema, **kwargs)


class HostReader(_MovedStream):
    """A stream of host record batches, copied back from a DeviceReader while they are read.

    Made by ``arrow_gpu.to_host(device_reader)``; read it as a DeviceReader (closing it
    closes the DeviceReader too). It exports ``__arrow_c_stream__``, so
    ``pyarrow.RecordBatchReader.from_stream(reader)`` and other Arrow consumers take it.

    Examples
    --------
    >>> import pyarrow as pa, arrow_gpu
    >>> on_gpu = arrow_gpu.to_device(pa.table({"x": [1, 2, 3]}).to_reader(max_chunksize=2))
    >>> pa.RecordBatchReader.from_stream(arrow_gpu.to_host(on_gpu)).read_all()["x"].to_pylist()
    [1, 2, 3]
    """

    __slots__ = ()

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """Export the rest of the stream as an ``arrow_array_stream`` capsule (the Arrow
        PyCapsule protocol's method for host streams)."""
        batches = pa.RecordBatchReader.from_batches(self.schema, self)
        return batches.__arrow_c_stream__(requested_schema)


def _starting_with(first: list[pa.RecordBatch], rest: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """``first``'s one batch, then ``rest``; the first is not held once handed over."""
    yield first.pop()
    yield from rest


def _is_pyarrow_data(obj: Any) -> bool:
    return isinstance(obj, (pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table))


def as_host_reader(obj: Any) -> pa.RecordBatchReader | None:
    """A ``pyarrow.RecordBatchReader`` over ``obj`` when it is a stream of batches, else None.

    Streams are ``pyarrow.RecordBatchReader``, ``pyarrow.dataset`` Scanner and Dataset,
    objects with ``__arrow_c_stream__`` (and not ``__arrow_c_array__``: those are arrays),
    and iterators, lists and tuples of record batches. An iterator's first batch is read
    here, for the schema.

    Raises
    ------
    ValueError
        If an iterator ends before its first batch (an empty stream needs a schema: make it
        with ``pyarrow.RecordBatchReader.from_batches(schema, [])``).
    TypeError
        If an iterator's first item is not a record batch.

    Examples
    --------
    >>> import pyarrow as pa
    >>> as_host_reader([pa.record_batch({"x": [1]})]).schema.names
    ['x']
    >>> as_host_reader(pa.table({"x": [1]})) is None
    True
    """
    if isinstance(obj, pa.RecordBatchReader):
        return obj
    if _is_pyarrow_data(obj) or isinstance(obj, (str, bytes)):
        return None
    dataset = sys.modules.get("pyarrow.dataset")  # a Dataset or Scanner means it is imported
    if dataset is not None:
        if isinstance(obj, dataset.Scanner):
            return obj.to_reader()
        if isinstance(obj, dataset.Dataset):
            return obj.scanner().to_reader()
    if hasattr(obj, "__arrow_c_stream__"):
        if hasattr(obj, "__arrow_c_array__") or hasattr(obj, "__arrow_c_device_stream__"):
            return None
        return pa.RecordBatchReader.from_stream(obj)
    if isinstance(obj, (list, tuple)):
        if obj and all(isinstance(item, pa.RecordBatch) for item in obj):
            return pa.RecordBatchReader.from_batches(obj[0].schema, obj)
        return None
    if isinstance(obj, Iterator):
        first = next(obj, None)
        if first is None:
            raise ValueError("the iterator of batches is empty, so there is no schema: make an "
                             "empty stream with pyarrow.RecordBatchReader.from_batches(schema, "
                             "[])")
        if not isinstance(first, pa.RecordBatch):
            raise TypeError(f"an iterator of record batches yielded a '{type(first).__name__}' "
                            "first")
        return pa.RecordBatchReader.from_batches(first.schema, _starting_with([first], obj))
    return None


def check_prefetch(prefetch: int) -> int:
    """``prefetch`` (how many moved batches may wait for the consumer), checked.

    Raises
    ------
    TypeError
        If it is not an int.
    ValueError
        If it is below 1.
    """
    if isinstance(prefetch, bool) or not isinstance(prefetch, int):
        raise TypeError(f"prefetch must be an int (batches copied ahead), got "
                        f"'{type(prefetch).__name__}'")
    if prefetch < 1:
        raise ValueError(f"prefetch must be at least 1 batch, got {prefetch}")
    return prefetch


def device_reader(reader: pa.RecordBatchReader, move: Move | None, context: Context, *,
                  prefetch: int = DEFAULT_PREFETCH, total_bytes: int | None = None,
                  close_with: Callable[[], object] | None = None,
                  interrupt_with: Callable[[], object] | None = None) -> DeviceReader:
    """A :class:`DeviceReader` of a host reader whose batches ``move`` puts on ``context``.

    Nothing is read before the first read of the result.

    Parameters
    ----------
    reader : pyarrow.RecordBatchReader
        The host batches (see :func:`as_host_reader` for other sources).
    move : callable or None
        ``move(batch)``: the batch on ``context``'s device, complete when it returns. None
        when ``reader``'s batches are on ``context`` already, copied by threads of the
        source's own that run ahead: they are then read on the consumer's thread, with no
        prefetch thread (it would overlap nothing), and the source bounds what waits.
    context : Context
        Where the batches are.
    prefetch : int, default 2
        How many moved batches may wait for the consumer (at least 1); unused when ``move``
        is None.
    total_bytes : int, optional
        The stream's bytes when the caller knows them, for ``transfer_progress``.
    close_with : callable, optional
        Called after ``reader.close()`` once the stream ends or is closed: what else feeds
        ``reader`` and must stop with it (e.g. the threads decoding its batches).
    interrupt_with : callable, optional
        Called first when the reader is closed before its end, on the closing thread: asks
        what feeds ``reader`` to wind down, so that a read in progress ends sooner.

    Returns
    -------
    DeviceReader

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context, to_device
    >>> batches = [pa.record_batch({"x": [1, 2]}), pa.record_batch({"x": [3]})]
    >>> host = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    >>> [batch.num_rows for batch in device_reader(host, to_device, Context(0))]
    [2, 1]
    """
    def close_source() -> None:
        try:
            reader.close()
        finally:
            if close_with is not None:
                close_with()

    opened: DeviceReader = DeviceReader._open(reader, reader.schema, move, context, prefetch,
                                              total_bytes, close_source, interrupt_with)
    return opened


def host_reader(reader: DeviceReader, move: Move, *,
                prefetch: int = DEFAULT_PREFETCH) -> HostReader:
    """A :class:`HostReader` of a DeviceReader's batches, which ``move`` copies back to the
    host on a thread of its own while the consumer works.

    Closing (or dropping) the host reader stops that thread and closes ``reader``.

    >>> import pyarrow as pa
    >>> from arrow_gpu import Context, to_device, to_host
    >>> batches = [pa.record_batch({"x": [1, 2]}), pa.record_batch({"x": [3]})]
    >>> host = pa.RecordBatchReader.from_batches(batches[0].schema, batches)
    >>> on_device = device_reader(host, to_device, Context(0))
    >>> host_reader(on_device, to_host).read_all().to_pydict()
    {'x': [1, 2, 3]}
    """
    opened: HostReader = HostReader._open(reader, reader.schema, move, reader.context, prefetch,
                                          reader.total_bytes, reader.close)
    return opened
