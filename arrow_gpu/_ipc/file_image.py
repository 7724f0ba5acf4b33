"""An uncompressed Arrow IPC file's metadata, read with pread into an image of the file.

The image is anonymous memory the size of the file. The file's footer and each message's
metadata are read into it where they lie in the file; the message bodies are not (their
pages stay untouched zeros, which cost no memory). pyarrow's IPC reader, reading the image,
makes batches whose buffers are views of it at the file's own offsets, and the copy engine
reads those ranges from the file itself. No page of the file is ever mapped, so a file
that shrinks while it is read ends in ``OSError``, never in SIGBUS.

>>> import os, tempfile, pyarrow as pa
>>> path = os.path.join(tempfile.mkdtemp(), "x.arrow")
>>> with pa.ipc.new_file(path, pa.schema({"x": pa.int64()})) as writer:
...     writer.write(pa.record_batch({"x": [1, 2, 3]}))
>>> fd = os.open(path, os.O_RDONLY)
>>> image = FileImage.open(fd)
>>> batch = pa.ipc.open_file(image.file()).get_batch(0)
>>> buffer = batch.column(0).buffers()[1]
>>> image.region.address <= buffer.address < image.region.address + image.region.size
True
>>> buffer.to_pybytes() == bytes(24)  # the body was never read
True
>>> os.close(fd)
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from typing import Optional

import pyarrow as pa

from arrow_gpu._ipc.metadata import record_batch_layout

__all__ = ["FILE_MAGIC", "FileImage", "NotUncompressed"]

FILE_MAGIC = b"ARROW1"  # at the start and the end of the IPC file format
_TAIL = 10  # the footer's int32 length, then the magic
_CONTINUATION = b"\xff\xff\xff\xff"  # the start of every encapsulated message
_PREFIX = 8  # the continuation marker and the metadata's int32 length


def _truncated(end: int) -> OSError:
    return OSError(f"the IPC file was truncated while its metadata was read: it ends before "
                   f"byte {end}")


class NotUncompressed(Exception):
    """A message's body must be decoded on the host (compressed, or a delta dictionary that
    pyarrow concatenates): the image cannot stand in for it."""


class FileImage(io.RawIOBase):
    """The IPC file open as ``fd``, as pyarrow's reader sees it through :meth:`file`: what
    the reader reads of the footer and of each message's metadata comes from the file, the
    bodies read as zeros (views of :attr:`region`, at the file's offsets)."""

    def __init__(self, fd: int, size: int, memory: mmap.mmap) -> None:
        super().__init__()
        self._fd = fd
        self._size = size
        self._memory = memory
        self._view = memoryview(memory)
        self._position = 0
        footer_length = int.from_bytes(self._fill(size - _TAIL, 4), "little", signed=True)
        # Whatever lies from the footer on is read as it is: the footer and its length.
        self._tail = max(size - _TAIL - max(footer_length, 0), 0)
        self.region = pa.py_buffer(memory)

    @classmethod
    def open(cls, fd: int) -> Optional[FileImage]:
        """The image of the IPC file ``fd``; None if it is not in the IPC file format, or
        too large for the address space to hold its image."""
        size = os.fstat(fd).st_size
        if size < 2 * len(FILE_MAGIC) + _TAIL:
            return None
        magic = len(FILE_MAGIC)
        ends = os.pread(fd, magic, 0) + os.pread(fd, magic, size - magic)
        if ends != FILE_MAGIC * 2:
            return None
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        try:
            memory = mmap.mmap(-1, size, flags=flags)
        except OSError:  # more than the host lets one process reserve
            return None
        return cls(fd, size, memory)

    def file(self) -> pa.NativeFile:
        """The image as a file pyarrow's readers read."""
        return pa.PythonFile(self, mode="r")

    def _fill(self, start: int, length: int) -> memoryview:
        """Bytes ``start`` to ``start + length`` of the file, read into the image."""
        into = self._view[start:start + length]
        if os.preadv(self._fd, [into], start) != length:
            raise _truncated(start + length)
        return into

    def _read_into_image(self, start: int, length: int) -> None:
        if start < len(FILE_MAGIC) or start + length > self._tail:
            self._fill(start, length)  # the leading magic, or the footer
            return
        # pyarrow reads a message's metadata with its body (or alone, then the body apart,
        # as pyarrow 23 does): a read that starts with a message's prefix holds metadata.
        prefix = os.pread(self._fd, min(_PREFIX, length), start)
        if len(prefix) < min(_PREFIX, length):
            raise _truncated(start + len(prefix) + 1)
        if len(prefix) < _PREFIX or prefix[:4] != _CONTINUATION:
            return  # a body's buffers, read apart from their metadata
        self._view[start:start + _PREFIX] = prefix
        metadata_length = struct.unpack_from("<i", prefix, 4)[0]
        metadata_length = min(max(metadata_length, 0), length - _PREFIX)
        metadata = self._fill(start + _PREFIX, metadata_length)
        layout = record_batch_layout(bytes(metadata))
        if layout.compressed or layout.delta:
            raise NotUncompressed("the IPC file's batches are decoded on the host")

    # The file protocol pyarrow.PythonFile calls.

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def read(self, size: int = -1) -> memoryview:
        start = min(self._position, self._size)
        end = self._size if size is None or size < 0 else min(start + size, self._size)
        if end > start:
            self._read_into_image(start, end - start)
        self._position = end
        return self._view[start:end]
