"""Batches and tables handed to another process of this host through CUDA IPC, with one
device copy: the sender exports the driver allocations its buffers already live in, and
the receiver copies straight from them into one allocation of its own (or, on request,
views them).

The data travels as the Arrow IPC messages of a stream (schema, dictionaries, batches):
each message's flatbuffer metadata in the payload, each buffer of its body named by the
driver allocation it lives in and its offset there. A payload is a sized sealed record
(see arrow_gpu._ipc.sealed) whose body is::

    header       pid, pid namespace, kind, device number, token, #allocations, #messages
    allocations  the driver's CUipcMemHandle (64 bytes), the allocation's size
    messages     metadata length, body length, #segments, the metadata, then per segment:
                 allocation index, offset in the allocation, size, offset in the body

Data the driver cannot export where it lives (host data, memory of a stream-ordered pool,
foreign memory) is first copied into one device buffer (the staging copy), which is
exported instead.

The receiver opens each allocation once and keeps the most recently used ones open
(``OpenedAllocations``), keyed by the exporter and the handle's bytes: the driver gives
every allocation a handle of its own, so an allocation freed by the exporter and a new one
at its address are never confused, while a block that the exporter's caching allocator
reuses for new data is the same allocation, read anew at every hand-off.
"""

from __future__ import annotations

import collections
import os
import secrets
import struct
import threading
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

import pyarrow as pa

import arrow_gpu._ipc.metadata as _ipc_metadata
import arrow_gpu._ipc.wire as _ipc_wire
from arrow_gpu._cuda import (BufferReader, CudaBuffer, IpcMemHandle, _describe_handoff,
                             _isolated_copy, _read_handoff, write_to_new_buffer)
from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
from arrow_gpu.device import Context, context_of

Tabular = Union[pa.RecordBatch, pa.Table]
# (metadata, body length, [(offset in the body, the bytes on the device), ...])
ReadableMessage = tuple[bytes, int, list[tuple[int, CudaBuffer]]]

MAGIC = b"AGPU-BAT"
VERSION = 3
_HEADER = struct.Struct("<qQqq16sII")
_ALLOCATION = struct.Struct("<64sq")
_MESSAGE = struct.Struct("<qqI")
_SEGMENT = struct.Struct("<Iqqq")
KINDS = ("batch", "table")
_PIDS = range(1, 2**31)  # pid_t is a signed 32-bit int; 0 and below name process groups
REMEDY = "send SharedBatch.payload unchanged, or export the data again with export_batch()"


def _pid_namespace() -> int:
    """This process's pid namespace (0 where it cannot be told): pids name processes only
    inside one."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


_PID_NAMESPACE = _pid_namespace()


@dataclass(frozen=True)
class Segment:
    allocation: int  # index into Payload.allocations
    offset: int  # where the bytes start in the allocation
    size: int
    body_offset: int  # where they go in the message body


@dataclass(frozen=True)
class Message:
    metadata: bytes
    body_length: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Payload:
    pid: int
    pid_namespace: int
    kind: str
    device_number: int
    token: bytes
    allocations: tuple[tuple[bytes, int], ...]  # (driver handle, allocation size)
    messages: tuple[Message, ...]

    def exporter_alive(self) -> bool:
        return _running(self.pid, self.pid_namespace)


def _running(pid: int, pid_namespace: int) -> bool:
    """Whether process ``pid`` still runs (assumed where it cannot be told); never for a pid
    no process can have."""
    if pid not in _PIDS:
        return False
    if pid_namespace != _PID_NAMESPACE:
        return True
    try:
        os.kill(pid, 0)
    except PermissionError:  # it runs, as another user
        return True
    except OSError:  # ProcessLookupError above all
        return False
    return True


def _write_stream(data: Tabular, sink: pa.NativeFile) -> None:
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)


def _batches(data: Tabular) -> list[pa.RecordBatch]:
    return data.to_batches() if isinstance(data, pa.Table) else [data]


class ExportedSegment(NamedTuple):
    """Bytes of a message body where they live (``_describe_handoff`` describes them)."""
    body_offset: int
    size: int
    source: Optional[CudaBuffer]  # None where the driver cannot export the memory
    driver_handle: Optional[bytes]
    allocation_offset: int
    allocation_size: int


# (metadata, body length, segments) per IPC message
Described = list[tuple[bytes, int, list[ExportedSegment]]]


def _described(schema: pa.Schema, batches: list[pa.RecordBatch]) -> Described:
    return [(metadata, body_length, [ExportedSegment(*segment) for segment in segments])
            for metadata, body_length, segments in _describe_handoff(schema, batches)]


def _exportable(described: Described) -> bool:
    return all(segment.source is not None for _, _, segments in described
               for segment in segments)


class Export:
    """What the sender holds while a hand-off may be read: the buffers the payload names
    (so that their memory stays allocated), and the payload.

    Device data on ``context``'s device is exported where it lives; anything else is first
    copied into one device buffer (a driver allocation of its own with ``isolated``).
    """

    def __init__(self, data: Tabular, context: Context, kind: str, isolated: bool) -> None:
        self.token = secrets.token_bytes(16)
        source = context_of(data)
        described: Optional[Described] = None
        if not isolated and source == context:
            # The receiver, another process, is not ordered after this process's streams.
            context.synchronize()
            described = _described(data.schema, _batches(data))
            self.nbytes = sum(segment.size for _, _, segments in described
                              for segment in segments)
        if described is None or not _exportable(described):
            described, self.nbytes = self._staged(data, context, isolated)
        if not _exportable(described):  # the current allocator's memory cannot be exported
            described, self.nbytes = self._staged(data, context, True)
        # The sources hold the exported memory; this process cannot open its own
        # handles, so it reads them directly. (Not `data` itself: the caller may tie the
        # export's life to that of `data`.)
        self._readable: Optional[list[ReadableMessage]] = [
            (metadata, body_length, [(segment.body_offset, source) for segment in segments
                                     if (source := segment.source) is not None])
            for metadata, body_length, segments in described]
        self.payload = self._sealed(kind, context.device_number, described)

    @staticmethod
    def _staged(data: Tabular, context: Context, isolated: bool) -> tuple[Described, int]:
        """The data copied into one device buffer, read back as views of it, described;
        and the buffer's size."""
        buffer = write_to_new_buffer(context, lambda sink: _write_stream(data, sink))
        if isolated:
            buffer = _isolated_copy(buffer)
        reader = pa.ipc.open_stream(BufferReader(buffer))
        return _described(reader.schema, list(reader)), buffer.size

    def _sealed(self, kind: str, device_number: int, described: Described) -> bytes:
        allocations: dict[bytes, int] = {}  # driver handle: its index
        sizes: list[int] = []
        messages: list[bytes] = []
        for metadata, body_length, segments in described:
            messages += [_MESSAGE.pack(len(metadata), body_length, len(segments)), metadata]
            for segment in segments:
                handle = segment.driver_handle or b""  # every one is set: see _exportable
                if handle not in allocations:
                    allocations[handle] = len(allocations)
                    sizes.append(segment.allocation_size)
                messages.append(_SEGMENT.pack(allocations[handle], segment.allocation_offset,
                                              segment.size, segment.body_offset))
        header = _HEADER.pack(os.getpid(), _PID_NAMESPACE, KINDS.index(kind), device_number,
                              self.token, len(allocations), len(described))
        table = [_ALLOCATION.pack(handle, size) for handle, size in zip(allocations, sizes)]
        return seal_sized(MAGIC, VERSION, b"".join([header, *table, *messages]))

    @property
    def closed(self) -> bool:
        return self._readable is None

    def close(self) -> None:
        self._readable = None

    def readable(self) -> list[ReadableMessage]:
        """The messages with their bodies' sources, for this process to read."""
        if self._readable is None:
            raise ValueError("this shared batch was closed by its exporter (this process)")
        return self._readable


def parse(data: bytes) -> Payload:
    """The payload ``Export`` sealed; ValueError if it is not one, exactly as sealed and
    naming only bytes inside the allocations it names."""
    body = unseal_sized(bytes(data), MAGIC, VERSION, "an arrow_gpu shared batch payload",
                        REMEDY)

    def refuse(problem: str) -> ValueError:
        return ValueError(f"an arrow_gpu shared batch payload {problem}; {REMEDY}")

    try:
        (pid, namespace, kind, device_number, token, allocation_count,
         message_count) = _HEADER.unpack_from(body, 0)
        position = _HEADER.size
        allocations = []
        for _ in range(allocation_count):
            handle, size = _ALLOCATION.unpack_from(body, position)
            position += _ALLOCATION.size
            if size <= 0:
                raise refuse(f"names an allocation of {size} bytes")
            allocations.append((handle, size))
        messages = []
        for _ in range(message_count):
            metadata_length, body_length, segment_count = _MESSAGE.unpack_from(body, position)
            position += _MESSAGE.size
            if metadata_length < 0 or body_length < 0 or position + metadata_length > len(body):
                raise refuse("has a message of impossible lengths")
            metadata = body[position:position + metadata_length]
            position += metadata_length
            # Arrow decompresses bodies, and concatenates a delta dictionary batch's values
            # with the dictionary before them, on the host, where these are not: never sent.
            layout = _ipc_metadata.record_batch_layout(metadata)
            if layout.compressed:
                raise refuse("holds a compressed message, which export_batch never sends")
            if layout.delta:
                raise refuse("holds a delta dictionary batch, which export_batch never sends")
            segments = []
            for _ in range(segment_count):
                segment = Segment(*_SEGMENT.unpack_from(body, position))
                position += _SEGMENT.size
                if (segment.allocation >= len(allocations) or segment.offset < 0 or
                        segment.size <= 0 or segment.body_offset < 0 or
                        segment.offset + segment.size > allocations[segment.allocation][1] or
                        segment.body_offset + segment.size > body_length):
                    raise refuse("names bytes outside its allocations or message bodies")
                segments.append(segment)
            messages.append(Message(metadata, body_length, tuple(segments)))
    except struct.error as error:
        raise refuse("is shorter than its own counts say") from error
    if position != len(body):
        raise refuse(f"has {len(body) - position} bytes past its messages")
    if not 0 <= device_number < 2**31:
        raise refuse(f"names device {device_number}")
    if pid not in _PIDS:
        raise refuse(f"names exporting process {pid}, which no process can be")
    if not 0 <= kind < len(KINDS):
        # Sealed by an arrow_gpu that knows other kinds, or forged.
        raise ValueError(f"an arrow_gpu shared batch payload of unknown kind {kind}; {REMEDY}")
    return Payload(pid, namespace, KINDS[kind], device_number, token, tuple(allocations),
                   tuple(messages))


class OpenedAllocations:
    """Allocations other processes exported, opened in this one.

    Each is opened once while anything uses it (CUDA maps a handle once per process), and
    the ``limit`` most recently used stay open after their last use, so that the next
    hand-offs from the same allocations pay no open. One dropped from the recent ones is
    closed when no buffer still uses it. The recent ones of an exporter that has exited are
    dropped when it is next seen gone.
    """

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self.opens = 0  # driver opens made, for tests and diagnostics
        self._lock = threading.Lock()
        self._open: "weakref.WeakValueDictionary[tuple[Any, ...], CudaBuffer]" = (
            weakref.WeakValueDictionary())
        self._recent: "collections.OrderedDict[tuple[Any, ...], CudaBuffer]" = (
            collections.OrderedDict())

    def view(self, payload: Payload, index: int, context: Context) -> CudaBuffer:
        """The whole allocation ``payload.allocations[index]``, opened in ``context``.

        The view keeps the opened allocation (and so its entry) alive while any buffer
        sliced from it lives.
        """
        handle, size = payload.allocations[index]
        key = (payload.pid, payload.pid_namespace, context.handle, handle)
        with self._lock:
            opened = self._open.get(key)
            if opened is None:
                opened = self._open_allocation(payload, handle, size, context)
                self._open[key] = opened
            self._recent[key] = opened
            self._recent.move_to_end(key)
            while len(self._recent) > self.limit:
                self._recent.popitem(last=False)
        if opened.size < size:
            raise ValueError(f"an arrow_gpu shared batch payload names an allocation of {size} "
                             f"bytes where {opened.size} are open; {REMEDY}")
        return context.foreign_buffer(opened.address, size, base=opened)

    def _open_allocation(self, payload: Payload, handle: bytes, size: int,
                         context: Context) -> CudaBuffer:
        """Opens an allocation (the lock held). An exporter that freed an allocation this
        process keeps open, and was given the same addresses again, exports a new handle
        the driver refuses to map over the old one (CUDA_ERROR_ALREADY_MAPPED): the
        exporter's recent ones are closed then, and the open tried once more."""
        ipc_handle = IpcMemHandle.from_buffer(_ipc_wire.serialize(handle, 0, size))
        try:
            opened = context.open_ipc_buffer(ipc_handle)
        except OSError as error:  # a driver error
            if "ALREADY_MAPPED" not in str(error):
                raise
            exporter = (payload.pid, payload.pid_namespace)
            for key in [key for key in self._recent if key[:2] == exporter]:
                del self._recent[key]  # closed now, unless a buffer still uses it
            try:
                opened = context.open_ipc_buffer(ipc_handle)
            except OSError as again:
                if "ALREADY_MAPPED" not in str(again):
                    raise
                raise ValueError(
                    f"process {payload.pid} reused the addresses of device memory it shared "
                    "before, and buffers of this process still view that earlier hand-off: "
                    "release them (import_batch(..., copy=False) views) before importing "
                    "more from it") from again
        self.opens += 1
        return opened

    def forget(self, pid: int, pid_namespace: int) -> None:
        """Drop the recent allocations of an exporter (they close once unused)."""
        with self._lock:
            for key in [key for key in self._recent if key[:2] == (pid, pid_namespace)]:
                del self._recent[key]

    def forget_exited(self) -> None:
        """Drop the recent allocations of exporters that have exited."""
        with self._lock:
            exporters = {key[:2] for key in self._recent}
        for pid, namespace in exporters:
            if not _running(pid, namespace):
                self.forget(pid, namespace)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"opens": self.opens, "recent": len(self._recent), "open": len(self._open)}


OPENED = OpenedAllocations()

# Exports alive in this process, by token, so that the exporting process can import its
# own payload (CUDA cannot open a handle in the process that made it).
_exports: "weakref.WeakValueDictionary[bytes, Export]" = weakref.WeakValueDictionary()
_exports_lock = threading.Lock()


def register(export: Export) -> None:
    with _exports_lock:
        _exports[export.token] = export


def _exited(payload: Payload, during: str) -> ValueError:
    return ValueError(f"cannot {during} the shared batch: the exporting process "
                      f"{payload.pid} has exited, and its device memory with it")


def receive(payload: Payload, context: Context, copy: bool) -> Tabular:
    """What ``payload`` describes, on ``context``'s device: copied into one new allocation
    with ``copy``, else views of the exporter's memory."""
    if payload.pid == os.getpid() and payload.pid_namespace == _PID_NAMESPACE:
        export = _exports.get(payload.token)
        if export is None:
            raise ValueError("this shared batch was closed by its exporter (this process)")
        schema, batches = _read_handoff(export.readable(), context, copy)
    else:
        schema, batches = _read_remote(payload, context, copy)
    if payload.kind == "batch":
        if len(batches) != 1:
            raise ValueError(f"an arrow_gpu shared batch payload of a batch holds "
                             f"{len(batches)} batches; {REMEDY}")
        return batches[0]
    return pa.Table.from_batches(batches, schema=schema)


def _read_remote(payload: Payload, context: Context, copy: bool
                 ) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    OPENED.forget_exited()
    # Before anything of it is opened (and so recorded among the opened allocations).
    if not payload.exporter_alive():
        raise _exited(payload, "open")
    try:
        views = [OPENED.view(payload, index, context)
                 for index in range(len(payload.allocations))]
    except OSError as error:
        if not payload.exporter_alive():
            raise _exited(payload, "open") from error
        raise
    messages = [(message.metadata, message.body_length,
                 [(segment.body_offset, views[segment.allocation].slice(segment.offset,
                                                                         segment.size))
                  for segment in message.segments])
                for message in payload.messages]
    try:
        schema, batches = _read_handoff(messages, context, copy)
    except (OSError, ValueError, KeyError, NotImplementedError, TypeError, IndexError) as error:
        if isinstance(error, OSError):
            OPENED.forget(payload.pid, payload.pid_namespace)
            if not payload.exporter_alive():
                raise _exited(payload, "read") from error
            if str(error).startswith("Cuda error"):  # the driver's, not the messages'
                raise
        # Arrow's IPC reader refused a message (IOError for malformed metadata, KeyError for
        # a dictionary of an unknown id...): the payload's fault, whatever Arrow calls it.
        raise ValueError(f"an arrow_gpu shared batch payload holds Arrow IPC messages that "
                         f"cannot be read ({error}); {REMEDY}") from error
    # Buffer sizes against lengths (metadata only): a forged length would read past them.
    for batch in batches:
        batch.validate()
    # The exporter's memory is only vouched for while it runs: bytes read from an exporter
    # that has exited since are not handed out, even if the driver still showed them.
    if not payload.exporter_alive():
        OPENED.forget(payload.pid, payload.pid_namespace)
        raise _exited(payload, "read")
    return schema, batches
