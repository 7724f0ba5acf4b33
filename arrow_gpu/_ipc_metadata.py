"""Fields of an Arrow IPC message's flatbuffer metadata (``Message.fbs``), read on the host.

The readers here follow offsets without verifying the flatbuffer: on bytes Arrow has not
verified they raise ``struct.error`` or ``IndexError`` rather than read out of bounds.
"""

from __future__ import annotations

import struct
from typing import Optional

# Message.header_type values (the MessageHeader union)
DICTIONARY_BATCH = 2
RECORD_BATCH = 3


def follow(data: bytes, position: int) -> int:
    """Where the uoffset stored at ``position`` points."""
    length: int = struct.unpack_from("<I", data, position)[0]
    return position + length


def field(data: bytes, table: int, index: int) -> Optional[int]:
    """Where field ``index`` of the table at ``table`` is stored; None if it is absent."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    entry = 4 + 2 * index
    if entry >= struct.unpack_from("<H", data, vtable)[0]:
        return None
    offset: int = struct.unpack_from("<H", data, vtable + entry)[0]
    return table + offset if offset else None


def record_batch(data: bytes) -> Optional[int]:
    """The RecordBatch table of a record batch or dictionary batch message, else None."""
    message = follow(data, 0)
    kind, header = field(data, message, 1), field(data, message, 2)
    if kind is None or header is None:
        return None
    header_type = data[kind]
    if header_type == RECORD_BATCH:
        return follow(data, header)
    if header_type == DICTIONARY_BATCH:
        batch = field(data, follow(data, header), 1)  # DictionaryBatch.data
        return None if batch is None else follow(data, batch)
    return None


def compressed(data: bytes) -> bool:
    """Whether the message's body is compressed (RecordBatch.compression is set)."""
    batch = record_batch(data)
    return batch is not None and field(data, batch, 3) is not None
