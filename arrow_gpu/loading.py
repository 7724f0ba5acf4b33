"""Loading data onto the device batch by batch: host streams, Arrow IPC (Feather v2) and
Parquet files.

No host table is built: a :class:`~arrow_gpu.streaming.DeviceReader` reads (and decodes)
the next batches on a thread of its own while the copy engine moves the earlier ones; the
host memory it holds stays a few batches, whatever the size of the data. Files are read
with ``pread``, never through a memory mapping, whose pages end the process with SIGBUS
once the file shrinks under it (a log rotated, a file rewritten). The metadata of an
uncompressed IPC file given by path is read through a mapping when it is opened, so that
its batches are views of the file: the copy engine reads their bytes with ``pread``
straight into its staging memory (read whole, in one transfer); other IPC files are read
into pinned memory, which the device copies from by DMA alone. A compressed file is
decompressed ``DECODE_WORKERS`` batches at once, each on a thread with a reader of its own
(and each batch's buffers spread over pyarrow's threads); the column chunks of a Parquet dataset's
row groups are decoded ``decoders`` at once, a batch of rows at a time, into pinned memory,
each piece copied the moment it is decoded (a chunk's pieces in one call, without the GIL;
the device batches are assembled from them), and give what ``pyarrow.dataset`` would scan.
Results keep the file's order.

>>> import os, tempfile
>>> import pyarrow as pa, pyarrow.feather as feather
>>> path = os.path.join(tempfile.mkdtemp(), "data.arrow")
>>> feather.write_feather(pa.table({"x": [1, 2, 3], "y": [0.5, 1.5, 2.5]}), path)
>>> table = read_ipc(path, columns=["y"])
>>> table.column_names, table["y"].chunk(0).is_cpu
(['y'], False)
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Literal, Union, overload

import pyarrow as pa

from arrow_gpu._cuda import (_ColumnChunkReader, _set_thread_copy_threads, _StopFlag,
                             _to_device_from_file)
from arrow_gpu._util.ordered_map import OrderedMap
from arrow_gpu.device import Context, DeviceLike, as_context
from arrow_gpu.memory_manager import pinned_memory_pool
from arrow_gpu.streaming import (DEFAULT_PREFETCH, DeviceReader, check_prefetch, device_reader,
                                 move_batches)
from arrow_gpu.transfer import to_device

__all__ = ["read_ipc", "read_parquet"]

_IPC_FILE_MAGIC = b"ARROW1"

#: Batches of a compressed IPC file decoded at once, each on a thread of its own beside
#: pyarrow's: two gave the most, four starved the copy engine's threads (bench/load_bench.py's
#: LZ4 and ZSTD files; the figures are in bench/RESULTS.md, "Tuning notes").
DECODE_WORKERS = 2

#: Parquet column chunks (or row groups) decoded at once by default, one per core (2 to 16):
#: one decoder is slow even with pyarrow's threads, and a decoder per core kept up with a
#: whole-dataset scan while holding a few row groups of host memory, more so decoding into
#: pinned memory than into ordinary memory (bench/parquet_decoders_bench.py; the figures are
#: in bench/RESULTS.md, "Tuning notes").
PARQUET_DECODERS = max(2, min(16, os.cpu_count() or 4))

#: Column chunks a decoder may run ahead of the consumer when ``read_parquet`` makes a Table
#: (they wait on the device, where the Table keeps them).
TABLE_AHEAD_PER_DECODER = 64

#: Rows per batch of a dataset's scan unless ``batch_size`` says otherwise (pyarrow.dataset's
#: default): the pieces ``read_parquet`` decodes and copies a column chunk in.
SCAN_BATCH_ROWS = 1 << 17

#: The keyword arguments of ``pyarrow.dataset.Dataset.scanner`` (``Scanner.from_dataset``)
#: that ``read_parquet`` passes on, named in its error for any other.
SCAN_OPTIONS = ("filter", "batch_size", "batch_readahead", "fragment_readahead",
                "fragment_scan_options", "use_threads", "cache_metadata", "memory_pool")

#: What ``read_ipc`` reads: a path, bytes in memory, or an open file.
IpcSource = Union[str, "os.PathLike[str]", bytes, pa.Buffer, pa.NativeFile, Any]


def _to_device_reader(reader: pa.RecordBatchReader, device: DeviceLike, prefetch: int,
                      total_bytes: int | None = None,
                      decoders: OrderedMap[Any, Any] | None = None) -> DeviceReader:
    """A DeviceReader of ``reader``, whose batches ``decoders`` (closed with it) may be
    decoding."""
    context = as_context(device)
    return device_reader(reader, functools.partial(to_device, device=context), context,
                         prefetch=prefetch, total_bytes=total_bytes,
                         close_with=None if decoders is None else decoders.close)


def _as_file(source: IpcSource, pool: pa.MemoryPool) -> tuple[Any, pa.Buffer | None, bool]:
    """An open file of ``source``, the bytes in memory its batches may be views of, and
    whether it reads at any position from any thread (a path, read with pread into
    ``pool``, or bytes in memory)."""
    if isinstance(source, (str, os.PathLike)):
        return pa.OSFile(os.fspath(source), memory_pool=pool), None, True
    if isinstance(source, (bytes, bytearray, memoryview, pa.Buffer)):
        region = pa.py_buffer(source)
        return pa.BufferReader(region), region, True
    if not (hasattr(source, "read") and callable(source.read)):
        raise TypeError(f"cannot read IPC data from a '{type(source).__name__}': expected a "
                        "path, bytes, a pyarrow.Buffer or an open binary file")
    return source, None, False


def _is_ipc_file_format(file: Any) -> bool:
    """Whether ``file`` holds the IPC file format (else the stream format), looked up
    without moving it."""
    if not file.seekable():
        return False
    start = file.tell()
    head = file.read(len(_IPC_FILE_MAGIC))
    file.seek(start)
    return bytes(head) == _IPC_FILE_MAGIC


def _column_indices(schema: pa.Schema, columns: Sequence[str]) -> list[int]:
    if isinstance(columns, str):
        raise TypeError(f"columns must be a list of names, got the string {columns!r}; "
                        f"write columns=[{columns!r}]")
    if len(set(columns)) != len(columns):
        raise ValueError(f"columns names a column twice: {list(columns)}")
    missing = [name for name in columns if schema.get_field_index(name) < 0]
    if missing:
        raise KeyError(f"no column {missing[0]!r} in the file (it has {schema.names}); "
                       "duplicated names cannot be selected")
    return [schema.get_field_index(name) for name in columns]


def _views_of(batch: pa.RecordBatch, region: pa.Buffer) -> bool:
    """Whether every buffer of ``batch`` lies in ``region``: read without a copy."""
    start, end = region.address, region.address + region.size
    return all(start <= buffer.address < end
               for column in batch.columns for buffer in column.buffers()
               if buffer is not None and buffer.size > 0)


def _file_batches(reader: pa.ipc.RecordBatchFileReader) -> Iterator[pa.RecordBatch]:
    for index in range(reader.num_record_batches):
        yield reader.get_batch(index)


def _in_order(reader: pa.RecordBatchReader, columns: Sequence[str]) -> pa.RecordBatchReader:
    """``reader``'s batches with their columns in the order asked for (IPC reads them in the
    file's order); views, no copy."""
    if reader.schema.names == list(columns):
        return reader
    batches = (batch.select(columns) for batch in reader)
    return pa.RecordBatchReader.from_batches(pa.schema([reader.schema.field(name)
                                                        for name in columns]), batches)


def _open_ipc(file: Any, columns: Sequence[str] | None, pool: pa.MemoryPool
              ) -> tuple[pa.RecordBatchReader | pa.ipc.RecordBatchFileReader,
                         pa.ipc.IpcReadOptions]:
    """A reader of the IPC file or stream ``file``, decoding into ``pool``, and the read
    options it was opened with."""
    open_reader = pa.ipc.open_file if _is_ipc_file_format(file) else pa.ipc.open_stream
    options = pa.ipc.IpcReadOptions(use_threads=True)
    if columns is not None:
        if not file.seekable():
            raise ValueError("columns= needs a seekable file (its schema is read first); read "
                             "all columns and select them on the device instead")
        start = file.tell()
        indices = _column_indices(open_reader(file).schema, columns)
        file.seek(start)
        options = pa.ipc.IpcReadOptions(use_threads=True, included_fields=indices)
    return open_reader(file, options=options, memory_pool=pool), options


def _mapped_ipc_file(path: str, context: Context, columns: Sequence[str] | None,
                     stream: bool, prefetch: int) -> pa.Table | DeviceReader | None:
    """The uncompressed IPC file at ``path``, its batches' metadata read through a memory
    mapping now, their bytes with pread by the copy engine (the mapping's pages each fault
    on first touch, and a file that shrinks makes them SIGBUS; pread copies from the page
    cache and finds a shrunk file's end): a Table, in one transfer, or a DeviceReader.
    None for the stream format, a compressed file or one without batches."""
    mapped = pa.memory_map(path)
    try:
        region = mapped.read_buffer()  # a view of the whole mapping, for where batches lie
        mapped.seek(0)
        if not _is_ipc_file_format(mapped):
            return None
        reader, _ = _open_ipc(mapped, columns, pa.default_memory_pool())
        if not (reader.num_record_batches and _views_of(reader.get_batch(0), region)):
            return None
        batches = list(_file_batches(reader))  # every metadata read through the mapping now
        fd = os.dup(mapped.fileno())  # the mapped file, whatever the path names by now
    finally:
        mapped.close()  # the batches keep the mapping
    table = pa.Table.from_batches(batches, schema=reader.schema)
    table = table if columns is None else table.select(columns)
    upload = functools.partial(_to_device_from_file, context, mapping=region, fd=fd)
    if not stream:
        try:
            return upload(table)
        finally:
            os.close(fd)
    total = sum(batch.get_total_buffer_size() for batch in batches)
    del batches
    return device_reader(table.to_reader(), upload, context,
                         prefetch=prefetch, total_bytes=total,
                         close_with=functools.partial(os.close, fd))


class _BatchDecoder:
    """Batch ``index`` of the IPC file ``file``, read (decompressed into ``pool``) on the
    calling thread by a reader of that thread's own: threads decode batches side by side
    without sharing a reader's state (they share the file, read at positions)."""

    def __init__(self, file: Any, options: pa.ipc.IpcReadOptions,
                 pool: pa.MemoryPool) -> None:
        self._file = file
        self._options = options
        self._pool = pool
        self._readers = threading.local()

    def __call__(self, index: int) -> pa.RecordBatch:
        reader = getattr(self._readers, "reader", None)
        if reader is None:
            reader = pa.ipc.open_file(self._file, options=self._options,
                                      memory_pool=self._pool)
            self._readers.reader = reader
        batch: pa.RecordBatch = reader.get_batch(index)
        return batch


def _table_or_reader(reader: DeviceReader, stream: bool) -> pa.Table | DeviceReader:
    if stream:
        return reader
    with reader:
        return reader.read_all()


@overload
def read_ipc(source: IpcSource, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
             stream: Literal[False] = ..., *, prefetch: int = ...) -> pa.Table: ...
@overload
def read_ipc(source: IpcSource, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
             *, stream: Literal[True], prefetch: int = ...) -> DeviceReader: ...
@overload
def read_ipc(source: IpcSource, device: DeviceLike, columns: Sequence[str] | None,
             stream: Literal[True], *, prefetch: int = ...) -> DeviceReader: ...
@overload
def read_ipc(source: IpcSource, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
             stream: bool = ..., *, prefetch: int = ...) -> pa.Table | DeviceReader: ...
def read_ipc(source: IpcSource, device: DeviceLike = 0, columns: Sequence[str] | None = None,
             stream: bool = False, *, prefetch: int = DEFAULT_PREFETCH
             ) -> pa.Table | DeviceReader:
    """Read an Arrow IPC file or stream (Feather v2 included) onto the device.

    Parameters
    ----------
    source : str, os.PathLike, bytes, pyarrow.Buffer or binary file
        A path (read with pread: a file that shrinks under an open reader raises
        ``OSError``; an uncompressed file's bytes go from the file to the copy engine's
        staging memory, the others' into pinned memory), the bytes, or an open file. The
        file and stream formats are told apart by the file format's leading magic bytes.
        A compressed file from a path or bytes is decompressed a few batches at once, in
        order; a stream or an open file one batch at a time.
    device : DeviceLike, default 0
        The device; data goes to its primary context.
    columns : list of str, optional
        The columns to read (the others are not decompressed); all by default.
    stream : bool, default False
        Return a DeviceReader of the batches instead of a Table.
    prefetch : int, default 2
        How many copied batches may wait for the consumer.

    Returns
    -------
    pyarrow.Table or arrow_gpu.streaming.DeviceReader
        A device Table, one chunk per batch of the file; or the reader, with ``stream=True``.

    Raises
    ------
    TypeError
        If ``source`` is not a path, bytes or binary file, or ``columns`` is a string.
    KeyError
        If a column is not in the file.
    pyarrow.ArrowInvalid
        If the data is not Arrow IPC.

    Examples
    --------
    >>> import io, pyarrow as pa
    >>> sink = io.BytesIO()
    >>> with pa.ipc.new_stream(sink, pa.schema({"x": pa.int8()})) as writer:
    ...     writer.write(pa.record_batch({"x": pa.array([1, 2], pa.int8())}))
    >>> with read_ipc(sink.getvalue(), stream=True) as reader:
    ...     [batch.num_rows for batch in reader]
    [2]
    """
    context = as_context(device)
    if isinstance(source, (str, os.PathLike)):
        mapped = _mapped_ipc_file(os.fspath(source), context, columns, stream, prefetch)
        if mapped is not None:
            return mapped
    pool = pinned_memory_pool(context)  # what the device copies from by DMA alone
    file, region, positional = _as_file(source, pool)
    reader, options = _open_ipc(file, columns, pool)
    total = None
    decoders: OrderedMap[int, pa.RecordBatch] | None = None
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        schema, count = reader.schema, reader.num_record_batches
        if region is not None and count > 0 and _views_of(reader.get_batch(0), region):
            if not stream:  # views of the bytes: one transfer of them all
                table = pa.Table.from_batches(list(_file_batches(reader)), schema=schema)
                return to_device(table if columns is None else table.select(columns), context)
            total = sum(batch.get_total_buffer_size() for batch in _file_batches(reader))
            batches: Iterator[pa.RecordBatch] = _file_batches(reader)
        elif positional:  # decode (decompress) the next few batches at once
            decoders = OrderedMap(_BatchDecoder(file, options, pool), range(count),
                                  workers=DECODE_WORKERS, name="arrow_gpu decode")
            batches = decoders
        else:  # an open file: one reader, one batch at a time
            batches = _file_batches(reader)
        reader = pa.RecordBatchReader.from_batches(schema, batches)
    host = reader if columns is None else _in_order(reader, columns)
    return _table_or_reader(_to_device_reader(host, context, prefetch, total, decoders),
                            stream)


@overload
def read_parquet(source: Any, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
                 stream: Literal[False] = ..., *, prefetch: int = ..., decoders: int = ...,
                 **scan_options: Any) -> pa.Table: ...
@overload
def read_parquet(source: Any, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
                 *, stream: Literal[True], prefetch: int = ..., decoders: int = ...,
                 **scan_options: Any) -> DeviceReader: ...
@overload
def read_parquet(source: Any, device: DeviceLike, columns: Sequence[str] | None,
                 stream: Literal[True], *, prefetch: int = ..., decoders: int = ...,
                 **scan_options: Any) -> DeviceReader: ...
@overload
def read_parquet(source: Any, device: DeviceLike = ..., columns: Sequence[str] | None = ...,
                 stream: bool = ..., *, prefetch: int = ..., decoders: int = ...,
                 **scan_options: Any) -> pa.Table | DeviceReader: ...
def read_parquet(source: Any, device: DeviceLike = 0, columns: Sequence[str] | None = None,
                 stream: bool = False, *, prefetch: int = DEFAULT_PREFETCH,
                 decoders: int = PARQUET_DECODERS, **scan_options: Any
                 ) -> pa.Table | DeviceReader:
    """Read a Parquet file or dataset onto the device.

    The decoders fill pinned host memory (``arrow_gpu.pinned_memory_pool(device)``, unless
    ``memory_pool`` names another pool), so that what they decode goes to the device by DMA
    alone, leaving the cores to decode. Files of the dataset's schema without partition
    columns, read with no scan options but ``batch_size`` and ``use_threads``, are read by
    ``pyarrow.parquet``'s reader column chunk by column chunk: ``decoders`` threads each
    decode a column of a row group ``batch_size`` rows at a time and copy each piece to the
    device as soon as it is decoded; the device batches are assembled from the pieces, cut
    where the dataset's scan cuts them, so the host holds about a piece per decoder. With a
    ``filter`` (or partitions, or files of other schemas, or other scan options) each row
    group is scanned as a fragment of its own (``split_by_row_group``) and copied whole.
    Either way the batches are those of ``dataset.to_table()``, in its order. Other datasets
    (another format, in memory, unions) are read by the dataset's scanner, whose read-ahead
    (``batch_readahead``, ``fragment_readahead``) decides how many batches it holds.

    Parameters
    ----------
    source : str, os.PathLike, list of them, or pyarrow.dataset.Dataset
        A file, a directory of files, a list of files, or a dataset.
    device : DeviceLike, default 0
        The device; data goes to its primary context.
    columns : list of str, optional
        The columns to read; all by default.
    stream : bool, default False
        Return a DeviceReader of the batches instead of a Table.
    prefetch : int, default 2
        With ``stream=True``: how many more row groups the decoders may copy ahead of the
        consumer, besides those in decoding (below). The batches are handed over on the
        consumer's thread: the decoders run ahead and copy as they decode, so a prefetch
        thread would overlap nothing. (A Table of column chunks decoded as above holds
        them all in the end: its decoders run further ahead.)
    decoders : int, default the number of cores, from 2 to 16
        How many column chunks (or row groups, as above) are decoded at once. More go
        faster where there are cores to spare; the host holds what is in decoding, so fewer
        bound it tighter. What is decoded ahead of the consumer waits in device memory.
    **scan_options
        As for ``pyarrow.dataset.Dataset.scanner``: ``filter``, ``batch_size`` (rows per
        batch, 131,072 by default), ``use_threads``, ``memory_pool`` (where the decoders'
        output goes), ``fragment_scan_options``...; they go to each row group's scan (the
        read-ahead options matter to the scanner only).

    Returns
    -------
    pyarrow.Table or arrow_gpu.streaming.DeviceReader
        A device Table; or the reader, with ``stream=True``.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    pyarrow.ArrowInvalid
        If a file is not Parquet, or a column is not in the dataset.

    Examples
    --------
    >>> import os, tempfile
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "data.parquet")
    >>> pq.write_table(pa.table({"x": range(10), "y": ["a"] * 10}), path, row_group_size=4)
    >>> read_parquet(path, columns=["x"]).num_rows
    10
    """
    import pyarrow.dataset as ds  # imported when used: it is slow to import

    dataset = source if isinstance(source, ds.Dataset) else ds.dataset(source, format="parquet")
    context = as_context(device)
    pool = scan_options.pop("memory_pool", None) or pinned_memory_pool(context)
    _check_columns(dataset.schema, columns)
    try:  # checks the options
        scanner = dataset.scanner(columns=columns, memory_pool=pool, **scan_options)
    except TypeError:
        unknown = set(scan_options) - set(SCAN_OPTIONS)
        if not unknown:
            raise
        raise TypeError(
            f"read_parquet() got an unexpected keyword argument {sorted(unknown)[0]!r}: it takes "
            f"source, device, columns, stream, prefetch and decoders, and the scan options "
            f"{', '.join(SCAN_OPTIONS)} (as pyarrow.dataset.Dataset.scanner)") from None
    if not (isinstance(dataset, ds.FileSystemDataset)
            and isinstance(dataset.format, ds.ParquetFileFormat)):
        return _table_or_reader(to_device(scanner, context, prefetch=prefetch), stream)
    if not isinstance(decoders, int) or isinstance(decoders, bool) or decoders < 1:
        raise ValueError(f"decoders must be an int of at least 1, got {decoders!r}")
    check_prefetch(prefetch)  # before it sizes the decoders' window
    schema = scanner.projected_schema
    stop = _StopFlag()  # set when the reader closes early
    plain = _plain_row_groups(dataset, columns, scan_options)
    decoding: OrderedMap[Any, Any]
    if plain is not None and schema.names:
        batch_rows = scan_options.get("batch_size", SCAN_BATCH_ROWS)
        read = functools.partial(_column_chunk_to_device, filesystem=dataset.filesystem,
                                 batch_rows=batch_rows, pool=pool, context=context, stop=stop)
        whole = functools.partial(_row_group_to_device, batches_of=functools.partial(
            _plain_row_group_batches, filesystem=dataset.filesystem, columns=schema.names,
            batch_rows=batch_rows, use_threads=scan_options.get("use_threads", True),
            pool=pool), context=context, stop=stop)
        # Chunks decoded ahead wait on the device: starting more than one per decoder
        # keeps the threads busy past a slow chunk (a string column's) at no host memory.
        # A reader's consumer bounds them; a Table holds them all in the end, and its
        # decoders kept up with the host scan only with many chunks allowed ahead (bench/
        # RESULTS.md, "The decoders' window and the consumer", and "Tuning notes").
        ahead = (4 * decoders + prefetch * len(schema.names) if stream
                 else TABLE_AHEAD_PER_DECODER * decoders)
        decoding = OrderedMap(read, ((row_group, name) for row_group in plain
                                     for name in schema.names),
                              workers=decoders, name="arrow_gpu decode", ahead=ahead)
        batches: Iterator[pa.RecordBatch] = _assembled(decoding, len(schema.names), schema,
                                                       whole)
    else:
        upload = functools.partial(_row_group_to_device, batches_of=functools.partial(
            _row_group_batches, schema=dataset.schema, columns=columns,
            scan_options={"memory_pool": pool, **scan_options}), context=context, stop=stop)
        decoding = OrderedMap(upload, _row_groups(dataset, scan_options.get("filter")),
                              workers=decoders, name="arrow_gpu decode",
                              ahead=decoders + prefetch)
        batches = itertools.chain.from_iterable(decoding)
    copied = pa.RecordBatchReader.from_batches(schema, batches)
    return _table_or_reader(device_reader(copied, None, context, close_with=decoding.close,
                                          interrupt_with=stop.set), stream)


def _check_columns(schema: pa.Schema, columns: Any) -> None:
    """Refuse a column name the dataset lacks, listing its columns (the scanner's own error
    lists its internal fields too)."""
    if columns is None or isinstance(columns, (str, dict)):
        return  # a string is the scanner's to refuse; a dict holds expressions
    missing = [name for name in columns if isinstance(name, str) and name not in schema.names]
    if missing:
        raise pa.ArrowInvalid(f"no column named {missing[0]!r} in the dataset; its columns are "
                              f"{', '.join(map(repr, schema.names))}")


_open_parquet_files = threading.local()  # per decoding thread: {path: (filesystem, pool, reader)}


def _chunk_reader(path: str, filesystem: Any, pool: pa.MemoryPool) -> _ColumnChunkReader:
    """A ``_ColumnChunkReader`` of ``path`` (read with pread from a local file), decoding into
    ``pool``, its footer read once per decoding thread; the thread keeps the two readers it
    used last."""
    files: dict[str, tuple[Any, pa.MemoryPool, _ColumnChunkReader]] | None = getattr(
        _open_parquet_files, "files", None)
    if files is None:
        files = _open_parquet_files.files = {}
    cached = files.pop(path, None)
    if cached is None or cached[0] is not filesystem or cached[1] is not pool:
        cached = (filesystem, pool, _ColumnChunkReader(_open_parquet_file(path, filesystem),
                                                       pool))
    files[path] = cached  # the most recent last
    while len(files) > 2:
        del files[next(iter(files))]
    return cached[2]


def _open_parquet_file(path: str, filesystem: Any) -> pa.NativeFile:
    """``path`` on ``filesystem``; a local file read with pread, never through a memory
    mapping, whose pages end the process with SIGBUS once the file shrinks under it."""
    import pyarrow.fs as fs

    if isinstance(filesystem, fs.LocalFileSystem):  # whatever its use_mmap says
        return pa.OSFile(path)
    file: pa.NativeFile = filesystem.open_input_file(path)
    return file


def _leaf_indices(reader: Any, names: Sequence[str]) -> list[int]:
    """The Parquet leaf columns of the top-level fields ``names`` (a struct or list field has
    several, or one), in that order."""
    paths = reader.column_paths
    return [index for name in names for index, path in enumerate(paths) if path[0] == name]


@contextlib.contextmanager
def _staged_alone() -> Iterator[None]:
    """The transfers that this thread starts staged by it alone, without the copy engine's
    threads: a decoder copies beside a core's worth of other decoders, and copy threads
    woken while every core decodes only delay it. (Pinned pieces need no staging at all;
    this is for those the pinned pool could not place.)"""
    previous = _set_thread_copy_threads(1)
    try:
        yield
    finally:
        _set_thread_copy_threads(previous)


def _column_chunk_to_device(chunk: tuple[tuple[str, int], str], filesystem: Any,
                            batch_rows: int, pool: pa.MemoryPool, context: Context,
                            stop: _StopFlag
                            ) -> tuple[tuple[str, int], list[pa.Array] | None]:
    """One column of one row group, decoded on this thread (pyarrow's threads would only
    add a hop: a column decodes on one) in pieces of ``batch_rows`` rows, as the dataset's
    scan cuts it, each piece copied to the device as soon as it is decoded (the last may be
    shorter; the reader cuts short a piece whose binary would pass 2 GiB). The host holds
    one piece and a page per decoder, where a whole column chunk would hold its growing
    arrays, about twice the decoded chunk at their peak. None once ``stop`` is set (looked
    at between two pieces too)."""
    if stop.is_set():
        return chunk[0], None
    (path, index), name = chunk
    reader = _chunk_reader(path, filesystem, pool)
    with _staged_alone():
        pieces = reader.to_device(index, _leaf_indices(reader, [name]), batch_rows, context,
                                  stop)
    return chunk[0], None if stop.is_set() else pieces


def _assembled(chunks: Iterator[tuple[tuple[str, int], list[pa.Array] | None]], count: int,
               schema: pa.Schema, whole: Any) -> Iterator[pa.RecordBatch]:
    """The device batches of each row group from the pieces of its ``count`` columns, in
    order. Columns cut at other rows (the reader cuts a piece whose binary would pass
    2 GiB) cannot make batches together: that row group is read again whole (``whole``),
    to be cut on the host."""
    for first in chunks:
        group = [first, *itertools.islice(chunks, count - 1)]
        columns = [pieces for _, pieces in group if pieces is not None]
        if len(columns) < count:
            return  # the reader closed
        lengths = [len(piece) for piece in columns[0]]
        if all([len(piece) for piece in pieces] == lengths for pieces in columns):
            for row in zip(*columns):
                yield pa.RecordBatch.from_arrays(list(row), schema=schema)
        else:
            yield from whole(first[0])


def _row_group_to_device(row_group: Any, batches_of: Any, context: Context,
                         stop: _StopFlag) -> list[pa.RecordBatch]:
    """The batches of one row group, copied to the device in one transfer as soon as they
    are decoded, so that a row group decoded ahead of the consumer waits in device memory,
    not in host memory. Nothing once ``stop`` is set."""
    batches = []
    for batch in batches_of(row_group):
        if stop.is_set():
            return []
        batches.append(batch)
    if not batches or stop.is_set():
        return []
    with _staged_alone():
        return move_batches(batches, functools.partial(to_device, device=context))


def _plain_row_groups(dataset: Any, columns: Any, scan_options: dict[str, Any]
                      ) -> list[tuple[str, int]] | None:
    """(path, row group) of each row group of ``dataset``, in its order, when reading them
    with ``pyarrow.parquet``'s reader gives what the dataset's scan gives: the format's
    default options, names for columns, no filter or other scan option, no partition
    columns, no field name twice, every file of the dataset's schema. None otherwise."""
    import pyarrow.dataset as ds

    if set(scan_options) - {"batch_size", "use_threads"}:
        return None
    if not dataset.format.equals(ds.ParquetFileFormat()):
        return None  # read options or fragment scan options of its own
    names = dataset.schema.names
    if len(set(names)) != len(names):
        return None
    if columns is not None and not (isinstance(columns, (list, tuple))
                                    and all(isinstance(name, str) for name in columns)
                                    and len(set(columns)) == len(columns)):
        return None  # expressions to project, or a column named twice
    found = []
    for fragment in dataset.get_fragments():
        if not (fragment.partition_expression.equals(ds.scalar(True))
                and fragment.physical_schema.equals(dataset.schema)):
            return None
        found += [(fragment.path, index) for index in range(fragment.num_row_groups)]
    return found


def _plain_row_group_batches(row_group: tuple[str, int], filesystem: Any, columns: list[str],
                             batch_rows: int, use_threads: bool, pool: pa.MemoryPool
                             ) -> list[pa.RecordBatch]:
    """The batches of one row group, read whole into ``pool`` by ``pyarrow.parquet``'s
    reader and cut in batches of ``batch_rows`` rows at most."""
    from pyarrow._parquet import ParquetReader  # pyarrow.parquet.ParquetFile takes no pool

    path, index = row_group
    reader = ParquetReader(memory_pool=pool)
    reader.open(_open_parquet_file(path, filesystem))
    table = reader.read_row_group(index, column_indices=_leaf_indices(reader, columns),
                                  use_threads=use_threads)
    batches: list[pa.RecordBatch] = table.select(columns).to_batches(max_chunksize=batch_rows)
    return batches


def _row_groups(dataset: Any, filter: Any) -> Iterator[Any]:
    """The row groups of a Parquet dataset, in its order, as fragments of their own; those
    that ``filter`` rules out by partition or statistics left out."""
    for fragment in dataset.get_fragments(filter=filter):
        yield from fragment.split_by_row_group(filter, schema=dataset.schema)


def _row_group_batches(fragment: Any, schema: pa.Schema, columns: Any,
                       scan_options: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The batches of one row group, decoded as the dataset's scanner would."""
    yield from fragment.to_batches(schema=schema, columns=columns, **scan_options)
