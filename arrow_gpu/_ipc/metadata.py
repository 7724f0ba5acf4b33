"""What an Arrow IPC message's metadata says of its body, read on the host.

The flatbuffer is read by the native reader that also vets IPC reads over device memory
(every offset checked, so forged metadata reads as absent fields, never out of bounds).

>>> import pyarrow as pa
>>> message = pa.ipc.read_message(pa.record_batch({"x": [1, None]}).serialize())
>>> record_batch_layout(message.metadata.to_pybytes()).nodes
[(2, 1)]
"""

from __future__ import annotations

from typing import NamedTuple

from arrow_gpu._cuda import _record_batch_layout

__all__ = ["RecordBatchLayout", "record_batch_layout"]


class RecordBatchLayout(NamedTuple):
    """A record batch message's body as its metadata describes it."""

    nodes: list[tuple[int, int]]  # per field: length, null count
    buffers: list[tuple[int, int]]  # per buffer: offset and length in the body
    compressed: bool  # RecordBatch.compression is set
    delta: bool  # a dictionary batch whose values extend its dictionary (isDelta)


def record_batch_layout(metadata: bytes) -> RecordBatchLayout:
    """The layout a record batch (or dictionary batch) message's metadata describes;
    empty for other messages."""
    return RecordBatchLayout(*_record_batch_layout(metadata))
