"""The C Data Interface structs as ctypes sees them, to build and tamper with capsules in tests.

arrow_gpu itself never handles these structs from Python; tests do, to play a careless or
hostile producer. The capsule functions are private prototypes of the C API: nothing of
``ctypes.pythonapi`` that other code in the process relies on is changed.

>>> import pyarrow as pa
>>> schema = moved_from_capsule(pa.int32().__arrow_c_schema__(), ArrowSchema)
>>> schema.format
b'i'
>>> release(schema); is_released(schema)
True
"""

import ctypes


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


class ArrowDeviceArray(ctypes.Structure):
    pass


class ArrowDeviceArrayStream(ctypes.Structure):
    pass


SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
STREAM_GET_SCHEMA = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ArrowDeviceArrayStream), ctypes.POINTER(ArrowSchema))
STREAM_GET_NEXT = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ArrowDeviceArrayStream), ctypes.POINTER(ArrowDeviceArray))
STREAM_GET_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ArrowDeviceArrayStream))
STREAM_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowDeviceArrayStream))

ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)), ("release", SCHEMA_RELEASE),
    ("private_data", ctypes.c_void_p),
]
ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)), ("release", ARRAY_RELEASE),
    ("private_data", ctypes.c_void_p),
]
ArrowDeviceArray._fields_ = [
    ("array", ArrowArray), ("device_id", ctypes.c_int64), ("device_type", ctypes.c_int32),
    ("sync_event", ctypes.c_void_p), ("reserved", ctypes.c_int64 * 3),
]
ArrowDeviceArrayStream._fields_ = [
    ("device_type", ctypes.c_int32), ("get_schema", STREAM_GET_SCHEMA),
    ("get_next", STREAM_GET_NEXT), ("get_last_error", STREAM_GET_LAST_ERROR),
    ("release", STREAM_RELEASE), ("private_data", ctypes.c_void_p),
]

NAMES = {ArrowSchema: b"arrow_schema", ArrowDeviceArray: b"arrow_device_array",
         ArrowDeviceArrayStream: b"arrow_device_array_stream"}

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 _CAPSULE_DESTRUCTOR)(("PyCapsule_New", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_pointer_of_address = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# Structs owned by the capsules made here, by address.
_owned: dict[int, ctypes.Structure] = {}


def _release_address(address, struct_type):
    instance = struct_type.from_address(address)
    target = instance.array if struct_type is ArrowDeviceArray else instance
    if target.release:
        target.release(ctypes.pointer(target))
        target.release = type(target.release)()


def _destructor_for(struct_type):
    @_CAPSULE_DESTRUCTOR
    def destroy(capsule):
        address = _capsule_pointer_of_address(capsule, NAMES[struct_type])
        _release_address(address, struct_type)
        _owned.pop(address, None)
    return destroy


_DESTRUCTORS = {struct_type: _destructor_for(struct_type) for struct_type in NAMES}


def in_new_capsule(struct):
    """A capsule owning a copy of ``struct`` (moved: the capsule now releases it)."""
    struct_type = type(struct)
    owned = struct_type()
    ctypes.memmove(ctypes.addressof(owned), ctypes.addressof(struct), ctypes.sizeof(struct))
    _owned[ctypes.addressof(owned)] = owned
    return _capsule_new(ctypes.addressof(owned), NAMES[struct_type], _DESTRUCTORS[struct_type])


def moved_from_capsule(capsule, struct_type):
    """Move the struct out of a capsule (the capsule's copy is marked released)."""
    address = _capsule_pointer(capsule, NAMES[struct_type])
    moved = struct_type()
    ctypes.memmove(ctypes.addressof(moved), address, ctypes.sizeof(struct_type))
    source = struct_type.from_address(address)
    (source.array if struct_type is ArrowDeviceArray else source).release = \
        type((source.array if struct_type is ArrowDeviceArray else source).release)()
    return moved


def is_released(struct):
    return not (struct.array.release if isinstance(struct, ArrowDeviceArray) else struct.release)


def release(struct):
    """Release a struct a test owns, once."""
    _release_address(ctypes.addressof(struct), type(struct))


def release_as_produced(array, on_release=None):
    """Make the release of ``array`` (an ArrowArray) restore the producer's fields and buffer
    pointers before calling the producer's release, which follows them: a test may then change
    counts and pointers freely. ``on_release`` is called first, on each call.

    Returns what must outlive the struct.
    """
    pristine = ArrowArray()
    ctypes.memmove(ctypes.addressof(pristine), ctypes.addressof(array), ctypes.sizeof(array))
    buffers = [array.buffers[i] for i in range(array.n_buffers)]
    original = pristine.release

    @ARRAY_RELEASE
    def restoring(pointer):
        if on_release is not None:
            on_release()
        ctypes.memmove(pointer, ctypes.addressof(pristine), ctypes.sizeof(pristine))
        for i, value in enumerate(buffers):
            pristine.buffers[i] = value
        original(pointer)

    array.release = restoring
    return restoring, pristine
