"""The bytes of a serialized ``IpcMemHandle``: what ``serialize()`` gives and
``IpcMemHandle.from_buffer`` reads back in another process.

A sealed record (see arrow_gpu._ipc.sealed) whose body is the offset and size of the exported
bytes in the driver's allocation, then the driver's 64-byte ``CUipcMemHandle``.
"""

from __future__ import annotations

import struct
from typing import Any

from arrow_gpu._ipc.sealed import seal, sealed_size, unseal

MAGIC = b"AGPU-IPC"
_VERSION = 2
_BODY = struct.Struct("<qq64s")
_INT64_MAX = (1 << 63) - 1
_REMEDY = ("send the bytes of IpcMemHandle.serialize() unchanged, or export the buffer again "
           "with CudaBuffer.export_for_ipc()")

#: The size of every serialized handle, in bytes.
SERIALIZED_SIZE = sealed_size(_BODY.size)


def serialize(driver_handle: bytes, offset: int, size: int) -> bytes:
    """The bytes ``IpcMemHandle.serialize()`` gives for this driver handle and range."""
    return seal(MAGIC, _VERSION, _BODY.pack(offset, size, driver_handle))


def parse(data: Any) -> tuple[bytes, int, int]:
    """``(driver_handle, offset, size)`` of the bytes ``serialize`` made.

    ``data`` is any object with the buffer protocol. Raises ValueError if the bytes are not
    a handle of this format version exactly as serialized, or name an impossible range;
    TypeError if ``data`` has no buffer protocol.

    Examples
    --------
    >>> handle, offset, size = parse(serialize(bytes(64), 128, 8))
    >>> len(handle), offset, size
    (64, 128, 8)
    """
    body = unseal(memoryview(data).tobytes(), MAGIC, _VERSION,
                  _BODY.size, "an arrow_gpu IPC handle", _REMEDY)
    offset, size, driver_handle = _BODY.unpack(body)
    if offset < 0 or size < 0 or offset > _INT64_MAX - size:
        raise ValueError(f"an arrow_gpu IPC handle names an impossible range (offset {offset}, "
                         f"size {size}); {_REMEDY}")
    return driver_handle, offset, size
