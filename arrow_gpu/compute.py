"""Selecting and assembling device data: take, filter, slice, concat, nulls.

pyarrow cannot compute on device data (its kernels raise, or crash the process); these
functions select and assemble rows of device Arrays, ChunkedArrays, RecordBatches and
Tables without leaving the device, and give ordinary device pyarrow objects whose null
counts are known (so pyarrow never counts them on the host). Each result equals what
``pyarrow.compute`` gives for the same data on the host.

A few generic kernels (``arrow_gpu._compute``) gather bytes, bits and ranges by indices; the
type logic, which buffers and children to gather, is here. On the simulator each kernel's
host twin runs in its place, so the planning, refusals and results are the GPU's. Data
without any device buffer (nothing to launch over) runs pyarrow's own CPU kernels over host
copies, and is copied back. Every function takes
``stream=``, the caller's stream in any spelling ``arrow_gpu.stream_handle`` accepts (a
``Stream``, CuPy's or PyTorch's stream, ``__cuda_stream__``, an int; None: the legacy default
stream): all its device work is queued there, after the stream's earlier work, and the host
waits only on that stream, never for other streams' work. Masks and indices may be any
library's CUDA arrays (``__cuda_array_interface__`` or DLPack: CuPy, PyTorch, JAX, Numba),
bool masks included.

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
import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any, Optional

import pyarrow as pa

from arrow_gpu._compute import kernels as _kernels
from arrow_gpu._compute import run_end
from arrow_gpu._compute.concat import concat_arrays, slice_array, slice_chunked
from arrow_gpu._compute.dispatch import (ANY_ROWS, check_arrays, combined, combined_natively,
                                         device_context, finished, joined, joined_natively,
                                         kernels_of, move, on_host, one_chunk, pc, rows_of,
                                         shaped)
from arrow_gpu._compute.layouts import (address, empty, holds_run_end_encoded,
                                        no_run_end_encoded, null_count_of, own_buffer, uploaded)
from arrow_gpu._compute.select import filter_rows, selected, shaped_like, take_rows
from arrow_gpu._compute.take import Rows, indices_rows, mask_rows, take_array
from arrow_gpu._cuda import _concat_frames_natively
from arrow_gpu._util.arrow_data import Kind, arrays, kind_of
from arrow_gpu.device import Context

__all__ = ["combine_chunks", "concat", "drop_null", "fill_null", "filter", "is_null",
           "is_valid", "null_count", "slice", "take"]


# -- public functions ------------------------------------------------------------------


def take(data: Any, indices: Any, *, stream: Any = None) -> Any:
    """The rows of ``data`` at ``indices``, as ``pyarrow.compute.take``, on the device.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        Device data, of any Arrow type but run-end encoded.
    indices : pyarrow.Array, ChunkedArray or CUDA array
        Integer positions on the same device, of any integer type; a null index gives a
        null row. Another library's CUDA array (CuPy, PyTorch, JAX, Numba) is read in place.
    stream : stream-like, optional
        The stream the work is queued on (see the module's documentation).

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

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> names = to_device(pa.array(["a", "b", None, "d"]))
    >>> to_host(compute.take(names, to_device(pa.array([3, None, 0])))).to_pylist()
    ['d', None, 'a']
    """
    return take_rows(data, indices, stream)


def filter(data: Any, mask: Any, *, null_selection_behavior: str = "drop",
           stream: Any = None) -> Any:
    """The rows of ``data`` where ``mask`` is true, as ``pyarrow.compute.filter``.

    Parameters
    ----------
    data : pyarrow.Array, ChunkedArray, RecordBatch or Table
        Device data, of any Arrow type but run-end encoded.
    mask : pyarrow.Array or ChunkedArray of booleans, or CUDA array of bools
        One per row of ``data``, on the same device. Another library's bool CUDA array
        (CuPy, PyTorch, JAX, Numba: a byte per row) is packed into bits on the device.
    null_selection_behavior : {"drop", "emit_null"}
        What a null in the mask gives: no row, or a null row.
    stream : stream-like, optional
        The stream the work is queued on (see the module's documentation).

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

    Examples
    --------
    On a stream of the caller's, read back on the same stream:

    >>> import pyarrow as pa
    >>> from arrow_gpu import Context, Stream, compute, to_device, to_host
    >>> stream = Stream(Context(0))
    >>> table = to_device(pa.table({"x": [1, 2, 3]}))
    >>> mask = to_device(pa.array([True, None, True]))
    >>> to_host(compute.filter(table, mask, stream=stream), stream=stream)["x"].to_pylist()
    [1, 3]
    >>> kept = compute.filter(table, mask, null_selection_behavior="emit_null")
    >>> to_host(kept)["x"].to_pylist()
    [1, None, 3]
    """
    return filter_rows(data, mask, null_selection_behavior, stream)


def is_valid(data: Any, *, stream: Any = None) -> Any:
    """Whether each row of an Array or ChunkedArray is not null, as booleans on the device
    (``pyarrow.compute.is_valid``): a mask ``filter`` takes.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> values = to_device(pa.array([1, None, 3]))
    >>> to_host(compute.is_valid(values)).to_pylist()
    [True, False, True]
    """
    return _validity_flags(data, False, stream)


def is_null(data: Any, *, stream: Any = None) -> Any:
    """Whether each row of an Array or ChunkedArray is null, as booleans on the device
    (``pyarrow.compute.is_null``; NaN is not null).

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> values = to_device(pa.array([1.0, None, float("nan")]))
    >>> to_host(compute.is_null(values)).to_pylist()
    [False, True, False]
    """
    return _validity_flags(data, True, stream)


def _validity_flags(data: Any, invert: bool, stream: Any) -> Any:
    check_arrays(data, "is_null" if invert else "is_valid")
    context = device_context(data)
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), pc().is_null if invert else pc().is_valid,
                        data, stream=stream)

    def flags(array: pa.Array) -> pa.Array:
        n = len(array)
        out = k.alloc((n + 7) // 8)
        bits, bit_offset = _logical_validity(k, array)
        k.copy_bits(out.address, 0, address(bits), bit_offset, n, invert)
        return pa.Array.from_buffers(pa.bool_(), n, [None, out], 0)

    if kind_of(data) is Kind.ARRAY:
        return finished(k, flags(data))
    return finished(k, pa.chunked_array([flags(chunk) for chunk in data.chunks],
                                         type=pa.bool_()))


_SEES_THROUGH: dict[str, bool] = {}  # by kind: see _sees_through


def _sees_through(kind: str) -> bool:
    """Whether the installed pyarrow.compute.is_valid reads a union's row (``kind`` "union"),
    a dictionary's ("dictionary") or a run-end encoded one's ("run_end_encoded") as null
    where its child's value, dictionary value or run's value is (newer pyarrow), or only by
    the array's own bitmap (older); with "union fill", whether its fill_null fills such a
    union row. Asked of pyarrow once."""
    if kind not in _SEES_THROUGH:
        union = pa.UnionArray.from_sparse(pa.array([0, 0], pa.int8()),
                                          [pa.array([None, 1], pa.int8())])
        if kind == "union fill":
            _SEES_THROUGH[kind] = pc().fill_null(union, union[1])[0].is_valid
        else:
            samples = {"union": lambda: union,
                       "dictionary": lambda: pa.DictionaryArray.from_arrays(
                           pa.array([0], pa.int8()), pa.array([None], pa.int8())),
                       "run_end_encoded": lambda: pa.RunEndEncodedArray.from_arrays(
                           pa.array([1], pa.int32()), pa.array([None], pa.int8()))}
            sample = samples[kind]()
            _SEES_THROUGH[kind] = not pc().is_valid(sample)[0].as_py()
    return _SEES_THROUGH[kind]


def _logical_validity(k: _kernels.DeviceKernels, array: pa.Array
                      ) -> tuple[Optional[pa.Buffer], int]:
    """The bits that tell which rows of ``array`` are valid as ``pyarrow.compute.is_valid``
    sees them, and their bit offset; None for all valid. Besides an array's own bitmap:
    every row of the null type is null, and, where the installed pyarrow reads them so, a
    dictionary's row whose value is null and a union's row whose child value is."""
    type = array.type
    n = len(array)
    if pa.types.is_run_end_encoded(type):  # no bitmap of its own: its values', by run
        return (run_end.validity(k, array) if _sees_through("run_end_encoded") else None), 0
    if pa.types.is_null(type):
        out = k.zeros((n + 7) // 8)
        return out, 0
    if pa.types.is_dictionary(type) and _sees_through("dictionary"):
        values, values_offset = _logical_validity(k, array.dictionary)
        if values is None:
            return own_buffer(array, 0), array.offset
        out = k.alloc((n + 7) // 8)
        rows = indices_rows(k, array.indices, len(array.dictionary))
        k.gather_bits(out.address, address(values), values_offset, rows.address, n)
        return out, 0
    if pa.types.is_union(type) and _sees_through("union"):
        return _union_validity(k, array), 0
    return own_buffer(array, 0), array.offset


def _union_validity(k: _kernels.DeviceKernels, array: pa.Array, *,
                    children_bitmaps: bool = False) -> pa.Buffer:
    """The bits of a union's rows that are valid: those whose child value is, as
    ``is_valid`` sees it; with ``children_bitmaps``, as the child's own bitmap says (what
    pyarrow's fill_null fills: not a row of the null type, a nested union's null, nor a
    dictionary's null value)."""
    type = array.type
    children, held = {}, []  # held: the children's bits, until the launch is queued
    for index, code in enumerate(type.type_codes):
        child = array.field(index)  # a sparse union's children come sliced to the rows
        bits, bit_offset = ((own_buffer(child, 0), child.offset) if children_bitmaps
                            else _logical_validity(k, child))
        children[code] = (address(bits), bit_offset)
        held.append(bits)
    dense = type.mode == "dense"
    n = len(array)
    out = k.alloc((n + 7) // 8)
    k.union_validity(out.address, address(own_buffer(array, 1)) + array.offset,
                     address(own_buffer(array, 2)) + 4 * array.offset if dense else 0, n,
                     children)
    return out


def null_count(data: Any, *, stream: Any = None) -> int:
    """How many rows of an Array or ChunkedArray are null: the count each array holds, or
    where it holds none, counted from its bitmap (on the device; a bitmap of at most 16 KiB
    is read back and counted on the host).

    pyarrow's own ``null_count`` reads a device bitmap on the host when the count is not
    known yet (and crashes); this never does.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device
    >>> compute.null_count(to_device(pa.chunked_array([[1, None], [None, 4]])))
    2
    """
    check_arrays(data, "null_count")
    context = device_context(data)
    k = kernels_of(context, stream)
    if k is None:
        host = move(data, None)
        count: int = host.null_count
        return count
    return builtins.sum(null_count_of(k, array) for array in arrays(data))


def drop_null(data: Any, *, stream: Any = None) -> Any:
    """``data`` without its null rows (for batches and tables: rows with a null in any
    column), as ``pyarrow.compute.drop_null``.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> table = to_device(pa.table({"x": [1, None, 3], "s": ["a", "b", None]}))
    >>> to_host(compute.drop_null(table)).to_pydict()
    {'x': [1], 's': ['a']}
    """
    context = device_context(data)
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), pc().drop_null, data, stream=stream)
    kind = kind_of(data)
    n = rows_of(data)
    columns = [data] if kind in (Kind.ARRAY, Kind.CHUNKED_ARRAY) else data.columns
    if kind in (Kind.CHUNKED_ARRAY, Kind.TABLE):
        columns = combined(k, columns)
    valid = k.alloc((n + 7) // 8)
    k.copy_bits(valid.address, 0, 0, 0, n)  # all rows, until a column's nulls clear them
    for array in columns:
        if pa.types.is_null(array.type):
            k.copy_bits(valid.address, 0, 0, 0, n, invert=True)
        elif own_buffer(array, 0) is not None:
            k.and_bits(valid.address, address(own_buffer(array, 0)), array.offset, n)
    if (any(holds_run_end_encoded(array.type) for array in columns)
            and k.popcount(valid.address, 0, n) == n):
        return data  # as pyarrow, which cannot take run-end encoded rows, when none drop
    mask = pa.Array.from_buffers(pa.bool_(), n, [None, valid], 0)
    # The columns as combined above: the native selection takes them without combining again.
    return selected(k, shaped_like(data, kind, columns, n), kind, mask, by_mask=True,
                    emit_null=False, rows=lambda: mask_rows(k, mask, emit_null=False))


def fill_null(data: Any, fill_value: Any, *, stream: Any = None) -> Any:
    """An Array or ChunkedArray with its nulls replaced by ``fill_value`` (a scalar of its
    type, or a Python value that converts to one), as ``pyarrow.compute.fill_null``.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> to_host(compute.fill_null(to_device(pa.array([1, None, 3])), 0)).to_pylist()
    [1, 0, 3]
    >>> colors = to_device(pa.array(["red", None, "blue"]).dictionary_encode())
    >>> to_host(compute.fill_null(colors, "green")).to_pylist()
    ['red', 'green', 'blue']
    """
    check_arrays(data, "fill_null")
    if holds_run_end_encoded(data.type):  # filling takes rows, and such rows are not taken
        raise no_run_end_encoded("fill nulls of")
    scalar = fill_value if isinstance(fill_value, pa.Scalar) else pa.scalar(fill_value, data.type)
    if not scalar.type.equals(data.type):
        scalar = scalar.cast(data.type)
    context = device_context(data)
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), lambda d: _as_type(pc().fill_null(d, scalar),
                                                                  data.type), data, stream=stream)

    def row_of(scalar: pa.Scalar) -> Callable[[], pa.Array]:
        @functools.cache
        def row() -> pa.Array:  # made once, when a chunk has nulls to fill
            made: pa.Array = uploaded(k.context, _one_row(scalar), k.stream)
            return made

        return row

    def fill(array: pa.Array, fill_row: Callable[[], pa.Array]) -> pa.Array:
        n = len(array)
        if pa.types.is_union(array.type) and _sees_through("union fill"):
            # A union has no bitmap: its null rows are those its child's bitmap says are.
            valid, valid_offset = _union_validity(k, array, children_bitmaps=True), 0
        else:
            valid, valid_offset = own_buffer(array, 0), array.offset
        if valid is None:  # no nulls; or the null type, whose only scalar is null
            return array
        extended = concat_arrays(k, [array, fill_row()])
        rows = Rows(n, False, k.alloc(8 * n))
        k.fill_indices(rows.address, valid.address, valid_offset, n, n)
        return take_array(k, extended, rows)

    if pa.types.is_dictionary(data.type):
        value_row = row_of(scalar.value)

        def fill_chunk(array: pa.Array) -> pa.Array:
            if not scalar.is_valid:  # nulls for nulls: the array as it is
                return array
            return _fill_dictionary(k, array, value_row, lambda indices, index: fill(
                indices, row_of(pa.scalar(index, data.type.index_type))))
    else:
        def fill_chunk(array: pa.Array) -> pa.Array:
            return fill(array, row_of(scalar))

    if kind_of(data) is Kind.ARRAY:
        return finished(k, fill_chunk(data))
    return finished(k, pa.chunked_array([fill_chunk(chunk) for chunk in data.chunks],
                                         type=data.type))


def _fill_dictionary(k: _kernels.DeviceKernels, array: pa.Array,
                     value_row: Callable[[], pa.Array],
                     fill_indices: Callable[[pa.Array, int], pa.Array]) -> pa.Array:
    """A dictionary array whose null indices point at the fill value, appended to its
    dictionary. pyarrow re-encodes the filled values instead (a dictionary of the values
    used, in order of first use): the rows' values and the type are the same. As
    pyarrow, only null indices are filled, not indices of a null dictionary value."""
    type = array.type
    if own_buffer(array, 0) is None:
        return array
    dictionary = array.dictionary
    position = len(dictionary)
    index_type = type.index_type
    if position > 2 ** (index_type.bit_width - pa.types.is_signed_integer(index_type)) - 1:
        raise OverflowError(f"the dictionary holds {position} values, all that its {index_type} "
                            "indices address, and fill_null appends the fill value to it: cast "
                            "to a dictionary type of wider indices first")
    return pa.DictionaryArray.from_arrays(fill_indices(array.indices, position),
                                          concat_arrays(k, [dictionary, value_row()]),
                                          ordered=type.ordered, safe=False)


def _as_type(filled: Any, type: pa.DataType) -> Any:
    """pyarrow's fill_null result in the data's type: pyarrow widens decimal32 and decimal64
    to decimal128 (the kernels keep the type). Cast only then: a cast to the same type can
    make invalid arrays (fixed-size lists of run-end encoded values)."""
    return filled if filled.type.equals(type) else filled.cast(type)


def _one_row(scalar: pa.Scalar) -> pa.Array:
    """An array of the one row ``scalar``, equal to it. pyarrow's array-from-scalar makes
    every type but keeps no type code of a null union value; ``pa.array([scalar])`` makes no
    union, nor some lists of nulls; a union is built from its children."""
    type = scalar.type
    if pa.types.is_union(type):
        sparse = type.mode == "sparse"
        chosen = type.type_codes.index(scalar.type_code)
        children = [(pa.nulls(1, field.type) if scalar.value is None
                     else _one_row(scalar.value))
                    if i == chosen else pa.nulls(1 if sparse else 0, field.type)
                    for i, field in enumerate(type)]
        # From buffers, in the union's own type: its constructors drop the fields' nullability.
        buffers = [None, pa.array([scalar.type_code], pa.int8()).buffers()[1]]
        if not sparse:
            buffers.append(pa.array([0], pa.int32()).buffers()[1])
        union: pa.Array = pa.Array.from_buffers(type, 1, buffers, children=children)
        return union
    row: pa.Array = pa.repeat(scalar, 1)
    if not row[0].equals(scalar):
        try:
            row = pa.array([scalar], type)
        except (pa.ArrowException, TypeError):
            pass
    if not row[0].equals(scalar):
        raise NotImplementedError(
            "arrow_gpu.compute cannot fill nulls with this value on the device yet: pyarrow "
            f"makes no array equal to it (a null union value inside {type}); fill on the host")
    return row


def slice(data: Any, offset: int = 0, length: Optional[int] = None, *,
          stream: Any = None) -> Any:
    """Rows ``offset`` to ``offset + length`` of ``data``, zero-copy, with null counts known.

    pyarrow's own ``Table.slice`` and ``ChunkedArray.slice`` count the nulls of device data
    on the host (and crash); this counts them on the device.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> part = compute.slice(to_device(pa.chunked_array([[1, None], [3, None, 5]])), 1, 3)
    >>> compute.null_count(part), to_host(part).to_pylist()
    (2, [None, 3, None])
    """
    context = device_context(data)
    offset, length = _slice_bounds(offset, length, rows_of(data))
    kind = kind_of(data)
    if kind in (Kind.RECORD_BATCH, Kind.TABLE) and data.num_columns == 0:
        return shaped(kind, data.schema, [], length)
    k = kernels_of(context, stream)
    if k is None:
        return on_host(context or Context(0), lambda d: d.slice(offset, length), data,
                       stream=stream)
    if kind is Kind.ARRAY:
        return finished(k, slice_array(k, data, offset, length))
    if kind is Kind.RECORD_BATCH:
        return finished(k, shaped(kind, data.schema, [slice_array(k, column, offset, length)
                                                        for column in data.columns], length))
    if kind is Kind.CHUNKED_ARRAY:
        return finished(k, slice_chunked(k, data, offset, length))
    return finished(k, pa.Table.from_arrays([slice_chunked(k, column, offset, length)
                                              for column in data.columns], schema=data.schema))


def _slice_bounds(offset: Any, length: Any, n: int) -> tuple[int, int]:
    """The offset and length of a slice of ``n`` rows, clamped to them as pyarrow clamps;
    negative ones raise as pyarrow's Array.slice raises, whatever the shape."""
    offset = operator.index(offset)  # TypeError for floats and the like
    if offset < 0:
        raise IndexError(f"slice offset must be non-negative, got {offset}")
    offset = min(offset, n)
    if length is None:
        return offset, n - offset
    length = operator.index(length)
    if length < 0:
        raise ValueError(f"slice length must be non-negative, got {length}: pass the number "
                         "of rows to keep, or None for all rows from offset on")
    return offset, min(length, n - offset)


def concat(parts: Sequence[Any], *, stream: Any = None) -> Any:
    """One Array, RecordBatch or Table of ``parts`` end to end, as
    ``pyarrow.concat_arrays`` (which crashes on device data) and ``concat_tables``.

    ``parts`` are all Arrays or ChunkedArrays (giving an Array), all RecordBatches, or all
    Tables, of one type or schema, on one device. Tables come back with one chunk per
    column.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> parts = [to_device(pa.array([1, 2])), to_device(pa.chunked_array([[None, 4], [5]]))]
    >>> to_host(compute.concat(parts)).to_pylist()
    [1, 2, None, 4, 5]
    """
    parts = list(parts)
    if not parts:
        raise ValueError("concat needs at least one part, to know the type")
    context = device_context(*parts)
    kinds = {kind_of(part) for part in parts}
    if kinds <= {Kind.ARRAY, Kind.CHUNKED_ARRAY}:
        for part in parts[1:]:  # a ChunkedArray without chunks has a type too
            if not part.type.equals(parts[0].type):
                raise TypeError(f"cannot concatenate arrays of types {parts[0].type} and "
                                f"{part.type}: cast them to one type first")
        chunks = [chunk for part in parts for chunk in arrays(part)]
        if not chunks:  # ChunkedArrays without chunks
            return empty(context or Context(0), parts[0].type, stream)
        k = kernels_of(context, stream)
        if k is None:
            return on_host(context or Context(0), lambda *c: pa.concat_arrays(list(c)), *chunks,
                           stream=stream)
        native = joined_natively(k, [chunks], copy_one=True)
        return native[0] if native is not None else finished(k, concat_arrays(k, chunks))
    if len(kinds) != 1:
        raise TypeError("concat takes parts of one shape: Arrays and ChunkedArrays, "
                        "RecordBatches, or Tables")
    schema = parts[0].schema
    for part in parts[1:]:
        if not part.schema.equals(schema):
            raise ValueError(f"cannot concatenate data of schemas {schema} and {part.schema}")
    k = kernels_of(context, stream)
    if k is None:
        columns = [concat([part.column(i) for part in parts], stream=stream)
                   for i in range(len(schema))]
    else:
        native = _concat_frames_natively(k.select_kernels, parts, k.stream)
        if native is None:
            parts_of = [[chunk for part in parts for chunk in arrays(part.column(i))]
                        for i in range(len(schema))]
            native = finished(k, joined(k, schema.types, parts_of, copy_one=True))
        columns = native
    return shaped(kinds.pop(), schema, columns, builtins.sum(part.num_rows for part in parts))


def combine_chunks(data: Any, *, stream: Any = None) -> Any:
    """As pyarrow's ``combine_chunks``: a ChunkedArray's chunks as one Array; a Table with
    one chunk per column. An Array or RecordBatch is already one.

    >>> import pyarrow as pa
    >>> from arrow_gpu import compute, to_device, to_host
    >>> combined = compute.combine_chunks(to_device(pa.chunked_array([[1, 2], [3]])))
    >>> type(combined).__name__, to_host(combined).to_pylist()
    ('Int64Array', [1, 2, 3])
    """
    kind = kind_of(data)
    if kind is None:
        raise TypeError(f"combine_chunks takes {ANY_ROWS}, got '{type(data).__name__}'")
    context = device_context(data)  # host data is refused however many chunks it has
    if kind in (Kind.ARRAY, Kind.RECORD_BATCH):
        return data
    if kind is Kind.CHUNKED_ARRAY:
        return one_chunk(data, context, stream)
    k = kernels_of(context, stream)
    if k is not None:  # flat columns in one native call, complete: no wait left
        native = combined_natively(k, data)
        if native is not None:
            return native
    columns = ([combine_chunks(column, stream=stream) for column in data.columns] if k is None
               else finished(k, combined(k, data.columns)))
    return shaped(kind, data.schema, columns, data.num_rows)

