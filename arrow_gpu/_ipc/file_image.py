"""An uncompressed Arrow IPC file's metadata, read with pread into an image of the file.

The image is anonymous memory the size of the file. The file's footer and the metadata of
each message the footer lists are read into it where they lie in the file, once, when the
image is opened; the message bodies are not (their pages stay untouched zeros, which cost no
memory). pyarrow's IPC reader, reading the image from memory, makes batches whose buffers
are views of it at the file's own offsets, and the copy engine reads those ranges from the
file itself. No page of the file is ever mapped, so a file that shrinks while it is read
ends in ``OSError``, never in SIGBUS; and pyarrow's reader never calls back into Python
(its I/O threads would, holding the reader's Python objects to interpreter exit).

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

import mmap
import os
import struct
from typing import Optional

import pyarrow as pa

from arrow_gpu._cuda import _footer_blocks
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


class FileImage:
    """The IPC file open as ``fd``, as pyarrow's reader sees it through :meth:`file`: its
    footer and each message's metadata as the file holds them, the bodies zeros (views of
    :attr:`region`, at the file's offsets)."""

    def __init__(self, fd: int, size: int, memory: mmap.mmap, tail: int) -> None:
        self._fd = fd
        self._size = size
        self._memory = memory
        self._view = memoryview(memory)
        self.region = pa.py_buffer(memory)
        self._fill(0, 2 * len(FILE_MAGIC))  # the leading magic and its padding
        self._fill(tail, size - tail)  # the footer, its length and the trailing magic

    @classmethod
    def open(cls, fd: int) -> Optional[FileImage]:
        """The image of the IPC file ``fd``, every message's metadata read; None if it is not
        in the IPC file format, its footer cannot be read (pyarrow's reader of the file says
        why), or it is too large for the address space to hold its image.

        Raises
        ------
        NotUncompressed
            If a message's body must be decoded on the host.
        OSError
            If the file ends before a message's metadata does (it was truncated).
        """
        size = os.fstat(fd).st_size
        if size < 2 * len(FILE_MAGIC) + _TAIL:
            return None
        magic = len(FILE_MAGIC)
        ends = os.pread(fd, magic, 0) + os.pread(fd, magic, size - magic)
        if ends != FILE_MAGIC * 2:
            return None
        footer_length = int.from_bytes(os.pread(fd, 4, size - _TAIL), "little", signed=True)
        tail = size - _TAIL - footer_length
        if not 2 * len(FILE_MAGIC) <= tail <= size - _TAIL:
            return None
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        try:
            memory = mmap.mmap(-1, size, flags=flags)
        except OSError:  # more than the host lets one process reserve
            return None
        image = cls(fd, size, memory, tail)
        blocks = _footer_blocks(image._view[tail:size - _TAIL])
        if blocks is None:
            return None
        for offset, metadata_length, _ in blocks:
            image._read_metadata(offset, metadata_length)
        return image

    def file(self) -> pa.NativeFile:
        """The image as a file pyarrow's readers read (from memory, on any thread)."""
        return pa.BufferReader(self.region)

    def _fill(self, start: int, length: int) -> memoryview:
        """Bytes ``start`` to ``start + length`` of the file, read into the image."""
        into = self._view[start:start + length]
        if os.preadv(self._fd, [into], start) != length:
            raise _truncated(start + length)
        return into

    def _read_metadata(self, offset: int, length: int) -> None:
        """The message a footer's block places at ``offset``: its prefix and metadata
        (``length`` bytes, padding included) read into the image, its body left out."""
        start, end = max(offset, 0), min(offset + length, self._size)
        if end <= start:
            return  # outside the file: pyarrow's reader says so
        prefix = self._fill(start, min(_PREFIX, end - start))
        if len(prefix) < _PREFIX or prefix[:4] != _CONTINUATION:
            self._fill(start, end - start)  # no message starts there: read as pyarrow would
            return
        metadata_length = struct.unpack_from("<i", prefix, 4)[0]
        metadata_length = min(max(metadata_length, 0), end - start - _PREFIX)
        metadata = self._fill(start + _PREFIX, metadata_length)
        layout = record_batch_layout(bytes(metadata))
        if layout.compressed or layout.delta:
            raise NotUncompressed("the IPC file's batches are decoded on the host")
