"""Host streams onto the device batch by batch: every kind of source, errors mid-stream, early
close, a consumer slower than its producer, and the streamed result equal to the whole one."""

import gc
import threading
import time
import weakref

import nanoarrow as na
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import example, given, settings, strategies as st

from arrow_gpu import DeviceData, import_stream, to_device, to_host
from arrow_gpu._streams.movers import GROUP_BATCHES, GROUP_BYTES
from arrow_gpu.device import Context
from arrow_gpu.streaming import DeviceReader, HostReader, as_host_reader, device_reader
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer_options import transfer_progress
from _arrow_samples import assert_identical

TABLE = pa.table({"x": pa.array(range(10), pa.int64()),
                  "s": pa.array([None if i % 3 == 0 else f"v{i}" for i in range(10)])})


def producer_threads():
    return [thread for thread in threading.enumerate() if thread.name.startswith("arrow_gpu")]


@pytest.fixture(autouse=True)
def no_thread_left():
    """Every test ends with no producer thread left."""
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while producer_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert producer_threads() == []


def on_device(batch):
    return batch.num_columns == 0 or all(not column.is_cpu for column in batch.columns)


def batches_of(table, size=3):
    return table.to_batches(max_chunksize=size)


SOURCES = {
    "RecordBatchReader": lambda: TABLE.to_reader(max_chunksize=3),
    "__arrow_c_stream__": lambda: na.c_array_stream(TABLE),
    "dataset Scanner": lambda: ds.dataset(TABLE).scanner(batch_size=3),
    "dataset Dataset": lambda: ds.dataset(TABLE),
    "iterator of batches": lambda: iter(batches_of(TABLE)),
    "generator of batches": lambda: (batch for batch in batches_of(TABLE)),
    "list of batches": lambda: batches_of(TABLE),
}


@pytest.mark.parametrize("make", SOURCES.values(), ids=SOURCES.keys())
def test_every_source_streams_to_the_device(ctx, make):
    reader = to_device(make())
    assert isinstance(reader, DeviceReader)
    assert reader.schema == TABLE.schema and reader.context.device_number == 0
    batches = list(reader)
    assert batches and all(on_device(batch) for batch in batches)
    back = pa.Table.from_batches([to_host(batch) for batch in batches], schema=TABLE.schema)
    assert back.equals(TABLE)
    assert reader.bytes_moved == sum(batch.get_total_buffer_size()
                                     for batch in back.to_batches())
    with pytest.raises(StopIteration):
        next(reader)  # the end stays the end
    del batches, reader


def test_read_all_is_a_device_table_of_the_rest(ctx):
    with to_device(TABLE.to_reader(max_chunksize=4)) as reader:
        first = reader.read_next_batch()
        rest = reader.read_all()
    assert isinstance(rest, pa.Table) and rest.num_rows == 6 and len(first) == 4
    assert all(not chunk.is_cpu for column in rest.columns for chunk in column.chunks)
    assert to_host(rest).equals(TABLE.slice(4))
    with pytest.raises(ValueError, match="closed"):
        reader.read_next_batch()
    del first, rest


def test_a_device_stream_of_the_reader_is_exported(ctx, nothing_left_exported):
    table = import_stream(to_device(TABLE.to_reader(max_chunksize=3)))
    assert table.num_rows == 10 and to_host(table).equals(TABLE)
    renamed = import_stream(to_device(TABLE.to_reader()),
                            requested_schema=pa.schema([("a", pa.int64()), ("b", pa.string())]))
    assert renamed.schema.names == ["a", "b"]
    del table, renamed


def test_to_host_of_a_device_reader_is_a_host_reader(ctx):
    host = to_host(to_device(TABLE.to_reader(max_chunksize=2)))
    assert isinstance(host, HostReader) and host.schema == TABLE.schema
    batches = list(host)
    assert len(batches) == 5 and all(batch.is_cpu for batch in batches)
    assert pa.Table.from_batches(batches).equals(TABLE)
    streamed = pa.RecordBatchReader.from_stream(to_host(to_device(TABLE.to_reader())))
    assert streamed.read_all().equals(TABLE)  # __arrow_c_stream__


def test_to_host_stops_early_when_closed(ctx):
    with to_host(to_device(endless())) as host:
        assert next(host).num_rows == 2
        assert len(producer_threads()) == 2  # one each way
    assert producer_threads() == []  # closing it closed the device reader too


def test_to_device_of_a_device_reader_streams_device_to_device(ctx):
    again = to_device(to_device(TABLE.to_reader(max_chunksize=5)))
    assert isinstance(again, DeviceReader)
    assert to_host(again.read_all()).equals(TABLE)


def failing_after(count, error):
    def batches():
        for index in range(count):
            yield pa.record_batch({"x": [index]})
        raise error
    return batches()


@pytest.mark.parametrize("wrap", [iter, lambda it: pa.RecordBatchReader.from_batches(
    pa.schema({"x": pa.int64()}), it)], ids=["iterator", "RecordBatchReader"])
def test_an_error_in_the_source_reaches_the_consumer_after_the_batches_before_it(ctx, wrap):
    reader = to_device(wrap(failing_after(3, KeyError("batch 3 is missing"))))
    got = []
    with pytest.raises(KeyError, match="batch 3 is missing") as raised:
        for batch in reader:
            got.append(batch)
    assert len(got) == 3
    assert isinstance(raised.value.__cause__, KeyError)  # the original, with its traceback
    assert raised.value.__cause__ is not raised.value
    with pytest.raises(StopIteration):
        next(reader)  # raised once, then the stream is over
    del got, batch


def test_a_source_error_without_a_copyable_exception_is_raised_as_itself(ctx):
    class Strict(Exception):
        def __init__(self, code, text):
            super().__init__(f"{code}: {text}")

    with pytest.raises(Strict, match="7: broken"):
        to_device(failing_after(1, Strict(7, "broken"))).read_all()


def endless(produced=None):
    index = 0
    while True:
        if produced is not None:
            produced.append(index)
        yield pa.record_batch({"x": [index, index]})
        index += 1


def test_close_stops_the_producer_and_leaves_no_thread(ctx):
    produced = []
    reader = to_device(endless(produced))
    assert producer_threads() == []  # nothing starts before the first read
    next(reader)
    assert len(producer_threads()) == 1
    reader.close()
    assert producer_threads() == []
    stopped_at = len(produced)
    time.sleep(0.05)
    # The first group, the prefetched groups, one in hand: small batches move in groups.
    assert len(produced) == stopped_at <= GROUP_BATCHES * (1 + 2 + 1) + 1
    reader.close()  # twice is fine


def test_leaving_the_with_block_and_dropping_the_reader_stop_the_producer(ctx):
    with to_device(endless()) as reader:
        next(reader)
    assert producer_threads() == []
    reader = to_device(endless())
    next(reader)
    del reader
    gc.collect()
    assert producer_threads() == []


def test_a_reader_never_read_starts_no_thread(ctx):
    reader = to_device(endless())
    assert reader.schema.names == ["x"] and producer_threads() == []
    del reader


def in_place_reader(source, events):
    """A DeviceReader of batches already on the device (``move`` None), recording when the
    source is interrupted and closed."""
    batches = pa.RecordBatchReader.from_batches(pa.schema({"x": pa.int64()}), source)
    return device_reader(batches, None, Context(0), close_with=lambda: events.append("closed"),
                         interrupt_with=lambda: events.append("interrupted"))


def on_device_batches(count, error=None):
    for index in range(count):
        yield to_device(pa.record_batch({"x": [index, index]}))
    if error is not None:
        raise error


def test_batches_on_the_device_already_are_read_on_the_consumers_thread(ctx):
    events = []
    reader = in_place_reader(on_device_batches(3), events)
    first = next(reader)
    assert on_device(first) and producer_threads() == [] and reader.bytes_moved == 16
    assert [batch.num_rows for batch in reader] == [2, 2] and events == ["closed"]
    with pytest.raises(StopIteration):
        next(reader)
    reader.close()
    assert events == ["closed"]  # once, and nothing interrupted at the end
    del first


def test_closing_a_reader_of_batches_on_the_device_interrupts_then_closes_its_source(ctx):
    events = []
    with in_place_reader(on_device_batches(5), events) as reader:
        next(reader)
    assert events == ["interrupted", "closed"]
    with pytest.raises(ValueError, match="closed"):
        next(reader)
    events.clear()
    with pytest.raises(KeyError, match="gone"):
        in_place_reader(on_device_batches(2, KeyError("gone")), events).read_all()
    assert events == ["interrupted", "closed"]


def test_a_reader_of_batches_on_the_device_refuses_another_schema(ctx):
    events = []
    other = to_device(pa.record_batch({"y": [1.0]}))
    reader = in_place_reader(iter([other]), events)
    with pytest.raises(pa.ArrowInvalid, match="another schema"):
        next(reader)
    assert events == ["interrupted", "closed"]
    with pytest.raises(StopIteration):
        next(reader)  # raised once, then the stream is over
    del other


class TrackedSource:
    """Batches whose host memory reports when it is freed, to count how many are alive."""

    def __init__(self, count, rows=GROUP_BYTES // 8):  # too large to share a copy
        self.count, self.rows = count, rows
        self.lock = threading.Lock()
        self.live = self.peak = self.made = 0

    def _freed(self):
        with self.lock:
            self.live -= 1

    def _batch(self, index):
        values = np.arange(index * self.rows, (index + 1) * self.rows, dtype=np.int64)
        with self.lock:
            self.live += 1
            self.made += 1
            self.peak = max(self.peak, self.live)
        weakref.finalize(values, self._freed)
        return pa.record_batch([pa.array(values)], names=["x"])  # a view of values

    def __iter__(self):
        for index in range(self.count):
            yield self._batch(index)


@pytest.mark.parametrize("prefetch", [1, 2, 4])
def test_a_slow_consumer_holds_host_memory_to_the_prefetch_depth(ctx, prefetch):
    source = TrackedSource(count=12)
    reader = to_device(iter(source), prefetch=prefetch)
    for consumed, batch in enumerate(reader, start=1):
        time.sleep(0.02)  # the producer is far faster: it waits on the queue
        assert source.made <= consumed + prefetch + 1
        assert batch.num_rows == source.rows
    assert source.made == 12
    assert source.peak <= prefetch + 1, f"{source.peak} host batches alive at once"
    gc.collect()
    assert source.live == 0
    del batch


def test_a_slow_source_is_not_held_back_to_fill_a_group(ctx):
    produced, consumed = [], []

    def trickle():
        for index in range(5):
            time.sleep(0.02)
            produced.append(index)
            yield pa.record_batch({"x": [index]})

    for batch in to_device(trickle()):
        consumed.append((batch.num_rows, len(produced)))
    # Each batch reaches the consumer before the source has made the one after the next.
    assert all(made <= index + 2 for index, (_, made) in enumerate(consumed))
    del batch


def test_small_batches_share_copies_and_stay_as_they_were(ctx):
    small = [pa.record_batch({"x": pa.array(range(n), pa.int64())}) for n in (3, 0, 5, 1, 4)]
    got = list(to_device(iter(small * 20)))
    assert [len(batch) for batch in got] == [len(batch) for batch in small * 20]
    for result, expected in zip(got, small * 20):
        assert_identical(result, expected)
    del got


def test_an_empty_stream(ctx):
    schema = pa.schema({"x": pa.int32()})
    reader = to_device(pa.RecordBatchReader.from_batches(schema, []))
    assert list(reader) == [] and reader.bytes_moved == 0
    empty = to_device(pa.RecordBatchReader.from_batches(schema, [])).read_all()
    assert empty.schema == schema and empty.num_rows == 0
    back = to_host(to_device(pa.RecordBatchReader.from_batches(schema, [])))
    assert back.read_all().num_rows == 0
    with pytest.raises(ValueError, match="empty.*from_batches"):
        to_device(iter([]))


def test_input_whose_schema_changes_is_refused_clearly(ctx):
    batches = iter([pa.record_batch({"x": [1]}), pa.record_batch({"x": ["one"]})])
    reader = to_device(batches)
    assert next(reader).num_rows == 1
    with pytest.raises(pa.ArrowInvalid, match="batch 1 of the stream has another schema.*cast"):
        next(reader)


def test_what_is_not_a_stream(ctx):
    with pytest.raises(TypeError, match="cannot move"):
        to_device([1, 2, 3])  # a list, but not of batches
    with pytest.raises(TypeError, match="yielded a 'int'"):
        to_device(iter([1, 2]))
    with pytest.raises(TypeError, match="for streams of batches.*'object'"):
        to_device(object(), prefetch=2)
    with pytest.raises(TypeError, match="for streams of batches.*'Table'"):
        to_device(TABLE, prefetch=2)
    with pytest.raises(TypeError, match="for streams of batches"):
        to_device(TABLE, total_bytes=1234)
    assert as_host_reader(pa.table({"x": [1]})) is None  # a table is data, not a stream
    with pytest.raises(ValueError, match="at least 1"):
        to_device(TABLE.to_reader(), prefetch=0)
    with pytest.raises(TypeError, match="prefetch must be an int"):
        to_device(TABLE.to_reader(), prefetch="2")
    with pytest.raises(TypeError, match="to_device"):
        DeviceReader()


def test_device_data_of_a_host_reader_says_what_to_do(ctx):
    with pytest.raises(OSError, match=r"host memory.*arrow_gpu\.to_device\(reader\)"):
        import_stream(DeviceData(TABLE.to_reader()))


def test_progress_counts_streamed_batches_and_announced_totals(ctx):
    seen = []
    with transfer_progress(seen.append) as progress:
        reader = to_device(TABLE.to_reader(max_chunksize=3), total_bytes=1234)
        table = reader.read_all()
    assert progress.total_bytes == 1234
    assert sum(seen) == progress.bytes_moved == reader.bytes_moved > 0
    with transfer_progress(seen.append, total=10) as given:
        to_device(TABLE.to_reader(), total_bytes=1234).close()
    assert given.total_bytes == 10  # the caller's total wins
    del table


def test_a_cancelling_progress_callback_stops_the_stream(ctx):
    def cancel(nbytes):
        raise RuntimeError("enough")

    with pytest.raises(pa.ArrowCancelled):
        with transfer_progress(cancel):
            to_device(TABLE.to_reader(max_chunksize=3)).read_all()


def test_another_device_number_is_checked_before_reading(ctx):
    with pytest.raises(TypeError, match="device must be"):
        to_device(TABLE.to_reader(), device="0")


@st.composite
def streams(draw):
    schema = draw(ags.schemas(max_columns=3))
    return schema, draw(st.lists(ags.record_batches(schema, max_size=8), max_size=4))


def _chunks(table: pa.Table) -> list[pa.RecordBatch]:
    """A table's chunks as batches, the empty ones included (all its columns chunk alike)."""
    return [pa.RecordBatch.from_arrays([column.chunk(i) for column in table.columns],
                                       schema=table.schema)
            for i in range(table.column(0).num_chunks)]


@settings(max_examples=max(settings().max_examples // 2, 10))
@given(streams(), st.integers(1, 3))
@example((pa.schema([("x", pa.null())]), [pa.record_batch({"x": pa.array([], pa.null())})]), 1)
def test_streamed_equals_the_whole_stream_moved_at_once(stream, prefetch):
    schema, batches = stream
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    whole = to_device(pa.Table.from_batches(batches, schema=schema))
    streamed = to_device(reader, prefetch=prefetch).read_all()
    assert streamed.schema == whole.schema and streamed.num_rows == whole.num_rows
    if not schema:
        return  # a table without columns has no chunks to compare, only its rows
    # Table.to_batches() skips empty chunks; the stream's batches are its chunks, empty or not.
    expected = _chunks(to_host(whole))
    got = [to_host(batch) for batch in _chunks(streamed)]
    assert len(got) == len(batches)
    for result, original in zip(got, batches):
        assert_identical(result, original)
    for result, reference in zip(got, expected):
        assert_identical(result, reference)
