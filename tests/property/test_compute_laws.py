"""arrow_gpu.compute gives, on the device, what pyarrow.compute gives on the host.

Every function is compared with pyarrow for every type family (on the simulator the
kernels' host twins run). Where pyarrow itself cannot (take of views, run-end encoded
data), the device result is compared with the rows picked in Python, or must raise
NotImplementedError as pyarrow does.
"""

from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import assume, given, strategies as st

from arrow_gpu import compute
from arrow_gpu._compute import concat as _device_concat
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer import to_device, to_host
from _arrow_samples import assert_identical, same_rows, _value, _values
from _compute_helpers import assert_known_null_counts, drop_null_on_host, filter_on_host

ags.register_extension_types()
TOP_FAMILIES = [f for f in ags.FAMILIES if f not in ags.OPAQUE_FAMILIES]
# compute.py reaches children from Python, where pyarrow cannot wrap these (a known gap).
NO_OPAQUE = ags.OPAQUE_FAMILIES
# What the kernels do not do yet, and say so (pyarrow does them on the host).
GAPS = ("run-end encoded",)  # take, filter and fill_null of it


@pytest.fixture(autouse=True, scope="module")
def _kernels_loaded():
    """The kernels compiled (or read from the disk cache) and loaded before the first example:
    a first call's compile of seconds would break Hypothesis's per-example deadline."""
    compute.null_count(to_device(pa.array([1, None])))


def _arrays(type=None, **kwargs):
    types = ags.data_types(exclude=NO_OPAQUE) if type is None else type
    return ags.arrays(types, special_floats=False, max_size=12, **kwargs)


def _check(device_result, host_result, rows):
    """Compare a device result with pyarrow's (or, where pyarrow raised
    NotImplementedError, with the scalars ``rows()`` picks)."""
    try:
        expected = host_result()
    except pa.ArrowNotImplementedError:
        expected = None
    if expected is None:
        try:
            got = device_result()
        except NotImplementedError:
            return  # neither can
        assert_known_null_counts(got)
        back = to_host(got)
        back.validate(full=True)
        expected_rows = rows()
        if expected_rows is not None:  # None: the other tests check these rows
            # or the same values: the device lays differing dictionaries end to end, and a
            # dictionary's scalars compare their dictionaries too
            assert (list(back) == expected_rows
                    or _values(back) == [[_value(row) for row in expected_rows]])
        return
    try:
        got = device_result()
    except NotImplementedError as error:  # the documented gaps of the kernels
        assert any(gap in str(error) for gap in GAPS), error
        return
    assert_known_null_counts(got)
    if isinstance(got, (pa.Array, pa.ChunkedArray, pa.RecordBatch)):
        back = to_host(got)
        back.validate(full=True)
        if not same_rows(back, expected):  # else the same bits (NaN too) at least
            assert_identical(got, expected)
        return
    back = to_host(got)  # a Table
    back.validate(full=True)
    assert back.schema == expected.schema
    assert same_rows(back, expected)


def _null(array):
    return pa.nulls(1, array.type)[0]


@st.composite
def _indices(draw, length):
    positions = st.integers(0, length - 1) if length else st.nothing()
    values = draw(st.lists(st.one_of(st.none(), positions) if length else st.none(),
                           max_size=12))
    return pa.array(values, draw(st.sampled_from([pa.int64(), pa.int32(), pa.uint16()])))


@pytest.mark.parametrize("family", TOP_FAMILIES)
@given(data=st.data())
def test_take_matches_pyarrow(family, data):
    array = data.draw(_arrays(ags.data_types(include={family}, exclude=NO_OPAQUE, max_depth=1)))
    indices = data.draw(_indices(len(array)))
    _check(lambda: compute.take(to_device(array), to_device(indices)),
           lambda: pc.take(array, indices),
           lambda: [_null(array) if i is None else array[i] for i in indices.to_pylist()])


@given(data=st.data(), behaviour=st.sampled_from(["drop", "emit_null"]))
def test_filter_matches_pyarrow(data, behaviour):
    array = data.draw(_arrays())
    mask = data.draw(_arrays(pa.bool_(), size=len(array)))

    def rows():
        picked = zip(array, mask.to_pylist())
        return [v if m else _null(array) for v, m in picked
                if m or (m is None and behaviour == "emit_null")]

    _check(lambda: compute.filter(to_device(array), to_device(mask),
                                  null_selection_behavior=behaviour),
           lambda: filter_on_host(array, mask, null_selection_behavior=behaviour), rows)


@given(data=st.data())
def test_concat_matches_pyarrow(data):
    type = data.draw(ags.data_types(exclude=ags.OPAQUE_FAMILIES))
    parts = data.draw(st.lists(_arrays(type), min_size=1, max_size=3))

    def device():
        got = compute.concat([to_device(part) for part in parts])
        assert got.type == type  # the parts' type, nested dictionaries' included
        return got

    def host():
        expected = pa.concat_arrays(parts)
        try:
            expected.validate(full=True)
        except pa.ArrowInvalid:  # pyarrow's builders retype some empty nested dictionaries
            return None  # (pyarrow 25): the device's rows are compared instead
        # pyarrow drops `ordered` of some dictionaries nested in runs (as in unions, below).
        return expected if expected.type == type else None

    _check(device, host, lambda: [v for part in parts for v in part])


@given(data=st.data())
def test_slice_matches_pyarrow(data):
    array = data.draw(_arrays())
    offset = data.draw(st.integers(0, len(array)))
    length = data.draw(st.integers(0, len(array) - offset))
    _check(lambda: compute.slice(to_device(array), offset, length),
           lambda: array.slice(offset, length), lambda: None)


@given(array=_arrays())
def test_null_functions_match_pyarrow(array):
    device = to_device(array)
    assert compute.null_count(device) == array.null_count
    for name in ("is_null", "is_valid"):
        _check(lambda: getattr(compute, name)(device), lambda: getattr(pc, name)(array),
               lambda: None)
    _check(lambda: compute.drop_null(device), lambda: drop_null_on_host(array),
           lambda: [value for value in array if value.is_valid])


FILLABLE = ags.data_types(include={"bool", "integer", "floating", "decimal", "date", "time",
                                   "timestamp", "duration", "string", "large_string",
                                   "binary", "large_binary", "fixed_size_binary"})


@given(data=st.data())
def test_fill_null_matches_pyarrow(data):
    array = data.draw(_arrays(FILLABLE))
    scalars = [value for value in array if value.is_valid]
    assume(scalars)
    fill = data.draw(st.sampled_from(scalars))
    # pyarrow widens decimal32/64 to decimal128 here; arrow_gpu keeps the type.
    _check(lambda: compute.fill_null(to_device(array), fill),
           lambda: pc.fill_null(array, fill).cast(array.type), lambda: None)


@given(data=st.data())
def test_tables_match_pyarrow(data):
    types = ags.data_types(exclude=ags.OPAQUE_FAMILIES | {"run_end_encoded"})
    table = data.draw(ags.tables(ags.schemas(types), max_size=8, special_floats=False))
    n = table.num_rows
    indices = data.draw(_indices(n))
    mask = data.draw(_arrays(pa.bool_(), size=n))
    offset = data.draw(st.integers(0, n))
    device = to_device(table)
    _check(lambda: compute.take(device, to_device(indices)), lambda: table.take(indices),
           lambda: None)
    _check(lambda: compute.filter(device, to_device(mask)), lambda: table.filter(mask),
           lambda: None)
    _check(lambda: compute.slice(device, offset), lambda: table.slice(offset),
           lambda: None)
    _check(lambda: compute.drop_null(device), lambda: drop_null_on_host(table), lambda: None)
    _check(lambda: compute.combine_chunks(device), lambda: table.combine_chunks(),
           lambda: None)
    _check(lambda: compute.concat([device, device]),
           lambda: pa.concat_tables([table, table]).combine_chunks(), lambda: None)


@given(data=st.data())
def test_tables_concatenated_column_by_column_match_pyarrow(data):
    # Each column launched as soon as it is planned (as large columns are), the offsets'
    # columns first: the same tables and null counts as one launch gives.
    types = ags.data_types(exclude=ags.OPAQUE_FAMILIES)
    table = data.draw(ags.tables(ags.schemas(types), max_size=8, special_floats=False))
    parts = [table.slice(0, data.draw(st.integers(0, table.num_rows))), table]
    # Chunked: pyarrow 25 cannot concatenate run-end encoded extension values on the host,
    # and the comparison looks through chunks.
    expected = pa.concat_tables(parts)
    with mock.patch.object(_device_concat, "LAUNCH_BYTES", 1):
        try:
            got = compute.concat([to_device(part) for part in parts])
        except NotImplementedError as error:  # the documented gaps of the kernels
            assert any(gap in str(error) for gap in GAPS), error
            return
    back = to_host(got)
    back.validate(full=True)
    assert same_rows(back, expected)
    # the counts of each launch, which validate does not check
    assert [c.null_count for c in back.columns] == [c.null_count for c in expected.columns]


@pytest.mark.parametrize("family", TOP_FAMILIES)
@given(data=st.data())
def test_fill_null_gives_valid_arrays_of_every_family(family, data):
    # Sliced lists of nulls, fixed-size lists of run-end encoded values, unions whose
    # nulls are their children's: each result is valid, and equals pyarrow's where it fills.
    array = data.draw(_arrays(ags.data_types(include={family}, exclude=NO_OPAQUE)))
    scalars = [value for value in array if value.is_valid]
    fill = data.draw(st.sampled_from(scalars)) if scalars else pa.nulls(1, array.type)[0]
    try:
        expected = pc.fill_null(array, fill)
        expected.validate(full=True)
    except pa.ArrowNotImplementedError:  # views, extensions, lists of nulls, ...
        expected = None
    except pa.ArrowInvalid:  # pyarrow's own result (lists of extensions of views)
        expected = None
    try:
        got = compute.fill_null(to_device(array), fill)
    except NotImplementedError as error:  # pyarrow's own, or a documented gap
        assert expected is None or any(gap in str(error) for gap in FILL_GAPS), error
        return
    assert_known_null_counts(got)
    back = to_host(got)
    back.validate(full=True)
    if expected is None:
        return
    if not expected.type.equals(back.type):
        try:
            expected = expected.cast(back.type)
        except pa.ArrowNotImplementedError:
            # pyarrow 23 drops a dictionary's `ordered` inside a union and cannot cast it
            # back: the values must agree.
            assert _values(back) == _values(expected)
            return
    # pyarrow may lay out a dictionary (at any depth) otherwise, and give a null union value
    # another type code: equal values.
    assert same_rows(back, expected)


FILL_GAPS = GAPS + ("run_end_encoded", "makes no array equal to it")
