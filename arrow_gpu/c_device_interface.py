"""Arrow's C Device Data Interface, implemented here with ctypes.

The structures follow the specification byte for byte. Export walks a pyarrow array
itself (pyarrow's exporter reads validity bitmaps on the host to count nulls, which
crashes on device memory) and records a CUDA event that the consumer must wait on;
import moves the struct out of any producer's capsule, validates it, waits on its
``sync_event`` and only then hands it to pyarrow's importer.

>>> import pyarrow as pa
>>> import arrow_gpu
>>> from arrow_gpu.c_device_interface import DeviceData, import_array
>>> on_gpu = pa.array([1, None, 3]).copy_to(arrow_gpu.Context(0).memory_manager)
>>> back = import_array(DeviceData(on_gpu))
>>> back.copy_to(pa.default_cpu_memory_manager()).to_pylist()
[1, None, 3]
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_gpu._cuda import Context, Event, Stream, stream_handle

__all__ = [
    "ArrowArray",
    "ArrowArrayStream",
    "ArrowDeviceArray",
    "ArrowDeviceArrayStream",
    "ArrowSchema",
    "DEVICE_CPU",
    "DEVICE_CUDA",
    "DEVICE_CUDA_HOST",
    "DEVICE_CUDA_MANAGED",
    "DeviceData",
    "count_nulls",
    "import_array",
    "import_record_batch",
    "import_stream",
    "iter_stream",
    "parse_format",
]

DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3
DEVICE_CUDA_MANAGED = 13
_CUDA_DEVICES = (DEVICE_CUDA, DEVICE_CUDA_HOST, DEVICE_CUDA_MANAGED)
# What can be imported: no Arrow memory manager exists for managed memory (Arrow's own CUDA
# module has none either), so pyarrow could not wrap its buffers.
_KNOWN_DEVICES = (DEVICE_CPU, DEVICE_CUDA, DEVICE_CUDA_HOST)

# ---------------------------------------------------------------------------
# The structures (Arrow C data interface and C device data interface)
# ---------------------------------------------------------------------------


class ArrowSchema(ctypes.Structure):
    """``struct ArrowSchema``."""


class ArrowArray(ctypes.Structure):
    """``struct ArrowArray``."""


class ArrowDeviceArray(ctypes.Structure):
    """``struct ArrowDeviceArray``."""


class ArrowDeviceArrayStream(ctypes.Structure):
    """``struct ArrowDeviceArrayStream``."""


class ArrowArrayStream(ctypes.Structure):
    """``struct ArrowArrayStream`` (the host-only stream)."""


SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
STREAM_GET_SCHEMA = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ArrowDeviceArrayStream), ctypes.POINTER(ArrowSchema))
STREAM_GET_NEXT = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ArrowDeviceArrayStream), ctypes.POINTER(ArrowDeviceArray))
STREAM_GET_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ArrowDeviceArrayStream))
STREAM_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowDeviceArrayStream))

ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_void_p),  # binary, not NUL-terminated text
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", SCHEMA_RELEASE),
    ("private_data", ctypes.c_void_p),
]
ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", ARRAY_RELEASE),
    ("private_data", ctypes.c_void_p),
]
ArrowDeviceArray._fields_ = [
    ("array", ArrowArray),
    ("device_id", ctypes.c_int64),
    ("device_type", ctypes.c_int32),
    ("sync_event", ctypes.c_void_p),
    ("reserved", ctypes.c_int64 * 3),
]
ArrowDeviceArrayStream._fields_ = [
    ("device_type", ctypes.c_int32),
    ("get_schema", STREAM_GET_SCHEMA),
    ("get_next", STREAM_GET_NEXT),
    ("get_last_error", STREAM_GET_LAST_ERROR),
    ("release", STREAM_RELEASE),
    ("private_data", ctypes.c_void_p),
]
ArrowArrayStream._fields_ = [
    ("get_schema", ctypes.c_void_p),
    ("get_next", ctypes.c_void_p),
    ("get_last_error", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

# The release member sits at the same place in every instance of a struct; writing a NULL
# there is how a consumer marks a struct it moved out as released.
_RELEASE_OFFSET = {
    ArrowSchema: ArrowSchema.release.offset,
    ArrowArray: ArrowArray.release.offset,
    ArrowDeviceArray: ArrowDeviceArray.array.offset + ArrowArray.release.offset,
    ArrowDeviceArrayStream: ArrowDeviceArrayStream.release.offset,
}

# ---------------------------------------------------------------------------
# PyCapsules through the C API
# ---------------------------------------------------------------------------

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
# Capsules are passed by address (id()): the destructor sees one mid-destruction, which
# must not be turned back into a counted reference.
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.calloc.restype = ctypes.c_void_p
_libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]

_CAPSULE_NAMES = {
    ArrowSchema: b"arrow_schema",
    ArrowDeviceArray: b"arrow_device_array",
    ArrowDeviceArrayStream: b"arrow_device_array_stream",
}
# Capsule names must outlive their capsules: keep the bytes objects here.
_NAME_BY_STRUCT = {struct: ctypes.create_string_buffer(name) for struct, name in _CAPSULE_NAMES.items()}
_STRUCT_BY_NAME = {name: struct for struct, name in _CAPSULE_NAMES.items()}


def _release_struct_at(address: int, struct: type) -> None:
    """Call a struct's release callback if it has not been released yet."""
    instance = struct.from_address(address)
    release = instance.array.release if struct is ArrowDeviceArray else instance.release
    if release:
        if struct is ArrowDeviceArray:
            release(ctypes.pointer(instance.array))
        else:
            release(ctypes.pointer(instance))
        # Released once even if the callback raised or did not mark it: never call it again.
        ctypes.c_void_p.from_address(address + _RELEASE_OFFSET[struct]).value = None


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    name = _api.PyCapsule_GetName(capsule)
    pointer = _api.PyCapsule_GetPointer(capsule, name)
    _release_struct_at(pointer, _STRUCT_BY_NAME[name])
    _libc.free(pointer)


def _new_capsule(struct: type) -> tuple[Any, Any]:
    """A capsule owning a zeroed, malloc'ed ``struct`` (returned too, to be filled in)."""
    address = _libc.calloc(1, ctypes.sizeof(struct))
    if not address:
        raise MemoryError(f"cannot allocate a {struct.__name__}")
    capsule = _api.PyCapsule_New(address, _NAME_BY_STRUCT[struct], _capsule_destructor)
    return capsule, struct.from_address(address)


def _moved_from_capsule(capsule: Any, struct: type) -> Any:
    """Move the struct out of a capsule into memory we own; the capsule's copy is released.

    The new struct is returned; whoever holds it must release it exactly once.
    """
    name = _CAPSULE_NAMES[struct]
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"expected a PyCapsule named {name.decode()!r}, got {type(capsule).__name__}")
    if not _api.PyCapsule_IsValid(id(capsule), name):
        found = _api.PyCapsule_GetName(id(capsule))
        raise ValueError(f"expected a capsule named {name.decode()!r}, got {found!r}")
    source = _api.PyCapsule_GetPointer(id(capsule), name)
    if not source:
        raise ValueError(f"capsule {name.decode()!r} holds a NULL pointer")
    moved = struct()
    ctypes.memmove(ctypes.addressof(moved), source, ctypes.sizeof(struct))
    if _is_released(moved):
        # Consumed already: its other members may point to freed memory, never read them.
        raise ValueError(f"capsule {name.decode()!r} holds a released {struct.__name__}; "
                         "a capsule can be imported only once")
    ctypes.c_void_p.from_address(source + _RELEASE_OFFSET[struct]).value = None
    return moved


def _is_released(struct: Any) -> bool:
    return not (struct.array.release if isinstance(struct, ArrowDeviceArray) else struct.release)


def _release(struct: Any) -> None:
    """Release a struct we own (a no-op once released), exactly once."""
    if not _is_released(struct):
        _release_struct_at(ctypes.addressof(struct), type(struct))


# ---------------------------------------------------------------------------
# Format strings
# ---------------------------------------------------------------------------


@dataclass
class Layout:
    """What a format string says about the physical layout of an array."""

    format: str
    buffers: int  # exact count, or the minimum for view types
    children: int | None  # None: as many as the schema has
    has_validity: bool = True
    variadic: bool = False
    offsets_on_host: bool = False  # pyarrow's importer reads the last offset on the host
    fixed_size: int = 0  # fixed_size_list width
    type_ids: list[int] = field(default_factory=list)


_PRIMITIVE = set("bcCsSiIlLefg") | {
    "tdD", "tdm", "tts", "ttm", "ttu", "ttn", "tDs", "tDm", "tDu", "tDn", "tiM", "tiD", "tin"}
_FORMAT_PATTERNS = [
    (re.compile(r"w:\d+"), lambda m: Layout(m.group(), 2, 0)),
    (re.compile(r"d:\d+,-?\d+(,(32|64|128|256))?"), lambda m: Layout(m.group(), 2, 0)),
    (re.compile(r"ts[smun]:.*"), lambda m: Layout(m.group(), 2, 0)),
    (re.compile(r"\+w:([1-9]\d*|0)"),
     lambda m: Layout(m.group(), 1, 1, fixed_size=int(m.group(1)))),
    (re.compile(r"\+u([sd]):((\d+)(,\d+)*)?"),
     lambda m: Layout(m.group(), 1 if m.group(1) == "s" else 2, None, has_validity=False,
                      type_ids=[int(t) for t in m.group(2).split(",")] if m.group(2) else [])),
]
_FIXED_FORMATS = {
    "n": Layout("n", 0, 0, has_validity=False),
    "z": Layout("z", 3, 0, offsets_on_host=True),
    "u": Layout("u", 3, 0, offsets_on_host=True),
    "Z": Layout("Z", 3, 0, offsets_on_host=True),
    "U": Layout("U", 3, 0, offsets_on_host=True),
    "vz": Layout("vz", 3, 0, variadic=True),
    "vu": Layout("vu", 3, 0, variadic=True),
    "+l": Layout("+l", 2, 1, offsets_on_host=True),
    "+L": Layout("+L", 2, 1, offsets_on_host=True),
    "+m": Layout("+m", 2, 1, offsets_on_host=True),
    "+vl": Layout("+vl", 3, 1),
    "+vL": Layout("+vL", 3, 1),
    "+s": Layout("+s", 1, None),
    "+r": Layout("+r", 0, 2, has_validity=False),
}


def parse_format(format: str) -> Layout:
    """The layout of a C data interface format string; ValueError if it is unknown.

    >>> parse_format("+w:4").fixed_size
    4
    >>> parse_format("xyz")
    Traceback (most recent call last):
    ...
    ValueError: unknown Arrow format string 'xyz'
    """
    if format in _PRIMITIVE:
        return Layout(format, 2, 0)
    if format in _FIXED_FORMATS:
        return _FIXED_FORMATS[format]
    for pattern, make in _FORMAT_PATTERNS:
        match = pattern.fullmatch(format)
        if match:
            return make(match)
    raise ValueError(f"unknown Arrow format string {format!r}")


# ---------------------------------------------------------------------------
# Validation of imported structs (host-only reads: never touches device memory)
# ---------------------------------------------------------------------------


def _schema_format(schema: ArrowSchema) -> str:
    if not schema.format:
        raise ValueError("ArrowSchema has a NULL format string")
    return schema.format.decode("utf-8", "replace")


def _schema_children(schema: ArrowSchema, path: str) -> list[ArrowSchema]:
    """The children of a schema, refusing the NULL pointers that reading them would follow."""
    if schema.n_children < 0:
        raise ValueError(f"{path}: the schema has a negative n_children ({schema.n_children})")
    if schema.n_children and not schema.children:
        raise ValueError(f"{path}: the schema has {schema.n_children} children but a NULL "
                         "children pointer")
    children = [schema.children[i] for i in range(schema.n_children)]
    for i, child in enumerate(children):
        if not child:
            raise ValueError(f"{path}: schema child {i} is NULL")
    return [child.contents for child in children]


def _signature(schema: ArrowSchema) -> tuple:
    """The physical type of a schema: formats of it and its children, names ignored."""
    children = tuple(_signature(child) for child in _schema_children(schema, "ArrowSchema"))
    dictionary = _signature(schema.dictionary.contents) if schema.dictionary else None
    return (_schema_format(schema), children, dictionary)


def _validate(schema: ArrowSchema, array: ArrowArray, path: str = "array") -> bool:
    """Check ``array`` against ``schema``; True if pyarrow will read offsets on the host."""
    layout = parse_format(_schema_format(schema))
    schema_children = _schema_children(schema, path)
    if array.length < 0 or array.offset < 0:
        raise ValueError(f"{path}: negative length ({array.length}) or offset ({array.offset})")
    if array.null_count < -1:
        raise ValueError(f"{path}: invalid null_count {array.null_count}")
    if array.n_children != schema.n_children:
        raise ValueError(f"{path}: the array has {array.n_children} children, its schema "
                         f"{schema.n_children}")
    if layout.children is not None and schema.n_children != layout.children:
        raise ValueError(f"{path}: format {layout.format!r} needs {layout.children} children, "
                         f"got {schema.n_children}")
    if layout.type_ids and len(layout.type_ids) != schema.n_children:
        raise ValueError(f"{path}: union lists {len(layout.type_ids)} type ids for "
                         f"{schema.n_children} children")
    if layout.variadic:
        if array.n_buffers < layout.buffers:
            raise ValueError(f"{path}: a view array needs at least 3 buffers, got {array.n_buffers}")
    elif array.n_buffers != layout.buffers:
        raise ValueError(f"{path}: format {layout.format!r} needs {layout.buffers} buffers, "
                         f"got {array.n_buffers}")
    if array.n_buffers and not array.buffers:
        raise ValueError(f"{path}: NULL buffers pointer")
    if array.n_children and not array.children:
        raise ValueError(f"{path}: NULL children pointer")
    first_data = 1 if layout.has_validity else 0
    extent = array.offset + array.length
    if extent:
        for i in range(first_data, array.n_buffers):
            if not array.buffers[i]:
                raise ValueError(f"{path}: buffer {i} is NULL in a non-empty array")
    if layout.variadic and array.n_buffers > layout.buffers and not array.buffers[array.n_buffers - 1]:
        # pyarrow reads the variadic buffer sizes on the host, even in an empty array.
        raise ValueError(f"{path}: the variadic buffer sizes (last buffer) are NULL")
    if layout.has_validity and array.n_buffers and not array.buffers[0] and array.null_count > 0:
        raise ValueError(f"{path}: {array.null_count} nulls but no validity bitmap")
    if bool(schema.dictionary) != bool(array.dictionary):
        raise ValueError(f"{path}: dictionary present in only one of schema and array")
    needs_host = layout.offsets_on_host
    for i, child_schema in enumerate(schema_children):
        child = array.children[i]
        if not child:
            raise ValueError(f"{path}: child {i} is NULL")
        child = child.contents
        if not child.release:
            raise ValueError(f"{path}: child {i} is released")
        minimum = {"+s": extent, "+w": extent * layout.fixed_size}.get(layout.format[:2], 0)
        if layout.format.startswith("+us"):
            minimum = extent
        if child.length < minimum:
            raise ValueError(f"{path}: child {i} has {child.length} slots, needs {minimum}")
        needs_host |= _validate(child_schema, child, f"{path}.children[{i}]")
    if array.dictionary:
        dictionary = array.dictionary.contents
        if not dictionary.release:
            raise ValueError(f"{path}: dictionary is released")
        needs_host |= _validate(schema.dictionary.contents, dictionary, f"{path}.dictionary")
    return needs_host


def _check_device(device_type: int, device_id: int, expected: tuple[int, int] | None) -> None:
    if device_type not in _KNOWN_DEVICES:
        raise ValueError(f"unsupported device_type {device_type}: arrow_gpu imports CPU (1), "
                         "CUDA (2) and CUDA_HOST (3) memory; copy the data into one of them")
    if device_type == DEVICE_CPU and device_id != -1:
        raise ValueError(f"a CPU array must have device_id -1, got {device_id}")
    if device_type in _CUDA_DEVICES and not 0 <= device_id < Context.get_num_devices():
        raise ValueError(f"device_id {device_id} is not a visible CUDA device")
    if expected is not None and (device_type, device_id) != expected:
        raise ValueError(f"array is on device (type {device_type}, id {device_id}); "
                         f"expected (type {expected[0]}, id {expected[1]})")


# ---------------------------------------------------------------------------
# Null counts
# ---------------------------------------------------------------------------


def count_nulls(address: int, device_type: int, device_id: int, bit_offset: int,
                length: int) -> int:
    """Zero bits in a validity bitmap anywhere (device bitmaps are copied, 1/8 byte a value).

    Exact counts matter: pyarrow counts unknown (-1) ones on the host whenever it builds a
    ChunkedArray or exports, and crashes doing so on device memory. The data must be ready.
    """
    if length == 0:
        return 0
    start, end = bit_offset // 8, (bit_offset + length + 7) // 8
    if device_type == DEVICE_CUDA:
        view = Context(device_id).foreign_buffer(address + start, end - start)
        raw = view.copy_to_host().to_pybytes()
    else:  # CPU, pinned and managed memory are readable from the host
        raw = ctypes.string_at(address + start, end - start)
    first = bit_offset % 8
    bits = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")[first:first + length]
    return length - int(bits.sum())


def _fill_null_counts(schema: ArrowSchema, array: ArrowArray, device: tuple[int, int]) -> None:
    """Replace unknown null counts of an imported tree by exact ones."""
    layout = parse_format(_schema_format(schema))
    if array.null_count == -1:
        if layout.has_validity and array.n_buffers and array.buffers[0]:
            array.null_count = count_nulls(array.buffers[0], *device, array.offset, array.length)
        elif layout.format == "n":
            array.null_count = array.length
        else:
            array.null_count = 0
    for i in range(array.n_children):
        _fill_null_counts(schema.children[i].contents, array.children[i].contents, device)
    if array.dictionary:
        _fill_null_counts(schema.dictionary.contents, array.dictionary.contents, device)


def _has_unknown_null_count(array: ArrowArray) -> bool:
    children = (array.children[i].contents for i in range(array.n_children))
    dictionary = [array.dictionary.contents] if array.dictionary else []
    return array.null_count == -1 or any(
        _has_unknown_null_count(child) for child in itertools.chain(children, dictionary))


# ---------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------


def _wait(device_array: ArrowDeviceArray, stream: Any, on_host: bool) -> None:
    """Honour the producer's sync_event, then clear it: the data is ready for the consumer."""
    if device_array.sync_event and device_array.device_type in _CUDA_DEVICES:
        context = Context(int(device_array.device_id))
        handle = ctypes.c_void_p.from_address(device_array.sync_event).value or 0
        event = Event.wrap(handle, context)
        if stream is not None:
            Stream.wrap(stream, context).wait_event(event)
        if stream is None or on_host:
            event.synchronize()
    # The event stays the producer's (freed by its release); pyarrow must not wait on it again.
    device_array.sync_event = None


def _import_moved(schema: ArrowSchema, device_array: ArrowDeviceArray, *, stream: Any,
                  device: tuple[int, int] | None, batch: bool) -> pa.Array | pa.RecordBatch:
    """Validate structs we own and hand them to pyarrow; they end up released either way."""
    try:
        # ``reserved`` is not checked: pyarrow leaves it uninitialised in some exports.
        _check_device(device_array.device_type, device_array.device_id, device)
        on_host = _validate(schema, device_array.array)
        unknown_counts = _has_unknown_null_count(device_array.array)
        if batch and _schema_format(schema) != "+s":
            raise ValueError("a record batch needs a struct ('+s') schema")
        _wait(device_array, stream, on_host or unknown_counts)
        if unknown_counts:
            _fill_null_counts(schema, device_array.array,
                              (device_array.device_type, device_array.device_id))
        importer = pa.RecordBatch if batch else pa.Array
        return importer._import_from_c_device(ctypes.addressof(device_array),
                                              ctypes.addressof(schema))
    finally:
        _release(schema)
        _release(device_array)


def _no_request_for_capsules(requested_schema: Any) -> None:
    # Capsules are exported already: a request they cannot honour must not be ignored.
    if requested_schema is not None:
        raise ValueError("requested_schema is asked of a producer object, but capsules were "
                         "given; pass the producer itself to import_array/import_stream")


def _capsules(obj: Any, requested_schema: Any) -> tuple[Any, Any]:
    if isinstance(obj, tuple) and len(obj) == 2:
        _no_request_for_capsules(requested_schema)
        return obj
    producer = getattr(obj, "__arrow_c_device_array__", None)
    if producer is None:
        raise TypeError(f"'{type(obj).__name__}' object does not expose __arrow_c_device_array__")
    return producer(requested_schema) if requested_schema is not None else producer()


def _requested(schema: pa.Schema | pa.DataType | pa.Field | None) -> Any:
    return None if schema is None else schema.__arrow_c_schema__()


def import_array(obj: Any, *, stream: Any = None, device: tuple[int, int] | None = None,
                 requested_schema: pa.DataType | pa.Field | None = None) -> pa.Array:
    """Import a device array from any producer of ``__arrow_c_device_array__``.

    ``obj`` is such an object or a ``(schema_capsule, array_capsule)`` pair. ``stream``
    (an int handle or an object with ``__cuda_stream__``) is made to wait on the producer's
    event; without one the host waits. ``device=(device_type, device_id)`` rejects arrays
    elsewhere.
    """
    schema_capsule, array_capsule = _capsules(obj, _requested(requested_schema))
    schema = _moved_from_capsule(schema_capsule, ArrowSchema)
    try:
        device_array = _moved_from_capsule(array_capsule, ArrowDeviceArray)
    except BaseException:
        _release(schema)
        raise
    return _import_moved(schema, device_array, stream=stream, device=device, batch=False)


def import_record_batch(obj: Any, *, stream: Any = None, device: tuple[int, int] | None = None,
                        requested_schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Like :func:`import_array`, for a struct array seen as a record batch."""
    schema_capsule, array_capsule = _capsules(obj, _requested(requested_schema))
    schema = _moved_from_capsule(schema_capsule, ArrowSchema)
    try:
        device_array = _moved_from_capsule(array_capsule, ArrowDeviceArray)
    except BaseException:
        _release(schema)
        raise
    return _import_moved(schema, device_array, stream=stream, device=device, batch=True)


def _stream_error(stream: ArrowDeviceArrayStream, code: int, what: str) -> OSError:
    error = stream.get_last_error(ctypes.pointer(stream)) if stream.get_last_error else None
    message = ctypes.string_at(error) if error else b""
    return OSError(code, f"{what} failed: {message.decode('utf-8', 'replace') or errno.errorcode.get(code, code)}")


def iter_stream(obj: Any, *, stream: Any = None,
                requested_schema: pa.Schema | None = None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema and the batches of a ``__arrow_c_device_stream__`` producer, one at a time."""
    if type(obj).__name__ == "PyCapsule":
        _no_request_for_capsules(requested_schema)
        capsule = obj
    else:
        producer = getattr(obj, "__arrow_c_device_stream__", None)
        if producer is None:
            raise TypeError(f"'{type(obj).__name__}' object does not expose __arrow_c_device_stream__")
        requested = _requested(requested_schema)
        capsule = producer(requested) if requested is not None else producer()
    device_stream = _moved_from_capsule(capsule, ArrowDeviceArrayStream)
    try:
        if not device_stream.get_schema or not device_stream.get_next:
            raise ValueError("ArrowDeviceArrayStream has a NULL get_schema or get_next callback")
        if device_stream.device_type not in _KNOWN_DEVICES:
            raise ValueError(f"unsupported stream device_type {device_stream.device_type}")
        schema = ArrowSchema()
        code = device_stream.get_schema(ctypes.pointer(device_stream), ctypes.pointer(schema))
        if code:
            raise _stream_error(device_stream, code, "get_schema")
        arrow_schema = pa.Schema._import_from_c(ctypes.addressof(schema))
    except BaseException:
        _release(device_stream)
        raise
    batches = _batches(device_stream, arrow_schema, stream)
    # A generator dropped before its first batch never runs its finally: release it then.
    weakref.finalize(batches, _release, device_stream)
    return arrow_schema, batches


def _batches(device_stream: ArrowDeviceArrayStream, schema: pa.Schema,
             stream: Any) -> Iterator[pa.RecordBatch]:
    try:
        while True:
            device_array = ArrowDeviceArray()
            code = device_stream.get_next(ctypes.pointer(device_stream), ctypes.pointer(device_array))
            if code:
                _release(device_array)
                raise _stream_error(device_stream, code, "get_next")
            if _is_released(device_array):
                return
            if device_array.device_type != device_stream.device_type:
                _release(device_array)
                raise ValueError(f"stream of device_type {device_stream.device_type} produced an "
                                 f"array on device_type {device_array.device_type}")
            schema_struct = ArrowSchema()
            schema._export_to_c(ctypes.addressof(schema_struct))
            yield _import_moved(schema_struct, device_array, stream=stream, device=None, batch=True)
    finally:
        _release(device_stream)


def import_stream(obj: Any, *, stream: Any = None,
                  requested_schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole ``__arrow_c_device_stream__`` into a table (its chunks stay where they are)."""
    schema, batches = iter_stream(obj, stream=stream, requested_schema=requested_schema)
    return pa.Table.from_batches(list(batches), schema=schema)


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------

# Exported structs find what they keep alive through this registry: private_data is a key.
_exported: dict[int, Any] = {}
_keys = itertools.count(1)
_lock = threading.Lock()


def _keep(value: Any) -> int:
    with _lock:
        key = next(_keys)
        _exported[key] = value
    return key


def _forget(key: int) -> Any:
    with _lock:
        return _exported.pop(key, None)


@ARRAY_RELEASE
def _release_array(pointer: Any) -> None:
    array = pointer.contents
    node = _forget(array.private_data or 0)
    if node is not None:
        for child in itertools.chain(node.children, [node.dictionary] if node.dictionary else []):
            if child.release:
                child.release(ctypes.pointer(child))
    array.release = ARRAY_RELEASE()
    array.private_data = None


@dataclass
class _Node:
    """What one exported ArrowArray owns: its arrays of pointers, children and data."""

    source: Any
    buffers: Any
    children: list[ArrowArray]
    children_pointers: Any
    dictionary: ArrowArray | None
    extra: Any = None  # the variadic sizes of a view array
    event: Any = None  # the top level's _SyncEvent


def _level_buffer_count(array: pa.Array) -> int:
    """How many of ``array.buffers()`` belong to this array itself, not to its children."""
    children = _raw_children(array)
    return len(array.buffers()) - sum(len(child.buffers()) for child, _ in children)


def _raw_children(array: pa.Array) -> list[tuple[pa.Array, int]]:
    """Each child with the shift to apply (see ``_fill``), as the parent's layout sees it."""
    type_ = array.type
    if pa.types.is_struct(type_) or (pa.types.is_union(type_) and type_.mode == "sparse"):
        # field() slices children by the parent's offset; undo it (shift) so that child slot
        # k is again parent slot k.
        return [(array.field(i), array.offset) for i in range(type_.num_fields)]
    if pa.types.is_union(type_):
        return [(array.field(i), 0) for i in range(type_.num_fields)]
    if pa.types.is_run_end_encoded(type_):
        return [(array.run_ends, 0), (array.values, 0)]
    if isinstance(array, (pa.ListArray, pa.LargeListArray, pa.ListViewArray,
                          pa.LargeListViewArray, pa.FixedSizeListArray)):
        return [(array.values, 0)]
    return []


def _device_of(buffer: pa.Buffer) -> tuple[int, int]:
    device_type = int(buffer.device_type)
    return (device_type, -1 if device_type == DEVICE_CPU else buffer.device.device_id)


def _fill(out: ArrowArray, array: pa.Array, shift: int, devices: set) -> _Node:
    """Describe ``array`` in ``out``, seen ``shift`` slots before its own offset."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    type_ = array.type
    if shift > array.offset:
        raise AssertionError("child offsets cannot go below zero")
    try:
        children_arrays = _raw_children(array)
    except KeyError as exc:  # pyarrow has no Python class for some types (e.g. month intervals)
        raise NotImplementedError(
            f"pyarrow cannot expose the children of {type_} to Python, so arrow_gpu cannot "
            "export it; pyarrow's copy_to and to_device/to_host still move it") from exc
    own = array.buffers()[:_level_buffer_count(array)]
    for buffer in own:
        if buffer is not None:
            devices.add(_device_of(buffer))
    extra = None
    if pa.types.is_null(type_) or pa.types.is_run_end_encoded(type_):
        own = []
    elif pa.types.is_union(type_):
        own = own[1:]  # unions have no validity bitmap in the C layout
    elif pa.types.is_binary_view(type_) or pa.types.is_string_view(type_):
        sizes = [buffer.size for buffer in own[2:]]
        extra = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
    addresses = [0 if buffer is None else buffer.address for buffer in own]
    if extra is not None:
        addresses.append(ctypes.addressof(extra))
    buffers = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
    length = len(array) + shift
    if pa.types.is_null(type_):
        null_count = length
    elif pa.types.is_union(type_) or pa.types.is_run_end_encoded(type_) or own[0] is None:
        null_count = 0
    else:
        # pyarrow cannot tell us the count it may know (it raises on device arrays).
        validity = own[0]
        device_type, device_id = _device_of(validity)
        null_count = count_nulls(validity.address, device_type, device_id,
                                 array.offset - shift, length)
    children = [ArrowArray() for _ in children_arrays]
    dictionary = ArrowArray() if pa.types.is_dictionary(type_) else None
    _fill_each([*zip(children, children_arrays),
                *([(dictionary, (array.dictionary, 0))] if dictionary is not None else [])], devices)
    pointers = (ctypes.POINTER(ArrowArray) * max(len(children), 1))(
        *[ctypes.pointer(child) for child in children])
    node = _Node(array, buffers, children, pointers, dictionary, extra)
    # An empty slice is exported at offset 0: pyarrow's importer sizes some buffers (views)
    # by length alone and then rejects a non-zero offset.
    out.length, out.null_count, out.offset = length, null_count, array.offset - shift if length else 0
    out.n_buffers, out.n_children = len(addresses), len(children)
    out.buffers = buffers
    out.children = pointers
    out.dictionary = ctypes.pointer(dictionary) if dictionary is not None else None
    out.private_data = _keep(node)
    out.release = _release_array
    return node


def _fill_each(targets: list[tuple[ArrowArray, tuple[pa.Array, int]]], devices: set) -> None:
    """``_fill`` each ``(out, (array, shift))``; if one fails, release those filled before."""
    try:
        for out, (array, shift) in targets:
            _fill(out, array, shift, devices)
    except BaseException:
        for out, _ in targets:
            _release(out)  # a filled one keeps device data alive through the registry
        raise


def _export_struct_of_columns(out: ArrowArray, batch: pa.RecordBatch, devices: set) -> None:
    """A record batch is exported as a struct array without validity."""
    children = [ArrowArray() for _ in batch.columns]
    _fill_each([(child, (column, 0)) for child, column in zip(children, batch.columns)], devices)
    pointers = (ctypes.POINTER(ArrowArray) * max(len(children), 1))(
        *[ctypes.pointer(child) for child in children])
    buffers = (ctypes.c_void_p * 1)(0)
    out.length, out.null_count, out.offset = batch.num_rows, 0, 0
    out.n_buffers, out.n_children = 1, len(children)
    out.buffers, out.children, out.dictionary = buffers, pointers, None
    out.private_data = _keep(_Node(batch, buffers, children, pointers, None))
    out.release = _release_array


def _check_kwargs(kwargs: dict) -> None:
    unknown = sorted(name for name, value in kwargs.items() if value is not None)
    if unknown:
        raise NotImplementedError(f"unsupported keyword arguments: {', '.join(unknown)}")


class _SyncEvent:
    """A recorded CUDA event and the ``CUevent`` value that ``sync_event`` points to."""

    def __init__(self, device_id: int, stream: Any) -> None:
        self.event = Event(Context(device_id))
        self.event.record(stream)
        self.handle = ctypes.c_void_p(self.event.handle)


def _export_device_array(out: ArrowDeviceArray, data: pa.Array | pa.RecordBatch,
                         stream: Any, default_device: tuple[int, int] = (DEVICE_CPU, -1)) -> None:
    devices: set = set()
    if stream is not None:
        Stream.wrap(stream).synchronize()  # null counts are read from the bitmaps
    if isinstance(data, pa.RecordBatch):
        _export_struct_of_columns(out.array, data, devices)
    else:
        _fill(out.array, data, 0, devices)
    if len(devices) > 1:
        _release(out)
        raise ValueError(f"data spans several devices {sorted(devices)}; copy it to one first")
    device_type, device_id = devices.pop() if devices else default_device
    out.device_type, out.device_id = device_type, device_id
    out.reserved[:] = (0, 0, 0)
    if device_type in (DEVICE_CUDA, DEVICE_CUDA_HOST):
        try:
            sync = _SyncEvent(device_id, stream)
        except BaseException:
            _release(out)
            raise
        out.sync_event = ctypes.addressof(sync.handle)
        # The event lives as long as the top-level node: tie it to its registry entry.
        _exported[out.array.private_data].event = sync
    else:
        out.sync_event = None


def _export_schema(out: ArrowSchema, data: Any, requested_schema: Any) -> None:
    source = data.schema if hasattr(data, "schema") else data.type
    source._export_to_c(ctypes.addressof(out))
    if requested_schema is None:
        return
    requested = ArrowSchema()  # released: nothing to give back if the move fails
    try:
        requested = _moved_from_capsule(requested_schema, ArrowSchema)
        if _signature(requested) != _signature(out):
            raise pa.ArrowTypeError(
                f"cannot honour requested_schema: arrow_gpu exports data as it is "
                f"({_signature(out)}), never casting on the device; requested {_signature(requested)}")
    except BaseException:
        _release(requested)
        _release(out)
        raise
    # Same physical layout: only names, nullability or metadata differ; use the request.
    _release(out)
    ctypes.memmove(ctypes.addressof(out), ctypes.addressof(requested), ctypes.sizeof(ArrowSchema))


# Stream callbacks ------------------------------------------------------------


@dataclass
class _StreamState:
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    stream: Any
    device_type: int
    error: Any = None


def _state(pointer: Any) -> _StreamState | None:
    """The state of an exported stream; None once it is released."""
    return _exported.get(pointer.contents.private_data)


def _stream_callback(body: Any) -> Any:
    """Turn a Python exception in a stream callback into an errno and a last error."""

    def callback(pointer: Any, out: Any) -> int:
        state = _state(pointer)
        if state is None:  # called after release: a consumer bug, never a false success
            return errno.EINVAL
        try:
            body(state, out.contents)
        except Exception as exc:  # the C caller only understands error codes
            state.error = ctypes.create_string_buffer(f"{type(exc).__name__}: {exc}".encode())
            return errno.EIO
        return 0

    return callback


def _get_schema(state: _StreamState, out: ArrowSchema) -> None:
    state.schema._export_to_c(ctypes.addressof(out))


def _get_next(state: _StreamState, out: ArrowDeviceArray) -> None:
    ctypes.memset(ctypes.addressof(out), 0, ctypes.sizeof(ArrowDeviceArray))
    batch = next(state.batches, None)
    if batch is None:
        return  # the released (zeroed) struct ends the stream
    _export_device_array(out, batch, state.stream, (state.device_type, 0))
    if out.device_type != state.device_type:
        found = out.device_type
        _release(out)
        raise ValueError(f"a batch on device_type {found} in a stream of {state.device_type}")


_stream_get_schema = STREAM_GET_SCHEMA(_stream_callback(_get_schema))
_stream_get_next = STREAM_GET_NEXT(_stream_callback(_get_next))


@STREAM_GET_LAST_ERROR
def _stream_get_last_error(pointer: Any) -> int | None:
    state = _state(pointer)
    error = state.error if state is not None else None
    return ctypes.addressof(error) if error is not None else None


@STREAM_RELEASE
def _stream_release(pointer: Any) -> None:
    stream = pointer.contents
    _forget(stream.private_data or 0)
    stream.release = STREAM_RELEASE()
    stream.private_data = None


def _record_batches(data: Any) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.Table):
        return data.to_batches()
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.RecordBatch):
        return [data]
    raise TypeError(f"cannot stream a '{type(data).__name__}' as record batches")


def _stream_device_type(data: Any) -> int:
    devices: set = set()
    columns = data.columns if isinstance(data, (pa.Table, pa.RecordBatch)) else []
    for column in columns:
        for chunk in getattr(column, "chunks", [column]):
            devices.update(_device_of(b)[0] for b in chunk.buffers() if b is not None)
    if len(devices) > 1:
        raise ValueError(f"data spans several device types {sorted(devices)}")
    return devices.pop() if devices else DEVICE_CUDA


# The exporting object ---------------------------------------------------------


class DeviceData:
    """Device (or host) Arrow data, exported through the Arrow PyCapsule device protocol.

    ``data`` is a ``pa.Array``, ``pa.RecordBatch`` (both export as a device array and as a
    one-chunk stream), ``pa.Table`` or ``pa.RecordBatchReader`` (streams, chunk by chunk).
    ``stream`` is the stream that produced the data: each export records a CUDA event on
    it, which the consumer waits on and which lives until the consumer releases the struct.

    >>> import pyarrow as pa, arrow_gpu
    >>> table = pa.table({"x": [1, 2]}).to_batches()[0].copy_to(arrow_gpu.Context(0).memory_manager)
    >>> schema, array = DeviceData(table).__arrow_c_device_array__()
    >>> schema, array
    (<capsule object "arrow_schema" at ...>, <capsule object "arrow_device_array" at ...>)
    """

    def __init__(self, data: Any, stream: Any = None) -> None:
        if not isinstance(data, (pa.Array, pa.RecordBatch, pa.Table, pa.RecordBatchReader)):
            raise TypeError(f"cannot export a '{type(data).__name__}'; expected a pyarrow Array, "
                            "RecordBatch, Table or RecordBatchReader")
        self.data = data
        self.stream = stream
        stream_handle(stream)  # reject a bad stream now rather than at export time

    def __arrow_c_device_array__(self, requested_schema: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        """Capsules ``arrow_schema`` and ``arrow_device_array`` (the spec's protocol)."""
        _check_kwargs(kwargs)
        if not isinstance(self.data, (pa.Array, pa.RecordBatch)):
            raise TypeError(f"a {type(self.data).__name__} exports as a stream: use "
                            "__arrow_c_device_stream__")
        schema_capsule, schema = _new_capsule(ArrowSchema)
        _export_schema(schema, self.data, requested_schema)
        array_capsule, array = _new_capsule(ArrowDeviceArray)
        _export_device_array(array, self.data, self.stream)
        return schema_capsule, array_capsule

    def __arrow_c_device_stream__(self, requested_schema: Any = None, **kwargs: Any) -> Any:
        """A capsule ``arrow_device_array_stream`` yielding one record batch per chunk."""
        _check_kwargs(kwargs)
        data = self.data
        if isinstance(data, pa.Array):
            data = pa.RecordBatch.from_struct_array(data) if pa.types.is_struct(data.type) \
                else pa.record_batch([data], names=[""])
        schema = data.schema
        if requested_schema is not None:
            # Batches carry no schema in a stream: the request only changes get_schema's answer.
            probe = ArrowSchema()
            _export_schema(probe, data, requested_schema)
            schema = pa.Schema._import_from_c(ctypes.addressof(probe))
        device_type = DEVICE_CUDA if isinstance(data, pa.RecordBatchReader) else _stream_device_type(data)
        capsule, out = _new_capsule(ArrowDeviceArrayStream)
        out.device_type = device_type
        out.get_schema, out.get_next = _stream_get_schema, _stream_get_next
        out.get_last_error, out.release = _stream_get_last_error, _stream_release
        out.private_data = _keep(_StreamState(schema, iter(_record_batches(data)), self.stream,
                                              device_type))
        return capsule

    def __repr__(self) -> str:
        return f"<arrow_gpu.DeviceData {type(self.data).__name__} stream={self.stream!r}>"
