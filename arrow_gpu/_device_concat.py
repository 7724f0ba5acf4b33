"""Concatenation and slicing by type on the device, with null counts known.

``concat_arrays`` copies each buffer of each part into one, rebasing offsets and shifting
validity bits; ``slice_array`` is a zero-copy slice whose null count was counted on the
device, so pyarrow never counts it on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pyarrow as pa

from arrow_gpu import _kernels
from arrow_gpu._layouts import (INT32_MAX, address, all_buffers, device_nulls, is_binary_like,
                                is_fixed_width, is_view, no_run_end_encoded, null_count_of,
                                offset_width, own_buffer)

def _concat_validity(k: _kernels.DeviceKernels,
                     parts: Sequence[pa.Array]) -> tuple[Optional[pa.Buffer], int]:
    if all(own_buffer(part, 0) is None for part in parts):
        return None, 0
    total = sum(len(part) for part in parts)
    out = k.alloc((total + 7) // 8)
    position = 0
    for part in parts:
        k.copy_bits(out.address, position, address(own_buffer(part, 0)), part.offset, len(part))
        position += len(part)
    nulls = total - k.popcount(out.address, 0, total)
    return (out if nulls else None), nulls


def _concat_offsets(k: _kernels.DeviceKernels,
                    parts: Sequence[pa.Array]) -> tuple[pa.Buffer, list[tuple[int, int]]]:
    """Offsets of the concatenation, rebased, and each part's [first, last) range."""
    width = offset_width(parts[0].type)
    total = sum(len(part) for part in parts)
    out = k.alloc(width * (total + 1))
    ranges: list[tuple[int, int]] = []
    position = 0
    items = 0
    for part in parts:
        start = address(own_buffer(part, 1)) + part.offset * width
        first = k.read_int(start, width) if len(part) else 0
        last = k.read_int(start + len(part) * width, width) if len(part) else 0
        k.rebase(out.address + position * width, start, width, len(part), items - first)
        ranges.append((first, last))
        position += len(part)
        items += last - first
    if width == 4 and items > INT32_MAX:
        raise OverflowError(f"the concatenated {parts[0].type} values hold {items} items, more "
                            "than 32-bit offsets can address: cast to the large_ type first")
    k.write(out.address + total * width, items.to_bytes(width, "little", signed=True))
    return out, ranges


def concat_arrays(k: _kernels.DeviceKernels, parts: Sequence[pa.Array], *,
                  any_dictionary_when_null: bool = False) -> pa.Array:
    """The parts one after another. Dictionary parts must share one dictionary (pyarrow
    would unify different ones); with ``any_dictionary_when_null``, parts whose rows are all
    null may hold another (the null rows arrow_gpu appends itself)."""
    return _concat(k, parts, any_dictionary_when_null)


def _concat(k: _kernels.DeviceKernels, parts: Sequence[pa.Array], lenient: bool) -> pa.Array:
    type = parts[0].type
    for part in parts[1:]:
        if not part.type.equals(type):
            raise TypeError(f"cannot concatenate arrays of types {type} and {part.type}")
    n = sum(len(part) for part in parts)
    if pa.types.is_null(type):
        return device_nulls(k, n)
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, _concat(k, [p.storage for p in parts], lenient))
    if pa.types.is_dictionary(type):
        valued = ([part for part in parts if null_count_of(k, part) < len(part)] if lenient
                  else list(parts))
        dictionary = (valued or parts)[0].dictionary
        for part in valued:
            if not _same_dictionary(part.dictionary, dictionary):
                raise NotImplementedError(
                    "arrow_gpu.compute concatenates dictionary arrays that share one dictionary; "
                    "these have different ones: unify them on the host "
                    "(pyarrow.Table.unify_dictionaries) before moving them")
        indices = _concat(k, [part.indices for part in parts], lenient)
        return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=type.ordered,
                                              safe=False)
    if pa.types.is_run_end_encoded(type):
        raise no_run_end_encoded("concatenate")
    if pa.types.is_union(type):
        return _concat_unions(k, parts, lenient)
    validity, nulls = _concat_validity(k, parts)
    if pa.types.is_boolean(type):
        values = k.alloc((n + 7) // 8)
        position = 0
        for part in parts:
            k.copy_bits(values.address, position, address(own_buffer(part, 1)), part.offset,
                        len(part))
            position += len(part)
        return pa.Array.from_buffers(type, n, [validity, values], nulls)
    if is_fixed_width(type) or is_view(type):
        width = 16 if is_view(type) else type.bit_width // 8
        values = k.alloc(width * n)
        position = 0
        variadic: list[pa.Buffer] = []
        for part in parts:
            k.copy(values.address + position * width,
                   address(own_buffer(part, 1)) + part.offset * width, len(part) * width)
            if is_view(type) and variadic:
                k.rebase_views(values.address + position * width, len(part), len(variadic))
            variadic += part.buffers()[2:] if is_view(type) else []
            position += len(part)
        return pa.Array.from_buffers(type, n, [validity, values, *variadic], nulls)
    if is_binary_like(type):
        offsets, ranges = _concat_offsets(k, parts)
        data = k.alloc(sum(last - first for first, last in ranges))
        position = 0
        for part, (first, last) in zip(parts, ranges):
            k.copy(data.address + position, address(own_buffer(part, 2)) + first, last - first)
            position += last - first
        return pa.Array.from_buffers(type, n, [validity, offsets, data], nulls)
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets, ranges = _concat_offsets(k, parts)
        child = _concat(k, [part.values.slice(first, last - first)
                            for part, (first, last) in zip(parts, ranges)], lenient)
        return pa.Array.from_buffers(type, n, [validity, offsets], nulls, children=[child])
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        # Views may point anywhere in their child: the children go whole, the offsets move.
        width = offset_width(type)
        offsets = k.alloc(width * n)
        sizes = k.alloc(width * n)
        position = 0
        items = 0
        for part in parts:
            k.rebase(offsets.address + position * width,
                     address(own_buffer(part, 1)) + part.offset * width, width, len(part), items)
            k.copy(sizes.address + position * width,
                   address(own_buffer(part, 2)) + part.offset * width,
                   len(part) * width)
            position += len(part)
            items += len(part.values)
        child = _concat(k, [part.values for part in parts], lenient)
        return pa.Array.from_buffers(type, n, [validity, offsets, sizes], nulls, children=[child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        child = _concat(k, [part.values.slice(part.offset * size, len(part) * size)
                            for part in parts], lenient)
        return pa.Array.from_buffers(type, n, [validity], nulls, children=[child])
    if pa.types.is_struct(type):
        children = [_concat(k, [part.field(i) for part in parts], lenient)
                    for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, n, [validity], nulls, children=children)
    raise NotImplementedError(f"arrow_gpu.compute cannot concatenate {type} on the device yet")


def _concat_unions(k: _kernels.DeviceKernels, parts: Sequence[pa.Array],
                   lenient: bool) -> pa.Array:
    type = parts[0].type
    n = sum(len(part) for part in parts)
    type_ids = k.alloc(n)
    position = 0
    for part in parts:
        k.copy(type_ids.address + position, address(own_buffer(part, 1)) + part.offset, len(part))
        position += len(part)
    if type.mode == "sparse":
        children = [_concat(k, [part.field(i) for part in parts], lenient)
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
        k.rebase_union(offsets.address + position * 4,
                       address(own_buffer(part, 2)) + part.offset * 4,
                       type_ids.address + position, len(part), device_deltas.address)
        k.finish()  # the table is read before it goes
        for i, code in enumerate(type.type_codes):
            deltas[code] += len(part.field(i))
        position += len(part)
    children = [_concat(k, [part.field(i) for part in parts], lenient)
                for i in range(type.num_fields)]
    return pa.Array.from_buffers(type, n, [None, type_ids, offsets], 0, children=children)


def _same_memory(a: pa.Array, b: pa.Array) -> bool:
    return (a.offset == b.offset and len(a) == len(b)
            and [address(x) for x in all_buffers(a)] == [address(x) for x in all_buffers(b)])


def _same_dictionary(a: pa.Array, b: pa.Array) -> bool:
    """The same memory, or equal values: each chunk moved to the device brings its own copy
    of a dictionary that its chunks shared on the host. Dictionaries are small; they are
    compared on the host."""
    if _same_memory(a, b):
        return True
    if not a.type.equals(b.type) or len(a) != len(b):
        return False
    cpu = pa.default_cpu_memory_manager()
    return bool(a.copy_to(cpu).equals(b.copy_to(cpu)))


def slice_chunked(k: _kernels.DeviceKernels, chunked: pa.ChunkedArray, offset: int,
                   length: int) -> pa.ChunkedArray:
    pieces = []
    start = 0
    for chunk in chunked.chunks:
        end = start + len(chunk)
        low, high = max(offset, start), min(offset + length, end)
        if low < high:
            pieces.append(slice_array(k, chunk, low - start, high - low))
        start = end
    return pa.chunked_array(pieces, type=chunked.type)


def slice_array(k: _kernels.DeviceKernels, array: pa.Array, offset: int, length: int) -> pa.Array:
    """A slice whose null count (and its struct fields' counts) is known."""
    type = array.type
    if pa.types.is_struct(type):
        # Fields are sliced with their parent: each gets its own known count.
        start = array.offset + offset
        validity = own_buffer(array, 0)
        nulls = 0
        if validity is not None:
            out = k.alloc((length + 7) // 8)
            k.copy_bits(out.address, 0, validity.address, start, length)
            nulls = length - k.popcount(out.address, 0, length)
            validity = out if nulls else None
        children = [slice_array(k, array.field(i), offset, length)
                    for i in range(type.num_fields)]
        return pa.Array.from_buffers(type, length, [validity], nulls, children=children)
    sliced = array.slice(offset, length)
    if pa.types.is_union(type) or pa.types.is_run_end_encoded(type) or pa.types.is_null(type):
        return sliced  # no validity bitmap: their null count is known (0, or all)
    if isinstance(type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(type, slice_array(k, array.storage, offset,
                                                                 length))
    if pa.types.is_dictionary(type):
        return pa.DictionaryArray.from_arrays(slice_array(k, array.indices, offset, length),
                                              array.dictionary, ordered=type.ordered,
                                              safe=False)
    nulls = null_count_of(k, sliced)
    own: list[Optional[pa.Buffer]] = sliced.buffers()[:_own_buffer_count(sliced)]
    return pa.Array.from_buffers(type, length, own, nulls, sliced.offset,
                                 children=_raw_children(sliced))


def _own_buffer_count(array: pa.Array) -> int:
    if is_view(array.type):
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
