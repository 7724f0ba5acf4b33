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

import ctypes
import datetime
import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

import pyarrow as pa
import pyarrow.types as pat
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from arrow_gpu.testing.c_structs import SCHEMA_RELEASE, ArrowSchema

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
# Interval types that pyarrow cannot create directly
# ---------------------------------------------------------------------------


_ARROW_FLAG_NULLABLE = 2


@SCHEMA_RELEASE
def _release_schema(schema: ctypes._Pointer) -> None:
    # The strings belong to Python objects, so releasing only marks the struct.
    schema.contents.release = SCHEMA_RELEASE()


def _type_from_format(format_string: bytes) -> pa.DataType:
    """Import a leaf type from its C data interface format string."""
    schema = ArrowSchema(
        format=format_string, flags=_ARROW_FLAG_NULLABLE, release=_release_schema
    )
    return pa.DataType._import_from_c(ctypes.addressof(schema))


_MONTH_INTERVAL = _type_from_format(b"tiM")
_DAY_TIME_INTERVAL = _type_from_format(b"tiD")


def month_interval() -> pa.DataType:
    """Return Arrow's ``month_interval`` type, which pyarrow has no factory for.

    >>> str(month_interval())
    'month_interval'
    """
    return _MONTH_INTERVAL


def day_time_interval() -> pa.DataType:
    """Return Arrow's ``day_time_interval`` type, which pyarrow has no factory for.

    >>> str(day_time_interval())
    'day_time_interval'
    """
    return _DAY_TIME_INTERVAL


# pyarrow has no Array class for these two types, so arrays of them are built
# from integers of the same layout and then re-typed (see _top_level).
_PROXIES = ((_MONTH_INTERVAL, pa.int32()), (_DAY_TIME_INTERVAL, pa.int64()))


def _proxy_of(type: pa.DataType) -> pa.DataType | None:
    """The stand-in type for an opaque interval type, else ``None``."""
    return next((proxy for opaque, proxy in _PROXIES if type == opaque), None)


# ---------------------------------------------------------------------------
# Extension type
# ---------------------------------------------------------------------------

EXTENSION_NAME = "arrow_gpu.testing.labelled"


class LabelledType(pa.ExtensionType):
    """Extension type: values of a storage type plus a free-text label (a unit, say).

    The label travels in the extension metadata, so it exercises metadata
    passing as well as storage handling.

    >>> LabelledType(pa.int32(), "metres").label
    'metres'
    """

    def __init__(self, storage_type: pa.DataType, label: str = "") -> None:
        self.label = label
        super().__init__(storage_type, EXTENSION_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return self.label.encode()

    @classmethod
    def __arrow_ext_deserialize__(
        cls, storage_type: pa.DataType, serialized: bytes
    ) -> LabelledType:
        return cls(storage_type, serialized.decode())

    # pyarrow's default equality ignores the metadata and compares classes,
    # which would break after a module reload; compare what is on the wire.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, pa.ExtensionType):
            return NotImplemented
        return (
            other.extension_name == EXTENSION_NAME
            and other.storage_type == self.storage_type
            and other.__arrow_ext_serialize__() == self.__arrow_ext_serialize__()
        )

    def __ne__(self, other: object) -> bool:
        # Needed too: the base class's __ne__ would not consult __eq__.
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((EXTENSION_NAME, self.storage_type, self.label))

    def __repr__(self) -> str:
        return f"LabelledType({self.storage_type}, label={self.label!r})"


def register_extension_types() -> None:
    """Register :class:`LabelledType` with pyarrow; safe to call any number of times.

    Registration lets IPC and the C data interface rebuild the type.  An
    existing registration (from an earlier import of this module) is replaced
    so that the registered class is always the current one.

    >>> register_extension_types(); register_extension_types()
    """
    try:
        pa.register_extension_type(LabelledType(pa.null()))
    except pa.ArrowKeyError:
        pa.unregister_extension_type(EXTENSION_NAME)
        pa.register_extension_type(LabelledType(pa.null()))


register_extension_types()

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
    "month_interval": st.just(_MONTH_INTERVAL),
    "day_time_interval": st.just(_DAY_TIME_INTERVAL),
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
class _Drawer:
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


def _validity(d: _Drawer, length: int, nullable: bool) -> list[bool] | None:
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


def _bitmap(d: _Drawer, length: int, nullable: bool) -> pa.Buffer | None:
    flags = _validity(d, length, nullable)
    return None if flags is None else _buffer(flags, pa.bool_())


def _slot_sizes(d: _Drawer, length: int) -> list[int]:
    return d.draw(
        st.lists(st.integers(0, _MAX_ITEMS_PER_SLOT), min_size=length, max_size=length)
    )


def _offset_type(type: pa.DataType) -> pa.DataType:
    large = isinstance(type, (pa.LargeListType, pa.LargeListViewType))
    return pa.int64() if large else pa.int32()


def _offsets(sizes: list[int], type: pa.DataType) -> pa.Buffer:
    """The offsets buffer of consecutive slots of ``sizes``, for list-like ``type``."""
    return _buffer(list(itertools.accumulate(sizes, initial=0)), _offset_type(type))


def _child(d: _Drawer, field: pa.Field, length: int) -> pa.Array:
    return _array(d, field.type, length, field.nullable)


def _fields_of(type: pa.DataType) -> list[pa.Field]:
    return [type.field(i) for i in range(type.num_fields)]


def _leaf(
    d: _Drawer, type: pa.DataType, length: int, nullable: bool, values: SearchStrategy
) -> pa.Array:
    drawn = d.draw(st.lists(values, min_size=length, max_size=length))
    flags = _validity(d, length, nullable)
    if flags is not None:
        drawn = [value if valid else None for value, valid in zip(drawn, flags)]
    return pa.array(drawn, type)


def _struct(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    children = [_child(d, field, length) for field in _fields_of(type)]
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity], children=children)


def _list(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    sizes = _slot_sizes(d, length)
    offsets = _offsets(sizes, type)
    values = _child(d, type.value_field, sum(sizes))
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity, offsets], children=[values])


def _list_view(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    # Views may overlap and come in any order, unlike list offsets.
    sizes = _slot_sizes(d, length)
    values_length = max(sizes, default=0) + d.draw(st.integers(0, _MAX_ITEMS_PER_SLOT))
    offsets = [d.draw(st.integers(0, values_length - size)) for size in sizes]
    values = _child(d, type.value_field, values_length)
    validity = _bitmap(d, length, nullable)
    buffers = [validity, _buffer(offsets, _offset_type(type)), _buffer(sizes, _offset_type(type))]
    return pa.Array.from_buffers(type, length, buffers, children=[values])


def _fixed_size_list(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    values = _child(d, type.value_field, length * type.list_size)
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity], children=[values])


def _map(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    sizes = _slot_sizes(d, length)
    offsets = _offsets(sizes, type)
    fields = [type.key_field, type.item_field]
    keys_and_items = [_child(d, field, sum(sizes)) for field in fields]
    entries = pa.Array.from_buffers(pa.struct(fields), sum(sizes), [None], children=keys_and_items)
    validity = _bitmap(d, length, nullable)
    return pa.Array.from_buffers(type, length, [validity, offsets], children=[entries])


def _union(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
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


def _dictionary(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    largest_index = _integer_bounds(type.index_type)[1]
    size = d.draw(st.integers(1, min(_MAX_DICTIONARY_SIZE, largest_index + 1)))
    dictionary = _array(d, type.value_type, size, False)
    indices = _leaf(d, type.index_type, length, nullable, st.integers(0, size - 1))
    return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=type.ordered)


def _run_end_encoded(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    cuts = d.draw(st.sets(st.integers(1, length - 1))) if length > 1 else set()
    run_ends = sorted(cuts) + [length] if length else []
    values = _array(d, type.value_type, len(run_ends), nullable)
    children = [pa.array(run_ends, type.run_end_type), values]
    return pa.Array.from_buffers(type, length, [None], children=children)


def _extension(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    storage = _array(d, type.storage_type, length, nullable)
    return pa.ExtensionArray.from_storage(type, storage)


def _build(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
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


def _array(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    """An array of ``type``, sliced out of a longer one if the knobs say so."""
    before = d.draw(st.integers(0, _MAX_SLICE_BEFORE)) if d.opts.sliced else 0
    after = d.draw(st.integers(0, _MAX_SLICE_AFTER)) if d.opts.sliced else 0
    return _build(d, type, before + length + after, nullable).slice(before, length)


def _proxy_field(field: pa.Field) -> pa.Field:
    return field.with_type(_proxy_type(field.type))


def _proxy_type(type: pa.DataType) -> pa.DataType:
    """``type`` with opaque intervals swapped for integers of the same layout."""
    proxy = _proxy_of(type)
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


def _top_level(d: _Drawer, type: pa.DataType, length: int, nullable: bool) -> pa.Array:
    """An array of exactly ``type``, which must be one pyarrow can wrap."""
    if _proxy_of(type) is not None:
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


def _options(null_density: float | None, sliced: bool, special_floats: bool) -> _Options:
    if null_density is not None and not 0.0 <= null_density <= 1.0:
        raise InvalidArgument(f"null_density={null_density} must be None or within [0, 1]")
    return _Options(null_density, sliced, special_floats)


def _sizes(size: int | None, min_size: int, max_size: int) -> SearchStrategy[int]:
    if size is not None:
        min_size = max_size = size
    if not 0 <= min_size <= max_size:
        raise InvalidArgument(f"need 0 <= min_size={min_size} <= max_size={max_size}")
    return st.integers(min_size, max_size)


def _strategy(
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
    types = _strategy(type, pa.DataType, data_types)
    lengths = _sizes(size, min_size, max_size)
    opts = _options(null_density, sliced, special_floats)

    @st.composite
    def draw_array(draw: DrawFn) -> pa.Array:
        return _top_level(_Drawer(draw, opts), draw(types), draw(lengths), nullable)

    return draw_array()


def _split(d: _Drawer, total: int, parts: int) -> list[int]:
    """Lengths of ``parts`` chunks, some possibly empty, that add up to ``total``."""
    if parts == 0:
        return []
    cuts = sorted(d.draw(st.lists(st.integers(0, total), min_size=parts - 1, max_size=parts - 1)))
    bounds = [0, *cuts, total]
    return [end - start for start, end in itertools.pairwise(bounds)]


def _chunked(
    d: _Drawer, type: pa.DataType, length: int, nullable: bool, chunk_counts: tuple[int, int]
) -> pa.ChunkedArray:
    least = max(chunk_counts[0], 1 if length else 0)
    lengths = _split(d, length, d.draw(st.integers(least, chunk_counts[1])))
    chunks = [_top_level(d, type, part, nullable) for part in lengths]
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
    types = _strategy(type, pa.DataType, data_types)
    lengths = _sizes(size, min_size, max_size)
    counts = _chunk_counts(min_chunks, max_chunks)
    opts = _options(null_density, sliced, special_floats)

    @st.composite
    def draw_chunked(draw: DrawFn) -> pa.ChunkedArray:
        return _chunked(_Drawer(draw, opts), draw(types), draw(lengths), nullable, counts)

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
    schemas_ = _strategy(
        schema, pa.Schema, lambda: schemas(min_columns=min_columns, max_columns=max_columns)
    )
    lengths = _sizes(size, min_size, max_size)
    opts = _options(null_density, sliced, special_floats)

    @st.composite
    def draw_batch(draw: DrawFn) -> pa.RecordBatch:
        d, drawn, length = _Drawer(draw, opts), draw(schemas_), draw(lengths)
        columns = [_top_level(d, field.type, length, field.nullable) for field in drawn]
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
    schemas_ = _strategy(
        schema, pa.Schema, lambda: schemas(min_columns=min_columns, max_columns=max_columns)
    )
    lengths = _sizes(size, min_size, max_size)
    counts = _chunk_counts(min_chunks, max_chunks)
    opts = _options(null_density, sliced, special_floats)

    @st.composite
    def draw_table(draw: DrawFn) -> pa.Table:
        d, drawn, length = _Drawer(draw, opts), draw(schemas_), draw(lengths)
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
