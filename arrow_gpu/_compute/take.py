"""Take by type on the device: which buffers and children arrow_gpu.compute gathers.

A selection is ``Rows``: int64 positions on the device, -1 for a null row, made from take
indices or a filter mask by the native plan that makes the native selection's rows;
``take_arrays`` gathers arrays' rows, recursing into children. Rows a mask selects also keep
the mask's ranks (per 32 rows, scanned once), so that fixed-width values and bitmaps are
compacted straight from the mask; their positions are made only for the gathers that need
them (strings, nested types). Every gather is queued
before any array is built: the null counts are added on the device (``Counters``) and read
back together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from arrow_gpu._compute import kernels
from arrow_gpu._compute.concat import concat_arrays
from arrow_gpu._compute.layouts import (INT32_MAX, Build, Validity, address, assembled,
                                        device_nulls, is_binary_like, is_view,
                                        no_run_end_encoded, no_validity, offset_width, own_buffer,
                                        uploaded)
from arrow_gpu._cuda import _gathers_flat, _make_rows, _NativeRows, _take_flat



@dataclass
class Rows:
    """Row positions as int64 on the device, -1 for a null row: made by the native plan
    from a mask or indices (``native``: a mask that picked them without making null rows is
    kept, and their positions are made only when a gather first asks for their address), or
    by a gather of the walk (``buffer``)."""

    length: int
    may_have_nulls: bool  # some row is null
    buffer: Optional[pa.Buffer] = None
    native: Optional[_NativeRows] = None

    @property
    def mask(self) -> Optional[tuple[int, int, int, int, int, int]]:
        """The mask the rows are compacted from (see ``_take_flat``); None for positions."""
        return None if self.native is None else self.native.mask

    @property
    def address(self) -> int:
        return self.native.positions() if self.native is not None else address(self.buffer)

    @property
    def owner(self) -> object:
        """What holds the positions' device memory."""
        return self.native if self.native is not None else self.buffer


def indices_rows(k: kernels.DeviceKernels, indices: pa.Array, bound: int) -> Rows:
    if not pa.types.is_integer(indices.type):
        raise TypeError(f"indices must be integers, got {indices.type}")
    native = _make_rows(k.select_kernels, indices, False, False, bound, k.stream)
    return Rows(native.length, native.may_have_nulls, native=native)


def mask_rows(k: kernels.DeviceKernels, mask: pa.Array, emit_null: bool) -> Rows:
    native = _make_rows(k.select_kernels, mask, True, emit_null, len(mask), k.stream)
    return Rows(native.length, native.may_have_nulls, native=native)


def _take_validity(k: kernels.DeviceKernels, counters: kernels.Counters, array: pa.Array,
                   rows: Rows) -> Validity:
    valid = own_buffer(array, 0)
    if valid is None and not rows.may_have_nulls:
        return no_validity
    count_at, set_bits = counters.new()
    out = _take_bits(k, valid, array.offset, rows, count_at)

    def validity() -> tuple[Optional[pa.Buffer], int]:
        nulls = rows.length - set_bits()
        return (out if nulls else None), nulls

    return validity


def _take_bits(k: kernels.DeviceKernels, bits: Optional[pa.Buffer], offset: int,
               rows: Rows, count_at: int = 0) -> pa.Buffer:
    """The bits of a bitmap (from bit ``offset``; all set for None) at ``rows``; how many
    are set is added to the counter at ``count_at`` (0: not counted)."""
    n = rows.length
    mask = rows.mask
    if mask is not None:
        values, valid, mask_offset, mask_length, mode, ranks = mask
        out = k.zeros(4 * -(-n // 32))
        k.compact_bits(out.address, address(bits), offset, values, mask_offset, valid,
                       mask_offset, mode, mask_length, ranks, count_at)
        return out
    out = k.alloc((n + 7) // 8)
    k.gather_bits(out.address, address(bits), offset, rows.address, n, count_at)
    return out


def _take_offsets(k: kernels.DeviceKernels, array: pa.Array, rows: Rows,
                  sizes: Optional[pa.Buffer] = None) -> tuple[pa.Buffer, int]:
    """Offsets of the selected rows' ranges (of ``array``'s own offsets, or views' sizes)
    and their total."""
    width = offset_width(array.type)
    n = rows.length
    lengths = k.alloc(width * n)  # as wide as the offsets
    k.range_sizes(lengths.address, address(own_buffer(array, 1)) + array.offset * width,
                  0 if sizes is None else sizes.address + array.offset * width, width,
                  rows.address, n)
    offsets = k.alloc(width * (n + 1))
    total = k.scan(lengths.address, width, n, offsets.address, width)
    if width == 4 and total > INT32_MAX:
        raise OverflowError(f"the selected {array.type} values hold {total} items, more than "
                            "32-bit offsets can address: cast to the large_ type first")
    return offsets, total


def _take_children_by_ranges(k: kernels.DeviceKernels, counters: kernels.Counters,
                             array: pa.Array, rows: Rows, offsets: pa.Buffer,
                             total: int) -> Build:
    width = offset_width(array.type)
    child_rows = Rows(total, False, k.alloc(8 * total))
    k.expand_ranges(child_rows.address, address(own_buffer(array, 1)) + array.offset * width, width,
                    0, rows.address, offsets.address, width, rows.length)
    return _take(k, counters, array.values, child_rows)


def _with_null_row(k: kernels.DeviceKernels, array: pa.Array,
                   rows: Rows) -> tuple[pa.Array, Rows]:
    """``array`` with one null row appended, and ``rows`` taking it for each null row:
    for unions, whose null rows pyarrow makes as a null of their first child."""
    null_row = uploaded(k.context, pa.nulls(1, array.type), k.stream)
    extended = concat_arrays(k, [array, null_row], any_dictionary_when_null=True)
    pointed = k.alloc(8 * rows.length)  # rows are shared with sibling columns: a copy
    k.copy(pointed.address, rows.address, 8 * rows.length)
    k.replace_nulls(pointed.address, rows.length, len(array))
    return extended, Rows(rows.length, False, pointed)


def take_array(k: kernels.DeviceKernels, array: pa.Array, rows: Rows) -> pa.Array:
    """``array``'s ``rows``, with known null counts."""
    return take_arrays(k, [array], rows)[0]


def take_arrays(k: kernels.DeviceKernels, arrays: Sequence[pa.Array],
                rows: Rows) -> list[pa.Array]:
    """Each of ``arrays`` at ``rows``: every gather queued first, then their null counts
    read in one round trip, then the arrays built."""
    counters = kernels.Counters(k)
    builds = [_take(k, counters, array, rows) for array in arrays]
    counters.read()
    return [build() for build in builds]


def _take(k: kernels.DeviceKernels, counters: kernels.Counters, array: pa.Array,
          rows: Rows) -> Build:
    """Queues the gathers of ``array``'s ``rows``: the array, once ``counters`` were read."""
    type = array.type
    n = rows.length
    if pa.types.is_null(type):
        nulls = device_nulls(k, n)
        return lambda: nulls
    if isinstance(type, pa.ExtensionType):
        storage = _take(k, counters, array.storage, rows)
        return lambda: pa.ExtensionArray.from_storage(type, storage())
    if _gathers_flat(type):
        return _gather_flat(k, counters, array, rows)
    if pa.types.is_union(type):
        return _take_union(k, counters, array, rows)
    if pa.types.is_run_end_encoded(type):
        raise no_run_end_encoded("take")
    validity = _take_validity(k, counters, array, rows)
    if is_view(type):
        views = k.alloc(16 * n)
        k.gather(views.address, address(own_buffer(array, 1)) + array.offset * 16, rows.address,
                 n, 16)
        return assembled(type, n, validity, [views, *array.buffers()[2:]])
    if pa.types.is_list(type) or pa.types.is_large_list(type) or pa.types.is_map(type):
        offsets, total = _take_offsets(k, array, rows)
        child = _take_children_by_ranges(k, counters, array, rows, offsets, total)
        return assembled(type, n, validity, [offsets], [child])
    if pa.types.is_list_view(type) or pa.types.is_large_list_view(type):
        width = offset_width(type)
        sizes = own_buffer(array, 2)
        offsets, total = _take_offsets(k, array, rows, sizes)
        new_sizes = k.alloc(width * n)
        k.gather(new_sizes.address, address(sizes) + array.offset * width, rows.address, n,
                 width)
        child = _take_children_by_ranges(k, counters, array, rows, offsets, total)
        return assembled(type, n, validity, [offsets, new_sizes], [child])
    if pa.types.is_fixed_size_list(type):
        size = type.list_size
        values = array.values.slice(array.offset * size, len(array) * size)
        child_rows = Rows(n * size, rows.may_have_nulls, k.alloc(8 * n * size))
        if size:
            k.expand_ranges(child_rows.address, 0, 8, size, rows.address, 0, 8, n)
        return assembled(type, n, validity, [], [_take(k, counters, values, child_rows)])
    if pa.types.is_struct(type):
        return assembled(type, n, validity, [], [_take(k, counters, array.field(i), rows)
                                                  for i in range(type.num_fields)])
    raise NotImplementedError(f"arrow_gpu.compute cannot take {type} on the device yet")


def _gather_flat(k: kernels.DeviceKernels, counters: kernels.Counters, array: pa.Array,
                 rows: Rows) -> Build:
    """Queues the gathers of a flat array's ``rows``: natively, by the code that gathers the
    native selection's columns."""
    valid_at, valid_bits = counters.new()
    binary = is_binary_like(array.type)
    bytes_at, nbytes = counters.new() if binary else (0, lambda: 0)
    mask = rows.mask
    # A binary's gathers take the positions: those of ``rows``, made once for all columns.
    positions = rows.address if mask is None or binary else 0
    pending = _take_flat(k.select_kernels, array, rows.length, rows.may_have_nulls, mask,
                         positions, rows.owner, valid_at, bytes_at, k.stream)
    return lambda: pending.complete(valid_bits(), nbytes())


def _take_union(k: kernels.DeviceKernels, counters: kernels.Counters, array: pa.Array,
                rows: Rows) -> Build:
    type = array.type
    if rows.may_have_nulls:
        array, rows = _with_null_row(k, array, rows)
    n = rows.length
    type_ids = k.alloc(n)
    k.gather(type_ids.address, address(own_buffer(array, 1)) + array.offset, rows.address, n, 1)
    if type.mode == "sparse":
        return assembled(type, n, no_validity, [type_ids],
                          [_take(k, counters, array.field(i), rows)
                           for i in range(type.num_fields)])
    # Dense: each child keeps the values its selected rows point at, in row order (offsets
    # within a child must not decrease).
    offsets = k.alloc(4 * n)
    source_offsets = k.alloc(4 * n)
    k.gather(source_offsets.address, address(own_buffer(array, 2)) + array.offset * 4, rows.address,
             n, 4)
    children = []
    for i, code in enumerate(type.type_codes):
        is_child = k.alloc((n + 7) // 8)
        k.type_mask(is_child.address, type_ids.address, n, code)
        mask = pa.Array.from_buffers(pa.bool_(), n, [None, is_child], 0)
        positions = mask_rows(k, mask, emit_null=False)
        k.scatter_ranks(offsets.address, positions.address, positions.length)
        picked = k.alloc(4 * positions.length)  # the rows' offsets into this child
        k.gather(picked.address, source_offsets.address, positions.address, positions.length, 4)
        child = array.field(i)
        try:
            child_rows = indices_rows(k, pa.Array.from_buffers(
                pa.int32(), positions.length, [None, picked], null_count=0), len(child))
        except IndexError:
            raise ValueError(f"the dense union's offsets point past the end of child {i}") \
                from None
        children.append(_take(k, counters, child, child_rows))
    return assembled(type, n, no_validity, [type_ids, offsets], children)
