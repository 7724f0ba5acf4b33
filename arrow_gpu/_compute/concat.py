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

import numpy as np
import pyarrow as pa

from arrow_gpu._compute import kernels, run_end
from arrow_gpu._compute.copy_plan import CopyPlan, starts
from arrow_gpu._compute.layouts import (INT32_MAX, ArrayLayouts, Build, Ints, Parts, Validity,
                                        address, all_buffers, array_layouts, as_arrays, assembled,
                                        device_nulls, downloaded, has_offsets, is_binary_like,
                                        is_fixed_width, is_view, no_validity, null_count_of,
                                        offset_width, own_buffer, part_at, part_count)
from arrow_gpu._cuda import CudaBuffer

#: Copies worth a launch before the plan is complete: the device copies them in about the
#: time the host takes to upload and launch a plan's tables (bench/compute_bench.py; the
#: figures are in bench/RESULTS.md, "Tuning notes").
LAUNCH_BYTES = 64 << 20



def concat_arrays(k: kernels.DeviceKernels, parts: Sequence[pa.Array], *,
                  any_dictionary_when_null: bool = False) -> pa.Array:
    """The parts one after another. Dictionary parts of different dictionaries get them
    one after another (pyarrow would unify them); with ``any_dictionary_when_null``, the
    dictionaries of parts whose rows are all null are left out where the others agree (the
    null rows arrow_gpu appends itself)."""
    return concat_columns(k, [parts], any_dictionary_when_null=any_dictionary_when_null)[0]


def concat_columns(k: kernels.DeviceKernels, columns: Sequence[Parts], *,
                   any_dictionary_when_null: bool = False) -> list[pa.Array]:
    """Each column's parts one after another (as ``concat_arrays``), the copies of every
    column in one plan, launched in a few batches at most. A column given as a ChunkedArray
    of a flat type (or a dictionary of one) is planned from its chunks' layouts alone."""
    # The columns whose planning reads device offsets go first, their reads answered while
    # the device is idle; then a column with copies enough to be worth a launch launches as
    # soon as it is planned, so the device copies it while the host plans the next.
    if not columns:  # a table whose columns are one chunk each: no plan to wait for
        return []
    reads = [_reads_offsets(part_at(parts, 0).type) for parts in columns]
    order = sorted(range(len(columns)), key=lambda i: not reads[i])
    builds: dict[int, Build] = {}
    with CopyPlan(k) as plan:
        for i in order:
            builds[i] = _concat(plan, columns[i], any_dictionary_when_null)
            if not reads[i] and plan.unlaunched_bytes >= LAUNCH_BYTES:
                plan.answer()
                plan.launch()
        plan.run()
    return [builds[i]() for i in range(len(columns))]


def _reads_offsets(type: pa.DataType) -> bool:
    """Whether concatenating ``type`` reads where each part's items start and end before it
    can plan their copies (``_concat_offsets``)."""
    if pa.types.is_dictionary(type):
        return False
    if isinstance(type, pa.ExtensionType):
        return _reads_offsets(type.storage_type)
    if has_offsets(type):
        return True
    return any(_reads_offsets(type.field(i).type) for i in range(type.num_fields))


def _concat_validity(plan: CopyPlan, layouts: ArrayLayouts) -> Validity:
    sources = layouts.addresses[:, 0]
    if not np.count_nonzero(sources):  # a plain call: ndarray.any costs a Python layer more
        return no_validity
    out, null_count = plan.validity(layouts.total, sources, layouts.offsets, layouts.lengths,
                                    layouts.positions)

    def validity() -> tuple[Optional[pa.Buffer], int]:
        nulls = null_count()
        return (out if nulls else None), nulls

    return validity


def _concat_offsets(plan: CopyPlan, type: pa.DataType, layouts: ArrayLayouts,
                    then: Callable[[Ints, Ints, Ints, int], None]) -> CudaBuffer:
    """Offsets of the concatenation, rebased; once each part's first and last item are read
    (with the other columns' asks: they decide what is copied next), ``then`` gets where
    each part's items start in its values, how many it has, where they go in the
    concatenation, and their total."""
    width = offset_width(type)
    lengths, total = layouts.lengths, layouts.total
    begins = layouts.addresses[:, 1] + layouts.offsets * width
    valued = lengths > 0  # an empty part's offsets may be absent
    ends = np.empty((np.count_nonzero(valued), 2), np.int64)
    ends[:, 0] = begins[valued]
    ends[:, 1] = ends[:, 0] + lengths[valued] * width
    out = plan.k.alloc(width * (total + 1))

    def rebase(data: bytes) -> None:
        read = np.frombuffer(data, f"<i{width}").astype(np.int64)
        first = np.zeros_like(lengths)
        items = np.zeros_like(lengths)
        first[valued] = read[0::2]
        items[valued] = read[1::2] - read[0::2]
        positions = starts(items)
        total_items = int(items.sum())
        if width == 4 and total_items > INT32_MAX:
            raise OverflowError(f"the concatenated {type} values hold {total_items} items, "
                                "more than 32-bit offsets can address: cast to the large_ "
                                "type first")
        plan.rebases(out.address + layouts.positions * width, begins, lengths, width,
                     positions - first)
        plan.rebase(out.address + total * width, plan.constant(bytes(width)), 1, width,
                    total_items)
        then(first, items, positions, total_items)

    plan.read_first(ends.ravel(), np.full(ends.size, width), rebase)
    return out


def _concat(plan: CopyPlan, parts: Parts, lenient: bool) -> Build:
    type = part_at(parts, 0).type
    layouts = array_layouts(parts)
    if layouts.type_differs_at < part_count(parts):
        raise TypeError(f"cannot concatenate arrays of types {type} and "
                        f"{part_at(parts, layouts.type_differs_at).type}")
    n = layouts.total
    if pa.types.is_null(type):
        nulls = device_nulls(plan.k, n)
        return lambda: nulls
    if isinstance(type, pa.ExtensionType):
        storage = _concat(plan, [part.storage for part in as_arrays(parts)], lenient)
        return lambda: pa.ExtensionArray.from_storage(type, storage())
    if pa.types.is_dictionary(type):
        return _concat_dictionaries(plan, parts, layouts, lenient)
    if pa.types.is_run_end_encoded(type):
        return run_end.concat(plan, as_arrays(parts),
                              lambda plan, values: _concat(plan, values, lenient))
    if pa.types.is_union(type):
        return _concat_unions(plan, as_arrays(parts), lenient)
    validity = _concat_validity(plan, layouts)
    flat = _concat_flat(plan, type, layouts, validity)
    if flat is not None:
        return flat
    return _concat_nested(plan, as_arrays(parts), layouts, validity, lenient)


def _concat_flat(plan: CopyPlan, type: pa.DataType, layouts: ArrayLayouts,
                 validity: Validity) -> Optional[Build]:
    """Parts of a type whose own buffers hold all its values (booleans, fixed width,
    binary and strings), a whole column of copies at once; None for other types."""
    k = plan.k
    n = layouts.total
    addresses = layouts.addresses
    if pa.types.is_boolean(type):
        bits = plan.bitmap(n, addresses[:, 1], layouts.offsets, layouts.lengths,
                           layouts.positions)
        return assembled(type, n, validity, [bits])
    if is_fixed_width(type):
        width = type.bit_width // 8
        values = k.alloc(width * n)
        plan.copies(values.address + layouts.positions * width,
                    addresses[:, 1] + layouts.offsets * width, layouts.lengths * width)
        return assembled(type, n, validity, [values])
    if is_binary_like(type):
        buffers: list[pa.Buffer] = []  # the offsets, then the data once they were read

        def copy_data(first: Ints, items: Ints, positions: Ints, total: int) -> None:
            data = k.alloc(total)
            plan.copies(data.address + positions, addresses[:, 2] + first, items)
            buffers.append(data)

        buffers.append(_concat_offsets(plan, type, layouts, copy_data))
        return assembled(type, n, validity, buffers)
    return None


def _concat_nested(plan: CopyPlan, parts: Sequence[pa.Array], layouts: ArrayLayouts,
                   validity: Validity, lenient: bool) -> Build:
    """Parts of a type with children or variadic buffers, walked part by part."""
    k = plan.k
    type = parts[0].type
    n = layouts.total
    if is_view(type):  # out-of-line views name buffers after the earlier parts'
        values = k.alloc(16 * n)
        position = 0
        variadic: list[pa.Buffer] = []
        for part in parts:
            plan.rebase(values.address + position * 16,
                        address(own_buffer(part, 1)) + part.offset * 16, len(part), 16,
                        len(variadic))
            variadic += part.buffers()[2:]
            position += len(part)
        return assembled(type, n, validity, [values, *variadic])
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        items: list[Build] = []  # the values child, planned once the offsets were read

        def concat_items(first: Ints, counts: Ints, *_: object) -> None:
            items.append(_concat(plan, [part.values.slice(start, count) for part, start, count
                                        in zip(parts, first.tolist(), counts.tolist())], lenient))

        return assembled(type, n, validity, [_concat_offsets(plan, type, layouts, concat_items)],
                          items)
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        # Views may point anywhere in their child: the children go whole, the offsets move.
        width = offset_width(type)
        offsets = k.alloc(width * n)
        sizes = k.alloc(width * n)
        positions = layouts.positions * width
        at = layouts.offsets * width
        children = np.array([len(part.values) for part in parts], np.int64)
        plan.rebases(offsets.address + positions, layouts.addresses[:, 1] + at,
                     layouts.lengths, width, starts(children))
        plan.copies(sizes.address + positions, layouts.addresses[:, 2] + at,
                    layouts.lengths * width)
        child = _concat(plan, [part.values for part in parts], lenient)
        return assembled(type, n, validity, [offsets, sizes], [child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        child = _concat(plan, [part.values.slice(part.offset * size, len(part) * size)
                               for part in parts], lenient)
        return assembled(type, n, validity, [], [child])
    if pa.types.is_struct(type):
        fields = [_concat(plan, [part.field(i) for part in parts], lenient)
                  for i in range(type.num_fields)]
        return assembled(type, n, validity, [], fields)
    raise NotImplementedError(f"arrow_gpu.compute cannot concatenate {type} on the device yet")


def _concat_dictionaries(plan: CopyPlan, parts: Parts, layouts: ArrayLayouts,
                         lenient: bool) -> Build:
    """Dictionary parts: their indices, which are their own buffers, and their dictionary
    when they share one; else (``_end_to_end``) their dictionaries one after another."""
    type = part_at(parts, 0).type
    valued: Parts = ([part for part in as_arrays(parts)
                      if null_count_of(plan.k, part) < len(part)] if lenient else parts)
    dictionary = part_at(valued if part_count(valued) else parts, 0).dictionary
    agree = _dictionaries_agree(plan, valued)
    indices = _concat_flat(plan, type.index_type, layouts, _concat_validity(plan, layouts))
    assert indices is not None  # dictionary indices are integers

    def build() -> pa.Array:
        if not agree():
            return _end_to_end(plan.k, type, indices(), layouts,
                               [part.dictionary for part in as_arrays(parts)], lenient)
        return pa.DictionaryArray.from_arrays(indices(), dictionary, ordered=type.ordered,
                                              safe=False)

    return build


def _end_to_end(k: kernels.DeviceKernels, type: pa.DictionaryType, indices: pa.Array,
                layouts: ArrayLayouts, dictionaries: Sequence[pa.Array],
                lenient: bool) -> pa.Array:
    """Concatenated ``indices`` of parts of different ``dictionaries``, and those
    dictionaries one after another: each part's indices move by the dictionary entries
    before its own. pyarrow unifies them instead (equal values once); the rows' values and
    the type are the same, the dictionary may hold a value more than once."""
    sizes = np.array([len(dictionary) for dictionary in dictionaries], np.int64)
    index_type = type.index_type
    largest = 2 ** (index_type.bit_width - pa.types.is_signed_integer(index_type)) - 1
    if sizes.sum() - 1 > largest:
        raise OverflowError(
            f"the parts' dictionaries hold {sizes.sum()} values together, more than "
            f"{index_type} indices address: arrow_gpu.compute concatenates different "
            "dictionaries one after another without unifying them; cast the parts to a "
            "dictionary type of wider indices first")
    width = index_type.bit_width // 8
    values = own_buffer(indices, 1)
    assert values is not None  # the concatenation's own, at offset 0
    at = values.address + layouts.positions * width
    with CopyPlan(k) as plan:
        plan.rebases(at, at, layouts.lengths, width, starts(sizes))
        dictionary = _concat(plan, dictionaries, lenient)
        plan.run()
    return pa.DictionaryArray.from_arrays(indices, dictionary(), ordered=type.ordered,
                                          safe=False)


def _concat_unions(plan: CopyPlan, parts: Sequence[pa.Array], lenient: bool) -> Build:
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
        return assembled(type, n, no_validity, [type_ids], fields)
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
    return assembled(type, n, no_validity, [type_ids, offsets], fields)


def _dictionaries_agree(plan: CopyPlan, parts: Parts) -> Callable[[], bool]:
    """Whether the dictionaries of ``parts`` all hold the first one's values, known once
    ``plan`` ran. Chunks moved to the device one at a time (a reader's batches) bring
    their own copies of a dictionary they shared on the host: the same bytes in other memory. Dictionaries of a flat
    type (no children) in the same memory as the first agree; copies of it, buffers of the
    same sizes, are compared byte for byte, their bytes read back with the plan's counters;
    any other dictionary is compared by value on the host."""
    if not part_count(parts):
        return lambda: True
    first = part_at(parts, 0).dictionary
    if not _is_flat(first.type):
        by_value = all(_equal_values(part.dictionary, first, plan.k.stream)
                       for part in as_arrays(parts) if _place(part.dictionary) != _place(first))
        return lambda: by_value
    layouts = array_layouts(parts, dictionaries=True)
    addresses, sizes = layouts.addresses, layouts.sizes
    same_place = ((layouts.offsets == layouts.offsets[0])
                  & (layouts.lengths == layouts.lengths[0]))
    same_memory = same_place & (addresses == addresses[0]).all(axis=1)
    # Same sizes suffice: a buffer absent where the first's is present (or the other way)
    # then holds no bytes in either.
    copy = same_place & ~same_memory & (sizes == sizes[0]).all(axis=1)
    differing = np.flatnonzero(~(same_memory | copy))
    copy[0] = True  # the first is read with its copies, to compare them with
    rows = np.flatnonzero(copy)
    read = plan.readback(addresses[rows].ravel(), sizes[rows].ravel()) if len(rows) > 1 else None

    def agree() -> bool:
        mismatched = differing
        if read is not None:
            data = read()
            size = len(data) // len(rows)
            if data != data[:size] * len(rows):  # the common case: every copy is equal
                by_row = np.frombuffer(data, np.uint8).reshape(len(rows), size)
                mismatched = np.union1d(differing, rows[1:][(by_row[1:] != by_row[0]).any(axis=1)])
        return all(_equal_values(part_at(parts, i).dictionary, first, plan.k.stream)
                   for i in mismatched.tolist())

    return agree


def _place(array: pa.Array) -> tuple[int, int, list[int]]:
    return array.offset, len(array), [address(buffer) for buffer in all_buffers(array)]


def _is_flat(type: pa.DataType) -> bool:
    """Whether an array of ``type`` holds all its values in its own first buffers."""
    return bool(is_fixed_width(type) or pa.types.is_boolean(type) or is_binary_like(type))


def _equal_values(a: pa.Array, b: pa.Array, stream: int) -> bool:
    """Whether device arrays ``a`` and ``b`` hold the same values, compared on the host
    (read on ``stream``)."""
    if not a.type.equals(b.type) or len(a) != len(b):
        return False
    return bool(_on_host(a, stream).equals(_on_host(b, stream)))


def _on_host(array: pa.Array, stream: int) -> pa.Array:
    copy: Optional[pa.Array] = downloaded(array, stream)
    return array if copy is None else copy


def slice_chunked(k: kernels.DeviceKernels, chunked: pa.ChunkedArray, offset: int,
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


def slice_array(k: kernels.DeviceKernels, array: pa.Array, offset: int, length: int) -> pa.Array:
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
