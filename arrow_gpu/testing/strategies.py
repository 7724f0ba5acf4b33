"""Hypothesis strategies for Arrow data, built with pyarrow alone.

The strategies cover every Arrow type, including the ones pyarrow has no
factory for (``month_interval``, ``day_time_interval``), and they build arrays
the way real producers do: with nulls, with slices at odd offsets (so bitmaps
start mid-byte), with sliced children, with view types that use both inline
and out-of-line values, and so on.  Every array they produce passes
``validate(full=True)``.

Example:

>>> import pyarrow as pa
>>> from hypothesis import given
>>> from arrow_gpu.testing import strategies as ags
>>> @given(ags.arrays(ags.data_types(max_depth=1), max_size=5))
... def test_arrays_are_valid(arr):
...     arr.validate(full=True)
>>> test_arrays_are_valid()
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from typing import TypeVar

import pyarrow as pa
import pyarrow.types as pat
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from arrow_gpu.testing._arrays import (Drawer, as_strategy, generation_options, sizes_between,
                                      top_level_array)
from arrow_gpu.testing._special_types import (EXTENSION_NAME, LabelledType, day_time_interval,
                                             month_interval, register_extension_types)

__all__ = [
    "EXTENSION_NAME",
    "FAMILIES",
    "OPAQUE_FAMILIES",
    "LabelledType",
    "arrays",
    "chunked_arrays",
    "data_types",
    "day_time_interval",
    "devices",
    "month_interval",
    "record_batches",
    "register_extension_types",
    "schemas",
    "tables",
]

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------

_TIME_UNITS = ("s", "ms", "us", "ns")
_TIMEZONES = (None, "UTC", "+05:30", "-08:00", "Europe/Paris", "America/Sao_Paulo")
_DECIMAL_MAX_PRECISION = {
    pa.decimal32: 9,
    pa.decimal64: 18,
    pa.decimal128: 38,
    pa.decimal256: 76,
}
_MAX_CHILDREN = 4
_MAX_FIXED_SIZE = 4
_MAX_NAME_SIZE = 6
# The C data interface passes names as NUL-terminated strings.
_NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=_MAX_NAME_SIZE)


def _decimal_types() -> SearchStrategy[pa.DataType]:
    """Decimals of every width, with any precision the width allows and 0 <= scale <= precision."""
    widths = st.sampled_from(list(_DECIMAL_MAX_PRECISION.items()))

    def sized(width: tuple[Callable[[int, int], pa.DataType], int]) -> SearchStrategy:
        factory, max_precision = width
        return st.integers(1, max_precision).flatmap(
            lambda precision: st.integers(0, precision).map(
                lambda scale: factory(precision, scale)
            )
        )

    return widths.flatmap(sized)


_INTEGER_TYPES = st.sampled_from(
    [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    + [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
)
_LEAF_TYPES: dict[str, SearchStrategy[pa.DataType]] = {
    "null": st.just(pa.null()),
    "bool": st.just(pa.bool_()),
    "integer": _INTEGER_TYPES,
    "floating": st.sampled_from([pa.float16(), pa.float32(), pa.float64()]),
    "decimal": _decimal_types(),
    "date": st.sampled_from([pa.date32(), pa.date64()]),
    "time": st.sampled_from(
        [pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")]
    ),
    "timestamp": st.builds(
        pa.timestamp, st.sampled_from(_TIME_UNITS), st.sampled_from(_TIMEZONES)
    ),
    "duration": st.sampled_from(_TIME_UNITS).map(pa.duration),
    "month_interval": st.just(month_interval()),
    "day_time_interval": st.just(day_time_interval()),
    "month_day_nano_interval": st.just(pa.month_day_nano_interval()),
    "string": st.just(pa.string()),
    "large_string": st.just(pa.large_string()),
    "string_view": st.just(pa.string_view()),
    "binary": st.just(pa.binary()),
    "large_binary": st.just(pa.large_binary()),
    "binary_view": st.just(pa.binary_view()),
    "fixed_size_binary": st.integers(0, 16).map(pa.binary),
}

def _dictionary_types(values: SearchStrategy[pa.DataType]) -> SearchStrategy:
    return st.builds(pa.dictionary, _INTEGER_TYPES, values, st.booleans())


def _extension_types(storage: SearchStrategy[pa.DataType]) -> SearchStrategy:
    return st.builds(LabelledType, storage, st.text(max_size=_MAX_NAME_SIZE))


# Wrappers take a leaf value type, so they add no nesting depth.
_WRAPPER_TYPES: dict[str, Callable[[SearchStrategy], SearchStrategy]] = {
    "dictionary": _dictionary_types,
    "extension": _extension_types,
}


def _field(
    name: str, type: pa.DataType, nullable: bool, metadata: dict[str, str] | None = None
) -> pa.Field:
    # Arrow rejects non-nullable fields of the null type.
    return pa.field(name, type, nullable or pat.is_null(type), metadata)


def _fields(
    types: SearchStrategy[pa.DataType],
    *,
    min_size: int = 0,
    max_size: int = _MAX_CHILDREN,
) -> SearchStrategy[list[pa.Field]]:
    """Lists of fields with unique names, random nullability and optional metadata."""
    metadata = st.none() | st.dictionaries(
        st.text(max_size=_MAX_NAME_SIZE), st.text(max_size=_MAX_NAME_SIZE), max_size=2
    )
    field = st.builds(_field, _NAMES, types, st.booleans(), metadata)
    return st.lists(field, min_size=min_size, max_size=max_size, unique_by=lambda f: f.name)


# Each factory takes the strategies for child types and for flat value types
# (map keys); the latter is needed because keys must not be nested or null.
_NestedFactory = Callable[[SearchStrategy, SearchStrategy], SearchStrategy]


def _item_field(types: SearchStrategy[pa.DataType], name: str) -> SearchStrategy[pa.Field]:
    return st.builds(_field, st.just(name), types, st.booleans())


def _union_types(mode: str) -> _NestedFactory:
    def unions(children: SearchStrategy, leaves: SearchStrategy) -> SearchStrategy:
        def with_codes(fields: list[pa.Field]) -> SearchStrategy:
            codes = st.lists(
                st.integers(0, 127), min_size=len(fields), max_size=len(fields), unique=True
            )
            return codes.map(lambda type_codes: pa.union(fields, mode, type_codes))

        return _fields(children, min_size=1).flatmap(with_codes)

    return unions


def _list_types(factory: Callable[[pa.Field], pa.DataType]) -> _NestedFactory:
    return lambda children, leaves: _item_field(children, "item").map(factory)


_NESTED_TYPES: dict[str, _NestedFactory] = {
    "struct": lambda children, leaves: _fields(children).map(pa.struct),
    "list": _list_types(pa.list_),
    "large_list": _list_types(pa.large_list),
    "list_view": _list_types(pa.list_view),
    "large_list_view": _list_types(pa.large_list_view),
    "fixed_size_list": lambda children, leaves: st.builds(
        pa.list_, _item_field(children, "element"), st.integers(0, _MAX_FIXED_SIZE)
    ),
    "map": lambda children, leaves: st.builds(
        pa.map_, leaves, _item_field(children, "value")
    ),
    "sparse_union": _union_types("sparse"),
    "dense_union": _union_types("dense"),
    # Arrow's C data interface rejects run-end encoded values that are run-end encoded.
    "run_end_encoded": lambda children, leaves: st.builds(
        pa.run_end_encoded,
        st.sampled_from([pa.int16(), pa.int32(), pa.int64()]),
        children.filter(lambda type: not pat.is_run_end_encoded(type)),
    ),
}

FAMILIES: tuple[str, ...] = (*_LEAF_TYPES, *_WRAPPER_TYPES, *_NESTED_TYPES)
"""Names of the type families :func:`data_types` can ``include`` or ``exclude``."""

OPAQUE_FAMILIES: frozenset[str] = frozenset({"month_interval", "day_time_interval"})
"""Families pyarrow can hold in nested arrays but cannot wrap as a Python ``Array``.

Arrays of these types therefore only appear nested (a struct field, a list
item, ...), and accessing such a child from Python fails.  Pass
``exclude=OPAQUE_FAMILIES`` to :func:`data_types` when a test needs to reach
every child from Python.
"""


def _one_of(options: list[SearchStrategy[T]], name: str) -> SearchStrategy[T]:
    """``st.one_of(options)``, shown as ``name()`` in failure reports.

    The plain repr of nested type strategies runs to tens of kilobytes.
    """
    if not options:
        raise InvalidArgument(f"no type family is left to draw {name} from")
    choice = st.one_of(options)

    def draw_choice(draw: DrawFn) -> T:
        return draw(choice)

    draw_choice.__name__ = draw_choice.__qualname__ = name
    return st.composite(draw_choice)()


def _value_leaf_types(excluded: frozenset[str]) -> SearchStrategy[pa.DataType]:
    """Leaf types that may hold dictionary values, map keys and extension storage."""
    unusable = excluded | OPAQUE_FAMILIES | {"null"}
    options = [types for name, types in _LEAF_TYPES.items() if name not in unusable]
    return _one_of(options, "flat_value_types")


def data_types(
    *,
    max_depth: int = 2,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
    dictionary: bool = True,
    extension: bool = True,
) -> SearchStrategy[pa.DataType]:
    """Strategy for Arrow data types, reaching every type Arrow defines.

    Args:
        max_depth: how many levels of nested types (struct, lists, map,
            unions, run-end encoded) may be stacked; 0 gives flat types only.
            Dictionaries and extension types wrap flat types and add no depth.
        include: families (see :data:`FAMILIES`) the top-level type is drawn
            from; ``None`` means all of them.  Children may be of any family
            that is not excluded.
        exclude: families that appear nowhere, at the top or nested.
        dictionary: ``False`` is shorthand for excluding ``"dictionary"``.
        extension: ``False`` is shorthand for excluding ``"extension"``.

    The families in :data:`OPAQUE_FAMILIES` only appear nested, since pyarrow
    cannot wrap a top-level array of them.

    >>> from hypothesis import find
    >>> pa.types.is_map(find(data_types(include={"map"}), lambda t: True))
    True
    """
    if max_depth < 0:
        raise InvalidArgument(f"max_depth={max_depth} must be >= 0")
    excluded = frozenset(exclude) | {
        name for name, wanted in (("dictionary", dictionary), ("extension", extension))
        if not wanted
    }
    top = frozenset(FAMILIES if include is None else include)
    unknown = (top | excluded) - set(FAMILIES)
    if unknown:
        raise InvalidArgument(f"unknown type families {sorted(unknown)}; see FAMILIES")

    def level(depth: int, families: frozenset[str]) -> SearchStrategy[pa.DataType]:
        allowed = [name for name in FAMILIES if name in families - excluded]
        options = [_LEAF_TYPES[name] for name in allowed if name in _LEAF_TYPES]
        wrappers = [name for name in allowed if name in _WRAPPER_TYPES]
        nested = [name for name in allowed if name in _NESTED_TYPES] if depth > 0 else []
        if wrappers or nested:
            leaves = _value_leaf_types(excluded)
            options += [_WRAPPER_TYPES[name](leaves) for name in wrappers]
        if nested:
            children = level(depth - 1, frozenset(FAMILIES))
            options += [_NESTED_TYPES[name](children, leaves) for name in nested]
        return _one_of(options, f"types_nesting_up_to_{depth}")

    return level(max_depth, top - OPAQUE_FAMILIES)


# ---------------------------------------------------------------------------
# Arrays, chunked arrays, schemas, record batches and tables
# ---------------------------------------------------------------------------


def arrays(
    type: pa.DataType | SearchStrategy[pa.DataType] | None = None,
    *,
    size: int | None = None,
    min_size: int = 0,
    max_size: int = 10,
    nullable: bool = True,
    null_density: float | None = None,
    sliced: bool = True,
    special_floats: bool = True,
) -> SearchStrategy[pa.Array]:
    """Strategy for valid arrays of ``type`` (default: any :func:`data_types`).

    Args:
        type: a data type, a strategy for data types, or ``None``.
        size: exact length; overrides ``min_size`` and ``max_size``.
        min_size, max_size: bounds on the length.
        nullable: ``False`` gives arrays without logical nulls (children of
            structs, lists and maps still follow their field's nullability).
            Arrays of the null type are always null.
        null_density: fraction of null slots, in every nested array; ``None``
            draws a density per array from 0, 0.1, 0.5 and 1.
        sliced: slice every array, children included, out of a longer one at
            an offset of 0 to 9, so bitmaps also start mid-byte.
        special_floats: allow NaN and infinities in floating point values.

    >>> from hypothesis import given
    >>> @given(arrays(pa.list_view(pa.string_view()), size=4, null_density=0))
    ... def test(arr):
    ...     assert len(arr) == 4 and arr.null_count == 0
    ...     arr.validate(full=True)
    >>> test()
    """
    types = as_strategy(type, pa.DataType, data_types)
    lengths = sizes_between(size, min_size, max_size)
    opts = generation_options(null_density, sliced, special_floats)

    @st.composite
    def draw_array(draw: DrawFn) -> pa.Array:
        return top_level_array(Drawer(draw, opts), draw(types), draw(lengths), nullable)

    return draw_array()


def _split(d: Drawer, total: int, parts: int) -> list[int]:
    """Lengths of ``parts`` chunks, some possibly empty, that add up to ``total``."""
    if parts == 0:
        return []
    cuts = sorted(d.draw(st.lists(st.integers(0, total), min_size=parts - 1, max_size=parts - 1)))
    bounds = [0, *cuts, total]
    return [end - start for start, end in itertools.pairwise(bounds)]


def _chunked(
    d: Drawer, type: pa.DataType, length: int, nullable: bool, chunk_counts: tuple[int, int]
) -> pa.ChunkedArray:
    least = max(chunk_counts[0], 1 if length else 0)
    lengths = _split(d, length, d.draw(st.integers(least, chunk_counts[1])))
    chunks = [top_level_array(d, type, part, nullable) for part in lengths]
    return pa.chunked_array(chunks, type=type)


def _chunk_counts(min_chunks: int, max_chunks: int) -> tuple[int, int]:
    if not 0 <= min_chunks <= max_chunks or max_chunks < 1:
        raise InvalidArgument(
            f"need 0 <= min_chunks={min_chunks} <= max_chunks={max_chunks} and max_chunks >= 1"
        )
    return min_chunks, max_chunks


def chunked_arrays(
    type: pa.DataType | SearchStrategy[pa.DataType] | None = None,
    *,
    size: int | None = None,
    min_size: int = 0,
    max_size: int = 20,
    min_chunks: int = 0,
    max_chunks: int = 4,
    nullable: bool = True,
    null_density: float | None = None,
    sliced: bool = True,
    special_floats: bool = True,
) -> SearchStrategy[pa.ChunkedArray]:
    """Strategy for chunked arrays; sizes count all chunks, some may be empty.

    A non-empty chunked array has at least one chunk.  Other arguments are as
    for :func:`arrays`.

    >>> from hypothesis import given
    >>> @given(chunked_arrays(pa.int64(), size=7, min_chunks=2))
    ... def test(chunked):
    ...     assert len(chunked) == 7 and chunked.num_chunks >= 2
    >>> test()
    """
    types = as_strategy(type, pa.DataType, data_types)
    lengths = sizes_between(size, min_size, max_size)
    counts = _chunk_counts(min_chunks, max_chunks)
    opts = generation_options(null_density, sliced, special_floats)

    @st.composite
    def draw_chunked(draw: DrawFn) -> pa.ChunkedArray:
        return _chunked(Drawer(draw, opts), draw(types), draw(lengths), nullable, counts)

    return draw_chunked()


def schemas(
    types: SearchStrategy[pa.DataType] | None = None,
    *,
    min_columns: int = 0,
    max_columns: int = 4,
) -> SearchStrategy[pa.Schema]:
    """Strategy for schemas with unique field names and optional metadata.

    >>> from hypothesis import find
    >>> len(find(schemas(min_columns=2), lambda schema: True).names)
    2
    """
    if not 0 <= min_columns <= max_columns:
        raise InvalidArgument(f"need 0 <= min_columns={min_columns} <= max_columns={max_columns}")
    types = data_types() if types is None else types
    fields = _fields(types, min_size=min_columns, max_size=max_columns)
    metadata = st.none() | st.dictionaries(st.binary(max_size=4), st.binary(max_size=4), max_size=2)
    return st.builds(pa.schema, fields, metadata)


def record_batches(
    schema: pa.Schema | SearchStrategy[pa.Schema] | None = None,
    *,
    min_columns: int = 0,
    max_columns: int = 4,
    size: int | None = None,
    min_size: int = 0,
    max_size: int = 10,
    null_density: float | None = None,
    sliced: bool = True,
    special_floats: bool = True,
) -> SearchStrategy[pa.RecordBatch]:
    """Strategy for record batches of ``schema`` (default: any of :func:`schemas`).

    ``min_columns`` and ``max_columns`` apply when ``schema`` is ``None``.
    Columns of non-nullable fields have no nulls; a batch without columns
    still has the drawn number of rows.  Other arguments are as for
    :func:`arrays`.

    >>> from hypothesis import given
    >>> @given(record_batches(size=3))
    ... def test(batch):
    ...     assert batch.num_rows == 3
    ...     batch.validate(full=True)
    >>> test()
    """
    schemas_ = as_strategy(
        schema, pa.Schema, lambda: schemas(min_columns=min_columns, max_columns=max_columns)
    )
    lengths = sizes_between(size, min_size, max_size)
    opts = generation_options(null_density, sliced, special_floats)

    @st.composite
    def draw_batch(draw: DrawFn) -> pa.RecordBatch:
        d, drawn, length = Drawer(draw, opts), draw(schemas_), draw(lengths)
        columns = [top_level_array(d, field.type, length, field.nullable) for field in drawn]
        # Going through a struct keeps the row count even without columns.
        rows = pa.Array.from_buffers(pa.struct(list(drawn)), length, [None], children=columns)
        return pa.RecordBatch.from_struct_array(rows).replace_schema_metadata(drawn.metadata)

    return draw_batch()


def tables(
    schema: pa.Schema | SearchStrategy[pa.Schema] | None = None,
    *,
    min_columns: int = 0,
    max_columns: int = 4,
    size: int | None = None,
    min_size: int = 0,
    max_size: int = 20,
    min_chunks: int = 0,
    max_chunks: int = 4,
    null_density: float | None = None,
    sliced: bool = True,
    special_floats: bool = True,
) -> SearchStrategy[pa.Table]:
    """Strategy for tables whose columns are each chunked their own way.

    A table without columns has no rows.  Chunk bounds are per column, as for
    :func:`chunked_arrays`; other arguments are as for :func:`record_batches`.

    >>> from hypothesis import given
    >>> @given(tables(size=5, min_columns=1))
    ... def test(table):
    ...     assert all(len(column) == 5 for column in table.columns)
    >>> test()
    """
    schemas_ = as_strategy(
        schema, pa.Schema, lambda: schemas(min_columns=min_columns, max_columns=max_columns)
    )
    lengths = sizes_between(size, min_size, max_size)
    counts = _chunk_counts(min_chunks, max_chunks)
    opts = generation_options(null_density, sliced, special_floats)

    @st.composite
    def draw_table(draw: DrawFn) -> pa.Table:
        d, drawn, length = Drawer(draw, opts), draw(schemas_), draw(lengths)
        columns = [_chunked(d, field.type, length, field.nullable, counts) for field in drawn]
        return pa.Table.from_arrays(columns, schema=drawn)

    return draw_table()


# ---------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------


def devices() -> SearchStrategy[int]:
    """Strategy for the numbers of the visible CUDA devices.

    The native module is imported when the first device is drawn, so merely
    building the strategy (e.g. in a ``@given`` decorator) needs no GPU.
    """
    # A fresh lambda each call: Hypothesis caches deferred() by its argument.
    return st.deferred(lambda: _visible_devices())


def _visible_devices() -> SearchStrategy[int]:
    from arrow_gpu import Context  # deferred: loads the CUDA runtime

    count = Context.get_num_devices()
    if count < 1:
        raise InvalidArgument("no CUDA device is visible")
    return st.integers(0, count - 1)
