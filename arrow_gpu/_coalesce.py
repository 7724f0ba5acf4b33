"""Moving whole arrays, batches and tables with one coalesced transfer.

All buffers of all arrays (children and dictionaries included) are packed, 64-byte
aligned, into one pinned staging area and moved with one pipelined transfer into one
device allocation; the device arrays are zero-copy slices of it, with the same types,
lengths, offsets and null counts as the sources (as ``copy_to`` gives). Wide tables and
many small chunks move at the speed of one large copy instead of thousands of small ones.

>>> import pyarrow as pa
>>> from arrow_gpu import Context
>>> from arrow_gpu._coalesce import batch_to_device, batch_to_host
>>> table = pa.table({"x": [1, None, 3], "s": ["a", "b", None]})
>>> on_gpu = batch_to_device(table, Context(0))
>>> on_gpu["x"].chunk(0).is_cpu
False
>>> batch_to_host(on_gpu).equals(table)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from arrow_gpu._cuda import (
    Context,
    _arrays_to_device,
    _arrays_to_host,
    _batch_to_device,
    _batch_to_host,
    _table_to_device,
    _table_to_host,
)

__all__ = ["batch_to_device", "batch_to_host"]

Data = TypeVar("Data", pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table)


def _move(data: Data, copy_arrays: Callable[[list[pa.Array]], list[pa.Array]],
          copy_table: Callable[[pa.Table], pa.Table],
          copy_batch: Callable[[pa.RecordBatch], pa.RecordBatch]) -> Data:
    if isinstance(data, pa.Table):
        return copy_table(data)
    if isinstance(data, pa.RecordBatch):
        return copy_batch(data)
    if isinstance(data, pa.ChunkedArray):
        return pa.chunked_array(copy_arrays(data.chunks), type=data.type)
    if isinstance(data, pa.Array):
        return copy_arrays([data])[0]
    raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                    f"'{type(data).__name__}'")


def batch_to_device(data: Data, ctx: Context | None = None) -> Data:
    """A copy of host ``data`` (Array, ChunkedArray, RecordBatch or Table) on ``ctx``'s
    device, made with one coalesced transfer.

    Raises TypeError if some buffer is not in host memory, MemoryError if the device is
    full (nothing is left allocated then).
    """
    context = ctx if ctx is not None else Context(0)
    return _move(data, lambda arrays: _arrays_to_device(context, arrays),
                 lambda table: _table_to_device(context, table),
                 lambda batch: _batch_to_device(context, batch))


def batch_to_host(data: Data) -> Data:
    """A host copy of device ``data``, made with one coalesced transfer per device."""
    return _move(data, _arrays_to_host, _table_to_host, _batch_to_host)
