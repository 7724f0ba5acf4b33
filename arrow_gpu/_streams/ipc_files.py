"""Arrow IPC files and streams opened for ``arrow_gpu.loading.read_ipc``: the file format told
from the stream format, the columns asked for, an uncompressed file's batches found in an
image of its footer and metadata read with pread (their bytes then read with pread by the
copy engine), and the batches of a compressed file decoded a few at once, each thread with a
reader of its own.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from arrow_gpu._cuda import _to_device_from_file
from arrow_gpu._ipc.file_image import FILE_MAGIC, FileImage, NotUncompressed
from arrow_gpu.device import Context
from arrow_gpu.streaming import DeviceReader, device_reader


def as_file(source: Any, pool: pa.MemoryPool) -> tuple[Any, pa.Buffer | None, bool]:
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
    head = file.read(len(FILE_MAGIC))
    file.seek(start)
    return bytes(head) == FILE_MAGIC


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


def views_of(batch: pa.RecordBatch, region: pa.Buffer) -> bool:
    """Whether every buffer of ``batch`` lies in ``region``: read without a copy."""
    start, end = region.address, region.address + region.size
    return all(start <= buffer.address < end
               for column in batch.columns for buffer in column.buffers()
               if buffer is not None and buffer.size > 0)


def file_batches(reader: pa.ipc.RecordBatchFileReader) -> Iterator[pa.RecordBatch]:
    for index in range(reader.num_record_batches):
        yield reader.get_batch(index)


def in_order(reader: pa.RecordBatchReader, columns: Sequence[str]) -> pa.RecordBatchReader:
    """``reader``'s batches with their columns in the order asked for (IPC reads them in the
    file's order); views, no copy."""
    if reader.schema.names == list(columns):
        return reader
    batches = (batch.select(columns) for batch in reader)
    return pa.RecordBatchReader.from_batches(pa.schema([reader.schema.field(name)
                                                        for name in columns]), batches)


def open_ipc(file: Any, columns: Sequence[str] | None, pool: pa.MemoryPool
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


def _uncompressed_batches(fd: int, columns: Sequence[str] | None
                          ) -> tuple[pa.ipc.RecordBatchFileReader, list[pa.RecordBatch],
                                     pa.Buffer] | None:
    """The reader and batches of the IPC file ``fd``, every metadata read into its image,
    and the image's memory, which the batches are views of; None for the stream format, a
    compressed file or one without batches."""
    try:
        image = FileImage.open(fd)
    except NotUncompressed:
        return None
    if image is None:
        return None
    reader, _ = open_ipc(image.file(), columns, pa.default_memory_pool())
    batches = list(file_batches(reader))
    if not (batches and views_of(batches[0], image.region)):
        return None
    return reader, batches, image.region


def ipc_file_by_pread(path: str, context: Context, columns: Sequence[str] | None,
                       stream: bool, prefetch: int) -> pa.Table | DeviceReader | None:
    """The uncompressed IPC file at ``path``: its footer and batches' metadata read with
    pread into an image of the file, their bytes with pread by the copy engine (pread
    copies from the page cache and finds a shrunk file's end, where a mapping's pages would
    SIGBUS): a Table, in one transfer, or a DeviceReader. None for the stream format, a
    compressed file or one without batches."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        opened = _uncompressed_batches(fd, columns)
    except BaseException:
        os.close(fd)
        raise
    if opened is None:
        os.close(fd)
        return None
    reader, batches, region = opened
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


class BatchDecoder:
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
