"""arrow_gpu.compute on dictionary arrays of different dictionaries and on run-end encoded
data, against pyarrow.compute on host copies.

Where pyarrow lays a dictionary out otherwise (it re-encodes fill_null's result and unifies
concatenated dictionaries; the device appends the fill value and puts dictionaries one after
another), the results are compared by type and by their decoded values. Run-end encoded
results compare with ``equals``, which pyarrow answers by the rows' values, whatever runs
hold them.
"""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from arrow_gpu import compute
from arrow_gpu.transfer import to_device, to_host


def _dictionary(indices, values, index_type=pa.int8(), ordered=False):
    return pa.DictionaryArray.from_arrays(pa.array(indices, index_type), pa.array(values),
                                          ordered=ordered)


def _decoded(array):
    return array.dictionary.take(array.indices)


def _assert_same_rows(got, expected):
    """Same type, same decoded values (and valid): what the device result must share with
    pyarrow's, whose dictionary is laid out otherwise."""
    back = to_host(got)
    back.validate(full=True)
    if pa.types.is_dictionary(expected.type):
        assert back.type == expected.type
        expected = _decoded(expected)
    else:  # pyarrow 25 decodes some fills; the device keeps the type, as pyarrow 26 does
        assert pa.types.is_dictionary(back.type) and back.type.value_type == expected.type
    assert _decoded(back).equals(expected)


# -- fill_null of dictionary arrays ----------------------------------------------------

FILLED = {
    "value in the dictionary": (_dictionary([0, None, 1, None], ["a", "b"]), "b"),
    "value not in it": (_dictionary([0, None, 1, None], ["a", "b"]), "z"),
    "sliced": (_dictionary([0, None, 1, None, 0], ["a", "b"]).slice(1, 3), "z"),
    "no nulls": (_dictionary([0, 1], ["a", "b"]), "z"),
    "empty": (_dictionary([], ["a"]), "z"),
    "null dictionary value": (_dictionary([0, None, 1], ["a", None]), "q"),
    "unsigned indices": (_dictionary([1, None], [1.5, 2.5], pa.uint8()), 9.5),
    "null fill value": (_dictionary([None, 0], ["a"]), None),
    "dictionary scalar": (_dictionary([None, 0], ["a"]),
                          pa.scalar("c", pa.dictionary(pa.int8(), pa.string()))),
}


@pytest.mark.parametrize("name", FILLED)
def test_fill_null_of_dictionaries_gives_pyarrows_rows(name):
    host, fill = FILLED[name]
    expected = pc.fill_null(host, fill)
    _assert_same_rows(compute.fill_null(to_device(host), fill), expected)


def test_fill_null_of_chunked_dictionaries():
    host = pa.chunked_array([_dictionary([None, 1], ["a", "b"]), _dictionary([], ["c"]),
                             _dictionary([0, None], ["c"])])
    got = to_host(compute.fill_null(to_device(host), "b"))
    expected = pc.fill_null(host, "b")
    assert got.type == expected.type
    assert got.cast(pa.string()).equals(expected.cast(pa.string()))


def test_fill_null_of_a_full_dictionary_names_the_wider_type():
    # pyarrow re-encodes the filled values (here into 2); the device appends the fill
    # value, which int8 indices cannot reach past 127 values: a clear refusal.
    host = _dictionary([0, None], [str(i) for i in range(128)])
    with pytest.raises(OverflowError, match="wider indices"):
        compute.fill_null(to_device(host), "new")
    # One value fewer leaves room for it.
    roomy = _dictionary([0, None], [str(i) for i in range(127)])
    _assert_same_rows(compute.fill_null(to_device(roomy), "new"), pc.fill_null(roomy, "new"))


# -- concatenation of different dictionaries -------------------------------------------

CONCATENATED = {
    "different values": [_dictionary([1, 0, None], ["a", "b"]), _dictionary([0, 1], ["c", "a"])],
    "sliced": [_dictionary([1, 0, None, 1], ["a", "b"]).slice(1, 2),
               _dictionary([0, 1, 1], ["c", "a"]).slice(2)],
    "an empty part": [_dictionary([], [0.5]), _dictionary([0], [1.5])],
    "three, uint16": [_dictionary([2, 0], ["x", "y", "z"], pa.uint16()),
                      _dictionary([None], ["q"], pa.uint16()),
                      _dictionary([0, 0], ["y"], pa.uint16())],
    "ordered": [_dictionary([0], ["a"], ordered=True), _dictionary([0], ["b"], ordered=True)],
    "lists of values": [pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()),
                                                       pa.array([[1], [2, 3]])),
                        pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int8()),
                                                       pa.array([[4, None]]))],
}


@pytest.mark.parametrize("index_type", [pa.uint8(), pa.uint64(), pa.int16()])
def test_drop_null_keeps_the_index_type_when_every_row_drops(index_type):
    # pyarrow 25 makes unsigned indices signed here; pyarrow 26 keeps them, as we do.
    host = pa.DictionaryArray.from_arrays(pa.array([None, None, None], index_type),
                                          pa.array(["a", "b"]))
    dropped = to_host(compute.drop_null(to_device(host)))
    assert dropped.type == host.type and len(dropped) == 0
    kept = pa.DictionaryArray.from_arrays(pa.array([1, None, 0], index_type), pa.array(["a", "b"]))
    assert to_host(compute.drop_null(to_device(kept))) == pc.drop_null(kept)


@pytest.mark.parametrize("name", CONCATENATED)
def test_concat_of_different_dictionaries_gives_pyarrows_rows(name):
    parts = CONCATENATED[name]
    try:
        expected = pa.concat_arrays(parts)
    except pa.ArrowNotImplementedError:  # pyarrow unifies no dictionaries of lists
        expected = pa.DictionaryArray.from_arrays(
            pa.array(range(sum(map(len, parts))), parts[0].type.index_type),
            pa.concat_arrays([_decoded(part) for part in parts]))
    _assert_same_rows(compute.concat([to_device(part) for part in parts]), expected)
    _assert_same_rows(compute.combine_chunks(to_device(pa.chunked_array(parts))), expected)


def test_tables_of_different_dictionaries_combine():
    parts = CONCATENATED["different values"]
    host = pa.table({"d": pa.chunked_array(parts), "x": pa.chunked_array([[1, 2, 3], [4, 5]])})
    got = to_host(compute.combine_chunks(to_device(host)))
    expected = host.combine_chunks()
    assert got.schema == expected.schema
    assert got["d"].cast(pa.string()).equals(expected["d"].cast(pa.string()))
    assert got["x"].equals(expected["x"])
    # Taking rows of chunks of different dictionaries combines them first.
    picked = to_host(compute.take(to_device(host), to_device(pa.array([4, 0, None]))))
    assert picked["d"].cast(pa.string()).equals(
        expected.take(pa.array([4, 0, None]))["d"].cast(pa.string()))


def test_concat_past_the_index_type_is_refused_clearly():
    big = [_dictionary([0, 99], [f"{p}{i}" for i in range(100)]) for p in "ab"]
    with pytest.raises(pa.ArrowInvalid):  # pyarrow: the unified dictionary is too large
        pa.concat_arrays(big)
    with pytest.raises(OverflowError, match="wider indices"):
        compute.concat([to_device(part) for part in big])
    # Overlapping dictionaries: pyarrow unifies them into 101 values, the device lays
    # them end to end (200), past what int8 indices address.
    overlapping = [_dictionary([0], [str(i) for i in range(start, start + 100)])
                   for start in (0, 1)]
    assert len(pa.concat_arrays(overlapping).dictionary) == 101
    with pytest.raises(OverflowError, match="without unifying"):
        compute.concat([to_device(part) for part in overlapping])


# -- run-end encoded data --------------------------------------------------------------

def _runs(ends, values, run_end_type=pa.int32()):
    return pa.RunEndEncodedArray.from_arrays(pa.array(ends, run_end_type), values)


RUNS = {
    "nulls": _runs([2, 4, 6], [1, None, 3]),
    "int16 run ends, sliced": _runs([2, 4, 6, 9], ["a", None, "c", None], pa.int16()).slice(3, 5),
    "int64 run ends, sliced in a run": _runs([5, 6], [None, 2.5], pa.int64()).slice(1, 2),
    "no nulls": _runs([1, 3], [True, False]),
    "empty": _runs([], pa.array([], pa.int8())),
    "null values": _runs([1, 3], pa.nulls(2)),
    "dictionary values": _runs([1, 3], _dictionary([0, None], [None])),
    "list values": _runs([2, 3], pa.array([[1, None], None])),
}


@pytest.mark.parametrize("name", RUNS)
def test_nulls_of_run_end_encoded_data_are_pyarrows(name):
    host = RUNS[name]
    data = to_device(host)
    for function in ("is_null", "is_valid"):
        got = to_host(getattr(compute, function)(data))
        assert got.equals(getattr(pc, function)(host)), function
    assert compute.null_count(data) == host.null_count
    chunked = pa.chunked_array([host, host.slice(1)])
    assert to_host(compute.is_null(to_device(chunked))).equals(pc.is_null(chunked))


@pytest.mark.parametrize("name", RUNS)
def test_concat_of_run_end_encoded_data_is_pyarrows(name):
    host = RUNS[name]
    parts = [host, host.slice(1), host.slice(0, 0), host.slice(len(host) // 2, 1)]
    got = to_host(compute.concat([to_device(part) for part in parts]))
    got.validate(full=True)
    combined = to_host(compute.combine_chunks(to_device(pa.chunked_array(parts))))
    try:
        expected = pa.concat_arrays(parts)
    except pa.ArrowNotImplementedError:  # pyarrow 26 concatenates no runs of dictionaries
        rows = [row for part in parts for row in part.to_pylist()]
        assert got.type == combined.type == host.type
        assert got.to_pylist() == combined.to_pylist() == rows
        return
    assert got.equals(expected)
    assert combined.equals(expected)


@pytest.mark.parametrize("index_type", [pa.int8(), pa.uint64()])
def test_runs_without_rows_keep_their_dictionary_type(index_type):
    # pyarrow's own empty array of this type (pa.nulls(0, type)) has int64 indices under
    # pyarrow 25, under a type that says uint64: an array that fails validation.
    type = pa.run_end_encoded(pa.int16(), pa.dictionary(index_type, pa.int32(), ordered=True))
    dictionary = pa.DictionaryArray.from_arrays(pa.array([], index_type), pa.array([7], pa.int32()),
                                                ordered=True)
    part = pa.RunEndEncodedArray.from_arrays(pa.array([], pa.int16()), dictionary, type=type)
    for got in (compute.concat([to_device(part)]), compute.concat([to_device(part)] * 2),
                compute.combine_chunks(to_device(pa.chunked_array([], type)))):
        back = to_host(got)
        back.validate(full=True)
        assert back.type == type and back.values.type == type.value_type and len(back) == 0


def test_lists_of_runs_without_chunks_combine_to_a_valid_empty_array():
    # pyarrow's empty arrays of such types (pa.nulls) give the run-end encoded child a
    # validity bitmap, which validation refuses.
    runs = pa.run_end_encoded(pa.int16(), pa.null())
    type = pa.list_(pa.field("item", runs, nullable=False))
    for got in (compute.combine_chunks(to_device(pa.chunked_array([], type))),
                compute.concat([to_device(pa.chunked_array([], type))] * 2)):
        back = to_host(got)
        back.validate(full=True)
        assert back.type == type and len(back) == 0


def test_slices_and_tables_of_run_end_encoded_data():
    host = pa.table({"r": pa.chunked_array([RUNS["nulls"], RUNS["nulls"].slice(2)]),
                     "x": pa.chunked_array([list(range(6)), [None, 1, 2, 3]])})
    data = to_device(host)
    assert to_host(compute.slice(data, 3, 5)).equals(host.slice(3, 5))
    assert to_host(compute.combine_chunks(data)).equals(host.combine_chunks())
    assert to_host(compute.concat([data, data])).equals(pa.concat_tables([host, host]))


def test_run_end_encoded_lengths_past_the_run_end_type_are_refused_as_pyarrow_does():
    host = _runs([30000], [1], pa.int16())
    with pytest.raises(pa.ArrowInvalid):
        pa.concat_arrays([host, host])
    with pytest.raises(OverflowError, match="int32 or int64 run ends"):
        compute.concat([to_device(host), to_device(host)])


def test_drop_null_keeps_run_end_encoded_data_as_pyarrow_does():
    # pyarrow reads no nulls of run-end encoded data (it has no bitmap) and keeps it whole.
    host = RUNS["nulls"]
    assert to_host(compute.drop_null(to_device(host))).equals(pc.drop_null(host))
    batch = pa.record_batch({"r": host, "x": list(range(6))})
    assert to_host(compute.drop_null(to_device(batch))).equals(pc.drop_null(batch))


@pytest.mark.parametrize("operation", ["take", "filter", "fill_null", "drop_null"])
def test_what_pyarrow_cannot_do_with_runs_is_refused_with_the_way_out(operation):
    host = pa.record_batch({"r": RUNS["nulls"], "x": [1, None, 3, 4, 5, 6]})
    calls = {
        "take": (lambda d: pc.take(d, pa.array([0])),
                 lambda d: compute.take(d, to_device(pa.array([0])))),
        "filter": (lambda d: pc.filter(d, pa.array([True] * 6)),
                   lambda d: compute.filter(d, to_device(pa.array([True] * 6)))),
        "fill_null": (lambda d: pc.fill_null(d["r"], 0),
                      lambda d: compute.fill_null(d["r"], 0)),
        "drop_null": (pc.drop_null, compute.drop_null),
    }
    on_host, on_device = calls[operation]
    with pytest.raises(pa.ArrowNotImplementedError):
        on_host(host)
    with pytest.raises(NotImplementedError, match="run_end_decode"):
        on_device(to_device(host))
