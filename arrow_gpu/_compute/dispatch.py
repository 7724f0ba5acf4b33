"""What the device compute functions share: the device of their arguments, other libraries'
CUDA arrays read in place, pyarrow's CPU kernels for data without device buffers, the kernels
to launch, and results in their arguments' shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import pyarrow as pa

from arrow_gpu._compute import kernels as _kernels
from arrow_gpu._compute.concat import concat_columns
from arrow_gpu._compute.layouts import (Parts, empty, labelled_on_device, no_columns, part_at,
                                        part_count, uploaded)
from arrow_gpu._cuda import _combine_natively, _concat_natively, _device_context
from arrow_gpu._interop.array_import import arrow_array, import_array
from arrow_gpu._util.arrow_data import Kind, kind_of, map_arrays
from arrow_gpu.device import Context, stream_handle

ANY_ROWS = "a pyarrow Array, ChunkedArray, RecordBatch or Table"
ARRAYS = "a pyarrow Array or ChunkedArray"


# -- arguments -------------------------------------------------------------------------


def device_context(*datas: Any) -> Optional[Context]:
    """The one context all of ``datas``' buffers live in; None when none has a buffer.

    Host data is refused: these functions are for device data, and pyarrow.compute already
    does all of this on the host.
    """
    return _device_context(datas)


def as_arrow(data: Any, what: str, stream: Any) -> Any:
    """``data``; or for another library's CUDA array (``__cuda_array_interface__`` or
    DLPack), a device Array over its memory (bools packed into bits), ready for the work
    queued on ``stream`` after it: the producer orders its work before that stream."""
    if kind_of(data) is None and (hasattr(data, "__cuda_array_interface__")
                                  or hasattr(data, "__dlpack__")):
        return arrow_array(import_array(data, what, stream), None, stream)
    return data


def rows_of(data: Any) -> int:
    return len(data) if kind_of(data) in (Kind.ARRAY, Kind.CHUNKED_ARRAY) else data.num_rows


def check_arrays(data: Any, function: str) -> None:
    if kind_of(data) not in (Kind.ARRAY, Kind.CHUNKED_ARRAY):
        raise TypeError(f"{function} takes {ARRAYS}, got '{type(data).__name__}'"
                        + ("; pass one column, e.g. table[name]"
                           if kind_of(data) in (Kind.RECORD_BATCH, Kind.TABLE) else ""))


# -- data without device buffers: pyarrow's CPU kernels over host copies ---------------


def move(data: Any, context: Optional[Context], stream: Any = None) -> Any:
    """``data`` copied to ``context``'s device, on ``stream`` (to the host for None)."""
    kind = kind_of(data)
    if kind in (Kind.RECORD_BATCH, Kind.TABLE) and data.num_columns == 0:
        return no_columns(data.schema, data.num_rows, table=kind is Kind.TABLE,
                          on_device=context is not None)

    def copy(array: pa.Array) -> pa.Array:
        if context is not None:  # host data: its null counts are known before it leaves
            moved: pa.Array = uploaded(context, array, stream)
            return moved
        return array.copy_to(pa.default_cpu_memory_manager())

    moved = map_arrays(data, copy) if kind is not None else data
    if context is not None and kind is Kind.RECORD_BATCH:
        return labelled_on_device(moved)
    return moved


def on_host(context: Context, function: Callable[..., Any], *datas: Any,
            stream: Any = None) -> Any:
    host = [move(data, None) for data in datas]
    first = host[0]
    if kind_of(first) is Kind.TABLE and first.num_columns == 0:
        # pyarrow's Table.take loses the rows of a table without columns; its RecordBatch
        # functions keep them.
        rows = function(no_columns(first.schema, first.num_rows, table=False, on_device=False),
                        *host[1:]).num_rows
        return no_columns(first.schema, rows, table=True, on_device=True)
    return move(function(*host), context, stream)


def pc() -> Any:
    """pyarrow.compute, imported for data without device buffers and where its semantics
    must be asked: it is slow to import (bench/RESULTS.md, "Tuning notes")."""
    import pyarrow.compute

    return pyarrow.compute


# -- kernels and results ---------------------------------------------------------------


def kernels_of(context: Optional[Context], stream: Any) -> Optional[_kernels.DeviceKernels]:
    """The kernels to run on ``context``'s device, launching on ``stream``; None where the
    driver runs none. A bad stream is refused either way."""
    stream_handle(stream)
    if context is None or not _kernels.runs_kernels(context):
        return None
    return _kernels.kernels_for(context).on_stream(stream)


def finished(k: _kernels.DeviceKernels, result: Any) -> Any:
    """``result`` once every launch that makes it is done: results are complete when a
    compute function returns, as ``to_device``'s are."""
    k.finish()
    return result


def shaped(kind: Optional[Kind], schema: pa.Schema, columns: Sequence[pa.Array],
            rows: int) -> Any:
    """A device RecordBatch, or a Table (of one chunk per column), of ``columns``; of
    ``rows`` rows also when there are no columns to count them from."""
    if not columns:
        return no_columns(schema, rows, table=kind is Kind.TABLE, on_device=True)
    if kind is Kind.RECORD_BATCH:
        return labelled_on_device(pa.RecordBatch.from_arrays(columns, schema=schema))
    return pa.Table.from_arrays([pa.chunked_array([column], type=column.type)
                                 for column in columns], schema=schema)


def combined(k: _kernels.DeviceKernels, columns: Sequence[pa.ChunkedArray]) -> list[pa.Array]:
    """Each column's chunks as one Array (a lone chunk as it is), the copies of all columns
    launched together. The ChunkedArrays go whole: pyarrow need not wrap every chunk."""
    return joined(k, [column.type for column in columns], columns, copy_one=False)


def joined(k: _kernels.DeviceKernels, types: Sequence[pa.DataType], columns: Sequence[Parts],
            copy_one: bool) -> list[pa.Array]:
    """Each column's arrays end to end (a lone one copied only with ``copy_one``; none
    giving an empty array), every copy launched together: in one native call where every
    column is of a flat type (its dictionaries shared), else by concat.py's walk."""
    def copied(parts: Parts) -> bool:
        count = part_count(parts)
        return count > 1 or (count == 1 and copy_one)

    copies = [parts for parts in columns if copied(parts)]
    native = joined_natively(k, copies, copy_one=True) if copies else None
    joined = iter(native if native is not None else concat_columns(k, copies))
    return [next(joined) if copied(parts) else
            part_at(parts, 0) if part_count(parts) else empty(k.context, type, k.stream)
            for type, parts in zip(types, columns)]


def one_chunk(data: pa.ChunkedArray, context: Optional[Context], stream: Any) -> pa.Array:
    """A ChunkedArray's chunks as one Array (a lone chunk as it is), on ``context``'s device."""
    if data.num_chunks == 1:
        chunk: pa.Array = data.chunk(0)
        return chunk
    if data.num_chunks == 0:
        return empty(context or Context(0), data.type, stream)
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), lambda d: d.combine_chunks(), data, stream=stream)
    native = combined_natively(k, data)
    return native if native is not None else finished(k, combined(k, [data])[0])


def combined_natively(k: _kernels.DeviceKernels, data: Any) -> Any:
    """A ChunkedArray's chunks as one Array, or a Table with one chunk per column, in one
    native call, complete (no wait left); None where a column is not of a flat type."""
    return _combine_natively(k.select_kernels, data, k.stream)


def joined_natively(k: _kernels.DeviceKernels, columns: Sequence[Parts],
                    copy_one: bool) -> Optional[list[pa.Array]]:
    """``joined``'s columns in one native call, complete (no wait left); None where a
    column is not of a flat type or has no parts."""
    native: Optional[list[pa.Array]] = _concat_natively(k.select_kernels, columns, copy_one,
                                                        k.stream)
    return native
