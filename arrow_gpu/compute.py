"""Selecting and assembling device data: take, filter, slice, concat, nulls.

pyarrow cannot compute on device data (its kernels raise, or crash the process); these
functions select and assemble rows of device Arrays, ChunkedArrays, RecordBatches and
Tables without leaving the device, and give ordinary device pyarrow objects whose null
counts are known (so pyarrow never counts them on the host). Each result equals what
``pyarrow.compute`` gives for the same data on the host.

On a GPU a few generic kernels (``arrow_gpu._kernels``) gather bytes, bits and ranges by
indices; the type logic, which buffers and children to gather, is here. On the simulator
(which runs no kernels) the same functions run pyarrow's own CPU kernels over copies of the
data, and copy the result back: the API and semantics are the same, and the GPU runs the
kernels.

>>> import pyarrow as pa
>>> from arrow_gpu import to_device, to_host
>>> table = to_device(pa.table({"x": [1, None, 3], "s": ["a", "b", None]}))
>>> to_host(take(table, to_device(pa.array([2, 0])))).to_pydict()
{'x': [3, 1], 's': [None, 'a']}
>>> to_host(filter(table, is_valid(table["x"]))).num_rows
2
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc

from arrow_gpu import _kernels
from arrow_gpu._arrow_data import Kind, arrays, kind_of, map_arrays
from arrow_gpu.device import Context, context_of
from arrow_gpu.memory_manager import cuda_memory_manager

__all__ = ["combine_chunks", "concat", "drop_null", "fill_null", "filter", "is_null",
           "is_valid", "null_count", "slice", "take"]

_NULL_SELECTION = ("drop", "emit_null")
_INT32_MAX = 2**31 - 1
_ANY_ROWS = "a pyarrow Array, ChunkedArray, RecordBatch or Table"
_ARRAYS = "a pyarrow Array or ChunkedArray"


# -- arguments -------------------------------------------------------------------------


def _device_context(*datas: Any) -> Optional[Context]:
    """The one context all of ``datas``' buffers live in; None when none has a buffer.

    Host data is refused: these functions are for device data, and pyarrow.compute already
    does all of this on the host.
    """
    found: Optional[Context] = None
    for data in datas:
        if kind_of(data) is None:
            raise TypeError(f"expected {_ANY_ROWS} on a CUDA device, got '{type(data).__name__}'")
        for array in arrays(data):
            for buffer in _all_buffers(array):
                if buffer.is_cpu:
                    raise TypeError("arrow_gpu.compute works on device data, and this is in host "
                                    "memory: move it with arrow_gpu.to_device first, or use "
                                    "pyarrow.compute on the host")
        context = context_of(data)
        if context is None:
            continue
        if found is not None and context.device_number != found.device_number:
            raise ValueError(f"the data is on devices {found.device_number} and "
                             f"{context.device_number}: move it to one device first "
                             "(arrow_gpu.to_device(data, device=n))")
        found = found or context
    return found


def _all_buffers(array: pa.Array) -> list[pa.Buffer]:
    found = [buffer for buffer in array.buffers() if buffer is not None]
    if isinstance(array, pa.DictionaryArray):
        found += _all_buffers(array.dictionary)
    return found


def _one_array(data: Any, what: str) -> pa.Array:
    """An Array of ``data``, an Array or a ChunkedArray (its chunks combined)."""
    kind = kind_of(data)
    if kind is Kind.ARRAY:
        return data
    if kind is Kind.CHUNKED_ARRAY:
        combined: pa.Array = combine_chunks(data)
        return combined
    raise TypeError(f"{what} must be {_ARRAYS}, got '{type(data).__name__}'")


def _rows_of(data: Any) -> int:
    return len(data) if kind_of(data) in (Kind.ARRAY, Kind.CHUNKED_ARRAY) else data.num_rows


def _check_arrays(data: Any, function: str) -> None:
    if kind_of(data) not in (Kind.ARRAY, Kind.CHUNKED_ARRAY):
        raise TypeError(f"{function} takes {_ARRAYS}, got '{type(data).__name__}'"
                        + ("; pass one column, e.g. table[name]"
                           if kind_of(data) in (Kind.RECORD_BATCH, Kind.TABLE) else ""))


# -- the simulator's way: pyarrow's CPU kernels over host copies -----------------------


def _move(data: Any, manager: pa.MemoryManager) -> Any:
    def copy(array: pa.Array) -> pa.Array:
        if array.is_cpu:  # known before it leaves, so no one counts on the device later
            array.null_count  # noqa: B018
        return array.copy_to(manager)

    return map_arrays(data, copy) if kind_of(data) is not None else data


def _on_host(context: Context, function: Callable[..., Any], *datas: Any) -> Any:
    host = [_move(data, pa.default_cpu_memory_manager()) for data in datas]
    return _move(function(*host), cuda_memory_manager(context))


def _kernels_of(context: Optional[Context]) -> Optional[_kernels.DeviceKernels]:
    """The kernels to run on ``context``'s device; None where the driver runs none."""
    if context is None or not _kernels.runs_kernels(context):
        return None
    return _kernels.kernels_for(context)


# -- rows: which rows a take or filter selects -----------------------------------------


@dataclass
class _Rows:
    """Row positions as int64 on the device, -1 for a null row."""

    buffer: pa.Buffer
    length: int
    null_count: int

    @property
    def address(self) -> int:
        return _address(self.buffer)


def _address(buffer: Optional[pa.Buffer]) -> int:
    return 0 if buffer is None else int(buffer.address)


def _own(array: pa.Array, index: int) -> Optional[pa.Buffer]:
    buffer: Optional[pa.Buffer] = array.buffers()[index]
    return buffer


def _width(type: pa.DataType) -> int:
    return 8 if type.id in _LARGE_IDS else 4


_LARGE_IDS = {pa.large_string().id, pa.large_binary().id, pa.large_list(pa.int8()).id,
              pa.large_list_view(pa.int8()).id}


def _indices_rows(k: _kernels.DeviceKernels, indices: pa.Array, bound: int) -> _Rows:
    if not pa.types.is_integer(indices.type):
        raise TypeError(f"indices must be integers, got {indices.type}")
    n = len(indices)
    width = indices.type.bit_width // 8
    out = k.alloc(8 * n)
    valid = _own(indices, 0)
    if n and not k.indices(out.address, _address(_own(indices, 1)) + indices.offset * width,
                           width, pa.types.is_signed_integer(indices.type), _address(valid),
                           indices.offset, n, bound):
        raise IndexError(f"index out of bounds: take indices must lie in [0, {bound})")
    nulls = 0 if valid is None else n - k.popcount(valid.address, indices.offset, n)
    return _Rows(out, n, nulls)


def _mask_rows(k: _kernels.DeviceKernels, mask: pa.Array, emit_null: bool) -> _Rows:
    n = len(mask)
    valid = _own(mask, 0)
    out = k.alloc(8 * n)
    total = k.scan(_address(_own(mask, 1)), mask.offset, _address(valid), mask.offset,
                   2 if emit_null else 1, n, out.address, 8, compact=True)
    nulls = 0 if valid is None or not emit_null else n - k.popcount(valid.address, mask.offset, n)
    return _Rows(out, total, nulls)


def _check_mask(mask: pa.Array, rows: int) -> None:
    if not pa.types.is_boolean(mask.type):
        raise TypeError(f"a filter mask must be boolean, got {mask.type}: compare on the "
                        "device first (e.g. with CuPy) and wrap the result with "
                        "arrow_gpu.from_cuda_array")
    if len(mask) != rows:
        raise ValueError(f"the mask has {len(mask)} rows and the data {rows}: they must match")


# -- take, by type (kernels) -----------------------------------------------------------


def _take_validity(k: _kernels.DeviceKernels, array: pa.Array,
                   rows: _Rows) -> tuple[Optional[pa.Buffer], int]:
    valid = _own(array, 0)
    if valid is None and rows.null_count == 0:
        return None, 0
    n = rows.length
    out = k.alloc((n + 7) // 8)
    nulls = n - k.gather_bits(out.address, _address(valid), array.offset, rows.address, n)
    return (out if nulls else None), nulls


def _take_offsets(k: _kernels.DeviceKernels, array: pa.Array, rows: _Rows,
                  sizes: Optional[pa.Buffer] = None) -> tuple[pa.Buffer, int]:
    """Offsets of the selected rows' ranges (of ``array``'s own offsets, or views' sizes)
    and their total."""
    width = _width(array.type)
    n = rows.length
    lengths = k.alloc(8 * n)
    k.range_sizes(lengths.address, _address(_own(array, 1)) + array.offset * width,
                  0 if sizes is None else sizes.address + array.offset * width, width,
                  rows.address, n)
    offsets = k.alloc(width * (n + 1))
    total = k.scan(lengths.address, 0, 0, 0, 0, n, offsets.address, width, compact=False)
    if width == 4 and total > _INT32_MAX:
        raise OverflowError(f"the selected {array.type} values hold {total} items, more than "
                            "32-bit offsets can address: cast to the large_ type first")
    return offsets, total


def _take_children_by_ranges(k: _kernels.DeviceKernels, array: pa.Array, rows: _Rows,
                             offsets: pa.Buffer, total: int) -> pa.Array:
    width = _width(array.type)
    child_rows = _Rows(k.alloc(8 * total), total, 0)
    k.expand_ranges(child_rows.address, _address(_own(array, 1)) + array.offset * width, width,
                    0, rows.address, offsets.address, width, rows.length)
    return _take_array(k, array.values, child_rows)


def _with_null_row(k: _kernels.DeviceKernels, array: pa.Array,
                   rows: _Rows) -> tuple[pa.Array, _Rows]:
    """``array`` with one null row appended, and ``rows`` taking it for each null row:
    for unions, whose null rows pyarrow makes as a null of their first child."""
    null_row = pa.nulls(1, array.type).copy_to(cuda_memory_manager(k.context))
    extended = _concat_arrays(k, [array, null_row])
    pointed = k.alloc(8 * rows.length)  # rows are shared with sibling columns: a copy
    k.copy(pointed.address, rows.address, 8 * rows.length)
    k.replace_nulls(pointed.address, rows.length, len(array))
    return extended, _Rows(pointed, rows.length, 0)


def _take_array(k: _kernels.DeviceKernels, array: pa.Array, rows: _Rows) -> pa.Array:
    type = array.type
    n = rows.length
    if pa.types.is_null(type):
        return _device_nulls(k, n)
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, _take_array(k, array.storage, rows))
    if pa.types.is_dictionary(type):
        indices = _take_array(k, array.indices, rows)
        return pa.DictionaryArray.from_arrays(indices, array.dictionary, ordered=type.ordered,
                                              safe=False)
    if pa.types.is_union(type):
        return _take_union(k, array, rows)
    if pa.types.is_run_end_encoded(type):
        raise _no_run_end_encoded("take")
    validity, nulls = _take_validity(k, array, rows)
    if pa.types.is_boolean(type):
        values = k.alloc((n + 7) // 8)
        k.gather_bits(values.address, _address(_own(array, 1)), array.offset, rows.address, n)
        return pa.Array.from_buffers(type, n, [validity, values], nulls)
    if _is_fixed_width(type):
        width = type.bit_width // 8
        values = k.alloc(width * n)
        if width:  # fixed_size_binary(0) has nothing to gather
            k.gather(values.address, _address(_own(array, 1)) + array.offset * width,
                     rows.address, n, width)
        return pa.Array.from_buffers(type, n, [validity, values], nulls)
    if _is_binary_like(type):
        offsets, total = _take_offsets(k, array, rows)
        data = k.alloc(total)
        width = _width(type)
        k.gather_ranges(data.address, _address(_own(array, 2)),
                        _address(_own(array, 1)) + array.offset * width, width, rows.address,
                        offsets.address, width, n)
        return pa.Array.from_buffers(type, n, [validity, offsets, data], nulls)
    if _is_view(type):
        views = k.alloc(16 * n)
        k.gather(views.address, _address(_own(array, 1)) + array.offset * 16, rows.address, n, 16)
        return pa.Array.from_buffers(type, n, [validity, views, *array.buffers()[2:]], nulls)
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets, total = _take_offsets(k, array, rows)
        child = _take_children_by_ranges(k, array, rows, offsets, total)
        return pa.Array.from_buffers(type, n, [validity, offsets], nulls, children=[child])
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        width = _width(type)
        sizes = _own(array, 2)
        offsets, total = _take_offsets(k, array, rows, sizes)
        new_sizes = k.alloc(width * n)
        k.gather(new_sizes.address, _address(sizes) + array.offset * width, rows.address, n,
                 width)
        child = _take_children_by_ranges(k, array, rows, offsets, total)
        return pa.Array.from_buffers(type, n, [validity, offsets, new_sizes], nulls,
                                     children=[child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        values = array.values.slice(array.offset * size, len(array) * size)
        child_rows = _Rows(k.alloc(8 * n * size), n * size, rows.null_count * size)
        if size:
            k.expand_ranges(child_rows.address, 0, 8, size, rows.address, 0, 8, n)
        child = _take_array(k, values, child_rows)
        return pa.Array.from_buffers(type, n, [validity], nulls, children=[child])
    if pa.types.is_struct(type):
        children = [_take_array(k, array.field(i), rows) for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, n, [validity], nulls, children=children)
    raise NotImplementedError(f"arrow_gpu.compute cannot take {type} on the device yet")


def _take_union(k: _kernels.DeviceKernels, array: pa.Array, rows: _Rows) -> pa.Array:
    type = array.type
    if rows.null_count:
        array, rows = _with_null_row(k, array, rows)
    n = rows.length
    type_ids = k.alloc(n)
    k.gather(type_ids.address, _address(_own(array, 1)) + array.offset, rows.address, n, 1)
    if type.mode == "sparse":
        children = [_take_array(k, array.field(i), rows) for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, n, [None, type_ids], 0, children=children)
    # Dense: each child keeps the values its selected rows point at, in row order (offsets
    # within a child must not decrease).
    offsets = k.alloc(4 * n)
    source_offsets = k.alloc(4 * n)
    k.gather(source_offsets.address, _address(_own(array, 2)) + array.offset * 4, rows.address,
             n, 4)
    children = []
    for i, code in enumerate(type.type_codes):
        is_child = k.alloc((n + 7) // 8)
        k.type_mask(is_child.address, type_ids.address, n, code)
        mask = pa.Array.from_buffers(pa.bool_(), n, [None, is_child], 0)
        positions = _mask_rows(k, mask, emit_null=False)
        k.scatter_ranks(offsets.address, positions.address, positions.length)
        child_rows = _Rows(k.alloc(8 * positions.length), positions.length, 0)
        picked = k.alloc(4 * positions.length)  # the rows' offsets into this child
        k.gather(picked.address, source_offsets.address, positions.address, positions.length, 4)
        child = array.field(i)
        if not k.indices(child_rows.address, picked.address, 4, True, 0, 0, positions.length,
                         len(child)):
            raise ValueError(f"the dense union's offsets point past the end of child {i}")
        children.append(_take_array(k, child, child_rows))
    return pa.Array.from_buffers(type, n, [None, type_ids, offsets], 0, children=children)


def _empty(context: Context, type: pa.DataType) -> pa.Array:
    empty: pa.Array = pa.nulls(0, type).copy_to(cuda_memory_manager(context))
    return empty


def _device_nulls(k: _kernels.DeviceKernels, n: int) -> pa.Array:
    nulls: pa.Array = pa.nulls(n).copy_to(cuda_memory_manager(k.context))
    return nulls


def _is_fixed_width(type: pa.DataType) -> bool:
    try:
        return type.bit_width % 8 == 0 and not pa.types.is_dictionary(type)
    except ValueError:  # pyarrow: "Non-fixed width type"
        return False


def _is_binary_like(type: pa.DataType) -> bool:
    return bool(pa.types.is_string(type) or pa.types.is_binary(type)
                or pa.types.is_large_string(type) or pa.types.is_large_binary(type))


def _is_view(type: pa.DataType) -> bool:
    return bool(pa.types.is_string_view(type) or pa.types.is_binary_view(type))


def _no_run_end_encoded(operation: str) -> NotImplementedError:
    return NotImplementedError(
        f"arrow_gpu.compute cannot {operation} run-end encoded data on the device yet: "
        "decode it first, e.g. arrow_gpu.to_device(pyarrow.compute.run_end_decode("
        "arrow_gpu.to_host(array)))")


# -- concatenation (kernels) -----------------------------------------------------------


def _concat_validity(k: _kernels.DeviceKernels,
                     parts: Sequence[pa.Array]) -> tuple[Optional[pa.Buffer], int]:
    if all(_own(part, 0) is None for part in parts):
        return None, 0
    total = sum(len(part) for part in parts)
    out = k.alloc((total + 7) // 8)
    position = 0
    for part in parts:
        k.copy_bits(out.address, position, _address(_own(part, 0)), part.offset, len(part))
        position += len(part)
    nulls = total - k.popcount(out.address, 0, total)
    return (out if nulls else None), nulls


def _concat_offsets(k: _kernels.DeviceKernels,
                    parts: Sequence[pa.Array]) -> tuple[pa.Buffer, list[tuple[int, int]]]:
    """Offsets of the concatenation, rebased, and each part's [first, last) range."""
    width = _width(parts[0].type)
    total = sum(len(part) for part in parts)
    out = k.alloc(width * (total + 1))
    ranges: list[tuple[int, int]] = []
    position = 0
    items = 0
    for part in parts:
        start = _address(_own(part, 1)) + part.offset * width
        first = k.read_int(start, width) if len(part) else 0
        last = k.read_int(start + len(part) * width, width) if len(part) else 0
        k.rebase(out.address + position * width, start, width, len(part), items - first)
        ranges.append((first, last))
        position += len(part)
        items += last - first
    if width == 4 and items > _INT32_MAX:
        raise OverflowError(f"the concatenated {parts[0].type} values hold {items} items, more "
                            "than 32-bit offsets can address: cast to the large_ type first")
    k.write(out.address + total * width, items.to_bytes(width, "little", signed=True))
    return out, ranges


def _concat_arrays(k: _kernels.DeviceKernels, parts: Sequence[pa.Array]) -> pa.Array:
    type = parts[0].type
    for part in parts[1:]:
        if not part.type.equals(type):
            raise TypeError(f"cannot concatenate arrays of types {type} and {part.type}")
    n = sum(len(part) for part in parts)
    if pa.types.is_null(type):
        return _device_nulls(k, n)
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, _concat_arrays(k, [p.storage for p in parts]))
    if pa.types.is_dictionary(type):
        # Parts whose rows are all null (a union's null row) may hold any dictionary.
        valued = [part for part in parts if _array_null_count(k, part) < len(part)]
        dictionary = (valued or parts)[0].dictionary
        for part in valued:
            if not _same_memory(part.dictionary, dictionary):
                raise NotImplementedError(
                    "arrow_gpu.compute concatenates dictionary arrays that share one dictionary; "
                    "these have different ones: unify them on the host "
                    "(pyarrow.Table.unify_dictionaries) before moving them")
        indices = _concat_arrays(k, [part.indices for part in parts])
        return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=type.ordered,
                                              safe=False)
    if pa.types.is_run_end_encoded(type):
        raise _no_run_end_encoded("concatenate")
    if pa.types.is_union(type):
        return _concat_unions(k, parts)
    validity, nulls = _concat_validity(k, parts)
    if pa.types.is_boolean(type):
        values = k.alloc((n + 7) // 8)
        position = 0
        for part in parts:
            k.copy_bits(values.address, position, _address(_own(part, 1)), part.offset, len(part))
            position += len(part)
        return pa.Array.from_buffers(type, n, [validity, values], nulls)
    if _is_fixed_width(type) or _is_view(type):
        width = 16 if _is_view(type) else type.bit_width // 8
        values = k.alloc(width * n)
        position = 0
        variadic: list[pa.Buffer] = []
        for part in parts:
            k.copy(values.address + position * width,
                   _address(_own(part, 1)) + part.offset * width, len(part) * width)
            if _is_view(type) and variadic:
                k.rebase_views(values.address + position * width, len(part), len(variadic))
            variadic += part.buffers()[2:] if _is_view(type) else []
            position += len(part)
        return pa.Array.from_buffers(type, n, [validity, values, *variadic], nulls)
    if _is_binary_like(type):
        offsets, ranges = _concat_offsets(k, parts)
        data = k.alloc(sum(last - first for first, last in ranges))
        position = 0
        for part, (first, last) in zip(parts, ranges):
            k.copy(data.address + position, _address(_own(part, 2)) + first, last - first)
            position += last - first
        return pa.Array.from_buffers(type, n, [validity, offsets, data], nulls)
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets, ranges = _concat_offsets(k, parts)
        child = _concat_arrays(k, [part.values.slice(first, last - first)
                                   for part, (first, last) in zip(parts, ranges)])
        return pa.Array.from_buffers(type, n, [validity, offsets], nulls, children=[child])
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        # Views may point anywhere in their child: the children go whole, the offsets move.
        width = _width(type)
        offsets = k.alloc(width * n)
        sizes = k.alloc(width * n)
        position = 0
        items = 0
        for part in parts:
            k.rebase(offsets.address + position * width,
                     _address(_own(part, 1)) + part.offset * width, width, len(part), items)
            k.copy(sizes.address + position * width, _address(_own(part, 2)) + part.offset * width,
                   len(part) * width)
            position += len(part)
            items += len(part.values)
        child = _concat_arrays(k, [part.values for part in parts])
        return pa.Array.from_buffers(type, n, [validity, offsets, sizes], nulls, children=[child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        child = _concat_arrays(k, [part.values.slice(part.offset * size, len(part) * size)
                                   for part in parts])
        return pa.Array.from_buffers(type, n, [validity], nulls, children=[child])
    if pa.types.is_struct(type):
        children = [_concat_arrays(k, [part.field(i) for part in parts])
                    for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, n, [validity], nulls, children=children)
    raise NotImplementedError(f"arrow_gpu.compute cannot concatenate {type} on the device yet")


def _concat_unions(k: _kernels.DeviceKernels, parts: Sequence[pa.Array]) -> pa.Array:
    type = parts[0].type
    n = sum(len(part) for part in parts)
    type_ids = k.alloc(n)
    position = 0
    for part in parts:
        k.copy(type_ids.address + position, _address(_own(part, 1)) + part.offset, len(part))
        position += len(part)
    if type.mode == "sparse":
        children = [_concat_arrays(k, [part.field(i) for part in parts])
                    for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, n, [None, type_ids], 0, children=children)
    # Dense: children go whole; each row's offset moves by its child's length before it.
    offsets = k.alloc(4 * n)
    deltas = [0] * 128
    position = 0
    for part in parts:
        table = b"".join(delta.to_bytes(4, "little", signed=True) for delta in deltas)
        device_deltas = k.alloc(len(table))
        k.write(device_deltas.address, table)
        k.rebase_union(offsets.address + position * 4, _address(_own(part, 2)) + part.offset * 4,
                       type_ids.address + position, len(part), device_deltas.address)
        k.finish()  # the table is read before it goes
        for i, code in enumerate(type.type_codes):
            deltas[code] += len(part.field(i))
        position += len(part)
    children = [_concat_arrays(k, [part.field(i) for part in parts])
                for i in range(type.num_fields)]
    return pa.Array.from_buffers(type, n, [None, type_ids, offsets], 0, children=children)


def _same_memory(a: pa.Array, b: pa.Array) -> bool:
    return (a.offset == b.offset and len(a) == len(b)
            and [_address(x) for x in _all_buffers(a)] == [_address(x) for x in _all_buffers(b)])


# -- public functions ------------------------------------------------------------------


def take(data: Any, indices: Any) -> Any:
    """The rows of ``data`` at ``indices``, as ``pyarrow.compute.take``, on the device.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        Device data, of any Arrow type but run-end encoded.
    indices : pyarrow.Array or ChunkedArray
        Integer positions on the same device; a null index gives a null row.

    Returns
    -------
    The same shape as ``data``, on the same device, with known null counts (a ChunkedArray
    or Table has one chunk per column).

    Raises
    ------
    TypeError
        If ``data`` or ``indices`` is in host memory, or ``indices`` is not integers.
    ValueError
        If they are on different devices.
    IndexError
        If an index is negative or not below the number of rows.
    """
    context = _device_context(data, indices)
    kind = kind_of(data)
    indices_array = _one_array(indices, "indices")
    if not pa.types.is_integer(indices_array.type):
        raise TypeError(f"indices must be integers, got {indices_array.type}")
    k = _kernels_of(context)
    if k is None:  # pyarrow's IndexError for out-of-range indices is an ArrowIndexError
        return _on_host(context or Context(0), lambda d, i: d.take(i), data, indices_array)
    rows = _indices_rows(k, indices_array, _rows_of(data))
    return _finished(k, _select(k, data, kind, rows))


def _finished(k: _kernels.DeviceKernels, result: Any) -> Any:
    """``result`` once every launch that makes it is done: results are complete when a
    compute function returns, as ``to_device``'s are."""
    k.finish()
    return result


def _select(k: _kernels.DeviceKernels, data: Any, kind: Optional[Kind], rows: _Rows) -> Any:
    """``data`` at ``rows``, in its own shape."""
    if kind is Kind.ARRAY:
        return _take_array(k, data, rows)
    if kind is Kind.CHUNKED_ARRAY:
        return pa.chunked_array([_take_array(k, _combined(k, data), rows)], type=data.type)
    if kind is Kind.RECORD_BATCH:
        return pa.RecordBatch.from_arrays([_take_array(k, column, rows)
                                           for column in data.columns], schema=data.schema)
    return pa.Table.from_arrays(
        [pa.chunked_array([_take_array(k, _combined(k, column), rows)], type=column.type)
         for column in data.columns], schema=data.schema)


def _combined(k: _kernels.DeviceKernels, chunked: pa.ChunkedArray) -> pa.Array:
    if chunked.num_chunks == 1:
        chunk: pa.Array = chunked.chunk(0)
        return chunk
    if chunked.num_chunks == 0:
        return _empty(k.context, chunked.type)
    return _concat_arrays(k, chunked.chunks)


def filter(data: Any, mask: Any, *, null_selection_behavior: str = "drop") -> Any:
    """The rows of ``data`` where ``mask`` is true, as ``pyarrow.compute.filter``.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        Device data, of any Arrow type but run-end encoded.
    mask : pyarrow.Array or ChunkedArray of booleans
        One per row of ``data``, on the same device.
    null_selection_behavior : {"drop", "emit_null"}
        What a null in the mask gives: no row, or a null row.

    Returns
    -------
    The same shape as ``data``, on the same device, with known null counts.

    Raises
    ------
    TypeError
        If ``data`` or ``mask`` is in host memory, or ``mask`` is not boolean.
    ValueError
        If the lengths differ, they are on different devices, or
        ``null_selection_behavior`` is neither choice.
    """
    if null_selection_behavior not in _NULL_SELECTION:
        raise ValueError(f"null_selection_behavior must be one of {_NULL_SELECTION}, got "
                         f"{null_selection_behavior!r}")
    context = _device_context(data, mask)
    mask_array = _one_array(mask, "mask")
    _check_mask(mask_array, _rows_of(data))
    k = _kernels_of(context)
    if k is None:
        return _on_host(context or Context(0), lambda d, m: pc.filter(
            d, m, null_selection_behavior=null_selection_behavior), data, mask_array)
    rows = _mask_rows(k, mask_array, null_selection_behavior == "emit_null")
    return _finished(k, _select(k, data, kind_of(data), rows))


def is_valid(data: Any) -> Any:
    """Whether each row of an Array or ChunkedArray is not null, as booleans on the device
    (``pyarrow.compute.is_valid``)."""
    return _validity_flags(data, invert=False)


def is_null(data: Any) -> Any:
    """Whether each row of an Array or ChunkedArray is null, as booleans on the device
    (``pyarrow.compute.is_null``; NaN is not null)."""
    return _validity_flags(data, invert=True)


def _validity_flags(data: Any, invert: bool) -> Any:
    _check_arrays(data, "is_null" if invert else "is_valid")
    context = _device_context(data)
    k = _kernels_of(context)
    if k is None:
        return _on_host(context or Context(0), pc.is_null if invert else pc.is_valid, data)

    def flags(array: pa.Array) -> pa.Array:
        if pa.types.is_run_end_encoded(array.type):
            raise _no_run_end_encoded("test for nulls in")
        n = len(array)
        out = k.alloc((n + 7) // 8)
        all_null = pa.types.is_null(array.type)
        k.copy_bits(out.address, 0, _address(_own(array, 0)), array.offset, n,
                    invert != all_null)
        return pa.Array.from_buffers(pa.bool_(), n, [None, out], 0)

    if kind_of(data) is Kind.ARRAY:
        return _finished(k, flags(data))
    return _finished(k, pa.chunked_array([flags(chunk) for chunk in data.chunks],
                                         type=pa.bool_()))


def null_count(data: Any) -> int:
    """How many rows of an Array or ChunkedArray are null, counted on the device.

    pyarrow's own ``null_count`` reads a device bitmap on the host when the count is not
    known yet (and crashes); this never does.
    """
    _check_arrays(data, "null_count")
    context = _device_context(data)
    k = _kernels_of(context)
    if k is None:
        host = _move(data, pa.default_cpu_memory_manager())
        count: int = host.null_count
        return count
    return builtins.sum(_array_null_count(k, array) for array in arrays(data))


def _array_null_count(k: _kernels.DeviceKernels, array: pa.Array) -> int:
    if pa.types.is_null(array.type):
        return len(array)
    valid = _own(array, 0)
    if valid is None:
        return 0
    return len(array) - k.popcount(valid.address, array.offset, len(array))


def drop_null(data: Any) -> Any:
    """``data`` without its null rows (for batches and tables: rows with a null in any
    column), as ``pyarrow.compute.drop_null``."""
    context = _device_context(data)
    k = _kernels_of(context)
    if k is None:
        return _on_host(context or Context(0), pc.drop_null, data)
    kind = kind_of(data)
    n = _rows_of(data)
    columns = [data] if kind in (Kind.ARRAY, Kind.CHUNKED_ARRAY) else data.columns
    valid = k.alloc((n + 7) // 8)
    k.copy_bits(valid.address, 0, 0, 0, n)  # all rows, until a column's nulls clear them
    for column in columns:
        array = column if isinstance(column, pa.Array) else _combined(k, column)
        if pa.types.is_null(array.type):
            k.copy_bits(valid.address, 0, 0, 0, n, invert=True)
        elif _own(array, 0) is not None:
            k.and_bits(valid.address, _address(_own(array, 0)), array.offset, n)
    mask = pa.Array.from_buffers(pa.bool_(), n, [None, valid], 0)
    return _finished(k, _select(k, data, kind, _mask_rows(k, mask, emit_null=False)))


def fill_null(data: Any, fill_value: Any) -> Any:
    """An Array or ChunkedArray with its nulls replaced by ``fill_value`` (a scalar of its
    type, or a Python value that converts to one), as ``pyarrow.compute.fill_null``."""
    _check_arrays(data, "fill_null")
    scalar = fill_value if isinstance(fill_value, pa.Scalar) else pa.scalar(fill_value, data.type)
    if not scalar.type.equals(data.type):
        scalar = scalar.cast(data.type)
    context = _device_context(data)
    k = _kernels_of(context)
    if k is None:
        return _on_host(context or Context(0), lambda d: pc.fill_null(d, scalar), data)
    manager = cuda_memory_manager(k.context)
    if pa.types.is_dictionary(data.type):
        raise NotImplementedError("arrow_gpu.compute cannot fill nulls of dictionary arrays on "
                                  "the device: fill the dictionary's indices' nulls with "
                                  "take, or decode it first")

    def fill(array: pa.Array) -> pa.Array:
        n = len(array)
        valid = _own(array, 0)
        if valid is None:  # no nulls; or the null type, whose only scalar is null
            return array
        extended = _concat_arrays(k, [array, pa.array([scalar], array.type).copy_to(manager)])
        rows = _Rows(k.alloc(8 * n), n, 0)
        k.fill_indices(rows.address, valid.address, array.offset, n, n)
        return _take_array(k, extended, rows)

    if kind_of(data) is Kind.ARRAY:
        return _finished(k, fill(data))
    return _finished(k, pa.chunked_array([fill(chunk) for chunk in data.chunks],
                                         type=data.type))


def slice(data: Any, offset: int = 0, length: Optional[int] = None) -> Any:
    """Rows ``offset`` to ``offset + length`` of ``data``, zero-copy, with null counts known.

    pyarrow's own ``Table.slice`` and ``ChunkedArray.slice`` count the nulls of device data
    on the host (and crash); this counts them on the device.
    """
    context = _device_context(data)
    n = _rows_of(data)
    if offset < 0:
        raise IndexError(f"offset must be non-negative, got {offset}")
    offset = min(offset, n)
    length = n - offset if length is None else min(max(length, 0), n - offset)
    k = _kernels_of(context)
    if k is None:
        return _on_host(context or Context(0), lambda d: d.slice(offset, length), data)
    kind = kind_of(data)
    if kind is Kind.ARRAY:
        return _finished(k, _slice_array(k, data, offset, length))
    if kind is Kind.RECORD_BATCH:
        return _finished(k, pa.RecordBatch.from_arrays(
            [_slice_array(k, column, offset, length) for column in data.columns],
            schema=data.schema))
    if kind is Kind.CHUNKED_ARRAY:
        return _finished(k, _slice_chunked(k, data, offset, length))
    return _finished(k, pa.Table.from_arrays([_slice_chunked(k, column, offset, length)
                                              for column in data.columns], schema=data.schema))


def _slice_chunked(k: _kernels.DeviceKernels, chunked: pa.ChunkedArray, offset: int,
                   length: int) -> pa.ChunkedArray:
    pieces = []
    start = 0
    for chunk in chunked.chunks:
        end = start + len(chunk)
        low, high = max(offset, start), min(offset + length, end)
        if low < high:
            pieces.append(_slice_array(k, chunk, low - start, high - low))
        start = end
    return pa.chunked_array(pieces, type=chunked.type)


def _slice_array(k: _kernels.DeviceKernels, array: pa.Array, offset: int, length: int) -> pa.Array:
    """A slice whose null count (and its struct fields' counts) is known."""
    type = array.type
    if pa.types.is_struct(type):
        # Fields are sliced with their parent: each gets its own known count.
        start = array.offset + offset
        validity = _own(array, 0)
        nulls = 0
        if validity is not None:
            out = k.alloc((length + 7) // 8)
            k.copy_bits(out.address, 0, validity.address, start, length)
            nulls = length - k.popcount(out.address, 0, length)
            validity = out if nulls else None
        children = [_slice_array(k, array.field(i), offset, length)
                    for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, length, [validity], nulls, children=children)
    sliced = array.slice(offset, length)
    if pa.types.is_union(type) or pa.types.is_run_end_encoded(type) or pa.types.is_null(type):
        return sliced  # no validity bitmap: their null count is known (0, or all)
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, _slice_array(k, array.storage, offset,
                                                                 length))
    if pa.types.is_dictionary(type):
        return pa.DictionaryArray.from_arrays(_slice_array(k, array.indices, offset, length),
                                              array.dictionary, ordered=type.ordered,
                                              safe=False)
    nulls = _array_null_count(k, sliced)
    own: list[Optional[pa.Buffer]] = sliced.buffers()[:_own_buffer_count(sliced)]
    return pa.Array.from_buffers(type, length, own, nulls, sliced.offset,
                                 children=_raw_children(sliced))


def _own_buffer_count(array: pa.Array) -> int:
    if _is_view(array.type):
        return len(array.buffers())
    count: int = array.type.num_buffers
    return count


def _raw_children(array: pa.Array) -> Optional[list[pa.Array]]:
    """The children as the array's data holds them (lists' values, not cut to its rows)."""
    type = array.type
    if (pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type)
            or pa.types.is_list_view(type) or pa.types.is_large_list_view(type)
            or pa.types.is_fixed_size_list(type)):
        return [array.values]
    return None


def concat(parts: Sequence[Any]) -> Any:
    """One Array, RecordBatch or Table of ``parts`` end to end, as
    ``pyarrow.concat_arrays`` (which crashes on device data) and ``concat_tables``.

    ``parts`` are all Arrays or ChunkedArrays (giving an Array), all RecordBatches, or all
    Tables, of one type or schema, on one device. Tables come back with one chunk per
    column.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("concat needs at least one part, to know the type")
    context = _device_context(*parts)
    kinds = {kind_of(part) for part in parts}
    if kinds <= {Kind.ARRAY, Kind.CHUNKED_ARRAY}:
        chunks = [chunk for part in parts for chunk in arrays(part)]
        if not chunks:  # ChunkedArrays without chunks
            return _empty(context or Context(0), parts[0].type)
        k = _kernels_of(context)
        if k is None:
            return _on_host(context or Context(0), lambda *c: pa.concat_arrays(list(c)), *chunks)
        return _finished(k, _concat_arrays(k, chunks))
    if len(kinds) != 1:
        raise TypeError("concat takes parts of one shape: Arrays and ChunkedArrays, "
                        "RecordBatches, or Tables")
    schema = parts[0].schema
    for part in parts[1:]:
        if not part.schema.equals(schema):
            raise ValueError(f"cannot concatenate data of schemas {schema} and {part.schema}")
    columns = [concat([part.column(i) for part in parts]) for i in range(len(schema))]
    if kinds == {Kind.RECORD_BATCH}:
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays([pa.chunked_array([c], type=c.type) for c in columns],
                                schema=schema)


def combine_chunks(data: Any) -> Any:
    """As pyarrow's ``combine_chunks``: a ChunkedArray's chunks as one Array; a Table with
    one chunk per column. An Array or RecordBatch is already one."""
    kind = kind_of(data)
    if kind in (Kind.ARRAY, Kind.RECORD_BATCH):
        _device_context(data)
        return data
    if kind is Kind.CHUNKED_ARRAY:
        if data.num_chunks == 1:
            return data.chunk(0)
        context = _device_context(data)
        if data.num_chunks == 0:
            return _empty(context or Context(0), data.type)
        k = _kernels_of(context)
        if k is None:
            return _on_host(context or Context(0), lambda d: d.combine_chunks(), data)
        return _finished(k, _combined(k, data))
    if kind is Kind.TABLE:
        return pa.Table.from_arrays(
            [pa.chunked_array([combine_chunks(column)], type=column.type)
             for column in data.columns], schema=data.schema)
    raise TypeError(f"combine_chunks takes {_ANY_ROWS}, got '{type(data).__name__}'")
