"""Concatenation and slicing by type on the device, with null counts known.

``concat_columns`` walks each column's type and gathers the copies of every buffer of every
part into one ``CopyPlan``: bytes copied, offsets rebased, validity bits shifted and counted.
They run together, and the arrays are built once they did (their null counts come from the
copies). ``slice_array`` is a zero-copy slice whose null count was counted on the device,
so pyarrow never counts it on the host.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Optional

import pyarrow as pa

from arrow_gpu import _kernels
from arrow_gpu._copy_plan import CopyPlan, read_ranges
from arrow_gpu._cuda import CudaBuffer
from arrow_gpu._layouts import (INT32_MAX, address, all_buffers, device_nulls, is_binary_like,
                                is_fixed_width, is_view, no_run_end_encoded, null_count_of,
                                offset_width, own_buffer)

# An array whose buffers a plan fills: built once the plan ran.
_Build = Callable[[], pa.Array]
_Validity = Callable[[], tuple[Optional[pa.Buffer], int]]


def concat_arrays(k: _kernels.DeviceKernels, parts: Sequence[pa.Array], *,
                  any_dictionary_when_null: bool = False) -> pa.Array:
    """The parts one after another. Dictionary parts must share one dictionary (pyarrow
    would unify different ones); with ``any_dictionary_when_null``, parts whose rows are all
    null may hold another (the null rows arrow_gpu appends itself)."""
    return concat_columns(k, [parts], any_dictionary_when_null=any_dictionary_when_null)[0]


def concat_columns(k: _kernels.DeviceKernels, columns: Sequence[Sequence[pa.Array]], *,
                   any_dictionary_when_null: bool = False) -> list[pa.Array]:
    """Each column's parts one after another (as ``concat_arrays``), every copy of every
    column launched together."""
    plan = CopyPlan(k)
    builds = [_concat(plan, parts, any_dictionary_when_null) for parts in columns]
    plan.run()
    return [build() for build in builds]


def _concat_validity(plan: CopyPlan, parts: Sequence[pa.Array],
                     buffers: Sequence[list[Optional[pa.Buffer]]]) -> _Validity:
    if all(own[0] is None for own in buffers):
        return _no_validity
    out, null_count = plan.validity([(address(own[0]), part.offset, len(part))
                                     for part, own in zip(parts, buffers)])

    def validity() -> tuple[Optional[pa.Buffer], int]:
        nulls = null_count()
        return (out if nulls else None), nulls

    return validity


def _assembled(type: pa.DataType, n: int, validity: _Validity, buffers: list[pa.Buffer],
               children: Sequence[_Build] = ()) -> _Build:
    """The array of the validity bitmap, ``buffers`` and ``children``, once the plan ran."""

    def build() -> pa.Array:
        bitmap, nulls = validity()
        return pa.Array.from_buffers(type, n, [bitmap, *buffers], nulls,
                                     children=[child() for child in children] or None)

    return build


def _concat_offsets(plan: CopyPlan, parts: Sequence[pa.Array],
                    buffers: Sequence[list[Optional[pa.Buffer]]]
                    ) -> tuple[CudaBuffer, list[tuple[int, int]]]:
    """Offsets of the concatenation, rebased, and each part's [first, last) range (read in
    one go: the ranges decide what is copied next)."""
    width = offset_width(parts[0].type)
    total = sum(len(part) for part in parts)
    starts = [address(own[1]) + part.offset * width for part, own in zip(parts, buffers)]
    ends = read_ranges(plan.k, [(at, width) for part, start in zip(parts, starts) if len(part)
                                for at in (start, start + len(part) * width)])
    values = iter(int.from_bytes(end, "little", signed=True) for end in ends)
    out = plan.k.alloc(width * (total + 1))
    ranges: list[tuple[int, int]] = []
    position = 0
    items = 0
    for part, start in zip(parts, starts):
        first, last = (next(values), next(values)) if len(part) else (0, 0)
        plan.rebase(out.address + position * width, start, len(part), width, items - first)
        ranges.append((first, last))
        position += len(part)
        items += last - first
    if width == 4 and items > INT32_MAX:
        raise OverflowError(f"the concatenated {parts[0].type} values hold {items} items, more "
                            "than 32-bit offsets can address: cast to the large_ type first")
    plan.rebase(out.address + total * width, plan.constant(bytes(width)), 1, width, items)
    return out, ranges


def _concat(plan: CopyPlan, parts: Sequence[pa.Array], lenient: bool) -> _Build:
    k = plan.k
    type = parts[0].type
    for part in parts[1:]:
        if not part.type.equals(type):
            raise TypeError(f"cannot concatenate arrays of types {type} and {part.type}")
    n = sum(len(part) for part in parts)
    if pa.types.is_null(type):
        nulls = device_nulls(k, n)
        return lambda: nulls
    if isinstance(type, pa.ExtensionType):
        storage = _concat(plan, [part.storage for part in parts], lenient)
        return lambda: pa.ExtensionArray.from_storage(type, storage())
    if pa.types.is_dictionary(type):
        valued = ([part for part in parts if null_count_of(k, part) < len(part)] if lenient
                  else list(parts))
        dictionary = (valued or parts)[0].dictionary
        if not _dictionaries_agree(k, dictionary, [part.dictionary for part in valued]):
            raise NotImplementedError(
                "arrow_gpu.compute concatenates dictionary arrays that share one dictionary; "
                "these have different ones: unify them on the host "
                "(pyarrow.Table.unify_dictionaries) before moving them")
        indices = _concat(plan, [part.indices for part in parts], lenient)
        return lambda: pa.DictionaryArray.from_arrays(indices(), dictionary,
                                                      ordered=type.ordered, safe=False)
    if pa.types.is_run_end_encoded(type):
        raise no_run_end_encoded("concatenate")
    if pa.types.is_union(type):
        return _concat_unions(plan, parts, lenient)
    buffers = [part.buffers() for part in parts]  # each part's own first (pyarrow makes them)
    validity = _concat_validity(plan, parts, buffers)
    if pa.types.is_boolean(type):
        bits = plan.bitmap([(address(own[1]), part.offset, len(part))
                            for part, own in zip(parts, buffers)])
        return _assembled(type, n, validity, [bits])
    if is_fixed_width(type) or is_view(type):
        width = 16 if is_view(type) else type.bit_width // 8
        values = k.alloc(width * n)
        position = 0
        variadic: list[pa.Buffer] = []
        for part, own in zip(parts, buffers):
            dst = values.address + position * width
            src = address(own[1]) + part.offset * width
            if is_view(type):  # out-of-line views name buffers after the earlier parts'
                plan.rebase(dst, src, len(part), 16, len(variadic))
                variadic += own[2:]
            else:
                plan.copy(dst, src, len(part) * width)
            position += len(part)
        return _assembled(type, n, validity, [values, *variadic])
    if is_binary_like(type):
        offsets, ranges = _concat_offsets(plan, parts, buffers)
        data = k.alloc(sum(last - first for first, last in ranges))
        position = 0
        for own, (first, last) in zip(buffers, ranges):
            plan.copy(data.address + position, address(own[2]) + first, last - first)
            position += last - first
        return _assembled(type, n, validity, [offsets, data])
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets, ranges = _concat_offsets(plan, parts, buffers)
        child = _concat(plan, [part.values.slice(first, last - first)
                               for part, (first, last) in zip(parts, ranges)], lenient)
        return _assembled(type, n, validity, [offsets], [child])
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        # Views may point anywhere in their child: the children go whole, the offsets move.
        width = offset_width(type)
        offsets = k.alloc(width * n)
        sizes = k.alloc(width * n)
        position = 0
        items = 0
        for part, own in zip(parts, buffers):
            at = part.offset * width
            plan.rebase(offsets.address + position * width, address(own[1]) + at, len(part),
                        width, items)
            plan.copy(sizes.address + position * width, address(own[2]) + at, len(part) * width)
            position += len(part)
            items += len(part.values)
        child = _concat(plan, [part.values for part in parts], lenient)
        return _assembled(type, n, validity, [offsets, sizes], [child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        child = _concat(plan, [part.values.slice(part.offset * size, len(part) * size)
                               for part in parts], lenient)
        return _assembled(type, n, validity, [], [child])
    if pa.types.is_struct(type):
        fields = [_concat(plan, [part.field(i) for part in parts], lenient)
                  for i in range(type.num_fields)]
        return _assembled(type, n, validity, [], fields)
    raise NotImplementedError(f"arrow_gpu.compute cannot concatenate {type} on the device yet")
def _concat_unions(plan: CopyPlan, parts: Sequence[pa.Array], lenient: bool) -> _Build:
    type = parts[0].type
    n = sum(len(part) for part in parts)
    type_ids = plan.k.alloc(n)
    position = 0
    for part in parts:
        plan.copy(type_ids.address + position, address(own_buffer(part, 1)) + part.offset,
                  len(part))
        position += len(part)
    fields = [_concat(plan, [part.field(i) for part in parts], lenient)
              for i in range(type.num_fields)]
    if type.mode == "sparse":
        return _assembled(type, n, _no_validity, [type_ids], fields)
    # Dense: children go whole; each row's offset moves by its child's length before it.
    offsets = plan.k.alloc(4 * n)
    deltas = [0] * 128  # by type code
    position = 0
    for part in parts:
        plan.rebase(offsets.address + position * 4,
                    address(own_buffer(part, 2)) + part.offset * 4, len(part), 4,
                    type_ids=address(own_buffer(part, 1)) + part.offset,
                    deltas=plan.constant(struct.pack("<128i", *deltas)))
        for i, code in enumerate(type.type_codes):
            deltas[code] += len(part.field(i))
        position += len(part)
    return _assembled(type, n, _no_validity, [type_ids, offsets], fields)


def _no_validity() -> tuple[Optional[pa.Buffer], int]:
    return None, 0


def _dictionaries_agree(k: _kernels.DeviceKernels, dictionary: pa.Array,
                        others: Sequence[pa.Array]) -> bool:
    """Whether each of ``others`` holds ``dictionary``'s values. Each chunk moved to the
    device brings its own copy of a dictionary that its chunks shared on the host: the same
    bytes in other memory. Such copies are compared byte for byte, all read back at once;
    any other dictionary (not the same memory either) is compared by value on the host."""
    where = [address(buffer) for buffer in all_buffers(dictionary)]
    layout = _layout(dictionary)
    copies: list[pa.Array] = []
    differing: list[pa.Array] = []
    for other in others:
        if not _same_place(other, dictionary):
            differing.append(other)
        elif [address(buffer) for buffer in all_buffers(other)] == where:
            continue  # the same memory
        elif layout is not None and other.type.equals(dictionary.type) and \
                _layout(other) == layout:
            copies.append(other)
        else:
            differing.append(other)
    if copies:
        data = read_ranges(k, [(address(buffer), buffer.size)
                               for array in (dictionary, *copies)
                               for buffer in array.buffers() if buffer is not None])
        count = len(data) // (len(copies) + 1)
        differing += [copy for i, copy in enumerate(copies)
                      if data[(i + 1) * count:(i + 2) * count] != data[:count]]
    return all(_equal_values(other, dictionary) for other in differing)


def _layout(array: pa.Array) -> Optional[list[Optional[int]]]:
    """The sizes of the buffers of an array whose values its buffers' bytes alone make (no
    children, whose offsets are elsewhere); None for other arrays."""
    type = array.type
    if type.num_fields or isinstance(type, pa.ExtensionType) or pa.types.is_dictionary(type):
        return None
    return [None if buffer is None else buffer.size for buffer in array.buffers()]


def _same_place(a: pa.Array, b: pa.Array) -> bool:
    return a.offset == b.offset and len(a) == len(b)


def _equal_values(a: pa.Array, b: pa.Array) -> bool:
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
