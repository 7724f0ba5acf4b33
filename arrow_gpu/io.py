"""Device IO: files over device buffers and IPC messages with bodies on the device.

Not implemented yet; the names exist so that ``pyarrow.cuda`` imports completely.
"""

from typing import NoReturn


def _not_yet(name: str) -> NoReturn:
    raise NotImplementedError(f"arrow_gpu does not implement {name} yet (device IO)")


class BufferReader:
    """A file reading a CudaBuffer (not implemented yet)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _not_yet("BufferReader")


class BufferWriter:
    """A file writing into a CudaBuffer (not implemented yet)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _not_yet("BufferWriter")


def serialize_record_batch(batch: object, ctx: object) -> NoReturn:
    """Serialize a record batch into device memory (not implemented yet)."""
    _not_yet("serialize_record_batch")


def read_message(source: object, pool: object = None) -> NoReturn:
    """Read an IPC message with its body on the device (not implemented yet)."""
    _not_yet("read_message")


def read_record_batch(buffer: object, schema: object, **kwargs: object) -> NoReturn:
    """Read a record batch whose body stays on the device (not implemented yet)."""
    _not_yet("read_record_batch")
