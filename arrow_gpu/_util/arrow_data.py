"""The four shapes of pyarrow data, and the few questions the package asks of them.

Arrow data at the Python surface is a pyarrow Array, ChunkedArray, RecordBatch or Table.
Modules that take any of them ask here what it is, what arrays and buffers it holds, or
rebuild it in the same shape, rather than each writing the isinstance ladder again: a
question dispatches on the type once.

>>> import pyarrow as pa
>>> kind_of(pa.table({"x": [1]}))
<Kind.TABLE: <class 'pyarrow.lib.Table'>>
>>> [len(array) for array in arrays(pa.chunked_array([[1, 2], [3]]))]
[2, 1]
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pyarrow as pa

__all__ = ["Kind", "arrays", "buffers", "kind_of", "map_arrays"]


class Kind(enum.Enum):
    """A shape of pyarrow data; its value is the pyarrow class."""

    ARRAY = pa.Array
    CHUNKED_ARRAY = pa.ChunkedArray
    RECORD_BATCH = pa.RecordBatch
    TABLE = pa.Table


# Kind of each class met so far: every call of a transfer asks, so the answer is a lookup
# (classes are few: pyarrow's array classes and whatever callers pass).
_KIND_OF_CLASS: dict[type, Optional[Kind]] = {}


def kind_of(data: object) -> Optional[Kind]:
    """The shape of ``data``; None when it is not pyarrow data."""
    cls = type(data)
    try:
        return _KIND_OF_CLASS[cls]
    except KeyError:
        kind = next((kind for kind in Kind if issubclass(cls, kind.value)), None)
        _KIND_OF_CLASS[cls] = kind
        return kind


def _expect(data: object) -> Kind:
    kind = kind_of(data)
    if kind is None:
        raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                        f"'{type(data).__name__}'")
    return kind


def arrays(data: Any) -> list[pa.Array]:
    """The top-level arrays of ``data`` in order: itself, its chunks, or its columns' chunks.

    Raises ``TypeError`` for anything that is not pyarrow data.
    """
    kind = _expect(data)
    if kind is Kind.ARRAY:
        return [data]
    if kind is Kind.CHUNKED_ARRAY:
        chunks: list[pa.Array] = data.chunks
        return chunks
    if kind is Kind.RECORD_BATCH:
        columns: list[pa.Array] = data.columns
        return columns
    return [chunk for column in data.columns for chunk in column.chunks]


def buffers(data: Any) -> Iterator[pa.Buffer]:
    """Every buffer of ``data``'s arrays, children and dictionaries included; absent ones
    (None) left out. Only metadata is read: device buffers are not touched. Chunks are
    wrapped as they are reached: a caller that stops at the first buffer wraps one."""
    kind = _expect(data)
    if kind in (Kind.ARRAY, Kind.RECORD_BATCH):
        for array in arrays(data):
            yield from _array_buffers(array)
        return
    for column in [data] if kind is Kind.CHUNKED_ARRAY else data.columns:
        for i in range(column.num_chunks):
            yield from _array_buffers(column.chunk(i))


def _array_buffers(array: pa.Array) -> Iterator[pa.Buffer]:
    yield from (buffer for buffer in array.buffers() if buffer is not None)
    if isinstance(array, pa.DictionaryArray):  # buffers() leaves the dictionary out
        yield from _array_buffers(array.dictionary)


def map_arrays(data: Any, function: Callable[[pa.Array], pa.Array]) -> Any:
    """``data`` rebuilt in its own shape and schema from ``function`` of each top-level array.

    Raises ``TypeError`` for anything that is not pyarrow data.
    """
    kind = _expect(data)
    if kind is Kind.ARRAY:
        return function(data)
    if kind is Kind.CHUNKED_ARRAY:
        return pa.chunked_array([function(chunk) for chunk in data.chunks], type=data.type)
    if data.num_columns == 0:
        return data  # rows without memory, the same anywhere (from_arrays would count 0)
    if kind is Kind.RECORD_BATCH:
        return pa.RecordBatch.from_arrays([function(column) for column in data.columns],
                                          schema=data.schema)
    return pa.Table.from_arrays([map_arrays(column, function) for column in data.columns],
                                schema=data.schema)
