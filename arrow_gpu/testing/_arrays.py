"""The array builders of :mod:`arrow_gpu.testing.strategies`, type family by type family:
values of each flat type, and arrays of any type built the way real producers build them
(nulls, slices at odd offsets, sliced children, inline and out-of-line view values)."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

import pyarrow as pa
import pyarrow.types as pat
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from arrow_gpu.testing._special_types import proxy_of

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Values of flat types
# ---------------------------------------------------------------------------

_MAX_VARIABLE_SIZE = 20  # long enough for out-of-line view values (> 12 bytes)
_UNITS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_SECONDS_PER_DAY = 86_400
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
# Instants and spans stay within the years 1 to 9999 so that they convert to
# Python datetimes; for nanoseconds int64 narrows that to 1677 to 2262.
_CALENDAR_SECONDS = (
    int((datetime.datetime.min.replace(tzinfo=datetime.timezone.utc) - _EPOCH).total_seconds()),
    int((datetime.datetime.max.replace(tzinfo=datetime.timezone.utc) - _EPOCH).total_seconds()),
)
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class _Options:
    """Generation knobs shared by every array strategy."""

    null_density: float | None
    sliced: bool
    special_floats: bool


@dataclass(frozen=True)
class Drawer:
    """What building one example's arrays needs: its draw function and the knobs."""

    draw: DrawFn
    opts: _Options


def _integer_bounds(type: pa.DataType) -> tuple[int, int]:
    if pat.is_signed_integer(type):
        return -(2 ** (type.bit_width - 1)), 2 ** (type.bit_width - 1) - 1
    return 0, 2**type.bit_width - 1


def _integer_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    return st.integers(*_integer_bounds(type))


def _float_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    return st.floats(
        width=type.bit_width,
        allow_nan=opts.special_floats,
        allow_infinity=opts.special_floats,
    )


def _decimal_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    largest = 10**type.precision - 1
    # Built from a string so that no decimal context rounds wide values.
    return st.integers(-largest, largest).map(lambda unscaled: Decimal(f"{unscaled}e-{type.scale}"))


def _time_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    return st.integers(0, _UNITS_PER_SECOND[type.unit] * _SECONDS_PER_DAY - 1)


def _calendar_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    """Timestamps or durations within the calendar range, in ``type.unit``."""
    scale = _UNITS_PER_SECOND[type.unit]
    low, high = (seconds * scale for seconds in _CALENDAR_SECONDS)
    return st.integers(max(low, _INT64[0]), min(high, _INT64[1]))


def _month_day_nano_values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    parts = st.tuples(st.integers(*_INT32), st.integers(*_INT32), st.integers(*_INT64))
    return parts.map(pa.MonthDayNano)  # months, days, nanoseconds


def _is_text(type: pa.DataType) -> bool:
    return pat.is_string(type) or pat.is_large_string(type) or pat.is_string_view(type)


def _is_bytes(type: pa.DataType) -> bool:
    return pat.is_binary(type) or pat.is_large_binary(type) or pat.is_binary_view(type)


_ValuesFactory = Callable[[pa.DataType, _Options], SearchStrategy]
_VALUES: list[tuple[Callable[[pa.DataType], bool], _ValuesFactory]] = [
    (pat.is_boolean, lambda type, opts: st.booleans()),
    (pat.is_integer, _integer_values),
    (pat.is_floating, _float_values),
    (pat.is_decimal, _decimal_values),
    (pat.is_date, lambda type, opts: st.dates()),
    (pat.is_time, _time_values),
    (pat.is_timestamp, _calendar_values),
    (pat.is_duration, _calendar_values),
    (lambda type: type == pa.month_day_nano_interval(), _month_day_nano_values),
    (_is_text, lambda type, opts: st.text(max_size=_MAX_VARIABLE_SIZE)),
    (_is_bytes, lambda type, opts: st.binary(max_size=_MAX_VARIABLE_SIZE)),
    (
        pat.is_fixed_size_binary,
        lambda type, opts: st.binary(min_size=type.byte_width, max_size=type.byte_width),
    ),
]


def _values(type: pa.DataType, opts: _Options) -> SearchStrategy:
    """Python values that ``pa.array`` converts to ``type``."""
    for matches, values in _VALUES:
        if matches(type):
            return values(type, opts)
    raise InvalidArgument(f"cannot generate values of type {type} in this position")


# ---------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------

_NULL_DENSITIES = (0.0, 0.1, 0.5, 1.0)
_MAX_SLICE_BEFORE = 9  # odd offsets, and offsets past the first bitmap byte
_MAX_SLICE_AFTER = 3
_MAX_ITEMS_PER_SLOT = 3
_MAX_DICTIONARY_SIZE = 8


def _validity(d: Drawer, length: int, nullable: bool) -> list[bool] | None:
    """Per-slot validity flags, or ``None`` when every slot is valid."""
    if not nullable or length == 0:
        return None
    density = d.opts.null_density
    if density is None:
        density = d.draw(st.sampled_from(_NULL_DENSITIES))
    if density == 0:
        return None
    rng = d.draw(st.randoms(use_true_random=False))
    return [rng.random() < 1.0 - density for _ in range(length)]


def _buffer(values: list, type: pa.DataType) -> pa.Buffer:
    """The data buffer (bits for booleans) holding ``values`` as ``type``."""
    return pa.array(values, type).buffers()[1]


def _bitmap(d: Drawer, length: int, nullable: bool) -> pa.Buffer | None:
    flags = _validity(d, length, nullable)
    return None if flags is None else _buffer(flags, pa.bool_())


def _slot_sizes(d: Drawer, length: int) -> list[int]:
    return d.draw(
        st.lists(st.integers(0, _MAX_ITEMS_PER_SLOT), min_size=length, max_size=length)
    )


def _offset_type(type: pa.DataType) -> pa.DataType:
    large = isinstance(type, (pa.LargeListType, pa.LargeListViewType))
    return pa.int64() if large else pa.int32()


def _offsets(sizes: list[int], type: pa.DataType) -> pa.Buffer:
    """The offsets buffer of consecutive slots of ``sizes``, for list-like ``type``."""
    return _buffer(list(itertools.accumulate(sizes, initial=0)), _offset_type(type))


def _child(d: Drawer, field: pa.Field, length: int) -> pa.Array:
    return _array(d, field.type, length, field.nullable)


def _fields_of(type: pa.DataType) -> list[pa.Field]:
    return [type.field(i) for i in range(type.num_fields)]


def _leaf(
    d: Drawer, type: pa.DataType, length: int, nullable: bool, values: SearchStrategy
) -> pa.Array:
    drawn = d.draw(st.lists(values, min_size=length, max_size=length))
    flags = _validity(d, length, nullable)
    if flags is not None:
        drawn = [value if valid else None for value, valid in zip(drawn, flags)]
    return pa.array(drawn, type)


def _struct(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    children = [_child(d, field, length) for field in _fields_of(type)]
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity], children=children)


def _list(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    sizes = _slot_sizes(d, length)
    offsets = _offsets(sizes, type)
    values = _child(d, type.value_field, sum(sizes))
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity, offsets], children=[values])


def _list_view(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    # Views may overlap and come in any order, unlike list offsets.
    sizes = _slot_sizes(d, length)
    values_length = max(sizes, default=0) + d.draw(st.integers(0, _MAX_ITEMS_PER_SLOT))
    offsets = [d.draw(st.integers(0, values_length - size)) for size in sizes]
    values = _child(d, type.value_field, values_length)
    validity = _bitmap(d, length, nullable)
    buffers = [validity, _buffer(offsets, _offset_type(type)), _buffer(sizes, _offset_type(type))]
    return pa.Array.from_buffers(type, length, buffers, children=[values])


def _fixed_size_list(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    values = _child(d, type.value_field, length * type.list_size)
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity], children=[values])


def _map(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    sizes = _slot_sizes(d, length)
    offsets = _offsets(sizes, type)
    fields = [type.key_field, type.item_field]
    keys_and_items = [_child(d, field, sum(sizes)) for field in fields]
    entries = pa.Array.from_buffers(pa.struct(fields), sum(sizes), [None], children=keys_and_items)
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity, offsets], children=[entries])


def _union(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    # Unions have no validity bitmap: their nulls are the children's.
    fields = _fields_of(type)
    picks = d.draw(st.lists(st.integers(0, len(fields) - 1), min_size=length, max_size=length))
    type_ids = _buffer([type.type_codes[pick] for pick in picks], pa.int8())
    if type.mode == "sparse":
        lengths, buffers = [length] * len(fields), [None, type_ids]
    else:
        lengths, offsets = [0] * len(fields), []
        for pick in picks:
            offsets.append(lengths[pick])
            lengths[pick] += 1
        buffers = [None, type_ids, _buffer(offsets, pa.int32())]
    children = [
        _array(d, field.type, child_length, nullable and field.nullable)
        for field, child_length in zip(fields, lengths)
    ]
    return pa.Array.from_buffers(type, length, buffers, children=children)


def _dictionary(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    largest_index = _integer_bounds(type.index_type)[1]
    size = d.draw(st.integers(1, min(_MAX_DICTIONARY_SIZE, largest_index + 1)))
    dictionary = _array(d, type.value_type, size, False)
    indices = _leaf(d, type.index_type, length, nullable, st.integers(0, size - 1))
    return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=type.ordered)


def _run_end_encoded(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    cuts = d.draw(st.sets(st.integers(1, length - 1))) if length > 1 else set()
    run_ends = sorted(cuts) + [length] if length else []
    values = _array(d, type.value_type, len(run_ends), nullable)
    children = [pa.array(run_ends, type.run_end_type), values]
    return pa.Array.from_buffers(type, length, [None], children=children)


def _extension(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    storage = _array(d, type.storage_type, length, nullable)
    return pa.ExtensionArray.from_storage(type, storage)


def _build(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    """An unsliced array of ``type``; ``nullable=False`` means no logical nulls."""
    match type:
        case pa.StructType():
            return _struct(d, type, length, nullable)
        case pa.ListType() | pa.LargeListType():
            return _list(d, type, length, nullable)
        case pa.ListViewType() | pa.LargeListViewType():
            return _list_view(d, type, length, nullable)
        case pa.FixedSizeListType():
            return _fixed_size_list(d, type, length, nullable)
        case pa.MapType():
            return _map(d, type, length, nullable)
        case pa.UnionType():
            return _union(d, type, length, nullable)
        case pa.DictionaryType():
            return _dictionary(d, type, length, nullable)
        case pa.RunEndEncodedType():
            return _run_end_encoded(d, type, length, nullable)
        case pa.BaseExtensionType():
            return _extension(d, type, length, nullable)
        case _ if pat.is_null(type):
            return pa.nulls(length)
        case _:
            return _leaf(d, type, length, nullable, _values(type, d.opts))


def _array(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    """An array of ``type``, sliced out of a longer one if the knobs say so."""
    before = d.draw(st.integers(0, _MAX_SLICE_BEFORE)) if d.opts.sliced else 0
    after = d.draw(st.integers(0, _MAX_SLICE_AFTER)) if d.opts.sliced else 0
    return _build(d, type, before + length + after, nullable).slice(before, length)


def _proxy_field(field: pa.Field) -> pa.Field:
    return field.with_type(_proxy_type(field.type))


def _proxy_type(type: pa.DataType) -> pa.DataType:
    """``type`` with opaque intervals swapped for integers of the same layout."""
    proxy = proxy_of(type)
    if proxy is not None:
        return proxy
    match type:
        case pa.StructType():
            return pa.struct([_proxy_field(field) for field in _fields_of(type)])
        case pa.UnionType():
            fields = [_proxy_field(field) for field in _fields_of(type)]
            return pa.union(fields, type.mode, type.type_codes)
        case pa.ListType():
            return pa.list_(_proxy_field(type.value_field))
        case pa.LargeListType():
            return pa.large_list(_proxy_field(type.value_field))
        case pa.ListViewType():
            return pa.list_view(_proxy_field(type.value_field))
        case pa.LargeListViewType():
            return pa.large_list_view(_proxy_field(type.value_field))
        case pa.FixedSizeListType():
            return pa.list_(_proxy_field(type.value_field), type.list_size)
        case pa.MapType():
            return pa.map_(
                _proxy_field(type.key_field), _proxy_field(type.item_field), type.keys_sorted
            )
        case pa.RunEndEncodedType():
            return pa.run_end_encoded(type.run_end_type, _proxy_type(type.value_type))
        case _:
            return type


def top_level_array(d: Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    """An array of exactly ``type``, which must be one pyarrow can wrap."""
    if proxy_of(type) is not None:
        raise InvalidArgument(f"pyarrow cannot wrap a top-level array of {type}")
    array = _array(d, _proxy_type(type), length, nullable)
    if array.type == type:
        return array
    # Re-import the same buffers under the real type.  (Array.view would do,
    # but it mixes up the lengths of null-typed children.)
    _, c_array = array.__arrow_c_array__()
    retyped = pa.Array._import_from_c_capsule(type.__arrow_c_schema__(), c_array)
    # The importer gives an empty view array at an offset a views buffer too
    # small to validate; the few draws that contain one are discarded.
    assume(_is_valid(retyped))
    return retyped


def _is_valid(array: pa.Array) -> bool:
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def generation_options(null_density: float | None, sliced: bool, special_floats: bool) -> _Options:
    if null_density is not None and not 0.0 <= null_density <= 1.0:
        raise InvalidArgument(f"null_density={null_density} must be None or within [0, 1]")
    return _Options(null_density, sliced, special_floats)


def sizes_between(size: int | None, min_size: int, max_size: int) -> SearchStrategy[int]:
    if size is not None:
        min_size = max_size = size
    if not 0 <= min_size <= max_size:
        raise InvalidArgument(f"need 0 <= min_size={min_size} <= max_size={max_size}")
    return st.integers(min_size, max_size)


def as_strategy(
    value: T | SearchStrategy[T] | None,
    kind: type,
    default: Callable[[], SearchStrategy[T]],
) -> SearchStrategy[T]:
    """Accept a value, a strategy for values, or ``None`` for the default strategy."""
    if value is None:
        return default()
    if isinstance(value, SearchStrategy):
        return value
    if isinstance(value, kind):
        return st.just(value)
    raise InvalidArgument(f"expected a {kind.__name__} or a strategy for one, got {value!r}")
