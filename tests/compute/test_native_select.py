"""The native selection plan of arrow_gpu.compute.filter and take: flat columns (fixed-width
values, booleans, binary and strings, dictionaries) selected in one native call, against
pyarrow's results on the host; other types keep the per-type walk of _compute/take.py.
"""

import datetime
import decimal
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda, compute
from arrow_gpu._compute import kernels as _kernels, select as _select
from arrow_gpu.transfer import to_device, to_host

ROWS = 70  # more than two 32-row groups of a mask, and not a multiple of 8


def values_of(type, rows, nulls):
    """``rows`` values of ``type``, every third null with ``nulls``."""
    def value(i):
        if pa.types.is_boolean(type):
            return i % 3 == 1
        if pa.types.is_integer(type):
            return i % 100
        if pa.types.is_floating(type):
            return np.float16(i / 4) if type == pa.float16() else i / 4
        if pa.types.is_decimal(type):
            return decimal.Decimal(i) / 10
        if pa.types.is_fixed_size_binary(type):
            return bytes([i % 256]) * type.byte_width
        if pa.types.is_binary(type) or pa.types.is_large_binary(type):
            return b"b" * (i % 6)
        if pa.types.is_string(type) or pa.types.is_large_string(type):
            return "s" * (i % 6)
        if pa.types.is_date(type):
            return datetime.date(2020, 1, 1) + datetime.timedelta(days=i)
        if pa.types.is_interval(type):
            return pa.MonthDayNano([i, i + 1, i * 1000])
        return i * 1000  # timestamps, times, durations
    return pa.array([None if nulls and i % 3 == 0 else value(i) for i in range(rows)], type)


FLAT_TYPES = [pa.bool_(), pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float16(),
              pa.float32(), pa.float64(), pa.decimal128(12, 1), pa.decimal256(40, 1),
              pa.date32(), pa.date64(), pa.timestamp("us", "UTC"), pa.time32("ms"),
              pa.time64("ns"), pa.duration("s"), pa.month_day_nano_interval(), pa.binary(3),
              pa.binary(0), pa.binary(), pa.string(), pa.large_binary(), pa.large_string()]


def flat_table(rows, nulls):
    columns = {str(type): values_of(type, rows, nulls) for type in FLAT_TYPES}
    columns["dictionary"] = pa.array([None if nulls and i % 4 == 0 else "abc"[i % 3]
                                      for i in range(rows)]).dictionary_encode()
    return pa.table(columns)


def mask_of(rows, nulls):
    return pa.array([None if nulls and i % 5 == 0 else i % 3 != 2 for i in range(rows)])


def native_only():
    """The per-type walk made to fail: what passes took the native plan."""
    return mock.patch.object(_select, "take_arrays",
                             side_effect=AssertionError("took the per-type walk"))


def assert_same(got, want):
    got = to_host(got)
    if isinstance(got, pa.Table):
        got, want = got.combine_chunks(), want.combine_chunks()
    assert got.equals(want), (got, want)
    if isinstance(got, pa.Table):
        for column in got.columns:
            for chunk in column.chunks:
                chunk.validate(full=True)
        assert [c.null_count for c in got.columns] == [c.null_count for c in want.columns]


@pytest.mark.parametrize("nulls", [False, True], ids=["no_nulls", "nulls"])
@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
def test_every_flat_type_filters_and_takes_natively(ctx, nulls, sliced):
    host = flat_table(ROWS + 13, nulls)
    mask = mask_of(ROWS + 13 + 5, nulls)
    if sliced:  # offsets on values, validity and the mask, none of them byte-aligned
        host, mask = host.slice(5, ROWS), mask.slice(11, ROWS)
    else:
        host, mask = host.slice(0, ROWS), mask.slice(0, ROWS)
    indices = pa.array([ROWS - 1, 0, None if nulls else 3, 3, 17, 64, 5], pa.int32())
    device, device_mask = to_device(host), to_device(mask)
    with native_only():
        for behavior in ("drop", "emit_null"):
            assert_same(compute.filter(device, device_mask, null_selection_behavior=behavior),
                        host.filter(mask, null_selection_behavior=behavior))
        assert_same(compute.take(device, to_device(indices)), host.take(indices))
        for name in ("bool", "string", "dictionary"):  # an Array, a ChunkedArray
            column = host[name].chunk(0)
            got = compute.filter(to_device(column), device_mask)
            assert isinstance(got, pa.Array)
            assert to_host(got).equals(column.filter(mask))
            got = compute.take(to_device(host[name]), to_device(indices))
            assert isinstance(got, pa.ChunkedArray)
            assert to_host(got).equals(host[name].take(indices))


def test_a_record_batch_keeps_its_shape_and_schema(ctx):
    host = flat_table(ROWS, True).to_batches()[0].replace_schema_metadata({"k": "v"})
    mask = mask_of(ROWS, True)
    with native_only():
        got = compute.filter(to_device(host), to_device(mask))
    assert isinstance(got, pa.RecordBatch)
    assert got.device_type == pa.DeviceAllocationType.CUDA
    assert to_host(got).equals(host.filter(mask))
    assert got.schema.metadata == {b"k": b"v"}


def test_columns_of_several_chunks_are_combined_then_selected_natively(ctx):
    host = pa.concat_tables([flat_table(ROWS, True)] * 3)
    mask = mask_of(3 * ROWS, True)
    with native_only():
        assert_same(compute.filter(to_device(host), to_device(mask)), host.filter(mask))


@pytest.mark.parametrize("how", ["drop", "emit_null", "take"])
def test_empty_results(ctx, how):
    host = flat_table(ROWS, True)
    with native_only():
        if how == "take":
            indices = pa.array([], pa.int64())
            got, want = compute.take(to_device(host), to_device(indices)), host.take(indices)
        else:
            mask = pa.array([None if i % 2 else False for i in range(ROWS)])
            got = compute.filter(to_device(host), to_device(mask), null_selection_behavior=how)
            want = host.filter(mask, null_selection_behavior=how)
    assert got.num_rows == want.num_rows
    assert_same(got, want)


def test_empty_data(ctx):
    host = flat_table(0, False)
    with native_only():
        assert_same(compute.filter(to_device(host), to_device(pa.array([], pa.bool_()))), host)
        assert_same(compute.take(to_device(host), to_device(pa.array([], pa.int8()))), host)


@pytest.mark.parametrize("type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
                                  pa.uint16(), pa.uint32(), pa.uint64()])
def test_indices_of_every_width_and_sign(ctx, type):
    host = flat_table(ROWS, True)
    indices = pa.array([ROWS - 1, None, 0, 5, 5, 63], type).slice(1)
    with native_only():
        assert_same(compute.take(to_device(host), to_device(indices)), host.take(indices))


@pytest.mark.parametrize("index", [ROWS, -1, 2**40])
@pytest.mark.parametrize("type", [pa.int64(), pa.uint64()])
def test_an_index_out_of_range_is_an_index_error(ctx, index, type):
    if index < 0 and type == pa.uint64():
        index = 2**64 - 1  # the largest unsigned index, not a negative one
    host = flat_table(ROWS, True)
    indices = to_device(pa.array([0, index, 1], type))
    with native_only(), pytest.raises(IndexError,
                                      match=rf"take indices must lie in \[0, {ROWS}\)"):
        compute.take(to_device(host), indices)


@pytest.mark.parametrize("null_count", [0, -1], ids=["counted", "uncounted"])
def test_a_bitmap_without_nulls_selects_as_none(ctx, null_count):
    # A bitmap known to hold no null is not gathered (uncounted, it is, and counted then).
    values = pa.array(range(ROWS), pa.int64())
    bitmap = pa.py_buffer(b"\xff" * 9)
    array = pa.Array.from_buffers(pa.int64(), ROWS, [bitmap, values.buffers()[1]],
                                  null_count=null_count)
    host = pa.table({"x": array, "s": pa.array([str(i) for i in range(ROWS)])})
    indices, mask = pa.array([3, 0, 69, 3], pa.int32()), mask_of(ROWS, False)
    data = to_device(host)
    with native_only():
        for got, want in ((compute.take(data, to_device(indices)), host.take(indices)),
                          (compute.filter(data, to_device(mask)), host.filter(mask))):
            assert_same(got, want)
            chunk = got["x"].chunk(0)
            assert chunk.buffers()[0] is None and compute.null_count(chunk) == 0


@pytest.mark.parametrize("type", [pa.int8(), pa.uint16(), pa.int32(), pa.uint32(), pa.int64()])
@pytest.mark.parametrize("columns", ["fixed", "strings", "none"])
def test_indices_without_nulls_are_checked_whichever_columns_read_them(ctx, type, columns):
    # Indices without nulls are read as they are by the gathers of fixed-width columns, which
    # check each; strings take positions made (and checked) from them; with no column at all
    # they are still checked.
    host = flat_table(ROWS, True)
    host = {"fixed": host.select(["int64", "double", "int32", "bool", "decimal256(40, 1)"]),
            "strings": host.select(["string", "large_binary"]),
            "none": host.drop_columns(host.column_names)}[columns]
    good = pa.array([ROWS - 1, 0, 5, 5, 63, 2], type)
    with native_only():
        taken = compute.take(to_device(host), to_device(good))
        if columns == "none":  # pyarrow's take of no columns keeps none of the rows
            assert taken.num_rows == len(good)
        else:
            assert_same(taken, host.take(good))
        for chunk in (c.chunk(0) for c in taken.columns):
            assert chunk.buffers()[0] is None or chunk.buffers()[0].size == 1
        bad = pa.array([0, ROWS, 1], type)
        with pytest.raises(IndexError, match=rf"take indices must lie in \[0, {ROWS}\)"):
            compute.take(to_device(host), to_device(bad))


def test_a_table_mixing_flat_and_nested_columns_takes_the_walk(ctx):
    host = pa.table({"i": pa.array([None if i % 4 == 0 else i for i in range(ROWS)]),
                     "s": pa.array(["x" * (i % 3) for i in range(ROWS)]),
                     "l": pa.array([[i, None] if i % 5 else None for i in range(ROWS)]),
                     "st": pa.array([{"a": i, "b": str(i)} for i in range(ROWS)]),
                     "n": pa.nulls(ROWS)})
    mask, indices = mask_of(ROWS, True), pa.array([3, None, 0, 69], pa.int16())
    with mock.patch.object(_select, "take_arrays", wraps=_select.take_arrays) as walk:
        for behavior in ("drop", "emit_null"):
            assert_same(compute.filter(to_device(host), to_device(mask),
                                       null_selection_behavior=behavior),
                        host.filter(mask, null_selection_behavior=behavior))
        assert_same(compute.take(to_device(host), to_device(indices)), host.take(indices))
    assert walk.call_count == 3


def test_a_nested_column_of_several_chunks_goes_to_the_walk_at_once(ctx):
    # The types are asked before the chunks: a column the plan cannot gather is not
    # combined into a table for a second native attempt (pyarrow validates such a table,
    # and a refusal of the walk would have come second).
    host = pa.Table.from_batches([pa.record_batch(
        {"i": pa.array(range(ROWS)), "l": pa.array([[i] for i in range(ROWS)])})] * 2)
    mask = mask_of(2 * ROWS, False)
    with mock.patch.object(_select, "_select_natively",
                           wraps=_select._select_natively) as native:
        assert_same(compute.filter(to_device(host), to_device(mask)), host.filter(mask))
    assert native.call_count == 1


@pytest.mark.parametrize("kind", ["table", "batch"])
def test_no_columns_keep_their_row_count(ctx, kind):
    host = pa.table({"x": range(ROWS)}).drop_columns(["x"])
    data = to_device(host if kind == "table" else host.to_batches()[0])
    mask = mask_of(ROWS, True)
    with native_only():
        filtered = compute.filter(data, to_device(mask))
        taken = compute.take(data, to_device(pa.array([1, 2, 3, None])))
    assert filtered.num_rows == host.filter(mask).num_rows == mask.true_count
    assert taken.num_rows == 4
    assert isinstance(filtered, type(data)) and isinstance(taken, type(data))


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
def test_the_native_plan_waits_on_its_stream_only_and_reads_back_once(ctx):
    # A small filter reads the mask's row count, every string column's bytes and every null
    # count together (what it makes before is sized for every row of the mask); a take
    # reads the latter.
    host = flat_table(ROWS, True)
    data, mask = to_device(host), to_device(mask_of(ROWS, True))
    indices = to_device(pa.array([1, None, 7], pa.uint32()))
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    synchronizations = _cuda._simulated_context_synchronizations()
    reads = _cuda._simulated_device_reads()
    with native_only():
        filtered = compute.filter(data, mask, stream=stream)
        assert _cuda._simulated_device_reads() - reads == 1
        taken = compute.take(data, indices, stream=stream)
        assert _cuda._simulated_device_reads() - reads == 2
    assert _cuda._simulated_context_synchronizations() == synchronizations
    assert_same(filtered, host.filter(mask_of(ROWS, True)))
    assert_same(taken, host.take(pa.array([1, None, 7])))


@pytest.mark.parametrize("behaviour", ["drop", "emit_null"])
def test_a_small_filter_of_fixed_width_columns_reads_back_once(ctx, behaviour):
    # Gathered by the mask before its row count is known, sized for every row of it, then
    # cut to the rows selected: the count and every null count come back in one read.
    host = flat_table(ROWS, True).drop_columns(
        [str(t) for t in FLAT_TYPES if pa.types.is_binary(t) or pa.types.is_string(t)
         or pa.types.is_large_binary(t) or pa.types.is_large_string(t)])
    mask = mask_of(ROWS, behaviour == "drop")  # emitted null rows need positions: no nulls
    data = to_device(host)
    reads = _cuda._simulated_device_reads()
    with native_only():
        filtered = compute.filter(data, to_device(mask), null_selection_behavior=behaviour)
    if arrow_gpu.using_simulator():  # only the simulator counts reads; the rest holds anywhere
        assert _cuda._simulated_device_reads() - reads == 1
    want = host.filter(mask, null_selection_behavior=behaviour)
    assert_same(filtered, want)
    for got, expected in zip(filtered.columns, want.columns):
        chunk = got.chunk(0)
        bits = (len(chunk) + 7) // 8
        sizes = [None if b is None else b.size for b in chunk.buffers()]
        width = (bits if pa.types.is_boolean(chunk.type) else
                 len(chunk) * (chunk.type.index_type if pa.types.is_dictionary(chunk.type)
                               else chunk.type).byte_width)
        assert sizes[0] in (None, bits) and sizes[1] == width, (chunk.type, sizes)


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
def test_a_small_selection_zeroes_its_counters_and_bitmaps_with_one_launch(ctx):
    # A small call's time is its launches: the counters and every bitmap a mask compacts
    # (or'ed into zeroed words) share one fill; a large call fills each on its own.
    def fills(rows):
        host = flat_table(rows, True).select(["bool", "int32", "string", "double"])
        data, mask = to_device(host), to_device(mask_of(rows, True))
        before = _cuda._simulated_launches("ag_fill_bytes")
        with native_only():
            filtered = compute.filter(data, mask)
        assert_same(filtered, host.filter(mask_of(rows, True)))
        return _cuda._simulated_launches("ag_fill_bytes") - before

    assert fills(ROWS) == 1
    assert fills(200_000) == 6  # the counters, the bool's values, four validity bitmaps


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
@pytest.mark.parametrize("index_nulls", [False, True], ids=["indices", "null_indices"])
def test_a_take_of_strings_reads_its_indices_as_they_are(ctx, index_nulls):
    # Their sizing pass reads and checks the indices, and keeps each row's start for the
    # copy: no pass makes positions, unless null indices need them (-1 for a null row).
    host = pa.array(["a", "bb", None, "ccc"] * 100)
    indices = pa.array([1, None if index_nulls else 2, 3, 0], pa.int32())
    before = _cuda._simulated_launches("ag_indices")
    with native_only():
        taken = compute.take(to_device(host), to_device(indices))
    assert_same(taken, host.take(indices))
    assert _cuda._simulated_launches("ag_indices") - before == int(index_nulls)


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
@pytest.mark.parametrize("kind", [pa.string(), pa.large_binary()], ids=str)
def test_a_filter_of_strings_compacts_their_ranges_with_no_positions(ctx, kind):
    # A mask's rows lie in order: one compaction reads each selected row's start and size
    # from the offsets; no pass makes positions, none sizes rows from them.
    host = pa.array([b"a", b"bb", None, b"ccc"] * 100, kind)
    mask = mask_of(len(host), True)
    names = ("ag_compact", "ag_compact_ranges", "ag_range_sizes")
    before = [_cuda._simulated_launches(name) for name in names]
    with native_only():
        result = compute.filter(to_device(host), to_device(mask))
    assert [_cuda._simulated_launches(name) - b for name, b in zip(names, before)] == [0, 1, 0]
    assert_same(result, host.filter(mask))


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's waits")
@pytest.mark.parametrize("emit_null", [False, True], ids=["drop", "emit_null"])
def test_a_large_filter_of_strings_stops_its_stream_once(ctx, emit_null):
    # Past the small selections sized for every row of the mask, a binary column's ranges
    # are sized before the mask's count is read. The count is read behind the mask's scan
    # while the stream goes on with the sizing, then the null counts and the bytes (copied
    # into room for as many as expected) once every gather is done: two reads, one of which
    # waits for the stream. A mask whose nulls make null rows picks them by positions, which
    # wait for the count: two reads, each waiting for the stream, and a third wait for the
    # bytes copied out of the room made before their total was read (its null rows hold
    # none, so the room holds more than a result may keep).
    rows = 1_000_000  # 10 bytes a row of results sized for every row: past 8 MiB
    rng = np.random.default_rng(0)
    host = pa.table({"i": pa.array(rng.integers(0, 100, rows)),
                     "s": pa.array(np.where(rng.random(rows) < 0.5, "ab", "c"),
                                   mask=rng.random(rows) < 0.1)})
    mask = pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.05)
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    data, device_mask = to_device(host), to_device(mask)
    behavior = "emit_null" if emit_null else "drop"
    reads, waits = _cuda._simulated_device_reads(), _cuda._simulated_stream_synchronizations()
    with native_only():
        result = compute.filter(data, device_mask, null_selection_behavior=behavior,
                                stream=stream)
    assert _cuda._simulated_device_reads() - reads == 2
    assert _cuda._simulated_stream_synchronizations() - waits == (3 if emit_null else 1)
    assert_same(result, host.filter(mask, null_selection_behavior=behavior))


def large_mixed_table(rows, strings):
    rng = np.random.default_rng(5)
    valid = rng.random(rows) > 0.1
    columns = {"i64": pa.array(rng.integers(0, 1 << 40, rows)),
               "i32": pa.array(rng.integers(-9, 9, rows, dtype=np.int32), mask=~valid),
               "flag": pa.array(rng.random(rows) < 0.3),
               "dict": pa.DictionaryArray.from_arrays(
                   pa.array(rng.integers(0, 4, rows, dtype=np.int32)), ["a", "b", "c", "d"])}
    if strings:
        columns["s"] = pa.array(np.where(rng.random(rows) < 0.5, "abc", "z"), mask=valid)
    return pa.table(columns)


@pytest.mark.parametrize("strings", [True, False], ids=["strings", "fixed_width"])
@pytest.mark.parametrize("behaviour", ["drop", "emit_null"])
def test_a_large_filter_forks_its_latency_bound_work_and_joins_it_on_its_stream(
        ctx, strings, behaviour):
    # Past 2**20 mask rows, a filter queues its bitmaps on one stream of its own and its
    # strings' sizing, scan and copy on another, each waiting for the caller's stream
    # first, and the caller's stream waits for both before the counters are read: on a
    # GPU a missing join reads null counts (and strings) before they are made.
    rows = (1 << 20) + 37
    host = large_mixed_table(rows, strings)
    rng = np.random.default_rng(6)
    mask = pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.05)
    small_host, small_mask = host.slice(0, 1000), mask.slice(0, 1000)
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    data, device_mask = to_device(host), to_device(mask)
    small_data, small_device_mask = to_device(small_host), to_device(small_mask)

    def waits(data, device_mask):
        before = _cuda._simulated_stream_waits()
        with native_only():
            result = compute.filter(data, device_mask, null_selection_behavior=behaviour,
                                    stream=stream)
        return result, _cuda._simulated_stream_waits() - before

    synchronizations = _cuda._simulated_context_synchronizations()
    small, small_waits = waits(small_data, small_device_mask)
    result, large_waits = waits(data, device_mask)
    live = _cuda._simulated_live_streams()
    for _ in range(2):
        again, _ = waits(data, device_mask)
    assert_same(result, host.filter(mask, null_selection_behavior=behaviour))
    assert_same(again, host.filter(mask, null_selection_behavior=behaviour))
    assert_same(small, small_host.filter(small_mask, null_selection_behavior=behaviour))
    if arrow_gpu.using_simulator():
        assert large_waits - small_waits == (4 if strings else 2)  # a fork and a join a lane
        assert _cuda._simulated_live_streams() == live  # lent, given back, lent again
        assert _cuda._simulated_context_synchronizations() == synchronizations


def test_strings_past_32_bit_offsets_fail_after_the_stream_ran_what_was_queued(ctx):
    # The first column's bytes, more than the room copied into before their total was read,
    # are copied again after it, then the second's total is found too large for 32-bit
    # offsets: the plan fails part way, and waits on its stream before its memory (the
    # copy's destination and the starts it reads) goes back to the allocator.
    long_row = "x" * (1 << 20)
    host = pa.table({"short": pa.array(["a" * 100, None]), "long": pa.array([long_row, "b"])})
    indices = to_device(pa.array(np.zeros(2049, dtype=np.int64)))  # 2049 MiB selected
    data = to_device(host)
    waits_before = _cuda._simulated_stream_synchronizations()
    with native_only(), pytest.raises(OverflowError,
                                      match="more than 32-bit offsets can address"):
        compute.take(data, indices)
    if arrow_gpu.using_simulator():
        assert _cuda._simulated_stream_synchronizations() - waits_before == 1
    # as the large_ type, the same rows are taken (their bytes read back in part)
    wide = to_device(host.cast(pa.schema({"short": pa.large_string(),
                                          "long": pa.large_string()})))
    with native_only():
        taken = compute.take(wide, to_device(pa.array([1, 0, 0])))
    assert to_host(taken).column("long").to_pylist() == ["b", long_row, long_row]


def device_bytes_held(ctx, make):
    """What ``make()`` returns, and the device bytes it holds once made."""
    before = ctx.bytes_allocated
    made = make()
    return made, ctx.bytes_allocated - before


@pytest.mark.parametrize("kind", [pa.string(), pa.large_binary()], ids=str)
def test_a_take_of_strings_waits_once_and_holds_little_room(ctx, kind):
    # Its bytes are copied before their total is read, into room for the source's average
    # row at every row and a little more: one wait, for the counters, and the result holds
    # that room, cut to its bytes.
    rng = np.random.default_rng(3)
    host = pa.array([b"x" * int(n) for n in rng.integers(0, 100, 5000)], kind,
                    mask=rng.random(5000) < 0.1)
    indices = pa.array(rng.integers(0, len(host), 20_000))
    data, device_indices = to_device(host), to_device(indices)
    waits = _cuda._simulated_device_reads() + _cuda._simulated_stream_synchronizations()
    with native_only():
        taken, held = device_bytes_held(ctx, lambda: compute.take(data, device_indices))
    if arrow_gpu.using_simulator():
        assert _cuda._simulated_device_reads() + _cuda._simulated_stream_synchronizations() \
            - waits == 1
    assert_same(taken, host.take(indices))
    values = taken.buffers()[2].size
    assert held <= sum(b.size for b in taken.buffers() if b is not None) + values // 16 + (64 << 10)


@pytest.mark.parametrize("picked", ["longer", "shorter", "empty"])
def test_a_take_of_strings_unlike_their_source_is_copied_to_its_size(ctx, picked):
    # Rows far longer than the source's average overflow the room, which the copy then
    # leaves untouched: they are copied again once their total is known. Rows far shorter
    # would leave the result holding most of its room: they are moved into their own buffer
    # (no bytes: nothing to move, nothing to wait for). Either way the host waits twice.
    host = pa.array(["x" * 1000] * 100 + ["ab"] * 100 + [""] * 100)
    rows = np.arange(100) + 100 * ["longer", "shorter", "empty"].index(picked)
    indices = pa.array(np.tile(rows, 10))
    data, device_indices = to_device(host), to_device(indices)
    copies = _cuda._simulated_launches("ag_gather_ranges")
    waits = _cuda._simulated_device_reads() + _cuda._simulated_stream_synchronizations()
    with native_only():
        taken, held = device_bytes_held(ctx, lambda: compute.take(data, device_indices))
    if arrow_gpu.using_simulator():
        assert _cuda._simulated_device_reads() + _cuda._simulated_stream_synchronizations() \
            - waits == (1 if picked == "empty" else 2)
        assert _cuda._simulated_launches("ag_gather_ranges") - copies == \
            (2 if picked == "longer" else 1)
    assert_same(taken, host.take(indices))
    buffers = [b.size for b in taken.buffers() if b is not None]
    assert held <= sum(buffers) + 1024  # the allocator's rounding at most


@pytest.mark.parametrize("picked", ["longer", "shorter"])
def test_a_large_filter_of_strings_unlike_their_column_is_copied_to_its_size(ctx, picked):
    # Past 8 MiB of results sized for every row of the mask, a filter copies its strings'
    # bytes, once the mask's count is read, into room for as many as its rows are expected
    # to hold: rows far longer than the column's average are copied again once their total
    # is known, rows far shorter are moved into a buffer of their own, and the result holds
    # no more than its bytes either way.
    rows = 1_000_000
    even = np.arange(rows) % 2 == 0
    host = pa.table({"i": pa.array(np.arange(rows)),
                     "s": pa.array(np.where(even, "x" * 30, "y"))})
    mask = pa.array(even if picked == "longer" else ~even)
    data, device_mask = to_device(host), to_device(mask)
    copies = _cuda._simulated_launches("ag_gather_ranges")
    with native_only():
        got, held = device_bytes_held(ctx, lambda: compute.filter(data, device_mask))
    if arrow_gpu.using_simulator():
        assert _cuda._simulated_launches("ag_gather_ranges") - copies == \
            (2 if picked == "longer" else 1)
    assert_same(got, host.filter(mask))
    buffers = [b.size for column in got.columns for chunk in column.chunks
               for b in chunk.buffers() if b is not None]
    assert held <= sum(buffers) + 4096  # the allocator's rounding at most


def test_a_take_of_a_slice_of_strings_holds_only_its_bytes(ctx):
    # A slice's rows are expected to average its whole buffers' rows (the host knows no
    # offset): one short row of a column of long ones gets room for long rows, and its bytes
    # move into a buffer of their own.
    host = pa.array(["x" * 1000] * 1000 + ["ab"])
    sliced = to_device(host).slice(1000, 1)
    indices = pa.array(np.zeros(500, np.int64))
    device_indices = to_device(indices)
    with native_only():
        taken, held = device_bytes_held(ctx, lambda: compute.take(sliced, device_indices))
    assert_same(taken, host.slice(1000, 1).take(indices))
    assert held <= sum(b.size for b in taken.buffers() if b is not None) + 1024


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
@pytest.mark.parametrize("rows", [400, 40_000], ids=["one tile", "tiles"])
def test_strings_are_scanned_by_one_launch_and_a_mask_sums_their_bytes_first(ctx, rows):
    # A take knows its rows: the sizes' scan is one launch, whatever their tiles, and gives
    # the bytes. A small filter reads its count with the bytes: the compaction of its rows'
    # ranges sums them before the read, their scan follows it.
    host = pa.array(["a", "bb", None, "ccc"] * (rows // 4))
    data = to_device(host)
    for select, picked, on_host in (
            (compute.take, pa.array(np.arange(rows)[::-1]), host.take),
            (compute.filter, mask_of(len(host), True), host.filter)):
        before = _cuda._simulated_launches("ag_scan")
        with native_only():
            result = select(data, to_device(picked))
        assert _cuda._simulated_launches("ag_scan") - before == 1
        assert_same(result, on_host(picked))


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
def test_a_mask_is_counted_and_scanned_by_one_launch(ctx):
    # A tile of groups of 32 rows is one block's scan; a longer mask's groups are counted as
    # the blocks of one launch scan them, a tile each.
    names = ("ag_mask_ranks", "ag_scan")
    tile_rows = 32 * _kernels.SCAN_TILE
    for rows, launches in ((tile_rows, (1, 0)), (tile_rows + 1, (1, 0))):
        host, mask = pa.table({"x": np.arange(rows)}), mask_of(rows, True).slice(0)
        data, device_mask = to_device(host), to_device(mask)
        before = [_cuda._simulated_launches(name) for name in names]
        with native_only():
            filtered = compute.filter(data, device_mask)
        assert tuple(_cuda._simulated_launches(name) - b for name, b in zip(names, before)) \
            == launches
        assert_same(filtered, host.filter(mask))


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's launches")
def test_a_null_count_on_the_device_is_one_read_and_at_most_one_launch(ctx):
    # A small bitmap is read back and counted on the host; a larger one is counted on the
    # device, a block at a time, each leaving its own count for the host to sum.
    for rows, popcounts in ((ROWS, 0), (130_000, 0), (140_000, 1)):  # 16 KiB: 131,072 rows
        array = values_of(pa.int32(), rows, True).slice(3)
        uncounted = pa.Array.from_buffers(array.type, len(array), to_device(array).buffers(),
                                          offset=array.offset)
        launches = _cuda._simulated_launches("ag_fill_bytes"), _cuda._simulated_launches(
            "ag_popcount")
        reads = _cuda._simulated_device_reads()
        assert compute.null_count(uncounted) == array.null_count
        assert (_cuda._simulated_launches("ag_fill_bytes") - launches[0],
                _cuda._simulated_launches("ag_popcount") - launches[1],
                _cuda._simulated_device_reads() - reads) == (0, popcounts, 1)


@pytest.mark.parametrize("chunked", [False, True], ids=["one_chunk", "chunks"])
def test_drop_null_of_flat_columns_is_one_native_selection(ctx, chunked):
    host = flat_table(ROWS, True)
    if chunked:
        host = pa.concat_tables([host.slice(0, 30), host.slice(30)])
    with native_only():
        dropped = compute.drop_null(to_device(host))
    assert_same(dropped, host.drop_null())
