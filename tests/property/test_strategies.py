"""Host-only property tests: arrow_gpu.testing's strategies generate valid, varied Arrow data."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.types as pat
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

import arrow_gpu
from arrow_gpu.testing import profiles
from arrow_gpu.testing import strategies as ags

# Searches only generate: shrinking a found example would just cost time.
SEARCH = settings(max_examples=20_000, phases=[Phase.generate], database=None)
VIEW_INLINE_LIMIT = 12  # bytes; longer view values live in variadic buffers
PYTHON_WRAPPABLE = ags.data_types(exclude=ags.OPAQUE_FAMILIES)


def search(strategy: SearchStrategy, condition: Callable) -> object:
    return find(strategy, condition, settings=SEARCH)


# --- walking types and arrays (kept independent of the module under test) ---


def types_within(type: pa.DataType) -> Iterator[pa.DataType]:
    yield type
    if isinstance(type, pa.DictionaryType):
        yield from types_within(type.index_type)
        yield from types_within(type.value_type)
    elif isinstance(type, pa.BaseExtensionType):
        yield from types_within(type.storage_type)
    elif isinstance(type, pa.MapType):  # skip the implicit entries struct
        yield from types_within(type.key_type)
        yield from types_within(type.item_type)
    else:
        for i in range(type.num_fields):
            yield from types_within(type.field(i).type)


def nesting(type: pa.DataType) -> int:
    """Levels of nested types; a map's entries struct is not a level of its own."""
    if isinstance(type, pa.DictionaryType):
        return nesting(type.value_type)
    if isinstance(type, pa.BaseExtensionType):
        return nesting(type.storage_type)
    if isinstance(type, pa.MapType):
        return 1 + max(nesting(type.key_type), nesting(type.item_type))
    children = [nesting(type.field(i).type) for i in range(type.num_fields)]
    return 1 + max(children, default=0) if pat.is_nested(type) else 0


def children(array: pa.Array) -> list[pa.Array]:
    type = array.type
    if isinstance(type, pa.DictionaryType):
        return [array.indices, array.dictionary]
    if isinstance(type, pa.BaseExtensionType):
        return [array.storage]
    if isinstance(type, pa.RunEndEncodedType):
        return [array.run_ends, array.values]
    if isinstance(type, pa.MapType):
        return [array.keys, array.items]
    if pat.is_struct(type) or pat.is_union(type):
        return [array.field(i) for i in range(type.num_fields)]
    if pat.is_nested(type):
        return [array.values]
    return []


def nodes(array: pa.Array) -> Iterator[pa.Array]:
    yield array
    for child in children(array):
        yield from nodes(child)


def logical_parts(array: pa.Array) -> Iterator[pa.Array]:
    """The array, or the arrays whose nulls are its logical nulls (union, dictionary, ...)."""
    type = array.type
    if isinstance(type, pa.DictionaryType):
        yield array.indices
    elif isinstance(type, pa.BaseExtensionType):
        yield from logical_parts(array.storage)
    elif isinstance(type, pa.RunEndEncodedType):
        yield from logical_parts(array.values)
    elif pat.is_union(type):
        for i in range(type.num_fields):
            yield from logical_parts(array.field(i))
    else:
        yield array


def has_no_logical_nulls(array: pa.Array) -> bool:
    """True unless nulls were generated; arrays of the null type are null by definition."""
    return all(part.null_count == 0 or pat.is_null(part.type) for part in logical_parts(array))


# --- data types ---


def _is(expected: pa.DataType) -> Callable[[pa.DataType], bool]:
    return lambda type: type == expected


def _timestamp(unit: str, zoned: bool) -> Callable[[pa.DataType], bool]:
    return lambda type: pat.is_timestamp(type) and type.unit == unit and (type.tz is not None) == zoned


def _dictionary(index: pa.DataType) -> Callable[[pa.DataType], bool]:
    return lambda type: pat.is_dictionary(type) and type.index_type == index


INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
UNITS = ["s", "ms", "us", "ns"]
REACHABLE: dict[str, Callable[[pa.DataType], bool]] = {
    "null": pat.is_null,
    "bool": pat.is_boolean,
    **{str(t): _is(t) for t in INTEGERS},
    **{str(t): _is(t) for t in [pa.float16(), pa.float32(), pa.float64()]},
    "decimal32": pat.is_decimal32,
    "decimal64": pat.is_decimal64,
    "decimal128": pat.is_decimal128,
    "decimal256": pat.is_decimal256,
    "date32": pat.is_date32,
    "date64": pat.is_date64,
    **{str(t): _is(t) for t in [pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns")]},
    **{f"timestamp[{u}]": _timestamp(u, zoned=False) for u in UNITS},
    **{f"timestamp[{u}, tz]": _timestamp(u, zoned=True) for u in UNITS},
    **{f"duration[{u}]": _is(pa.duration(u)) for u in UNITS},
    "month_interval": _is(ags.month_interval()),
    "day_time_interval": _is(ags.day_time_interval()),
    "month_day_nano_interval": _is(pa.month_day_nano_interval()),
    "string": pat.is_string,
    "binary": pat.is_binary,
    "large_string": pat.is_large_string,
    "large_binary": pat.is_large_binary,
    "string_view": pat.is_string_view,
    "binary_view": pat.is_binary_view,
    "fixed_size_binary": pat.is_fixed_size_binary,
    "list": pat.is_list,
    "large_list": pat.is_large_list,
    "list_view": pat.is_list_view,
    "large_list_view": pat.is_large_list_view,
    "fixed_size_list": pat.is_fixed_size_list,
    "map": pat.is_map,
    "struct": pat.is_struct,
    "sparse_union": lambda type: pat.is_union(type) and type.mode == "sparse",
    "dense_union": lambda type: pat.is_union(type) and type.mode == "dense",
    **{f"dictionary<{t}>": _dictionary(t) for t in INTEGERS},
    "ordered dictionary": lambda type: pat.is_dictionary(type) and type.ordered,
    "unordered dictionary": lambda type: pat.is_dictionary(type) and not type.ordered,
    **{
        f"run_end_encoded<{t}>": lambda type, t=t: pat.is_run_end_encoded(type) and type.run_end_type == t
        for t in [pa.int16(), pa.int32(), pa.int64()]
    },
    "extension": lambda type: isinstance(type, ags.LabelledType),
}


@pytest.mark.parametrize("name", REACHABLE)
def test_data_types_reach_every_type(name: str) -> None:
    matches = REACHABLE[name]
    found = search(ags.data_types(), lambda type: any(map(matches, types_within(type))))
    assert any(map(matches, types_within(found)))


# What a top-level type of each family looks like; keys must cover ags.FAMILIES.
FAMILY_CHECKS: dict[str, Callable[[pa.DataType], bool]] = {
    "null": pat.is_null,
    "bool": pat.is_boolean,
    "integer": pat.is_integer,
    "floating": pat.is_floating,
    "decimal": pat.is_decimal,
    "date": pat.is_date,
    "time": pat.is_time,
    "timestamp": pat.is_timestamp,
    "duration": pat.is_duration,
    "month_interval": _is(ags.month_interval()),
    "day_time_interval": _is(ags.day_time_interval()),
    "month_day_nano_interval": _is(pa.month_day_nano_interval()),
    "string": pat.is_string,
    "large_string": pat.is_large_string,
    "string_view": pat.is_string_view,
    "binary": pat.is_binary,
    "large_binary": pat.is_large_binary,
    "binary_view": pat.is_binary_view,
    "fixed_size_binary": pat.is_fixed_size_binary,
    "dictionary": pat.is_dictionary,
    "extension": lambda type: isinstance(type, ags.LabelledType),
    "struct": pat.is_struct,
    "list": pat.is_list,
    "large_list": pat.is_large_list,
    "list_view": pat.is_list_view,
    "large_list_view": pat.is_large_list_view,
    "fixed_size_list": pat.is_fixed_size_list,
    "map": pat.is_map,
    "sparse_union": REACHABLE["sparse_union"],
    "dense_union": REACHABLE["dense_union"],
    "run_end_encoded": pat.is_run_end_encoded,
}
TOP_LEVEL_FAMILIES = sorted(set(ags.FAMILIES) - ags.OPAQUE_FAMILIES)


def test_family_checks_cover_every_family() -> None:
    assert set(FAMILY_CHECKS) == set(ags.FAMILIES)
    assert ags.OPAQUE_FAMILIES < set(ags.FAMILIES)


@pytest.mark.parametrize("family", TOP_LEVEL_FAMILIES)
@settings(max_examples=10)
@given(data=st.data())
def test_include_picks_the_top_level_family(family: str, data: st.DataObject) -> None:
    type = data.draw(ags.data_types(include={family}))
    assert FAMILY_CHECKS[family](type)


@given(ags.data_types())
def test_opaque_types_never_appear_at_the_top_level(type: pa.DataType) -> None:
    assert type not in (ags.month_interval(), ags.day_time_interval())


def test_opaque_types_are_rejected_as_array_types() -> None:
    with pytest.raises(InvalidArgument):
        find(ags.arrays(ags.month_interval()), lambda array: True)


@given(ags.data_types(exclude={"struct", "null"}, dictionary=False, extension=False))
def test_excluded_families_appear_nowhere(type: pa.DataType) -> None:
    for inner in types_within(type):
        assert not (pat.is_struct(inner) or pat.is_null(inner) or pat.is_dictionary(inner))
        assert not isinstance(inner, pa.BaseExtensionType)


@given(st.integers(0, 3).flatmap(lambda depth: st.tuples(st.just(depth), ags.data_types(max_depth=depth))))
def test_max_depth_bounds_nesting(depth_and_type: tuple[int, pa.DataType]) -> None:
    depth, type = depth_and_type
    assert nesting(type) <= depth


def test_max_depth_is_reached() -> None:
    assert nesting(search(ags.data_types(max_depth=3), lambda type: nesting(type) == 3)) == 3


@pytest.mark.parametrize(
    "kwargs",
    [{"include": {"no_such_family"}}, {"exclude": {"no_such_family"}}, {"max_depth": -1},
     {"include": {"month_interval"}}],
)
def test_data_types_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidArgument):
        ags.data_types(**kwargs)


# --- arrays ---


@given(ags.data_types(), st.integers(0, 12), st.data())
def test_arrays_are_valid_and_have_the_requested_type_and_size(
    type: pa.DataType, size: int, data: st.DataObject
) -> None:
    array = data.draw(ags.arrays(type, size=size))
    array.validate(full=True)
    assert array.type == type
    assert len(array) == size


@given(ags.arrays(min_size=3, max_size=6))
def test_array_sizes_stay_within_bounds(array: pa.Array) -> None:
    assert 3 <= len(array) <= 6


@given(ags.arrays(special_floats=False))
def test_arrays_round_trip_through_the_c_data_interface(array: pa.Array) -> None:
    # Not imported.validate(full=True): pyarrow's importer sizes the views buffer of an
    # empty view array at a non-zero offset as 0 bytes, which its own validation rejects.
    imported = pa.Array._import_from_c_capsule(*array.__arrow_c_array__())
    assert imported.type == array.type
    assert imported.equals(array)


@pytest.mark.parametrize("family", sorted(ags.OPAQUE_FAMILIES))
def test_opaque_types_appear_nested_in_valid_arrays(family: str) -> None:
    matches = FAMILY_CHECKS[family]
    array = search(ags.arrays(), lambda array: any(map(matches, types_within(array.type))))
    array.validate(full=True)
    imported = pa.Array._import_from_c_capsule(*array.__arrow_c_array__())
    assert imported.equals(array)


def test_sliced_bitmaps_start_at_odd_bit_offsets() -> None:
    array = search(ags.arrays(pa.int32()), lambda a: a.offset % 2 == 1 and a.null_count > 0)
    assert array.offset % 2 == 1
    assert array.buffers()[0] is not None


def test_children_are_sliced_too() -> None:
    array = search(ags.arrays(pa.list_(pa.int8())), lambda a: a.values.offset > 0)
    assert array.values.offset > 0


@given(ags.arrays(ags.data_types(max_depth=1, exclude=ags.OPAQUE_FAMILIES), sliced=False))
def test_unsliced_arrays_have_no_offsets(array: pa.Array) -> None:
    assert all(node.offset == 0 for node in nodes(array) if not pat.is_map(node.type))


@given(ags.arrays(ags.data_types(exclude={"null", *ags.OPAQUE_FAMILIES}), null_density=0))
def test_zero_null_density_gives_no_nulls(array: pa.Array) -> None:
    assert all(node.null_count == 0 for node in nodes(array))


@given(ags.arrays(ags.data_types(max_depth=0), min_size=1, null_density=1))
def test_full_null_density_gives_only_nulls(array: pa.Array) -> None:
    assert array.null_count == len(array)


def test_null_density_in_between_mixes_nulls_and_values() -> None:
    search(ags.arrays(pa.int8(), null_density=0.5), lambda a: 0 < a.null_count < len(a))


@given(ags.arrays(ags.data_types(exclude={"null", *ags.OPAQUE_FAMILIES}), nullable=False))
def test_non_nullable_arrays_have_no_logical_nulls(array: pa.Array) -> None:
    assert has_no_logical_nulls(array)


@pytest.mark.parametrize("type", [pa.string_view(), pa.binary_view()])
def test_views_mix_inline_and_out_of_line_values(type: pa.DataType) -> None:
    def sizes(array: pa.Array) -> set[bool]:
        values = [v.encode() if isinstance(v, str) else v for v in array.to_pylist() if v is not None]
        return {len(value) <= VIEW_INLINE_LIMIT for value in values}

    array = search(ags.arrays(type), lambda a: sizes(a) == {True, False})
    assert len(array.buffers()) > 2  # validity, views, and at least one variadic buffer


@given(ags.arrays(ags.data_types(include={"decimal"}, max_depth=0)))
def test_decimals_fit_their_precision_and_scale(array: pa.Array) -> None:
    for value in array.to_pylist():
        if value is not None:
            sign, digits, exponent = value.as_tuple()
            assert exponent == -array.type.scale
            assert len(digits) <= array.type.precision


@given(ags.arrays(ags.data_types(include={"floating"}, max_depth=0), special_floats=False))
def test_special_floats_can_be_turned_off(array: pa.Array) -> None:
    assert all(math.isfinite(v) for v in array.to_pylist() if v is not None)


def test_special_floats_are_generated_by_default() -> None:
    search(ags.arrays(pa.float64()), lambda a: any(v is not None and math.isnan(v) for v in a.to_pylist()))


@pytest.mark.parametrize(
    "kwargs",
    [{"null_density": 1.5}, {"min_size": 5, "max_size": 2}, {"type": "int32"}],
)
def test_arrays_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidArgument):
        ags.arrays(**kwargs)


# --- chunked arrays, record batches and tables ---


@given(ags.chunked_arrays(min_size=1, max_size=15, min_chunks=2, max_chunks=3))
def test_chunked_arrays_are_valid(chunked: pa.ChunkedArray) -> None:
    chunked.validate(full=True)
    assert 1 <= len(chunked) <= 15
    assert 2 <= chunked.num_chunks <= 3
    assert all(chunk.type == chunked.type for chunk in chunked.chunks)


def test_chunked_arrays_may_have_no_chunks() -> None:
    assert search(ags.chunked_arrays(pa.int8()), lambda c: c.num_chunks == 0).num_chunks == 0


@given(ags.record_batches(ags.schemas(PYTHON_WRAPPABLE)))
def test_record_batches_are_consistent(batch: pa.RecordBatch) -> None:
    batch.validate(full=True)
    assert len(set(batch.schema.names)) == batch.num_columns
    for field, column in zip(batch.schema, batch.columns):
        assert column.type == field.type
        assert len(column) == batch.num_rows
        assert field.nullable or has_no_logical_nulls(column)
    imported = pa.RecordBatch._import_from_c_capsule(*batch.__arrow_c_array__())
    assert imported.schema == batch.schema


SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("tags", pa.list_(pa.string()))],
    metadata={"origin": "test"},
)


@given(ags.record_batches(SCHEMA, size=5))
def test_record_batches_follow_a_given_schema(batch: pa.RecordBatch) -> None:
    assert batch.schema.equals(SCHEMA, check_metadata=True)
    assert batch.num_rows == 5


@given(ags.record_batches(pa.schema([]), size=3))
def test_record_batches_without_columns_keep_their_rows(batch: pa.RecordBatch) -> None:
    assert batch.num_columns == 0 and batch.num_rows == 3


@given(ags.tables(ags.schemas(PYTHON_WRAPPABLE, min_columns=1)))
def test_tables_are_consistent(table: pa.Table) -> None:
    table.validate(full=True)
    for field, column in zip(table.schema, table.columns):
        assert column.type == field.type
        assert len(column) == table.num_rows
        assert field.nullable or all(map(has_no_logical_nulls, column.chunks))


def test_table_columns_are_chunked_independently() -> None:
    def layouts(table: pa.Table) -> set[tuple[int, ...]]:
        return {tuple(len(chunk) for chunk in column.chunks) for column in table.columns}

    table = search(ags.tables(min_columns=2, min_size=2), lambda t: len(layouts(t)) > 1)
    assert len(layouts(table)) > 1


# --- extension type ---


def test_extension_registration_is_idempotent() -> None:
    ags.register_extension_types()
    ags.register_extension_types()
    array = pa.ExtensionArray.from_storage(ags.LabelledType(pa.int16(), "°C"), pa.array([1, None], pa.int16()))
    imported = pa.Array._import_from_c_capsule(*array.__arrow_c_array__())
    assert imported.type == array.type
    assert imported.type.label == "°C"


def test_extension_label_takes_part_in_equality() -> None:
    assert ags.LabelledType(pa.int8(), "a") == ags.LabelledType(pa.int8(), "a")
    assert ags.LabelledType(pa.int8(), "a") != ags.LabelledType(pa.int8(), "b")
    assert ags.LabelledType(pa.int8(), "a") != ags.LabelledType(pa.int16(), "a")


# --- devices (no GPU: the device count is faked) ---


class FakeContext:
    count = 3

    @staticmethod
    def get_num_devices() -> int:
        return FakeContext.count


def test_devices_draws_every_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_gpu, "Context", FakeContext, raising=False)
    seen = set()
    find(ags.devices(), lambda device: seen.add(device) or seen == {0, 1, 2}, settings=SEARCH)
    assert seen == {0, 1, 2}


def test_devices_without_a_device_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_gpu, "Context", FakeContext, raising=False)
    monkeypatch.setattr(FakeContext, "count", 0)
    with pytest.raises(InvalidArgument):
        find(ags.devices(), lambda device: True)


# --- profiles ---


@pytest.fixture
def restore_profile() -> Iterator[None]:
    previous = settings.default
    yield
    settings.register_profile("restored_after_test", previous)
    settings.load_profile("restored_after_test")


@pytest.mark.parametrize(("env", "expected"), [(None, "quick"), ("ci", "ci"), ("gpu", "gpu"),
                                                   ("thorough", "thorough")])
def test_load_profile_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, restore_profile: None, env: str | None, expected: str
) -> None:
    if env is None:
        monkeypatch.delenv(profiles.PROFILE_ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(profiles.PROFILE_ENV_VAR, env)
    assert profiles.load_profile() == expected
    assert settings.default.max_examples == profiles.PROFILES[expected].max_examples
    assert settings.default.print_blob


def test_profiles_have_their_documented_sizes() -> None:
    quick, ci = profiles.PROFILES["quick"], profiles.PROFILES["ci"]
    assert quick.derandomize and ci.derandomize
    assert quick.max_examples < ci.max_examples <= 100
    assert profiles.PROFILES["gpu"].max_examples > profiles.PROFILES["ci"].max_examples
    assert profiles.PROFILES["thorough"].max_examples == 10_000
    assert all(profile.print_blob for profile in profiles.PROFILES.values())


def test_unknown_profile_is_an_error(restore_profile: None) -> None:
    with pytest.raises(InvalidArgument):
        profiles.load_profile("no_such_profile")


def test_every_public_name_is_served_by_the_strategies_module() -> None:
    # The strategies are built in private sibling modules; the public module keeps them all.
    missing = [name for name in ags.__all__ if not hasattr(ags, name)]
    assert not missing, missing
