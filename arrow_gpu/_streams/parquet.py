"""The row groups of a Parquet dataset decoded on a few threads at once into ``pool``, each
piece copied to the device the moment it is decoded: what ``arrow_gpu.loading.read_parquet``
reads a dataset of Parquet files with.

Files of the dataset's schema, read with no scan option but ``batch_size`` and
``use_threads``, are read column chunk by column chunk by ``pyarrow.parquet``'s reader (with
pread, never through a memory mapping); the others row group by row group, each scanned as a
fragment of its own. Either way the batches are the dataset scan's, in its order.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from arrow_gpu._cuda import _ColumnChunkReader, _set_thread_copy_threads, _StopFlag
from arrow_gpu._streams.movers import move_batches
from arrow_gpu._util.ordered_map import OrderedMap
from arrow_gpu.device import Context
from arrow_gpu.streaming import DeviceReader, device_reader
from arrow_gpu.transfer import to_device

#: Column chunks a decoder may run ahead of the consumer when ``read_parquet`` makes a Table
#: (they wait on the device, where the Table keeps them).
TABLE_AHEAD_PER_DECODER = 64

#: Rows per batch of a dataset's scan unless ``batch_size`` says otherwise (pyarrow.dataset's
#: default): the pieces ``read_parquet`` decodes and copies a column chunk in.
SCAN_BATCH_ROWS = 1 << 17


def read_row_groups(dataset: Any, schema: pa.Schema, columns: Any, scan_options: dict[str, Any],
                    pool: pa.MemoryPool, context: Context, *, decoders: int, prefetch: int,
                    stream: bool) -> DeviceReader:
    """A DeviceReader of the batches of ``dataset`` (a ``FileSystemDataset`` of Parquet files)
    of the projected ``schema``, decoded by ``decoders`` threads into ``pool`` and copied to
    ``context``'s device as they are decoded. The decoders run ahead of the consumer by
    ``prefetch`` batches with ``stream``; for a Table (not ``stream``), further."""
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
    return device_reader(copied, None, context, close_with=decoding.close,
                         interrupt_with=stop.set)


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
