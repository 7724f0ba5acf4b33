"""Empty shapes keep their rows and their device through compute and transfers.

Data of no columns, or of no rows, in every container (an Array; a ChunkedArray of no
chunks or several empty ones; a RecordBatch; a Table of no chunks or several) goes
through every compute function (on the simulator the kernels' host twins run), and through
to_device and to_host: the result has the rows pyarrow gives on the host, is
labelled where its memory is, and pyarrow's host functions take the copy to_host gives.
"""

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, strategies as st

from arrow_gpu import compute
from arrow_gpu._util.arrow_data import Kind, arrays, buffers, kind_of
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer import to_device, to_host
from _arrow_samples import same_rows
from _compute_helpers import (assert_known_null_counts, drop_null_on_host, filter_on_host,
                              rows_only)

# Types the kernels gather (run-end encoded data is a documented gap; opaque intervals
# cannot be reached from Python).
TYPES = ags.data_types(exclude=ags.OPAQUE_FAMILIES | {"run_end_encoded"}, max_depth=1)


@st.composite
def empty_shapes(draw):
    """Data without columns (of any number of rows) or without rows, in any container."""
    kind = draw(st.sampled_from(list(Kind)))
    if kind is Kind.ARRAY:
        return draw(ags.arrays(TYPES, size=0))
    if kind is Kind.CHUNKED_ARRAY:
        return draw(ags.chunked_arrays(TYPES, size=0, max_chunks=3))
    if draw(st.booleans()):  # columns, no rows
        schema = draw(ags.schemas(TYPES, min_columns=1, max_columns=3))
        if kind is Kind.RECORD_BATCH:
            return draw(ags.record_batches(schema, size=0))
        return draw(ags.tables(schema, size=0, max_chunks=3))
    schema = draw(ags.schemas(TYPES, max_columns=0))  # rows, no columns
    sizes = draw(st.lists(st.integers(0, 5), min_size=1 if kind is Kind.RECORD_BATCH else 0,
                          max_size=1 if kind is Kind.RECORD_BATCH else 3))
    batches = [rows_only(rows, schema) for rows in sizes]
    return batches[0] if kind is Kind.RECORD_BATCH else pa.Table.from_batches(batches, schema)


def _rows(data):
    return len(data) if kind_of(data) in (Kind.ARRAY, Kind.CHUNKED_ARRAY) else data.num_rows


def _without_columns(data):
    return kind_of(data) is Kind.TABLE and data.num_columns == 0


def _on_device(data):
    """Labelled as device data, and none of its memory on the host."""
    if kind_of(data) is Kind.RECORD_BATCH:
        assert data.device_type == pa.DeviceAllocationType.CUDA
    assert not any(buffer.is_cpu for buffer in buffers(data))


def _check(result, expected):
    """A device ``result()`` equals ``expected()`` (host data), rows and device included;
    its host copy is plain host data that pyarrow's own functions take. Where pyarrow
    cannot (take of views), ``expected`` raises, and the result is checked but not its
    values; or raises NotImplementedError too (the simulator runs pyarrow's kernels)."""
    try:
        expected = expected()
    except pa.ArrowNotImplementedError:
        expected = None
    try:
        got = result()
    except NotImplementedError as error:
        assert expected is None, error
        return
    assert_known_null_counts(got)
    _on_device(got)
    assert expected is None or type(got) is type(expected)
    assert expected is None or _rows(got) == _rows(expected)
    back = to_host(got)
    if kind_of(back) is Kind.RECORD_BATCH:
        assert back.device_type == pa.DeviceAllocationType.CPU
    assert all(buffer.is_cpu for buffer in buffers(back))
    back.validate(full=True)
    # Rows, not dictionaries: chunks of different dictionaries are laid end to end where
    # pyarrow unifies them.
    assert expected is None or same_rows(back, expected)
    if kind_of(back) in (Kind.RECORD_BATCH, Kind.TABLE) and back.num_columns == 0:
        back.take(pa.array([0] * min(back.num_rows, 2), pa.int64()))  # as host data
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, back.schema) as writer:
            writer.write(back)
        assert pa.ipc.open_stream(sink.getvalue()).read_all().num_rows == back.num_rows


def _in_type(data, type):
    return data if data.type.equals(type) else data.cast(type)


@given(host=empty_shapes(), data=st.data())
def test_empty_shapes_keep_rows_and_device(host, data):
    kind = kind_of(host)
    n = _rows(host)
    device = to_device(host)
    _on_device(device)
    assert _rows(device) == n
    assert to_host(device).equals(host)
    indices = pa.array(data.draw(st.lists(st.none() | st.integers(0, n - 1) if n else st.none(),
                                          max_size=4)), pa.int64())
    mask = data.draw(ags.arrays(pa.bool_(), size=n))
    offset, length = data.draw(st.integers(0, n + 1)), data.draw(st.integers(0, n + 1))
    # pyarrow's Table.take and concat_tables lose the rows of a table without columns, and
    # its slice does not clamp them; its RecordBatch functions count them right.
    as_batch = rows_only(n, host.schema) if _without_columns(host) else None

    def sliced():
        if as_batch is None:
            return host.slice(offset, length)
        return pa.Table.from_batches([as_batch.slice(offset, length)])

    _check(lambda: compute.take(device, to_device(indices)),
           lambda: pc.take(host, indices) if as_batch is None
           else pa.Table.from_batches([as_batch.take(indices)]))
    for behavior in ("drop", "emit_null"):
        _check(lambda: compute.filter(device, to_device(mask), null_selection_behavior=behavior),
               lambda: filter_on_host(host, mask, null_selection_behavior=behavior))
    _check(lambda: compute.slice(device, offset, length), sliced)
    _check(lambda: compute.drop_null(device), lambda: drop_null_on_host(host))
    _check(lambda: compute.combine_chunks(device),
           lambda: host.combine_chunks() if kind in (Kind.CHUNKED_ARRAY, Kind.TABLE) else host)
    twice = lambda: compute.concat([device, device])  # noqa: E731
    if kind in (Kind.ARRAY, Kind.CHUNKED_ARRAY):
        _check(twice, lambda: pa.chunked_array(arrays(host) * 2, type=host.type).combine_chunks())
    elif kind is Kind.RECORD_BATCH:
        _check(twice, lambda: pa.concat_batches([host, host]))
    else:
        _check(twice, lambda: pa.concat_tables([host, host]).combine_chunks()
               if as_batch is None
               else pa.Table.from_batches([pa.concat_batches([as_batch] * 2)]))
    if kind in (Kind.ARRAY, Kind.CHUNKED_ARRAY):
        assert compute.null_count(device) == host.null_count
        _check(lambda: compute.is_valid(device), lambda: pc.is_valid(host))
        _check(lambda: compute.is_null(device), lambda: pc.is_null(host))
        fill = pa.nulls(1, host.type)[0]
        # pyarrow widens narrow decimals; the kernels keep the type
        _check(lambda: compute.fill_null(device, fill),
               lambda: _in_type(pc.fill_null(host, fill), host.type))
