"""Hand-picked arrays of every Arrow type, with nulls, slices and odd bit offsets."""

import decimal

import pyarrow as pa

from arrow_gpu.testing import strategies as ags


def _union(mode):
    types = pa.array([0, 1, 0, 1, 0], pa.int8())
    if mode == "sparse":
        return pa.UnionArray.from_sparse(types, [pa.array([1, None, 3, 4, 5]), pa.array(["a", "b", None, "d", "e"])])
    offsets = pa.array([0, 0, 1, 1, 2], pa.int32())
    return pa.UnionArray.from_dense(types, offsets, [pa.array([1, None, 3]), pa.array(["x", None])])


def samples(sliced=True):
    """(id, array) pairs; each array is sliced at an odd offset unless ``sliced`` is False."""
    ags.register_extension_types()
    dec = [decimal.Decimal("1.5"), None, decimal.Decimal("-2.25"), decimal.Decimal("3"), None]
    long_text = ["short", None, "a string longer than twelve", "", "x" * 30]
    out = {
        "null": pa.nulls(5),
        "bool": pa.array([True, None, False, True, False, None, True, True, False, True]),
        "int8": pa.array([1, None, -3, 4, 5], pa.int8()),
        "uint64": pa.array([1, None, 2**64 - 1, 0, 7], pa.uint64()),
        "float16": pa.array([1.5, None, -2.0, 0.25, 8.0], pa.float16()),
        "float64": pa.array([1.5, None, float("nan"), float("inf"), 0.0]),
        "decimal32": pa.array(dec, pa.decimal32(5, 2)),
        "decimal64": pa.array(dec, pa.decimal64(12, 2)),
        "decimal128": pa.array(dec, pa.decimal128(20, 2)),
        "decimal256": pa.array(dec, pa.decimal256(40, 2)),
        "date32": pa.array([1, None, 3, 4, 5], pa.date32()),
        "time64": pa.array([1, None, 3, 4, 5], pa.time64("ns")),
        "timestamp_tz": pa.array([1, None, 3, 4, 5], pa.timestamp("us", tz="Europe/Paris")),
        "duration": pa.array([1, None, 3, 4, 5], pa.duration("ms")),
        "interval_mdn": pa.array([(1, 2, 3), None, (4, 5, 6), (0, 0, 0), (7, 8, 9)], pa.month_day_nano_interval()),
        "string": pa.array(long_text),
        "large_binary": pa.array([b"a", None, b"bc", b"", b"d"], pa.large_binary()),
        "fixed_binary": pa.array([b"ab", None, b"cd", b"ef", b"gh"], pa.binary(2)),
        "string_view": pa.array(long_text, pa.string_view()),
        "binary_view": pa.array([t.encode() if t is not None else None for t in long_text], pa.binary_view()),
        "list": pa.array([[1, None], None, [], [3], [4, 5]], pa.list_(pa.int32())),
        "large_list": pa.array([["a"], None, [], ["b", None], ["c"]], pa.large_list(pa.string())),
        "list_view": pa.array([[1, None], None, [], [3], [4, 5]], pa.list_view(pa.int16())),
        "fixed_size_list": pa.array([[1, 2], None, [3, None], [5, 6], [7, 8]], pa.list_(pa.int8(), 2)),
        "map": pa.array([[("k", 1)], None, [], [("a", None), ("b", 2)], [("c", 3)]], pa.map_(pa.string(), pa.int64())),
        "struct": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}, {"x": 4, "y": None}, {"x": 5, "y": "e"}]),
        "sparse_union": _union("sparse"),
        "dense_union": _union("dense"),
        "dictionary": pa.array(["a", "b", None, "a", "c"]).dictionary_encode(),
        "run_end_encoded": pa.RunEndEncodedArray.from_arrays([2, 3, 5], pa.array([1, None, 3])),
        "extension": pa.ExtensionArray.from_storage(ags.LabelledType(pa.int32(), "tag"), pa.array([1, None, 3, 4, 5], pa.int32())),
    }
    return [(name, array.slice(1) if sliced else array) for name, array in out.items()]


def _ipc_bytes(data):
    batch = data if isinstance(data, pa.RecordBatch) else pa.record_batch([data], names=["a"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def assert_identical(result, expected):
    """``result`` (on any device) holds exactly ``expected``: same type, same bits (NaN too)."""
    back = result.copy_to(pa.default_cpu_memory_manager())
    back.validate(full=True)
    assert back.type == expected.type if hasattr(expected, "type") else back.schema == expected.schema
    assert len(back) == len(expected)
    # equals() says NaN != NaN; IPC bytes can differ in bitmaps a slice does not reach.
    assert back.equals(expected) or _ipc_bytes(back) == _ipc_bytes(expected) \
        or _listing(back) == _listing(expected)


def _listing(data) -> list[str]:
    """Every value, printed by Arrow (NaN prints as NaN; Python objects cannot hold some values,
    e.g. nanosecond times of day without pandas)."""
    columns = data.columns if isinstance(data, (pa.RecordBatch, pa.Table)) else [data]
    return [column.to_string(window=1 << 30, container_window=1 << 30) for column in columns]


def _values(data) -> list:
    """Every row as plain values, looked through dictionaries, unions, extensions and run-end
    encoding: equal for layouts that differ but hold the same values. Temporal values are
    compared by their integers (Python's datetime cannot hold nanoseconds). Read back through
    IPC first, which rebuilds every child's type from the schema: pyarrow 25 concatenates
    lists of run-end encoded dictionaries into children whose scalars abort the process."""
    columns = data.columns if isinstance(data, (pa.RecordBatch, pa.Table)) else [data]
    return [[_value(scalar) for scalar in _rebuilt(column)] for column in columns]


def _rebuilt(column):
    """``column`` written to IPC and read back (a ChunkedArray as one chunk per batch)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    table = pa.Table.from_batches([pa.record_batch([chunk], names=["a"]) for chunk in chunks],
                                  schema=pa.schema([pa.field("a", column.type)]))
    sink = pa.BufferOutputStream()
    try:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    except pa.ArrowNotImplementedError:  # a type IPC cannot carry: compared as it is
        return column
    return pa.ipc.open_stream(sink.getvalue()).read_all().column(0)


def same_rows(back, expected) -> bool:
    """Host data ``back`` equals ``expected``, prints the same values, or holds the same
    values under the same type: arrow_gpu.compute lays different dictionaries end to end
    where pyarrow unifies them."""
    shape = "schema" if isinstance(back, (pa.RecordBatch, pa.Table)) else "type"
    return (back.equals(expected) or _listing(back) == _listing(expected)
            or (getattr(back, shape) == getattr(expected, shape)
                and _values(back) == _values(expected)))


def _value(scalar):
    if not scalar.is_valid:
        return None
    type = scalar.type
    if isinstance(scalar, (pa.UnionScalar, pa.DictionaryScalar, pa.ExtensionScalar,
                           pa.RunEndEncodedScalar)):
        return _value(scalar.value)
    if isinstance(scalar, pa.StructScalar):
        return [_value(scalar[i]) for i in range(type.num_fields)]
    if pa.types.is_map(type):
        return [(_value(key), _value(item)) for key, item in
                zip(scalar.values.field(0), scalar.values.field(1))]
    if hasattr(scalar, "values"):  # the list families
        return [_value(item) for item in scalar.values]
    if pa.types.is_temporal(type) and not pa.types.is_interval(type):
        return scalar.value
    return scalar.as_py()
