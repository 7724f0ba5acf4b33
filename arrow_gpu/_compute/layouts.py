"""Arrow layouts as arrow_gpu.compute's kernels see them: addresses, widths, type groups.

Shared by the modules that gather (``take``) and assemble (``concat``)
device arrays; nothing here launches more than a popcount.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from arrow_gpu._compute import kernels
from arrow_gpu._cuda import (_fill_array_layouts, _rows_on_device, _stored_null_count, _to_device,
                             _to_host)
from arrow_gpu.device import Context

INT32_MAX = 2**31 - 1  # the most items 32-bit offsets address

# An array whose buffers queued launches fill: built once they ran (and its counts are known).
Build = Callable[[], pa.Array]
# Its validity bitmap (None where there are no nulls) and null count, once known.
Validity = Callable[[], tuple[Optional[pa.Buffer], int]]


def no_validity() -> tuple[Optional[pa.Buffer], int]:
    return None, 0


def assembled(type: pa.DataType, n: int, validity: Validity,
              buffers: Sequence[Optional[pa.Buffer]], children: Sequence[Build] = ()) -> Build:
    """The array of the validity bitmap, ``buffers`` and ``children``, built when called
    (once the launches that fill them ran: lists that they may still fill)."""

    def build() -> pa.Array:
        bitmap, nulls = validity()
        return pa.Array.from_buffers(type, n, [bitmap, *buffers], nulls,
                                     children=[child() for child in children] or None)

    return build


def all_buffers(array: pa.Array) -> list[pa.Buffer]:
    found = [buffer for buffer in array.buffers() if buffer is not None]
    if isinstance(array, pa.DictionaryArray):
        found += all_buffers(array.dictionary)
    return found


Ints = npt.NDArray[np.int64]

# Arrays one after another: a sequence of them, or a ChunkedArray, whose chunks the native
# walk reads without making a Python Array of each.
Parts = Union[Sequence[pa.Array], pa.ChunkedArray]


def part_count(parts: Parts) -> int:
    return parts.num_chunks if isinstance(parts, pa.ChunkedArray) else len(parts)


def part_at(parts: Parts, index: int) -> pa.Array:
    part: pa.Array = parts.chunk(index) if isinstance(parts, pa.ChunkedArray) else parts[index]
    return part


def as_arrays(parts: Parts) -> Sequence[pa.Array]:
    """The parts as Python Arrays, for the walks that visit them one by one."""
    arrays: Sequence[pa.Array] = parts.chunks if isinstance(parts, pa.ChunkedArray) else parts
    return arrays


@dataclass  # not frozen: a frozen one's __init__ sets each field through object.__setattr__
class ArrayLayouts:
    """Where the own buffers of many arrays are: one row per array, read in one native walk
    (a plan's per-chunk work done on whole columns of these)."""

    offsets: Ints
    lengths: Ints
    positions: Ints  # where each array starts when they are laid one after another
    total: int  # their lengths' sum
    addresses: Ints  # (arrays, buffers): 0 where a buffer is absent
    sizes: Ints  # (arrays, buffers)
    type_differs_at: int  # the first array whose type is not the first one's; or their number


def array_layouts(parts: Parts, buffers: int = 3, *,
                  dictionaries: bool = False) -> ArrayLayouts:
    """The layouts of ``parts``' first ``buffers`` own buffers (of their dictionaries, with
    ``dictionaries``)."""
    table = np.empty((part_count(parts), 3 + 2 * buffers), np.int64)
    differs_at, total = _fill_array_layouts(parts, table, dictionaries)
    return ArrayLayouts(table[:, 0], table[:, 1], table[:, 2], total,
                        table[:, 3:3 + buffers], table[:, 3 + buffers:], differs_at)


def address(buffer: Optional[pa.Buffer]) -> int:
    return 0 if buffer is None else int(buffer.address)


def own_buffer(array: pa.Array, index: int) -> Optional[pa.Buffer]:
    buffer: Optional[pa.Buffer] = array.buffers()[index]
    return buffer


def offset_width(type: pa.DataType) -> int:
    return 8 if type.id in _LARGE_IDS else 4


_LARGE_IDS = {pa.large_string().id, pa.large_binary().id, pa.large_list(pa.int8()).id,
              pa.large_list_view(pa.int8()).id}


def is_fixed_width(type: pa.DataType) -> bool:
    try:
        return type.bit_width % 8 == 0 and not pa.types.is_dictionary(type)
    except ValueError:  # pyarrow: "Non-fixed width type"
        return False


def is_binary_like(type: pa.DataType) -> bool:
    return bool(pa.types.is_string(type) or pa.types.is_binary(type)
                or pa.types.is_large_string(type) or pa.types.is_large_binary(type))


def has_offsets(type: pa.DataType) -> bool:
    """Whether ``type``'s layout holds offsets, one more than its rows: strings, binaries,
    lists and maps."""
    return bool(is_binary_like(type) or pa.types.is_list(type) or pa.types.is_large_list(type)
                or pa.types.is_map(type))


def is_view(type: pa.DataType) -> bool:
    return bool(pa.types.is_string_view(type) or pa.types.is_binary_view(type))


def holds_run_end_encoded(type: pa.DataType) -> bool:
    """Whether ``type`` is run-end encoded or has such a type anywhere inside it."""
    if pa.types.is_run_end_encoded(type):
        return True
    if pa.types.is_dictionary(type):
        return holds_run_end_encoded(type.value_type)
    return any(holds_run_end_encoded(type.field(i).type) for i in range(type.num_fields))


def no_run_end_encoded(operation: str) -> NotImplementedError:
    return NotImplementedError(
        f"arrow_gpu.compute cannot {operation} run-end encoded data on the device "
        "(pyarrow.compute takes and filters none either): decode it first, e.g. arrow_gpu.to_device(pyarrow.compute.run_end_decode("
        "arrow_gpu.to_host(array)))")


def uploaded(context: Context, data: Any, stream: Any = None) -> Any:
    """Host ``data`` (an Array, ChunkedArray, RecordBatch or Table) copied to ``context``'s
    device, complete on return; None if some buffer of it is on a device already. A small
    copy runs on ``stream`` and waits for that stream alone (pyarrow's ``copy_to`` copies on
    the legacy default stream, which waits for every blocking stream of every library)."""
    return _to_device(context, data, stream)


def downloaded(data: Any, stream: Any = None, memory_pool: Optional[pa.MemoryPool] = None) -> Any:
    """Device ``data`` (an Array, ChunkedArray, RecordBatch or Table) copied to host memory
    from ``memory_pool``, complete on return; None if every buffer of it is in host memory.
    A small copy runs on ``stream`` and waits for that stream alone."""
    return _to_host(data, stream, memory_pool)


def empty(context: Context, type: pa.DataType, stream: Any = None) -> pa.Array:
    """An array of ``type`` without rows, on ``context``'s device."""
    empty: pa.Array = uploaded(context, _empty_on_host(type), stream)
    return empty


def _empty_on_host(type: pa.DataType) -> pa.Array:
    """An array of ``type`` without rows, built node by node. Not pa.nulls(0, type) nor a
    sliced null row: pyarrow's builders give nested dictionaries a type of their own
    (pyarrow 25: int64 indices for uint64 ones under run-end encoding) and run-end encoded
    children of lists a validity bitmap, arrays that fail validation."""
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, _empty_on_host(type.storage_type))
    if pa.types.is_dictionary(type):
        return pa.DictionaryArray.from_arrays(_empty_on_host(type.index_type),
                                              _empty_on_host(type.value_type),
                                              ordered=type.ordered)
    if pa.types.is_run_end_encoded(type):
        return pa.RunEndEncodedArray.from_arrays(_empty_on_host(type.run_end_type),
                                                 _empty_on_host(type.value_type), type=type)
    buffers: list[Optional[pa.Buffer]] = [None] + [pa.py_buffer(b"")] * (type.num_buffers - 1)
    if has_offsets(type):  # one offset, 0, for no rows
        buffers[1] = pa.py_buffer(bytes(offset_width(type)))
    children = [_empty_on_host(type.field(i).type) for i in range(type.num_fields)]
    return pa.Array.from_buffers(type, 0, buffers, null_count=0, children=children)


def no_columns(schema: pa.Schema, rows: int, *, table: bool,
               on_device: bool) -> Union[pa.RecordBatch, pa.Table]:
    """A RecordBatch (a Table with ``table``) of ``schema``, which has no fields, with
    ``rows`` rows, labelled as device data with ``on_device``. pyarrow's constructors count
    a batch's rows and find its device from its columns: without any, 0 rows on the host."""
    struct = pa.Array.from_buffers(pa.struct([]), rows, [None], null_count=0, children=[])
    batch = pa.RecordBatch.from_struct_array(struct).replace_schema_metadata(schema.metadata)
    if table:
        return pa.Table.from_batches([batch])
    return _rows_on_device(batch) if on_device else batch


def labelled_on_device(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch``, a RecordBatch of device columns, labelled as device data also when its
    first column holds no buffer (the null type), which pyarrow labels as host data."""
    if batch.device_type == pa.DeviceAllocationType.CPU:
        return _rows_on_device(batch)  # raises for host buffers
    return batch


def device_nulls(k: kernels.DeviceKernels, n: int) -> pa.Array:
    nulls: pa.Array = uploaded(k.context, pa.nulls(n), k.stream)
    return nulls


def null_count_of(k: kernels.DeviceKernels, array: pa.Array) -> int:
    """``array``'s null count: the one it holds, else counted from its bitmap."""
    stored: int = _stored_null_count(array)
    if stored >= 0:
        return stored
    if pa.types.is_null(array.type):
        return len(array)
    valid = own_buffer(array, 0)
    if valid is None:
        return 0
    return len(array) - k.popcount(valid.address, array.offset, len(array))
