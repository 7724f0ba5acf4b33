"""Arrow IPC (file and stream formats, Feather v2 compressed or not) and Parquet read onto the
device batch by batch."""

import gc
import io
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given, settings, strategies as st

import arrow_gpu._streams.ipc_files as ipc_files
import arrow_gpu._streams.parquet
import arrow_gpu.io
import arrow_gpu.loading
from arrow_gpu._ipc.file_image import FileImage
from arrow_gpu import to_device, to_host
from arrow_gpu._util.arrow_data import buffers
from arrow_gpu.loading import read_ipc, read_parquet
from arrow_gpu.streaming import DeviceReader
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer_options import transfer_options, transfer_progress
from _arrow_samples import assert_identical

ROWS = 1000
TABLE = pa.table({
    "x": pa.array(range(ROWS), pa.int64()),
    "s": pa.array([None if i % 7 == 0 else f"row {i}" for i in range(ROWS)]),
    "d": pa.array([f"k{i % 3}" for i in range(ROWS)]).dictionary_encode(),
})


def on_device(table):
    return all(not chunk.is_cpu for column in table.columns for chunk in column.chunks)


def ipc_stream_bytes(table, **options):
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
        w.write_table(table, max_chunksize=300)
    return sink.getvalue()


@pytest.fixture
def feather_file(tmp_path):
    def write(compression):
        path = tmp_path / f"{compression}.arrow"
        feather.write_feather(TABLE, path, compression=compression, chunksize=300)
        return path
    return write


def test_the_readers_have_one_home():
    assert {"read_ipc", "read_parquet"} <= set(arrow_gpu.loading.__all__)
    assert not {"read_ipc", "read_parquet"} & set(vars(arrow_gpu.io))


@pytest.mark.parametrize("compression", ["uncompressed", "lz4", "zstd"])
def test_feather_files_read_onto_the_device(ctx, feather_file, compression):
    path = feather_file(compression)
    table = read_ipc(path)
    assert on_device(table) and table.column("x").num_chunks == 4
    assert to_host(table).equals(TABLE)
    selected = read_ipc(str(path), columns=["d", "x"])
    assert selected.column_names == ["d", "x"]
    assert to_host(selected).equals(TABLE.select(["d", "x"]))
    del table, selected


def test_an_uncompressed_file_knows_its_size_up_front(ctx, feather_file):
    with transfer_progress(lambda nbytes: None) as progress:
        with read_ipc(feather_file("uncompressed"), stream=True) as reader:
            assert isinstance(reader, DeviceReader) and reader.total_bytes > 0
            table = reader.read_all()
    assert progress.total_bytes == reader.total_bytes == reader.bytes_moved
    assert progress.bytes_moved == reader.bytes_moved
    with read_ipc(feather_file("zstd"), stream=True) as compressed:
        assert compressed.total_bytes is None  # known only by decompressing it
    with transfer_progress(lambda nbytes: None) as progress:
        with read_ipc(feather_file("zstd"), stream=True) as compressed:
            compressed.read_all()
    assert progress.total_bytes is None and progress.bytes_moved > 0
    del table


def test_a_whole_file_read_knows_its_total_up_front(ctx, feather_file):
    with transfer_progress(lambda nbytes: None) as progress:
        table = read_ipc(feather_file("uncompressed"))
    assert progress.total_bytes == progress.bytes_moved == sum(b.size for b in buffers(table))
    del table


def test_ipc_streams_from_bytes_buffers_and_files(ctx, tmp_path):
    data = ipc_stream_bytes(TABLE)
    for source in (data, pa.py_buffer(data), io.BytesIO(data), pa.BufferReader(data)):
        assert to_host(read_ipc(source)).equals(TABLE)
    path = tmp_path / "data.arrows"
    path.write_bytes(ipc_stream_bytes(TABLE, compression="lz4"))
    with read_ipc(path, columns=["s"], stream=True) as reader:
        batches = [to_host(batch) for batch in reader]
    assert [len(batch) for batch in batches] == [300, 300, 300, 100]
    assert pa.Table.from_batches(batches).equals(TABLE.select(["s"]))


def test_ipc_file_format_from_memory(ctx):
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, TABLE.schema) as writer:
        writer.write_table(TABLE, max_chunksize=400)
    assert to_host(read_ipc(sink.getvalue(), columns=["x"])).equals(TABLE.select(["x"]))


def test_an_empty_ipc_stream(ctx):
    table = read_ipc(ipc_stream_bytes(TABLE.slice(0, 0)))
    assert table.num_rows == 0 and table.schema == TABLE.schema


class Unseekable(io.RawIOBase):
    def __init__(self, data):
        self.inner = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, buffer):
        return self.inner.readinto(buffer)


def test_bad_ipc_input_is_refused_clearly(ctx, feather_file):
    path = feather_file("uncompressed")
    with pytest.raises(KeyError, match="no column 'nope'"):
        read_ipc(path, columns=["x", "nope"])
    with pytest.raises(TypeError, match=r"list of names.*columns=\['x'\]"):
        read_ipc(path, columns="x")
    with pytest.raises(TypeError, match="cannot read IPC data from a 'int'"):
        read_ipc(42)
    with pytest.raises(pa.ArrowInvalid):
        read_ipc(b"this is not Arrow IPC data at all")
    with pytest.raises(FileNotFoundError):
        read_ipc(path.parent / "missing.arrow")
    assert to_host(read_ipc(Unseekable(ipc_stream_bytes(TABLE)))).equals(TABLE)
    with pytest.raises(ValueError, match="seekable"):
        read_ipc(Unseekable(ipc_stream_bytes(TABLE)), columns=["x"])


def batches_of(table):
    """A table's chunks as batches, the empty ones included (all its columns chunk alike)."""
    return [pa.RecordBatch.from_arrays([column.chunk(i) for column in table.columns],
                                       schema=table.schema)
            for i in range(table.column(0).num_chunks)]


def ipc_file_bytes(table, compression=None, max_chunksize=300):
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=max_chunksize)
    return sink.getvalue()


def assert_same_batches(device_table, host_batches):
    got = [to_host(batch) for batch in batches_of(device_table)]
    assert len(got) == len(host_batches)
    for result, expected in zip(got, host_batches):
        assert_identical(result, expected)


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("columns", [None, ["d", "x"]])
@pytest.mark.parametrize("source", ["path", "bytes", "stream format"])
def test_read_ipc_equals_the_whole_file_moved_at_once(ctx, tmp_path, compression, columns,
                                                      source):
    if source == "stream format":
        data = ipc_stream_bytes(TABLE, compression=compression)
    else:
        data = ipc_file_bytes(TABLE, compression)
    path = tmp_path / "data.arrow"
    path.write_bytes(data)
    whole = pa.ipc.open_file(data) if source != "stream format" else pa.ipc.open_stream(data)
    expected = whole.read_all()
    expected = expected if columns is None else expected.select(columns)
    reference = to_device(expected)
    for stream in (False, True):
        read = read_ipc(path if source == "path" else data, columns=columns, stream=stream)
        table = read.read_all() if stream else read
        assert table.schema == reference.schema and on_device(table)
        assert_same_batches(table, batches_of(to_host(reference)))
    del reference, read, table


def test_an_uncompressed_file_read_whole_is_one_transfer(ctx, feather_file, monkeypatch):
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda thread: (started.append(thread.name), start(thread))[1])
    table = read_ipc(feather_file("uncompressed"))
    assert not [name for name in started if name.startswith("arrow_gpu")]  # no reader thread
    assert table.column("x").num_chunks == 4  # one chunk per batch, as before
    assert to_host(table).equals(TABLE)
    empty = read_ipc(ipc_file_bytes(TABLE.slice(0, 0)))
    assert empty.num_rows == 0 and empty.schema == TABLE.schema
    del table, empty


def decode_threads():
    return [thread for thread in threading.enumerate()
            if thread.name.startswith("arrow_gpu decode")]


def no_decode_thread_left():
    gc.collect()
    deadline = time.monotonic() + 5
    while decode_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return decode_threads() == []


#: Where a compressed buffer's frame starts (ZSTD's and LZ4's magic numbers).
FRAME_MAGIC = {"zstd": b"\x28\xb5\x2f\xfd", "lz4": b"\x04\x22\x4d\x18"}


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_a_corrupt_batch_in_the_middle_fails_at_its_place(ctx, tmp_path, compression):
    sink = io.BytesIO()
    ends = []
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, TABLE.schema, options=options) as writer:
        for batch in TABLE.to_batches(max_chunksize=200):
            writer.write_batch(batch)
            ends.append(sink.tell())
    data = bytearray(sink.getvalue())
    frame = data.index(FRAME_MAGIC[compression], ends[1], ends[2])  # in batch 2
    data[frame:frame + 4] = b"\0\0\0\0"
    path = tmp_path / "corrupt.arrow"
    path.write_bytes(bytes(data))
    got = []
    with read_ipc(path, stream=True) as reader:
        with pytest.raises((pa.ArrowInvalid, OSError)):
            for batch in reader:
                got.append(to_host(batch))
    assert pa.Table.from_batches(got).equals(TABLE.slice(0, 400))  # the two before it
    with pytest.raises((pa.ArrowInvalid, OSError)):
        read_ipc(path)
    del reader, batch
    assert no_decode_thread_left()


@pytest.mark.parametrize("read", [
    lambda tmp_path: read_ipc(tmp_path / "many.arrow", stream=True),
    lambda tmp_path: read_parquet(tmp_path / "many.parquet", stream=True)],
    ids=["IPC", "Parquet"])
def test_closing_early_stops_the_decoding_threads(ctx, tmp_path, read):
    many = pa.table({"x": pa.array(range(20_000), pa.int64())})
    feather.write_feather(many, tmp_path / "many.arrow", compression="zstd", chunksize=100)
    pq.write_table(many, tmp_path / "many.parquet", row_group_size=100)
    gc.collect()
    threads = threading.active_count()
    reader = read(tmp_path)
    first = next(reader)
    assert to_host(first)["x"].to_pylist() == list(range(100))
    reader.close()
    assert threading.active_count() == threads
    reader = read(tmp_path)
    next(reader)
    del reader, first  # dropping it stops them too
    assert no_decode_thread_left() and threading.active_count() == threads


@settings(max_examples=max(settings().max_examples // 4, 10), deadline=None)
@given(ags.schemas(max_columns=3).flatmap(
    lambda schema: st.lists(ags.record_batches(schema, max_size=8), max_size=4).map(
        lambda batches: (schema, batches))),
    st.sampled_from([None, "lz4", "zstd"]), st.booleans())
def test_any_ipc_file_reads_as_it_was_written(stream, compression, file_format):
    schema, batches = stream
    assume(len(schema) > 0)  # a table without columns has no chunks to compare
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    new_writer = pa.ipc.new_file if file_format else pa.ipc.new_stream
    try:
        with new_writer(sink, schema, options=options) as writer:
            for batch in batches:
                writer.write_batch(batch)
    except pa.ArrowInvalid:  # e.g. a file format's dictionary replaced between batches
        assume(False)
    open_reader = pa.ipc.open_file if file_format else pa.ipc.open_stream
    try:  # pyarrow reads back some unusual layouts it wrote (empty unions...) as invalid
        open_reader(pa.BufferReader(sink.getvalue())).read_all()
    except (pa.ArrowException, OSError):
        assume(False)
    table = read_ipc(sink.getvalue())
    assert table.schema == schema
    assert_same_batches(table, batches)


def parquet_dataset(tmp_path):
    part = tmp_path / "dataset"
    part.mkdir()
    for index, start in enumerate(range(0, ROWS, 250)):
        pq.write_table(TABLE.slice(start, 250), part / f"{index}.parquet", row_group_size=60)
    return part


def test_parquet_row_groups_are_read_in_the_datasets_order(ctx, tmp_path):
    part = parquet_dataset(tmp_path)
    dataset = ds.dataset(part)
    cases = [{}, {"columns": ["s", "x"]},
             {"columns": ["x", "d"], "filter": ds.field("s").isin(["row 5", "row 700"])},
             {"filter": (ds.field("x") > 430) & (ds.field("x") < 610), "batch_size": 16},
             {"columns": {"twice": ds.field("x") * 2}},
             {"batch_size": 16}, {"columns": ["d"], "use_threads": False}]
    for options, decoders in itertools.product(cases, (1, 3)):
        expected = dataset.to_table(**options)
        for stream in (False, True):
            read = read_parquet(part, stream=stream, decoders=decoders, **options)
            table = read.read_all() if stream else read
            assert table.schema == expected.schema and on_device(table)
            assert to_host(table).equals(expected), options  # the same rows in the same order
            if "batch_size" in options:
                assert max(len(chunk) for chunk in table["x"].chunks) <= 16
    del read, table


def test_closing_early_interrupts_the_row_groups_in_decoding(ctx, tmp_path, monkeypatch):
    """A row group still decoding when the reader closes is dropped before its copy (the
    scan of a fragment between two batches), not decoded and copied to the end."""
    pq.write_table(pa.table({"x": pa.array(range(10), pa.int64())}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"x": pa.array(range(100_000), pa.int64())}),
                   tmp_path / "1.parquet", row_group_size=100_000)
    copies = []

    def counted(data, device):
        copies.append(data.num_rows)
        return to_device(data, device)

    monkeypatch.setattr(arrow_gpu._streams.parquet, "to_device", counted)
    reader = read_parquet(tmp_path, stream=True, decoders=2, batch_size=10,
                          filter=ds.field("x") >= 0)  # 10,000 batches to scan in 1.parquet
    assert to_host(next(reader))["x"].to_pylist() == list(range(10))
    reader.close()
    assert copies == [10] and no_decode_thread_left()


def test_parquet_column_chunks_make_a_batch_per_row_group_or_the_scans_batches(ctx, tmp_path):
    """Row groups decode column by column, whole or (with ``batch_size``) a batch of rows at
    a time: the device batches are a batch per row group, or the dataset scan's, cut where
    it cuts them, nested columns and dotted names included."""
    table = TABLE.append_column("pair", pa.StructArray.from_arrays(
        [TABLE["x"].combine_chunks(), TABLE["s"].combine_chunks()], ["a", "b"])).append_column(
        "list", pa.array([[i] * (i % 3) for i in range(ROWS)])).append_column(
        "dotted.name", pa.array(range(ROWS), pa.int16()))
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=300)
    pq.write_table(table, tmp_path / "b.parquet", row_group_size=450)
    dataset = ds.dataset(tmp_path)
    for columns, options in itertools.product(
            (None, ["list", "pair", "x"], ["dotted.name", "s"], ["x", "x"]),
            ({}, {"batch_size": 128})):
        try:
            expected = dataset.to_table(columns=columns, **options)
        except pa.ArrowInvalid:
            continue
        got = read_parquet(tmp_path, columns=columns, decoders=3, **options)
        assert got.schema == expected.schema and on_device(got)
        assert to_host(got).equals(expected), columns
        cuts = [len(chunk) for chunk in got.column(0).chunks]
        if options:
            assert cuts == [len(chunk) for chunk in expected.column(0).chunks]
        assert cuts == ([300, 300, 300, 100, 450, 450, 100] if not options else
                        [128, 128, 44] * 3 + [100, 128, 128, 128, 66, 128, 128, 128, 66, 100])


def test_columns_cut_at_other_rows_are_read_again_whole(ctx, tmp_path, monkeypatch):
    """A column that the reader cuts at other rows than the rest (it cuts short a piece
    whose binary would pass 2 GiB) cannot make batches with them: its row group is read
    again whole and cut on the host."""
    pq.write_table(TABLE, tmp_path / "t.parquet", row_group_size=400)
    chunk_to_device = arrow_gpu._streams.parquet._column_chunk_to_device

    def strings_cut_short(chunk, *args, **kwargs):
        row_group, pieces = chunk_to_device(chunk, *args, **kwargs)
        if chunk[1] == "s":
            pieces = [part for piece in pieces for part in (
                (piece.slice(0, 1), piece.slice(1)) if len(piece) > 1 else (piece,))]
        return row_group, pieces

    monkeypatch.setattr(arrow_gpu._streams.parquet, "_column_chunk_to_device", strings_cut_short)
    for options, cuts in (({}, [400, 400, 200]),
                          ({"batch_size": 150}, [150, 150, 100, 150, 150, 100, 150, 50])):
        got = read_parquet(tmp_path / "t.parquet", decoders=2, **options)
        assert to_host(got).equals(TABLE) and on_device(got)
        assert [len(chunk) for chunk in got["s"].chunks] == cuts


def test_a_column_chunk_read_stops_between_its_pieces(ctx, tmp_path):
    """A column chunk's pieces decode and copy in one call without the GIL; a reader that
    closes early stops that call before its next piece, with the pieces copied by then."""
    from arrow_gpu._cuda import _ColumnChunkReader, _StopFlag

    pq.write_table(pa.table({"x": pa.array(range(2000))}), tmp_path / "one.parquet")
    reader = _ColumnChunkReader(pa.memory_map(str(tmp_path / "one.parquet")),
                                pa.default_memory_pool())
    stop, copies = _StopFlag(), []

    def copied(nbytes):
        copies.append(nbytes)
        if len(copies) == 5:
            stop.set()

    with transfer_progress(copied):
        pieces = reader.to_device(0, [0], 10, ctx, stop)
    assert stop.is_set() and len(copies) == 5
    assert [to_host(piece).to_pylist() for piece in pieces] == [
        list(range(start, start + 10)) for start in range(0, 50, 10)]
    with transfer_progress(lambda nbytes: None):
        whole = reader.to_device(0, [0], 1500, ctx, _StopFlag())
    assert [len(piece) for piece in whole] == [1500, 500]


def test_a_column_chunk_reader_refuses_what_is_not_whole_parquet(ctx, tmp_path):
    """The native reader of column chunks opens a file that is not Parquet, or a Parquet
    file cut short, or reads a row group or column the file lacks, with pyarrow's error."""
    from arrow_gpu._cuda import _ColumnChunkReader, _StopFlag

    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"x": pa.array(range(100))}), path)
    data = path.read_bytes()
    for name, content, message in (("text.parquet", b"not parquet at all", "magic bytes"),
                                   ("cut.parquet", data[:len(data) // 2], "magic bytes")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(pa.ArrowInvalid, match=message):
            _ColumnChunkReader(pa.memory_map(str(tmp_path / name)), pa.default_memory_pool())
    reader = _ColumnChunkReader(pa.memory_map(str(path)), pa.default_memory_pool())
    for row_group, leaves in ((1, [0]), (0, [1]), (-1, [0])):
        with pytest.raises(pa.ArrowException):
            reader.to_device(row_group, leaves, 10, ctx, _StopFlag())
    assert [len(piece) for piece in reader.to_device(0, [0], 64, ctx, _StopFlag())] == [64, 36]


def test_parquet_decodes_into_pinned_memory_unless_told_otherwise(ctx, tmp_path):
    """The decoders fill the pinned pool (their pieces then move by DMA alone) and hold it
    only while a piece is in flight; a ``memory_pool`` given takes its place."""
    part = parquet_dataset(tmp_path)
    expected = ds.dataset(part).to_table()
    pinned = arrow_gpu.pinned_memory_pool(ctx)
    for options in ({}, {"filter": ds.field("x") >= 0}):  # by column chunks, by fragments
        before = pinned.total_bytes_allocated()
        table = read_parquet(part, decoders=3, **options)
        assert to_host(table).equals(expected)
        assert pinned.total_bytes_allocated() > before
        gc.collect()
        assert pinned.bytes_allocated() == 0
    ordinary = pa.default_memory_pool()
    before = pinned.total_bytes_allocated(), ordinary.total_bytes_allocated()
    table = read_parquet(part, decoders=3, memory_pool=ordinary)
    assert to_host(table).equals(expected)
    assert pinned.total_bytes_allocated() == before[0]
    assert ordinary.total_bytes_allocated() > before[1]
    del table


def test_parquet_batches_are_the_scans_for_row_groups_past_its_batch_size(ctx, tmp_path):
    """Without ``batch_size``, a row group longer than the scan's default batch (131,072
    rows) is cut where ``dataset.to_table()`` cuts it."""
    rows = 300_000
    table = pa.table({"x": pa.array(range(rows), pa.int32()),
                      "s": pa.array([str(i % 10) for i in range(rows)])})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=rows)
    expected = ds.dataset(tmp_path / "big.parquet").to_table()
    got = read_parquet(tmp_path / "big.parquet", decoders=2)
    assert to_host(got).equals(expected)
    assert ([len(chunk) for chunk in got["s"].chunks] ==
            [len(chunk) for chunk in expected["s"].chunks] == [131_072, 131_072, 37_856])
    del got


def test_parquet_formats_with_options_of_their_own_read_as_scanned(ctx, tmp_path):
    """A dataset whose format has read options (here, strings read as dictionaries) is
    scanned, not read by pyarrow.parquet's reader with the defaults."""
    part = parquet_dataset(tmp_path)
    dataset = ds.dataset(part, format=ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=["s"])))
    expected = dataset.to_table()
    assert pa.types.is_dictionary(expected.schema.field("s").type)
    got = read_parquet(dataset, decoders=2)
    assert got.schema == expected.schema and to_host(got).equals(expected)
    del got


def test_parquet_logical_types_read_as_the_scan_reads_them(ctx, tmp_path):
    """JSON and UUID columns of a file that does not store its Arrow schema (as other
    writers' files do not) read as the dataset's scan reads them: string and 16-byte
    binary, not pyarrow.parquet.ParquetFile's extension types."""
    table = pa.table({"j": pa.array(['{"a": 1}', None, "[]"], pa.json_()),
                      "u": pa.array([bytes(range(16)), None, bytes(16)], pa.uuid())})
    pq.write_table(table, tmp_path / "logical.parquet", store_schema=False)
    expected = ds.dataset(tmp_path / "logical.parquet").to_table()
    got = read_parquet(tmp_path / "logical.parquet", decoders=2)
    assert got.schema == expected.schema and to_host(got).equals(expected)
    del got


def test_parquet_decoders_and_prefetch_must_be_positive_ints(ctx, tmp_path):
    part = parquet_dataset(tmp_path)
    for decoders in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="decoders must be an int of at least 1"):
            read_parquet(part, decoders=decoders)
    for stream in (False, True):  # the Table form, gathered without a reader, checks it too
        with pytest.raises(ValueError, match="prefetch must be at least 1"):
            read_parquet(part, stream=stream, prefetch=0)
        with pytest.raises(TypeError, match="prefetch must be an int"):
            read_parquet(part, stream=stream, prefetch=2.5)


def test_partitioned_and_non_parquet_datasets(ctx, tmp_path):
    ds.write_dataset(TABLE.select(["x"]).append_column("p", pa.array([i % 2 for i in range(ROWS)])),
                     tmp_path / "parts", format="parquet", partitioning=["p"],
                     max_rows_per_group=100, min_rows_per_group=100)
    dataset = ds.dataset(tmp_path / "parts", format="parquet", partitioning=["p"])
    expected = dataset.to_table(filter=ds.field("p") == 1)
    assert to_host(read_parquet(dataset, filter=ds.field("p") == 1)).equals(expected)
    feather.write_feather(TABLE, tmp_path / "t.arrow", chunksize=300)
    ipc = ds.dataset(tmp_path / "t.arrow", format="ipc")  # the scanner reads what is not Parquet
    assert to_host(read_parquet(ipc, columns=["x"])).equals(TABLE.select(["x"]))


def test_parquet_files_and_datasets(ctx, tmp_path):
    pq.write_table(TABLE, tmp_path / "one.parquet", row_group_size=250)
    table = read_parquet(tmp_path / "one.parquet")
    assert on_device(table) and to_host(table).equals(TABLE)
    part = tmp_path / "dataset"
    part.mkdir()
    pq.write_table(TABLE.slice(0, 600), part / "a.parquet", row_group_size=200)
    pq.write_table(TABLE.slice(600), part / "b.parquet", row_group_size=200)
    back = to_host(read_parquet(str(part), columns=["x", "s"]))
    assert back.sort_by("x").equals(TABLE.select(["x", "s"]))
    filtered = read_parquet(part, columns=["x"], filter=ds.field("x") < 10)
    assert sorted(to_host(filtered)["x"].to_pylist()) == list(range(10))
    with read_parquet(ds.dataset(part), stream=True, prefetch=1, batch_size=100) as reader:
        sizes = [batch.num_rows for batch in reader]
        # The decoders copy ahead; the batches are handed over on this thread.
        assert not [thread for thread in threading.enumerate()
                    if thread.name.startswith("arrow_gpu to device")]
    assert sum(sizes) == ROWS and max(sizes) <= 200
    del table, filtered


def test_parquet_on_another_filesystem_is_read_through_its_files(ctx, tmp_path):
    """A dataset on a filesystem other than the local one (here a subtree of it) is read
    through the files that filesystem opens, not mapped by path."""
    import pyarrow.fs as fs

    pq.write_table(TABLE.slice(0, 700), tmp_path / "a.parquet", row_group_size=300)
    pq.write_table(TABLE.slice(700), tmp_path / "b.parquet", row_group_size=300)
    subtree = fs.SubTreeFileSystem(str(tmp_path), fs.LocalFileSystem())
    dataset = ds.dataset("", filesystem=subtree, format="parquet")
    expected = ds.dataset(tmp_path).to_table()
    got = read_parquet(dataset, decoders=2)
    assert on_device(got) and to_host(got).equals(expected)
    assert [len(chunk) for chunk in got["x"].chunks] == [300, 300, 100, 300]


def test_bad_parquet_input(ctx, tmp_path):
    pq.write_table(TABLE, tmp_path / "one.parquet")
    with pytest.raises(pa.ArrowInvalid, match="nope"):
        read_parquet(tmp_path / "one.parquet", columns=["nope"])
    with pytest.raises(FileNotFoundError):
        read_parquet(tmp_path / "missing.parquet")


def test_the_parquet_example_runs():
    example = Path(__file__).resolve().parent.parent / "examples" / "parquet_to_torch.py"
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "skipped" in result.stdout or "1000000 rows" in result.stdout


def test_malformed_files_raise_in_a_child_without_crashing(tmp_path):
    # Bytes from a file are untrusted: cut, bit-flipped and foreign ones fail clearly.
    table = pa.table({"x": list(range(100)), "s": [str(i) for i in range(100)]})
    feather.write_feather(table, tmp_path / "t.arrow", compression="uncompressed")
    pq.write_table(table, tmp_path / "t.parquet")
    whole = (tmp_path / "t.arrow").read_bytes()
    cases = {"cut.arrow": whole[: len(whole) // 2], "garbage.arrow": b"ARROW1" + b"\xff" * 200,
             "flipped.arrow": whole[:200] + bytes([whole[200] ^ 0x40]) + whole[201:],
             "cut.parquet": (tmp_path / "t.parquet").read_bytes()[:-40]}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    code = f"""
import pathlib, pyarrow as pa, arrow_gpu.loading as loading
for path in sorted(pathlib.Path({str(tmp_path)!r}).glob("*")):
    if path.name.startswith("t."):
        continue
    read = loading.read_parquet if path.suffix == ".parquet" else loading.read_ipc
    try:
        result = read(str(path))
        result.validate(full=False)
        print(path.name, "read")
    except (pa.ArrowException, OSError, ValueError) as error:
        print(path.name, "refused", type(error).__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr  # no crash
    outcomes = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert set(outcomes) == set(cases)
    for name in ("cut.arrow", "garbage.arrow", "cut.parquet"):
        assert outcomes[name].startswith("refused"), (name, outcomes[name])


# ---- an uncompressed file by path: its pages read with pread, not through the mapping ----

#: A file large enough for the staging pipeline (the small-copy threshold is 1 MiB), of
#: several batches and types: strings and lists with nulls, dictionaries, booleans, structs.
BIG_ROWS = 400_000
BIG_TABLE = pa.table({
    "i": pa.array(range(BIG_ROWS), pa.int64()),
    "f": pa.array([i / 3 if i % 11 else None for i in range(BIG_ROWS)], pa.float64()),
    "s": pa.array([None if i % 7 == 0 else f"value {i}" for i in range(BIG_ROWS)]),
    "l": pa.array([None if i % 13 == 0 else list(range(i % 5)) for i in range(BIG_ROWS)],
                  pa.list_(pa.int32())),
    "d": pa.array([f"key {i % 17}" for i in range(BIG_ROWS)]).dictionary_encode(),
    "b": pa.array([i % 3 == 0 for i in range(BIG_ROWS)]),
    "t": pa.array([{"a": i, "b": str(i % 9)} for i in range(BIG_ROWS)]),
})


def open_fds():
    return sorted(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.arrow"
    feather.write_feather(BIG_TABLE, path, compression="uncompressed", chunksize=90_000)
    assert 8 << 20 < path.stat().st_size < 40 << 20
    return path


@pytest.mark.parametrize("options", [{"threads": 4}, {"threads": 1}, {"staging_bytes": 0}],
                         ids=["workers", "inline", "no staging ring"])
def test_a_file_by_path_reads_as_the_same_table_moved_from_memory(ctx, big_file, options):
    expected = to_device(feather.read_table(big_file, memory_map=False))
    fds = open_fds()
    with transfer_options(**options), transfer_progress(lambda nbytes: None) as progress:
        table = read_ipc(big_file)
    assert open_fds() == fds  # the descriptor it read with is closed
    assert progress.bytes_moved == sum(buffer.size for buffer in buffers(table))
    assert table.column("i").num_chunks == 5 and on_device(table)
    assert_same_batches(table, batches_of(to_host(expected)))
    selected = read_ipc(str(big_file), columns=["t", "s"])
    assert_same_batches(selected, batches_of(to_host(expected).select(["t", "s"])))
    del expected, table, selected


@pytest.mark.parametrize("table", [pa.table({"x": pa.array(range(1000), pa.int64())}),
                                   TABLE.slice(0, 10)], ids=["one buffer", "several"])
def test_a_small_file_by_path_is_read_through_a_host_buffer(ctx, tmp_path, table):
    # Under the small-copy threshold, the file's pieces are packed in ordinary host memory.
    path = tmp_path / "small.arrow"
    feather.write_feather(table, path, compression="uncompressed")
    with transfer_progress(lambda nbytes: None) as progress:
        read = read_ipc(path)
    assert progress.bytes_moved == sum(buffer.size for buffer in buffers(read))
    assert_same_batches(read, batches_of(table.combine_chunks()))
    del read


def then(real, action):
    """``real`` (a function of the reader's), calling ``action()`` once it returned: the
    file changes at that point of the read."""
    def call_then_act(*args, **kwargs):
        result = real(*args, **kwargs)
        action()
        return result
    return call_then_act


@pytest.mark.parametrize("when", ["opened", "reading metadata", "metadata read"])
@pytest.mark.parametrize("options", [{"threads": 4}, {"threads": 1}, {"staging_bytes": 0}],
                         ids=["workers", "inline", "no staging ring"])
def test_a_file_truncated_after_it_was_opened_raises(ctx, big_file, tmp_path, monkeypatch,
                                                     options, when):
    path = tmp_path / "shrinking.arrow"
    path.write_bytes(big_file.read_bytes())
    fds = open_fds()
    # Once opened, its footer is read; then its batches' metadata; then their bytes.
    owner, name = {"opened": (FileImage, "open"), "reading metadata": (ipc_files, "file_batches"),
                   "metadata read": (ipc_files, "views_of")}[when]
    half = path.stat().st_size // 2
    monkeypatch.setattr(owner, name, then(getattr(owner, name), lambda: os.truncate(path, half)))
    with transfer_options(**options), pytest.raises(OSError, match="truncated"):
        read_ipc(path)  # through a mapping of the file, this would be SIGBUS
    monkeypatch.undo()
    gc.collect()
    assert open_fds() == fds  # ctx checks that the device allocation was given back


def test_a_file_that_shrinks_and_grows_while_it_is_opened_never_crashes(tmp_path):
    # A producer rewriting the file while readers open it (a rotated log): each read gives
    # the file's batches or raises; none dies of SIGBUS, as one through a mapping would.
    path = tmp_path / "rewritten.arrow"
    code = f"""
import os, threading, pyarrow as pa, pyarrow.feather as feather
from arrow_gpu import to_host
from arrow_gpu.loading import read_ipc
path = {str(path)!r}
table = pa.table({{"x": pa.array(range(200_000), pa.int64())}})
feather.write_feather(table, path, compression="uncompressed", chunksize=100)
whole = open(path, "rb").read()
stop = threading.Event()
def rewrite():
    while not stop.is_set():
        os.truncate(path, 64)
        with open(path, "r+b") as file:
            file.write(whole)
threading.Thread(target=rewrite, daemon=True).start()
outcomes = set()
for _ in range(40):
    try:
        read = to_host(read_ipc(path))
        assert read.equals(table), "a read gave other rows than the file's"
        outcomes.add("read")
    except (OSError, pa.ArrowInvalid) as error:
        outcomes.add(type(error).__name__)
stop.set()
print(sorted(outcomes))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, f"rc {done.returncode}\n{done.stdout}\n{done.stderr}"


def test_a_file_truncated_while_it_is_read_raises(ctx, big_file, tmp_path):
    path = tmp_path / "shrinking.arrow"
    path.write_bytes(big_file.read_bytes())
    fds = open_fds()
    # One thread stages, issues and reports each chunk in turn: the second one finds the end.
    with transfer_options(threads=1), transfer_progress(lambda nbytes: os.truncate(path, 0)):
        with pytest.raises(OSError, match="truncated while being read"):
            read_ipc(path)
    gc.collect()
    assert open_fds() == fds


def test_a_descriptor_that_cannot_be_read_raises(ctx, big_file, monkeypatch):
    fds = open_fds()
    write_only = os.open(big_file, os.O_WRONLY)
    upload = ipc_files._to_device_from_file
    monkeypatch.setattr(ipc_files, "_to_device_from_file",
                        lambda context, data, mapping, fd: upload(context, data, mapping,
                                                                  write_only))
    try:
        with pytest.raises(OSError, match="Bad file descriptor"):
            read_ipc(big_file)
    finally:
        os.close(write_only)
    monkeypatch.undo()
    gc.collect()
    assert open_fds() == fds


def test_the_opened_file_is_read_when_its_path_names_another_by_then(ctx, big_file, tmp_path,
                                                                     monkeypatch):
    expected = batches_of(feather.read_table(big_file, memory_map=False))
    path = tmp_path / "replaced.arrow"
    path.write_bytes(big_file.read_bytes())
    other = tmp_path / "other.arrow"
    feather.write_feather(BIG_TABLE.slice(0, 10), other, compression="uncompressed")
    fds = open_fds()
    monkeypatch.setattr(FileImage, "open", then(FileImage.open, lambda: os.replace(other, path)))
    table = read_ipc(path)
    monkeypatch.undo()
    assert open_fds() == fds
    assert_same_batches(table, expected)
    del table


@pytest.mark.parametrize("options", [{}, {"filter": ds.field("x") >= 0}],
                         ids=["row-group reader", "fragment scan"])
def test_a_corrupt_parquet_file_fails_at_its_place(ctx, tmp_path, options):
    """Row groups decode on threads: a file whose pages are garbage (its footer intact)
    raises pyarrow's error at the consumer, after the rows of the files before it; a file
    that is not Parquet at all is refused."""
    table = pa.table({"x": pa.array(range(3000)), "s": [f"row {i}" for i in range(3000)]})
    for index in range(3):
        pq.write_table(table.slice(1000 * index, 1000), tmp_path / f"{index}.parquet",
                       row_group_size=250)
    bad = tmp_path / "1.parquet"
    data = bytearray(bad.read_bytes())
    data[8:len(data) // 2] = b"\xab" * (len(data) // 2 - 8)
    bad.write_bytes(bytes(data))
    threads = threading.active_count()
    with pytest.raises(OSError, match="page header"):
        read_parquet(tmp_path, **options)
    rows = 0
    with read_parquet(tmp_path, stream=True, **options) as reader:
        with pytest.raises(OSError, match="page header"):
            for batch in reader:
                rows += batch.num_rows
    assert rows <= 1000  # nothing of the files after the bad one
    assert to_host(read_parquet(tmp_path / "0.parquet", **options)).equals(table.slice(0, 1000))
    pq.write_table(table.slice(1000, 1000), bad)  # whole again
    (tmp_path / "3.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(pa.ArrowInvalid, match="magic bytes"):
        read_parquet(tmp_path, **options)
    assert threading.active_count() == threads


# ---- a file that shrinks while a reader has it open: a clean error, never SIGBUS ----

#: How each kind of file is written (``path``, ``table``, ``rows``: rows per batch or row
#: group) and read by a reader that stays open while the file shrinks.
SHRINKING = {
    "IPC file": ("feather.write_feather(table, path, compression='uncompressed', "
                 "chunksize=rows)", "read_ipc(path, stream=True, prefetch=1)"),
    "IPC file, lz4": ("feather.write_feather(table, path, compression='lz4', chunksize=rows)",
                      "read_ipc(path, stream=True, prefetch=1)"),
    "IPC file, zstd": ("feather.write_feather(table, path, compression='zstd', "
                       "chunksize=rows)", "read_ipc(path, stream=True, prefetch=1)"),
    "IPC stream": ("write_stream(table, path, None, rows)",
                   "read_ipc(path, stream=True, prefetch=1)"),
    "IPC stream, zstd": ("write_stream(table, path, 'zstd', rows)",
                         "read_ipc(path, stream=True, prefetch=1)"),
    "Parquet": ("pq.write_table(table, path, row_group_size=rows)",
                "read_parquet(path, stream=True, prefetch=1, decoders=1)"),
    "Parquet, uncompressed": ("pq.write_table(table, path, row_group_size=rows, "
                              "compression='none')",
                              "read_parquet(path, stream=True, prefetch=1, decoders=1)"),
    "Parquet, filtered": ("pq.write_table(table, path, row_group_size=rows)",
                          "read_parquet(path, stream=True, prefetch=1, decoders=1, "
                          "filter=ds.field('x') >= 0)"),
}


@pytest.mark.parametrize("kind", SHRINKING)
def test_a_file_that_shrinks_under_an_open_reader_raises_cleanly(tmp_path, kind):
    """Truncated (a log rotated, a file rewritten) after the reader's first batch: the
    batches read are the file's, and the rest either read or end in a clean exception."""
    write, read = SHRINKING[kind]
    code = f"""
import os, pyarrow as pa, pyarrow.dataset as ds, pyarrow.feather as feather
import pyarrow.parquet as pq
from arrow_gpu import to_host
from arrow_gpu.loading import read_ipc, read_parquet

def write_stream(table, path, compression, rows):
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(path, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=rows)

rows = 20_000
table = pa.table({{"x": pa.array(range(40 * rows), pa.int64()),
                  "s": [f"value {{i}}" for i in range(40 * rows)]}})
path = {str(tmp_path / "shrinking")!r}
{write}
with {read} as reader:
    got = [to_host(next(reader))]
    os.truncate(path, os.path.getsize(path) // 3)
    try:
        got += [to_host(batch) for batch in reader]
        outcome = "read"
    except (OSError, pa.ArrowInvalid) as error:
        outcome = f"raised {{type(error).__name__}}: {{error}}"
read = pa.Table.from_batches(got)
assert read.equals(table.slice(0, read.num_rows)), "the batches read are not the file's"
print("rows", read.num_rows, outcome)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"rc {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("rows "), done.stdout
    # The reader ran a few batches ahead at most: the file's end was found, not read past.
    assert " raised " in done.stdout, done.stdout


# ---- a finished reader gives its device memory back ----

#: Each kind of DeviceReader, made from ``path`` (a directory holding the files written by
#: ``finished_reader_files``).
FINISHED_READERS = {
    "read_parquet": lambda path: read_parquet(path / "t.parquet", stream=True),
    "read_parquet, filtered": lambda path: read_parquet(path / "t.parquet", stream=True,
                                                        filter=ds.field("x") >= 0),
    "read_ipc": lambda path: read_ipc(path / "t.arrow", stream=True),
    "read_ipc, zstd": lambda path: read_ipc(path / "zstd.arrow", stream=True),
    "read_ipc, stream format": lambda path: read_ipc(path / "t.arrows", stream=True),
    "to_device(iterator)": lambda path: to_device(iter(TABLE.to_batches(300)), prefetch=4),
    "to_device(reader)": lambda path: to_device(TABLE.to_reader(300)),
}


@pytest.fixture
def finished_reader_files(tmp_path):
    pq.write_table(TABLE, tmp_path / "t.parquet", row_group_size=300)
    feather.write_feather(TABLE, tmp_path / "t.arrow", compression="uncompressed",
                          chunksize=300)
    feather.write_feather(TABLE, tmp_path / "zstd.arrow", compression="zstd", chunksize=300)
    (tmp_path / "t.arrows").write_bytes(ipc_stream_bytes(TABLE))
    return tmp_path


@pytest.mark.parametrize("end", ["exhausted", "closed", "exhausted and closed"])
@pytest.mark.parametrize("kind", FINISHED_READERS)
def test_a_finished_reader_holds_no_device_memory(ctx, finished_reader_files, kind, end):
    reader = FINISHED_READERS[kind](finished_reader_files)
    gc.collect()
    before = ctx.bytes_allocated
    rows = 0
    if end != "closed":
        for batch in reader:
            rows += batch.num_rows
        assert rows == ROWS
    else:
        batch = next(reader)
        rows = batch.num_rows
    if end != "exhausted":
        reader.close()
    del batch
    gc.collect()  # the reader stays alive: only what it holds is collected
    assert ctx.bytes_allocated == before, "the finished reader holds device memory"
    assert rows > 0 and reader.schema == TABLE.schema


# ---- zero columns, zero rows ----

#: Tables of no columns (whose rows still count) and of no rows.
EMPTY_SHAPES = {
    "no columns": TABLE.slice(0, 7).drop_columns(TABLE.column_names),
    "no rows": TABLE.slice(0, 0),
    "neither": pa.table({}),
}


def write_shape(table, path, form):
    if form == "Parquet":
        pq.write_table(table, path)
        return pq.read_table(path)
    compression = "zstd" if form.endswith("zstd") else None
    options = pa.ipc.IpcWriteOptions(compression=compression)
    new_writer = pa.ipc.new_stream if form.startswith("IPC stream") else pa.ipc.new_file
    with new_writer(path, table.schema, options=options) as writer:
        writer.write_table(table)
    open_reader = pa.ipc.open_stream if form.startswith("IPC stream") else pa.ipc.open_file
    return open_reader(pa.OSFile(str(path))).read_all()


@pytest.mark.parametrize("stream", [False, True], ids=["table", "stream"])
@pytest.mark.parametrize("source", ["path", "bytes"])
@pytest.mark.parametrize("form", ["IPC file", "IPC file, zstd", "IPC stream", "Parquet"])
@pytest.mark.parametrize("shape", EMPTY_SHAPES)
def test_empty_shapes_keep_their_rows_on_the_device(ctx, tmp_path, shape, form, source,
                                                    stream):
    if form == "Parquet" and source == "bytes":
        pytest.skip("read_parquet reads files and datasets")
    path = tmp_path / "empty"
    expected = write_shape(EMPTY_SHAPES[shape], path, form)  # as pyarrow reads it back
    read = read_parquet if form == "Parquet" else read_ipc
    result = read(path if source == "path" else path.read_bytes(), stream=stream)
    if stream:  # each batch says where it is, with or without columns
        batches = list(result)
        assert all(batch.device_type == pa.DeviceAllocationType.CUDA for batch in batches)
        table = pa.Table.from_batches(batches, schema=result.schema)
    else:  # a Table says it by its chunks alone
        table = result
        assert on_device(table)
    assert table.schema == expected.schema and table.num_rows == expected.num_rows
    assert to_host(table).equals(expected)
    if stream:
        result.close()
    del result, table
