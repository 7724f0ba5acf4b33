"""Positions of fields in an Arrow IPC message's flatbuffer metadata, for tests that forge one.

The package reads metadata with its native reader; a test that overwrites one field of valid
metadata needs to know where that field is stored. Field numbers are those of Arrow's
Message.fbs.
"""

from __future__ import annotations

import struct
from typing import Optional


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


def record_batch(data: bytes) -> int:
    """The RecordBatch table of a record batch message."""
    message = follow(data, 0)
    header = field(data, message, 2)
    assert header is not None
    return follow(data, header)
