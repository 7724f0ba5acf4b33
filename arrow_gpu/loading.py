"""Loading data onto the device batch by batch: host streams, Arrow IPC (Feather v2) and
Parquet files.

No host table is built: a :class:`~arrow_gpu.streaming.DeviceReader` reads (and decodes)
the next batches on a thread of its own while the copy engine moves the earlier ones; the
host memory it holds stays a few batches, whatever the size of the data. Files are read
with ``pread``, never through a memory mapping, whose pages end the process with SIGBUS
once the file shrinks under it (a log rotated, a file rewritten). The footer and metadata
of an uncompressed IPC file given by path are read into an image of the file when it is
opened, so that its batches are views of the image at the file's offsets: the copy engine
reads their bytes with ``pread`` straight into its staging memory (read whole, in one
transfer); other IPC files are read
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

import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any, Literal, Union, overload

import pyarrow as pa

from arrow_gpu._streams.ipc_files import (BatchDecoder, as_file, file_batches, in_order,
                                          ipc_file_by_pread, open_ipc, views_of)
from arrow_gpu._streams.parquet import read_row_groups
from arrow_gpu._util.ordered_map import OrderedMap
from arrow_gpu.device import DeviceLike, as_context
from arrow_gpu.memory_manager import pinned_memory_pool
from arrow_gpu.streaming import DEFAULT_PREFETCH, DeviceReader, check_prefetch, device_reader
from arrow_gpu.transfer import to_device

__all__ = ["read_ipc", "read_parquet"]

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
        by_pread = ipc_file_by_pread(os.fspath(source), context, columns, stream, prefetch)
        if by_pread is not None:
            return by_pread
    pool = pinned_memory_pool(context)  # what the device copies from by DMA alone
    file, region, positional = as_file(source, pool)
    reader, options = open_ipc(file, columns, pool)
    total = None
    decoders: OrderedMap[int, pa.RecordBatch] | None = None
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        schema, count = reader.schema, reader.num_record_batches
        if region is not None and count > 0 and views_of(reader.get_batch(0), region):
            if not stream:  # views of the bytes: one transfer of them all
                table = pa.Table.from_batches(list(file_batches(reader)), schema=schema)
                return to_device(table if columns is None else table.select(columns), context)
            total = sum(batch.get_total_buffer_size() for batch in file_batches(reader))
            batches: Iterator[pa.RecordBatch] = file_batches(reader)
        elif positional:  # decode (decompress) the next few batches at once
            decoders = OrderedMap(BatchDecoder(file, options, pool), range(count),
                                  workers=DECODE_WORKERS, name="arrow_gpu decode")
            batches = decoders
        else:  # an open file: one reader, one batch at a time
            batches = file_batches(reader)
        reader = pa.RecordBatchReader.from_batches(schema, batches)
    host = reader if columns is None else in_order(reader, columns)
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
    return _table_or_reader(read_row_groups(dataset, scanner.projected_schema, columns,
                                            scan_options, pool, context, decoders=decoders,
                                            prefetch=prefetch, stream=stream), stream)


def _check_columns(schema: pa.Schema, columns: Any) -> None:
    """Refuse a column name the dataset lacks, listing its columns (the scanner's own error
    lists its internal fields too)."""
    if columns is None or isinstance(columns, (str, dict)):
        return  # a string is the scanner's to refuse; a dict holds expressions
    missing = [name for name in columns if isinstance(name, str) and name not in schema.names]
    if missing:
        raise pa.ArrowInvalid(f"no column named {missing[0]!r} in the dataset; its columns are "
                              f"{', '.join(map(repr, schema.names))}")


