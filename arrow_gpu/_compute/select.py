"""Rows of device data selected by indices or a mask: what ``arrow_gpu.compute.take`` and
``filter`` do, and ``arrow_gpu.to_host(data, indices=..., filter=...)`` before a download.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import pyarrow as pa

from arrow_gpu._compute import kernels as _kernels
from arrow_gpu._compute.dispatch import (ARRAYS, as_arrow, combined, device_context, finished,
                                         kernels_of, on_host, one_chunk, pc, rows_of, shaped)
from arrow_gpu._compute.take import Rows, indices_rows, mask_rows, take_arrays
from arrow_gpu._cuda import _select_natively
from arrow_gpu._util.arrow_data import Kind, kind_of
from arrow_gpu.device import Context

NULL_SELECTION = ("drop", "emit_null")


def take_rows(data: Any, indices: Any, stream: Any) -> Any:
    """``arrow_gpu.compute.take``."""
    indices = as_arrow(indices, "indices", stream)
    context = device_context(data, indices)
    kind = kind_of(data)
    indices_array = one_array(indices, "indices", stream)
    if not pa.types.is_integer(indices_array.type):
        raise TypeError(f"indices must be integers, got {indices_array.type}")
    k = kernels_of(context, stream)
    if k is None:  # pyarrow's IndexError for out-of-range indices is an ArrowIndexError
        return on_host(context or Context(0), lambda d, i: d.take(i), data, indices_array,
                       stream=stream)
    return selected(k, data, kind, indices_array, by_mask=False, emit_null=False,
                    rows=lambda: indices_rows(k, indices_array, rows_of(data)))


def filter_rows(data: Any, mask: Any, null_selection_behavior: str, stream: Any) -> Any:
    """``arrow_gpu.compute.filter``."""
    if null_selection_behavior not in NULL_SELECTION:
        raise ValueError(f"null_selection_behavior must be one of {NULL_SELECTION}, got "
                         f"{null_selection_behavior!r}")
    mask = as_arrow(mask, "mask", stream)
    context = device_context(data, mask)
    mask_array = one_array(mask, "mask", stream)
    check_mask(mask_array, rows_of(data))
    if kind_of(data) is Kind.CHUNKED_ARRAY and data.num_chunks == 0:
        return data  # no rows to select; pyarrow 25 aborts filtering one that holds maps
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), lambda d, m: pc().filter(
            d, m, null_selection_behavior=null_selection_behavior), data, mask_array,
                       stream=stream)
    emit_null = null_selection_behavior == "emit_null"
    return selected(k, data, kind_of(data), mask_array, by_mask=True, emit_null=emit_null,
                    rows=lambda: mask_rows(k, mask_array, emit_null))


def selected(k: _kernels.DeviceKernels, data: Any, kind: Optional[Kind], selector: pa.Array,
             *, by_mask: bool, emit_null: bool, rows: Callable[[], Rows]) -> Any:
    """``data`` at the rows a mask or indices pick, complete: planned and launched
    natively in one call where every column is of a flat type, else by the walk of
    ``take_arrays`` over ``rows()``."""
    native = _select_natively(k.select_kernels, data, selector, by_mask, emit_null, k.stream)
    if native is not None and native is not NotImplemented:
        return native
    columns = columns_of(k, data, kind)
    if native is NotImplemented:  # flat columns of several chunks, now one each
        native = _select_natively(k.select_kernels, shaped_like(data, kind, columns, len(data)),
                                  selector, by_mask, emit_null, k.stream)
        if native is not None:
            return native
    taken = rows()
    return finished(k, shaped_like(data, kind, take_arrays(k, columns, taken), taken.length))


def columns_of(k: _kernels.DeviceKernels, data: Any, kind: Optional[Kind]) -> list[pa.Array]:
    """``data``'s columns (an array's only one), each as one Array."""
    if kind is Kind.ARRAY:
        return [data]
    if kind is Kind.CHUNKED_ARRAY:
        return combined(k, [data])
    return list(data.columns) if kind is Kind.RECORD_BATCH else combined(k, data.columns)


def shaped_like(data: Any, kind: Optional[Kind], columns: Sequence[pa.Array],
                rows: int) -> Any:
    """``columns`` of ``rows`` rows in ``data``'s shape."""
    if kind is Kind.ARRAY:
        return columns[0]
    if kind is Kind.CHUNKED_ARRAY:
        return pa.chunked_array(columns, type=data.type)
    return shaped(kind, data.schema, columns, rows)


def one_array(data: Any, what: str, stream: Any) -> pa.Array:
    """An Array of ``data``, an Array or a ChunkedArray (its chunks combined)."""
    kind = kind_of(data)
    if kind is Kind.ARRAY:
        return data
    if kind is Kind.CHUNKED_ARRAY:
        return one_chunk(data, device_context(data), stream)
    raise TypeError(f"{what} must be {ARRAYS}, got '{type(data).__name__}'")


def check_mask(mask: pa.Array, rows: int) -> None:
    if not pa.types.is_boolean(mask.type):
        raise TypeError(f"a filter mask must be boolean, got {mask.type}: compare on the "
                        "device first (e.g. with CuPy) and wrap the result with "
                        "arrow_gpu.from_cuda_array")
    if len(mask) != rows:
        raise ValueError(f"the mask has {len(mask)} rows and the data {rows}: they must match")
