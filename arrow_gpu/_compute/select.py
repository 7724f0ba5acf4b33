"""Rows of device data selected by indices or a mask: what ``arrow_gpu.compute.take`` and
``filter`` do, and ``arrow_gpu.to_host(data, indices=..., filter=...)`` before a download.
"""

from __future__ import annotations

from typing import Any, Optional

import pyarrow as pa

from arrow_gpu._compute import kernels as _kernels
from arrow_gpu._compute.dispatch import (ARRAYS, as_arrow, combined, device_context, finished,
                                         kernels_of, on_host, one_chunk, pc, rows_of, shaped)
from arrow_gpu._compute.take import Rows, indices_rows, mask_rows, take_array, take_arrays
from arrow_gpu._util.arrow_data import Kind, kind_of
from arrow_gpu.device import Context

NULL_SELECTION = ("drop", "emit_null")


def take_rows(data: Any, indices: Any, stream: Any) -> Any:
    """``arrow_gpu.compute.take``."""
    indices = as_arrow(indices, "indices")
    context = device_context(data, indices)
    kind = kind_of(data)
    indices_array = one_array(indices, "indices", stream)
    if not pa.types.is_integer(indices_array.type):
        raise TypeError(f"indices must be integers, got {indices_array.type}")
    k = kernels_of(context, stream)
    if k is None:  # pyarrow's IndexError for out-of-range indices is an ArrowIndexError
        return on_host(context or Context(0), lambda d, i: d.take(i), data, indices_array)
    rows = indices_rows(k, indices_array, rows_of(data))
    return finished(k, select_rows(k, data, kind, rows))



def filter_rows(data: Any, mask: Any, null_selection_behavior: str, stream: Any) -> Any:
    """``arrow_gpu.compute.filter``."""
    if null_selection_behavior not in NULL_SELECTION:
        raise ValueError(f"null_selection_behavior must be one of {NULL_SELECTION}, got "
                         f"{null_selection_behavior!r}")
    mask = as_arrow(mask, "mask")
    context = device_context(data, mask)
    mask_array = one_array(mask, "mask", stream)
    check_mask(mask_array, rows_of(data))
    if kind_of(data) is Kind.CHUNKED_ARRAY and data.num_chunks == 0:
        return data  # no rows to select; pyarrow 25 aborts filtering one that holds maps
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), lambda d, m: pc().filter(
            d, m, null_selection_behavior=null_selection_behavior), data, mask_array)
    rows = mask_rows(k, mask_array, null_selection_behavior == "emit_null")
    return finished(k, select_rows(k, data, kind_of(data), rows))


def select_rows(k: _kernels.DeviceKernels, data: Any, kind: Optional[Kind], rows: Rows) -> Any:
    """``data`` at ``rows``, in its own shape."""
    if kind is Kind.ARRAY:
        return take_array(k, data, rows)
    if kind is Kind.CHUNKED_ARRAY:
        return pa.chunked_array([take_array(k, combined(k, [data])[0], rows)], type=data.type)
    columns = data.columns if kind is Kind.RECORD_BATCH else combined(k, data.columns)
    return shaped(kind, data.schema, take_arrays(k, columns, rows), rows.length)


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
