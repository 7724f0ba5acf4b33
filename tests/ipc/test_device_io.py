"""Device IO: files over device buffers, IPC messages with device bodies, shared batches."""

import gc
import pickle
import struct
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from arrow_gpu import CudaBuffer
from arrow_gpu.io import (BufferReader, BufferWriter, SharedBatch, export_batch, import_batch,
                          read_message, read_record_batch, serialize_record_batch)

CPU = pa.default_cpu_memory_manager()


def to_host(data):
    """A device batch or table, copied to the host (the only safe way to compare it)."""
    if isinstance(data, pa.Table):
        return pa.Table.from_batches([b.copy_to(CPU) for b in data.to_batches()], data.schema)
    return data.copy_to(CPU)


def device_buffers(data):
    """Every non-null buffer of every column, dictionaries and children included."""
    def walk(array):
        yield from (b for b in array.buffers() if b is not None)
        if isinstance(array, pa.DictionaryArray):
            yield from walk(array.dictionary)
    columns = data.columns
    for column in columns:
        for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
            yield from walk(chunk)


def assert_on_device(data):
    # Arrow's IPC reader gives empty bodies a CPU buffer of size 0: no data, no hazard.
    buffers = [b for b in device_buffers(data) if b.size > 0]
    assert buffers, "expected some buffers"
    assert all(b.device_type == pa.DeviceAllocationType.CUDA for b in buffers)
    assert not any(b.is_cpu for b in buffers)


def sample_batch(offset=0):
    return pa.record_batch({
        "i": pa.array([1 + offset, None, 3, 4], pa.int64()),
        "f": pa.array([0.5, 1.5, None, 3.5], pa.float32()),
        "s": pa.array(["a", None, "ccc", "dd"]),
        "l": pa.array([[1], [2, 3], None, []], pa.list_(pa.int32())),
        "st": pa.array([{"a": 1, "b": "x"}, None, {"a": 3, "b": None}, {"a": 4, "b": "y"}]),
        "d": pa.array(["x", "y", None, "x"]).dictionary_encode(),
    })


def stream_bytes(*batches):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


# ---------------------------------------------------------------------------------------
# BufferReader

def test_reader_is_a_native_file(ctx):
    reader = BufferReader(ctx.buffer_from_data(b"abc"))
    assert isinstance(reader, pa.NativeFile)
    assert reader.readable() and reader.seekable() and not reader.writable()
    assert reader.size() == 3


def test_reader_reads_copy_to_host(ctx):
    reader = BufferReader(ctx.buffer_from_data(b"0123456789"))
    assert reader.read(4) == b"0123"
    assert reader.tell() == 4
    target = bytearray(3)
    assert reader.readinto(target) == 3 and target == b"456"
    assert reader.read() == b"789"
    assert reader.read() == b""
    assert reader.read_at(3, 2) == b"234"


def test_read_buffer_is_a_zero_copy_device_slice(ctx):
    buf = ctx.buffer_from_data(b"0123456789")
    reader = BufferReader(buf)
    reader.seek(2)
    piece = reader.read_buffer(5)
    assert isinstance(piece, CudaBuffer)
    assert piece.address == buf.address + 2 and piece.size == 5
    assert not piece.is_cpu and piece.to_pybytes() == b"23456"
    rest = reader.read_buffer()
    assert rest.address == buf.address + 7 and rest.to_pybytes() == b"789"
    assert reader.read_buffer(4).size == 0  # at the end: empty, not an error


def test_reader_accepts_device_pyarrow_buffer(ctx):
    array = pa.array([1, 2, 3], pa.int8()).copy_to(ctx.memory_manager)
    reader = BufferReader(array.buffers()[1])  # a plain pa.Buffer over device memory
    assert reader.read() == b"\x01\x02\x03"


@pytest.mark.parametrize("position, whence, expected", [(3, 0, 3), (-2, 2, 8), (0, 2, 10)])
def test_reader_seek(ctx, position, whence, expected):
    reader = BufferReader(ctx.buffer_from_data(b"0123456789"))
    assert reader.seek(position, whence) == expected
    assert reader.tell() == expected
    reader.seek(1)
    assert reader.seek(2, 1) == 3


@pytest.mark.parametrize("position, whence", [(11, 0), (-1, 0), (1, 2), (-11, 2)])
def test_reader_seek_out_of_bounds(ctx, position, whence):
    reader = BufferReader(ctx.buffer_from_data(b"0123456789"))
    reader.seek(4)
    with pytest.raises(OSError, match="out of bounds"):
        reader.seek(position, whence)
    assert reader.tell() == 4  # unchanged


def test_reader_read_at_out_of_bounds(ctx):
    reader = BufferReader(ctx.buffer_from_data(b"0123"))
    with pytest.raises(OSError, match="out of bounds"):
        reader.read_at(1, 5)


def test_reader_rejects_host_memory():
    with pytest.raises(pa.ArrowTypeError, match="not backed by a CudaBuffer"):
        BufferReader(pa.py_buffer(b"abc"))
    with pytest.raises(TypeError, match="expected a CudaBuffer"):
        BufferReader(b"abc")


def test_closed_reader_releases_the_buffer(ctx):
    baseline = ctx.bytes_allocated
    reader = BufferReader(ctx.new_buffer(1024))
    assert ctx.bytes_allocated == baseline + 1024
    reader.close()
    gc.collect()
    assert ctx.bytes_allocated == baseline
    assert reader.closed
    with pytest.raises(ValueError, match="closed"):
        reader.read()


# ---------------------------------------------------------------------------------------
# BufferWriter

def test_writer_writes_and_tells(ctx):
    buf = ctx.buffer_from_data(b"." * 8)
    with BufferWriter(buf) as writer:
        assert isinstance(writer, pa.NativeFile) and writer.writable()
        assert writer.write(b"abc") == 3
        assert writer.tell() == 3
        writer.write(pa.py_buffer(b"de"))
    assert buf.to_pybytes() == b"abcde..."


def test_writeat_and_seek(ctx):
    buf = ctx.buffer_from_data(b"." * 8)
    writer = BufferWriter(buf)
    assert writer.writeat(5, b"xy") == 2
    assert writer.tell() == 7
    assert writer.seek(1) == 1
    writer.write(b"A")
    assert writer.seek(-1, 2) == 7
    writer.write(b"Z")
    writer.close()
    assert buf.to_pybytes() == b".A...xyZ"


@pytest.mark.parametrize("write", [
    lambda w: w.write(b"123456789"),
    lambda w: w.writeat(6, b"123"),
    lambda w: w.writeat(9, b""),
    lambda w: w.seek(9),
])
def test_writes_past_the_end_fail_and_write_nothing(ctx, write):
    buf = ctx.buffer_from_data(b"." * 8)
    writer = BufferWriter(buf)
    writer.write(b"ab")
    with pytest.raises(OSError, match="past the end|out of bounds"):
        write(writer)
    assert writer.tell() == 2
    writer.close()
    assert buf.to_pybytes() == b"ab......"


def test_staging_buffer_gathers_small_writes(ctx):
    buf = ctx.buffer_from_data(b"." * 20)
    writer = BufferWriter(buf)
    assert writer.buffer_size == 0
    writer.buffer_size = 8
    assert writer.buffer_size == 8
    writer.write(b"abc")
    writer.write(b"de")
    assert writer.num_bytes_buffered == 5
    assert writer.tell() == 5
    assert buf.to_pybytes() == b"." * 20  # still on the host
    # Arrow's rule: a write that would fill the staging buffer goes to the device, after
    # what is staged, so num_bytes_buffered stays below buffer_size.
    writer.write(b"fghi")
    assert writer.num_bytes_buffered == 0
    assert buf.to_pybytes() == b"abcdefghi" + b"." * 11
    writer.write(b"0123")
    assert writer.num_bytes_buffered == 4
    writer.write(b"4567")  # 4 staged + 4 == 8: fills it exactly
    assert writer.num_bytes_buffered == 0
    assert buf.to_pybytes() == b"abcdefghi01234567..."
    writer.write(b"89")
    writer.flush()
    assert writer.num_bytes_buffered == 0
    assert buf.to_pybytes() == b"abcdefghi0123456789."


def test_close_and_resize_flush_the_staging_buffer(ctx):
    buf = ctx.buffer_from_data(b"." * 8)
    writer = BufferWriter(buf)
    writer.buffer_size = 4
    writer.write(b"ab")
    writer.buffer_size = 0
    assert buf.to_pybytes() == b"ab......"
    writer.buffer_size = 4
    writer.write(b"cd")
    writer.close()
    assert buf.to_pybytes() == b"abcd...."


def test_staging_buffer_rejects_negative_size(ctx):
    writer = BufferWriter(ctx.new_buffer(4))
    with pytest.raises(pa.ArrowInvalid, match="non-negative"):
        writer.buffer_size = -1


def test_writer_copies_device_data_on_the_device(ctx):
    source = ctx.buffer_from_data(b"device")
    buf = ctx.buffer_from_data(b"." * 8)
    with BufferWriter(buf) as writer:
        writer.buffer_size = 16
        writer.write(b"<")
        assert writer.write(source) == 6
        writer.write(b">")
        with pytest.raises(TypeError, match="host data"):
            writer.writeat(0, source)
    assert buf.to_pybytes() == b"<device>"


def test_closed_writer_raises_and_releases(ctx):
    baseline = ctx.bytes_allocated
    writer = BufferWriter(ctx.new_buffer(64))
    writer.close()
    gc.collect()
    assert ctx.bytes_allocated == baseline
    for operation in (lambda: writer.write(b"x"), lambda: writer.writeat(0, b"x"),
                      lambda: writer.seek(0)):
        with pytest.raises(ValueError, match="closed"):
            operation()


# ---------------------------------------------------------------------------------------
# IPC messages

BATCHES = {
    "primitive": pa.record_batch({"x": [1, 2, 3], "y": [1.0, None, 3.0]}),
    "nested": sample_batch().drop_columns(["d"]),
    "empty": pa.record_batch({"x": pa.array([], pa.int32())}),
    "sliced": sample_batch().drop_columns(["d"]).slice(1, 2),
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_serialize_record_batch_matches_host_serialize(ctx, name):
    batch = BATCHES[name]
    buf = serialize_record_batch(batch, ctx)
    assert isinstance(buf, CudaBuffer)
    assert buf.to_pybytes() == batch.serialize().to_pybytes()


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_read_record_batch_keeps_the_body_on_the_device(ctx, name):
    batch = BATCHES[name]
    buf = serialize_record_batch(batch, ctx)
    device = read_record_batch(buf, batch.schema)
    if batch.num_rows:
        assert_on_device(device)
        assert device.device_type == pa.DeviceAllocationType.CUDA
        values = device.column(0).buffers()[1]
        assert buf.address <= values.address < buf.address + buf.size  # zero-copy
    assert to_host(device).equals(batch)


def test_device_batch_serializes_on_the_device(ctx):
    batch = BATCHES["primitive"]
    device = batch.copy_to(ctx.memory_manager)
    buf = serialize_record_batch(device, ctx)
    assert buf.to_pybytes() == batch.serialize().to_pybytes()


def test_read_message_accepts_a_reader_and_a_buffer(ctx):
    batch = BATCHES["primitive"]
    buf = ctx.buffer_from_data(stream_bytes(batch, batch))
    reader = BufferReader(buf)
    assert read_message(reader).type == "schema"
    first = read_message(reader)
    second = read_message(reader, pool=pa.default_memory_pool())
    assert first.type == second.type == "record batch"
    assert first.metadata.is_cpu and not first.body.is_cpu
    with pytest.raises(EOFError):
        read_message(reader)
    assert read_message(buf).type == "schema"  # a buffer is read from its start


def test_open_stream_reads_a_table_on_the_device(ctx):
    batches = [sample_batch(0), sample_batch(10)]
    buf = ctx.buffer_from_data(stream_bytes(*batches))
    table = pa.ipc.open_stream(BufferReader(buf)).read_all()
    assert table.num_rows == 8
    assert_on_device(table)
    assert to_host(table).equals(pa.Table.from_batches(batches))


def test_dictionary_column_without_its_dictionary_raises(ctx):
    batch = sample_batch()
    buf = ctx.buffer_from_data(stream_bytes(batch))
    reader = BufferReader(buf)
    memo = pa.DictionaryMemo()
    schema = pa.ipc.read_schema(read_message(reader), memo)
    dictionary = read_message(reader)
    assert dictionary.type == "dictionary"
    # pyarrow offers no public call to load a dictionary message into a memo (open_stream
    # covers dictionaries); a memo that lacks the values must be refused.
    rest = buf.slice(reader.tell())
    with pytest.raises(KeyError, match="Dictionary with id 0 not found"):
        read_record_batch(rest, schema, dictionary_memo=memo)


# ---------------------------------------------------------------------------------------
# Bad IPC input

@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.99])
def test_truncated_message_raises(ctx, keep):
    data = BATCHES["nested"].serialize().to_pybytes()
    buf = ctx.buffer_from_data(data[: int(len(data) * keep)])
    with pytest.raises((pa.ArrowInvalid, OSError, EOFError)):
        read_record_batch(buf, BATCHES["nested"].schema)


def test_truncated_stream_raises(ctx):
    batch = sample_batch()
    data = stream_bytes(batch, batch).to_pybytes()
    buf = ctx.buffer_from_data(data[: len(data) - 100])
    reader = pa.ipc.open_stream(BufferReader(buf))
    with pytest.raises((pa.ArrowInvalid, OSError)):
        reader.read_all()


@pytest.mark.parametrize("garbage", [
    b"\xff" * 64,
    b"\xff\xff\xff\xff\x10\x00\x00\x00" + b"\x07" * 56,  # a continuation, then junk
    bytes((i * 97 + 13) % 256 for i in range(256)),  # fixed noise
])
def test_corrupt_message_raises(ctx, garbage):
    with pytest.raises((pa.ArrowInvalid, OSError, EOFError)):
        read_record_batch(ctx.buffer_from_data(garbage), BATCHES["primitive"].schema)


def test_corrupt_metadata_raises(ctx):
    data = bytearray(BATCHES["primitive"].serialize().to_pybytes())
    data[12:40] = b"\xee" * 28  # inside the flatbuffer
    with pytest.raises((pa.ArrowInvalid, OSError)):
        read_record_batch(ctx.buffer_from_data(bytes(data)), BATCHES["primitive"].schema)


@pytest.mark.parametrize("schema", [
    pa.schema({"x": pa.int64()}),                                     # too few fields
    pa.schema({"x": pa.int64(), "y": pa.float64(), "z": pa.int8()}),  # too many
    pa.schema({"x": pa.list_(pa.int64()), "y": pa.float64()}),        # another layout
    pa.schema({"x": pa.decimal128(38, 0), "y": pa.float64()}),        # wider values
])
def test_schema_that_does_not_match_raises(ctx, schema):
    buf = serialize_record_batch(BATCHES["primitive"], ctx)
    with pytest.raises(pa.ArrowInvalid):
        read_record_batch(buf, schema)


def test_read_record_batch_of_a_schema_message_raises(ctx):
    batch = BATCHES["primitive"]
    buf = ctx.buffer_from_data(stream_bytes(batch))
    with pytest.raises(pa.ArrowInvalid, match="expected a record batch"):
        read_record_batch(buf, batch.schema)


# ---------------------------------------------------------------------------------------
# Sharing batches in one process

def test_export_import_batch_in_the_same_process(ctx):
    batch = sample_batch()
    with export_batch(batch, ctx) as shared:
        assert isinstance(shared, SharedBatch) and isinstance(shared.payload, bytes)
        back = import_batch(shared.payload)
        assert isinstance(back, pa.RecordBatch)
        assert back.device_type == pa.DeviceAllocationType.CUDA
        assert_on_device(back)
        assert to_host(back).equals(batch)
        del back


def test_export_import_table(ctx):
    table = pa.Table.from_batches([sample_batch(0), sample_batch(10)])
    with export_batch(table, ctx) as shared:
        back = import_batch(shared.payload)
        assert isinstance(back, pa.Table)
        assert_on_device(back)
        assert to_host(back).equals(table)
        del back


def test_export_of_device_data_stays_on_its_context(ctx):
    # Fixed-width columns only: for offsets (strings, lists) see the subprocess test below.
    batch = BATCHES["primitive"]
    device = batch.copy_to(ctx.memory_manager)
    with export_batch(device) as shared:
        back = import_batch(shared.payload)
        assert to_host(back).equals(batch)
        del back


def test_the_old_ctx_keyword_still_works_with_a_warning(ctx):
    batch = BATCHES["primitive"]
    with pytest.warns(DeprecationWarning, match=r"export_batch\(ctx=...\) is now"):
        shared = export_batch(batch, ctx=ctx)
    with shared:
        with pytest.warns(DeprecationWarning, match=r"import_batch\(ctx=...\) is now"):
            back = import_batch(shared.payload, ctx=ctx, copy=True)
        assert to_host(back).equals(batch)
        with pytest.raises(TypeError, match="device or ctx, not both"):
            import_batch(shared.payload, 0, ctx=ctx)
        del back


def test_imported_batch_is_the_exported_memory(ctx):
    batch = BATCHES["primitive"]
    with export_batch(batch, ctx) as shared:
        back = import_batch(shared.payload)
        values = CudaBuffer.from_buffer(back.column(0).buffers()[1])
        values.copy_from_host(pa.array([42], pa.int64()).buffers()[1])
        again = import_batch(shared.payload)
        assert to_host(again).column(0)[0].as_py() == 42
        del back, again, values


def test_closed_export_cannot_be_imported_and_frees_memory(ctx):
    baseline = ctx.bytes_allocated
    shared = export_batch(BATCHES["primitive"], ctx)
    assert ctx.bytes_allocated > baseline
    back = import_batch(shared.payload)
    shared.close()
    assert to_host(back).equals(BATCHES["primitive"])  # the import still holds the memory
    with pytest.raises(ValueError, match="closed"):
        import_batch(shared.payload)
    del back
    gc.collect()
    assert ctx.bytes_allocated == baseline


def test_import_with_copy_owns_its_memory(ctx):
    baseline = ctx.bytes_allocated
    shared = export_batch(BATCHES["nested"], ctx)
    exported = ctx.bytes_allocated - baseline
    allocations = ctx.memory_stats()["live_allocations"]
    own = import_batch(shared.payload, ctx, copy=True)
    copied = ctx.bytes_allocated - baseline - exported
    # One allocation holds every body; the export also holds the stream's metadata.
    assert ctx.memory_stats()["live_allocations"] == allocations + 1
    assert 0 < copied <= exported
    values = CudaBuffer.from_buffer(own.column(0).buffers()[1])
    shared.close()
    gc.collect()
    assert ctx.bytes_allocated == baseline + copied  # the export is gone, the copy is not
    assert values.context.device_number == ctx.device_number
    assert to_host(own).equals(BATCHES["nested"])
    del own, values


@pytest.mark.parametrize("payload", [b"", b"nonsense" * 10, b"AGPUBAT1" + b"\x00" * 8])
def test_bad_payload_raises(payload):
    with pytest.raises(ValueError, match="not an arrow_gpu shared batch"):
        import_batch(payload)


def test_every_flipped_bit_of_a_payload_is_refused(ctx):
    # Defect 5: payloads were not checked; in the exporting process a flipped bit of the
    # handle went unseen, elsewhere it could open other bytes of the allocation.
    with export_batch(BATCHES["primitive"], ctx) as shared:
        raw = bytearray(shared.payload)
        for bit in range(len(raw) * 8):
            raw[bit // 8] ^= 1 << (bit % 8)
            with pytest.raises(ValueError, match="corrupt|not an arrow_gpu shared batch|version"):
                import_batch(bytes(raw))
            raw[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ValueError, match="corrupt: .* truncated"):
            import_batch(shared.payload[:-3])
        with pytest.raises(ValueError, match="corrupt: .* extended"):
            import_batch(shared.payload + b"!")


def test_shared_batch_is_not_picklable_but_its_payload_is(ctx):
    with export_batch(BATCHES["primitive"], ctx) as shared:
        with pytest.raises(TypeError, match="payload"):
            pickle.dumps(shared)
        assert pickle.loads(pickle.dumps(shared.payload)) == shared.payload


def test_export_rejects_other_objects():
    with pytest.raises(TypeError, match="RecordBatch or Table"):
        export_batch([1, 2, 3])


# ---------------------------------------------------------------------------------------
# Sharing batches between processes (CUDA IPC, simulated on shared memory by the simulator)

def run_python(code, stdin=""):
    # The child inherits the environment, so it uses the same driver (or simulator).
    result = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True,
                            text=True, timeout=120)
    return result


CONSUMER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from arrow_gpu import CudaBuffer
    from arrow_gpu.io import import_batch
    batch = import_batch(bytes.fromhex(sys.stdin.read().strip()))
    assert batch.device_type == pa.DeviceAllocationType.CUDA, batch.device_type
    values = CudaBuffer.from_buffer(batch.column("i").buffers()[1])
    print(values.address, batch.copy_to(pa.default_cpu_memory_manager()).to_pydict())
    values.copy_from_host(pa.array([-7], pa.int64()).buffers()[1])  # seen by the producer
    values.context.synchronize()
    """
)


# Imports a payload and prints every byte of the driver allocation its data lives in, as hex.
ALLOCATION_CONSUMER = textwrap.dedent(
    """
    import sys
    from arrow_gpu import CudaBuffer
    from arrow_gpu.io import import_batch
    batch = import_batch(bytes.fromhex(sys.stdin.read().strip()))
    opened = CudaBuffer.from_buffer(batch.column(0).buffers()[1])
    base, size = opened._driver_allocation()
    print(opened.context.foreign_buffer(base, size, base=opened).copy_to_host().to_pybytes().hex())
    """
)


def test_an_isolated_export_shows_the_importer_nothing_else(ctx):
    secrets = [ctx.buffer_from_data(f"secret {i:03}".encode() * 20) for i in range(32)]
    batch = BATCHES["primitive"]
    with export_batch(batch, ctx, isolated=True) as shared:
        result = run_python(ALLOCATION_CONSUMER, shared.payload.hex())
        assert result.returncode == 0, result.stderr
        whole = bytes.fromhex(result.stdout.strip())
        assert 0 < len(whole) <= 2 << 20
        assert whole[:shared.nbytes] == stream_bytes(batch).to_pybytes()
        assert whole[shared.nbytes:] == bytes(len(whole) - shared.nbytes)
        assert not any(secret.to_pybytes() in whole for secret in secrets)


def test_another_process_imports_a_batch_zero_copy(ctx):
    batch = sample_batch()
    with export_batch(batch, ctx) as shared:
        result = run_python(CONSUMER, shared.payload.hex())
        assert result.returncode == 0, result.stderr
        assert str(batch.to_pydict()) in result.stdout
        mine = import_batch(shared.payload)  # the exporter's own view of the memory
        assert to_host(mine).column("i")[0].as_py() == -7
        del mine


def test_another_process_imports_a_table(ctx):
    table = pa.Table.from_batches([sample_batch(0), sample_batch(10)])
    code = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from arrow_gpu.io import import_batch
        table = import_batch(bytes.fromhex(sys.stdin.read().strip()))
        cpu = pa.default_cpu_memory_manager()
        print(pa.Table.from_batches([b.copy_to(cpu) for b in table.to_batches()]).to_pydict())
        """
    )
    with export_batch(table, ctx) as shared:
        result = run_python(code, shared.payload.hex())
    assert result.returncode == 0, result.stderr
    assert str(table.to_pydict()) in result.stdout


def test_payload_of_an_exited_process_raises(ctx):
    exporter = textwrap.dedent(
        """
        import pyarrow as pa
        from arrow_gpu.io import export_batch
        shared = export_batch(pa.record_batch({"x": [1, 2, 3]}))
        print(shared.payload.hex())
        """
    )
    result = run_python(exporter)
    assert result.returncode == 0, result.stderr
    with pytest.raises(ValueError, match="has exited"):
        import_batch(bytes.fromhex(result.stdout.strip()))


def test_the_same_payload_opens_twice_at_once_on_one_mapping(ctx):
    # CUDA maps a handle once per process: the second import shares the first's mapping
    # (it used to be refused until the first was dropped).
    code = textwrap.dedent(
        """
        import gc, sys
        from arrow_gpu import CudaBuffer
        from arrow_gpu._ipc.handoff import OPENED
        from arrow_gpu.io import import_batch
        payload = bytes.fromhex(sys.stdin.read().strip())
        first = import_batch(payload)
        second = import_batch(payload)
        address = lambda batch: CudaBuffer.from_buffer(batch.column(0).buffers()[1]).address
        print("same memory:", address(first) == address(second), OPENED.stats()["opens"])
        del first, second
        gc.collect()
        print("reopened rows:", import_batch(payload).num_rows)
        """
    )
    with export_batch(BATCHES["primitive"], ctx) as shared:
        result = run_python(code, shared.payload.hex())
    assert result.returncode == 0, result.stderr
    assert "same memory: True 1" in result.stdout
    assert "reopened rows: 3" in result.stdout


def test_export_of_device_strings_and_lists():
    # Arrow's IPC writer reads the last offset of string and list arrays to size their data;
    # on device arrays that must not touch device memory from the host. A subprocess, so
    # that a crash is a failure here rather than the end of the run.
    code = textwrap.dedent(
        """
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu.io import export_batch, import_batch
        ctx = arrow_gpu.Context(0)
        batch = pa.record_batch({"s": ["a", None, "ccc"], "l": [[1], [2, 3], None],
                                 "d": pa.array(["x", "y", "x"]).dictionary_encode()})
        with export_batch(batch.copy_to(ctx.memory_manager)) as shared:
            back = import_batch(shared.payload)
            assert back.copy_to(pa.default_cpu_memory_manager()).equals(batch)
        print("ok")
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------
# Streams of the other endianness

def say_big_endian(data, schema):
    """Make the Schema table at ``schema`` of ``data`` (a bytearray) say big-endian.

    Arrow's writer leaves Schema.endianness out (Little is the default); its vtable entry is
    pointed at the int16 1 that starts the length of the one-field ``fields`` vector.
    """
    def u32(position):
        return struct.unpack_from("<I", data, position)[0]

    def entry(table_at, index):
        vtable = table_at - struct.unpack_from("<i", data, table_at)[0]
        assert 4 + 2 * index < struct.unpack_from("<H", data, vtable)[0]
        return vtable + 4 + 2 * index

    fields = schema + struct.unpack_from("<H", data, entry(schema, 1))[0]
    fields += u32(fields)
    assert u32(fields) == 1 and struct.unpack_from("<H", data, entry(schema, 0))[0] == 0
    struct.pack_into("<H", data, entry(schema, 0), fields - schema)


def table_field(data, table_at, index):
    """The table that field ``index`` of the flatbuffer table at ``table_at`` refers to."""
    vtable = table_at - struct.unpack_from("<i", data, table_at)[0]
    field = table_at + struct.unpack_from("<H", data, vtable + 4 + 2 * index)[0]
    return field + struct.unpack_from("<I", data, field)[0]


def big_endian_stream(table, write=pa.ipc.new_stream):
    """An IPC stream (or file) of ``table`` whose schema says big-endian (data unchanged)."""
    sink = pa.BufferOutputStream()
    with write(sink, table.schema) as writer:
        writer.write_table(table)
    data = bytearray(sink.getvalue().to_pybytes())
    start = 8 if data[:6] == b"ARROW1" else 0
    assert struct.unpack_from("<i", data, start)[0] == -1  # continuation marker, then length
    message = start + 8 + struct.unpack_from("<I", data, start + 8)[0]
    say_big_endian(data, table_field(data, message, 2))
    if start:  # the file format: the footer's schema is the one its reader uses
        footer = len(data) - 10 - struct.unpack_from("<i", data, len(data) - 10)[0]
        root = footer + struct.unpack_from("<I", data, footer)[0]
        say_big_endian(data, table_field(data, root, 1))
    return bytes(data)


def test_big_endian_stream_is_refused_not_swapped_on_the_host(ctx):
    table = pa.table({"x": pa.array([1, 2, 3], pa.int32())})
    raw = big_endian_stream(table)
    swapped = pa.ipc.open_stream(raw).read_all()  # on the host, pyarrow swaps the bytes
    assert swapped.column("x").to_pylist() == [1 << 24, 2 << 24, 3 << 24]
    device = ctx.buffer_from_data(raw)
    with pytest.raises(NotImplementedError, match="big-endian.*copy the buffer to the host"):
        pa.ipc.open_stream(BufferReader(device)).read_all()
    assert BufferReader(device).read(8) == raw[:8]  # copying reads still work
    little = ctx.buffer_from_data(stream_bytes(table.to_batches()[0]))
    assert to_host(pa.ipc.open_stream(BufferReader(little)).read_all()).equals(table)


def test_write_to_new_buffer_sizes_the_buffer_by_a_counting_pass(ctx):
    from arrow_gpu.io import write_to_new_buffer
    passes = []

    def write(sink):
        passes.append(type(sink).__name__)
        sink.write(b"abc")
        sink.write(b"defg")

    buf = write_to_new_buffer(ctx, write)
    assert (buf.size, buf.to_pybytes()) == (7, b"abcdefg")
    assert passes == ["MockOutputStream", "BufferWriter"]


def test_write_to_new_buffer_refuses_a_second_pass_that_writes_more(ctx):
    from arrow_gpu.io import write_to_new_buffer
    baseline, sizes = ctx.bytes_allocated, iter([3, 5])

    def write(sink):
        sink.write(b"x" * next(sizes))

    with pytest.raises(OSError, match="past the end of a device buffer of 3 bytes"):
        write_to_new_buffer(ctx, write)
    gc.collect()
    assert ctx.bytes_allocated == baseline


# ---------------------------------------------------------------------------------------
# IPC bodies that pyarrow decodes on the host: compressed, or of big-endian data. Each
# crashed the interpreter (device memory read on the host), so each runs in a child.

def run_ipc_child(body):
    """Runs ``body`` after a prelude that builds the IPC bytes; returns its stdout."""
    prelude = f"""
        import sys
        sys.path.insert(0, {repr(str(__import__("pathlib").Path(__file__).parent))})
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu.io import BufferReader, read_message, read_record_batch
        from test_device_io import big_endian_stream, sample_batch, to_host

        ctx = arrow_gpu.Context(0)
        batch = sample_batch()

        def written(compression=None, write=pa.ipc.new_stream, data=batch):
            sink = pa.BufferOutputStream()
            options = pa.ipc.IpcWriteOptions(compression=compression)
            with write(sink, data.schema, options=options) as writer:
                writer.write(data)
            return sink.getvalue()

        def message_bytes(stream, index):
            reader = pa.ipc.MessageReader.open_stream(stream)
            for _ in range(index):
                reader.read_next_message()
            return reader.read_next_message().serialize()

        def refused(call):
            try:
                call()
            except NotImplementedError as error:
                return str(error)
            raise AssertionError("not refused")
        """
    result = run_python(textwrap.dedent(prelude) + textwrap.dedent(body))
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_message_is_read_through_the_host(codec):
    out = run_ipc_child(f"""
        import pyarrow.cuda
        stream = written({codec!r})
        host_message = message_bytes(stream, 2)  # after the schema and the dictionary
        batch = batch.drop_columns(["d"])
        host_message = message_bytes(written({codec!r}, data=batch), 1)
        expected = pa.ipc.read_record_batch(host_message, batch.schema)
        for read in (read_record_batch, pyarrow.cuda.read_record_batch):
            device = read(ctx.buffer_from_data(host_message), batch.schema)
            assert device.device_type == pa.DeviceAllocationType.CUDA
            assert to_host(device).equals(expected)
        print(refused(lambda: read_message(ctx.buffer_from_data(host_message))))
        """)
    assert f"body is compressed ({codec})" in out and "copy the buffer to the host" in out


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
@pytest.mark.parametrize("fmt", ["stream", "file"])
def test_compressed_stream_or_file_is_refused(codec, fmt):
    out = run_ipc_child(f"""
        write, open_ = {{"stream": (pa.ipc.new_stream, pa.ipc.open_stream),
                         "file": (pa.ipc.new_file, pa.ipc.open_file)}}[{fmt!r}]
        device = ctx.buffer_from_data(written({codec!r}, write))
        print(refused(lambda: open_(BufferReader(device)).read_all()))
        """)
    assert f"body is compressed ({codec})" in out


def test_a_flipped_bit_that_sets_compression_never_crashes():
    # Single bit flips that make an uncompressed message say it is compressed: libarrow then
    # decompressed device memory on the host.
    out = run_ipc_child("""
        from arrow_gpu._cuda import _record_batch_layout
        batch = pa.record_batch({"x": pa.array(["short", None, "a string longer than twelve"],
                                               pa.string_view())})
        raw = message_bytes(written(data=batch), 1).to_pybytes()
        flips = 0
        for bit in range(8 * len(raw)):
            data = bytearray(raw)
            data[bit // 8] ^= 1 << (bit % 8)
            data = bytes(data)
            try:
                message = pa.ipc.read_message(data)
                if message.type != "record batch" or not _record_batch_layout(message.metadata.to_pybytes())[2]:
                    continue
            except Exception:
                continue
            flips += 1
            try:
                expected = pa.ipc.read_record_batch(data, batch.schema)
            except Exception:
                expected = None
            try:
                got = to_host(read_record_batch(ctx.buffer_from_data(data), batch.schema))
            except (pa.ArrowException, ValueError, OSError):
                pass
            else:
                assert expected is not None and got.equals(expected)
            refused(lambda: read_message(ctx.buffer_from_data(data)))
        print("flips", flips)
        """)
    assert "flips" in out and "flips 0" not in out


def test_file_format_reads_on_the_device():
    # libarrow reads a file's trailer and footer on the host: they crashed as device slices.
    out = run_ipc_child("""
        batches = [sample_batch(0), sample_batch(10)]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, batches[0].schema) as writer:
            for one in batches:
                writer.write_batch(one)
        buf = ctx.buffer_from_data(sink.getvalue())
        reader = pa.ipc.open_file(BufferReader(buf))
        values = reader.get_batch(1).column("i").buffers()[1]
        assert not values.is_cpu and buf.address <= values.address < buf.address + buf.size
        assert to_host(reader.read_all()).equals(pa.Table.from_batches(batches))
        print("zero-copy")
        """)
    assert "zero-copy" in out


@pytest.mark.parametrize("case", ["stream", "after_seek", "file", "read_message"])
def test_big_endian_data_anywhere_is_refused(case):
    out = run_ipc_child(f"""
        case = {case!r}
        table = pa.table({{"x": pa.array([1, 2, 3], pa.int16())}})
        raw = big_endian_stream(table, pa.ipc.new_file if case == "file" else pa.ipc.new_stream)
        # Host pyarrow reads it, swapping the bytes.
        expected = (pa.ipc.open_file if case == "file" else pa.ipc.open_stream)(raw).read_all()
        if case == "after_seek":
            lead = written().to_pybytes()  # a little-endian stream first
            reader = BufferReader(ctx.buffer_from_data(lead + raw))
            reader.seek(len(lead))
            print(refused(lambda: pa.ipc.open_stream(reader).read_all()))
        elif case == "file":
            print(refused(lambda: pa.ipc.open_file(BufferReader(ctx.buffer_from_data(raw)))
                          .read_all()))
        elif case == "read_message":
            reader = BufferReader(ctx.buffer_from_data(raw))
            assert read_message(reader).type == "schema"
            print(refused(lambda: read_message(reader)))
        else:
            print(refused(lambda: pa.ipc.RecordBatchStreamReader(
                BufferReader(ctx.buffer_from_data(raw))).read_all()))
        """)
    assert "big-endian" in out and "copy the buffer to the host" in out


def test_read_record_batch_with_a_big_endian_schema_reads_what_pyarrow_reads():
    # pyarrow's read_record_batch(message, schema) does not swap: nothing is read on the host.
    out = run_ipc_child("""
        table = pa.table({"x": pa.array([1, 2, 3], pa.int16())})
        raw = big_endian_stream(table)
        reader = pa.ipc.MessageReader.open_stream(raw)
        schema = pa.ipc.read_schema(reader.read_next_message())
        message = reader.read_next_message().serialize()
        expected = pa.ipc.read_record_batch(message, schema)
        device = read_record_batch(ctx.buffer_from_data(message), schema)
        assert to_host(device).equals(expected), (to_host(device), expected)
        print("same")
        """)
    assert "same" in out


def test_bit_flips_that_make_a_schema_big_endian_never_crash():
    # 19 of 20 crashes of a bit-flip sweep of device streams: a flip that makes the schema say
    # big-endian, such as one in byte 40 of this stream.
    out = run_ipc_child("""
        table = pa.table({"x": pa.array([1, 2, 3], pa.int16())})
        raw = written(data=table.to_batches()[0]).to_pybytes()
        for bit in range(8 * 40, 8 * 41):
            data = bytearray(raw)
            data[bit // 8] ^= 1 << (bit % 8)
            try:
                pa.ipc.open_stream(BufferReader(ctx.buffer_from_data(bytes(data)))).read_all()
            except (pa.ArrowException, ValueError, OSError) as error:
                print(type(error).__name__, error)
        """)
    assert "big-endian" in out


def test_the_native_metadata_reader_reads_what_pyarrow_wrote():
    from arrow_gpu._cuda import _record_batch_layout
    batch = pa.record_batch({"x": pa.array([1, None, 3]), "s": pa.array(["a", None, "bc"])})
    plain = pa.ipc.read_message(batch.serialize())
    nodes, buffers, compressed, delta = _record_batch_layout(plain.metadata.to_pybytes())
    assert nodes == [(3, 1), (3, 1)] and not compressed and not delta
    assert len(buffers) == 5 and all(offset % 8 == 0 for offset, _ in buffers)
    assert sum(length for _, length in buffers) <= plain.body.size
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema,
                           options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_batch(batch)
    messages = pa.ipc.MessageReader.open_stream(sink.getvalue())
    messages.read_next_message()  # the schema
    packed = messages.read_next_message()
    assert _record_batch_layout(packed.metadata.to_pybytes())[2]
    schema = pa.ipc.read_message(batch.schema.serialize())
    assert _record_batch_layout(schema.metadata.to_pybytes()) == ([], [], False, False)
    import _sharing_fuzz
    for deltas in (False, True):
        stream = pa.BufferReader(_sharing_fuzz.dictionary_stream(deltas))
        said = [_record_batch_layout(message.metadata.to_pybytes())[3]
                for message in pa.ipc.MessageReader.open_stream(stream)]
        # The schema, two dictionaries, a batch, two replacements or deltas, a batch.
        assert said == [False] * 4 + [deltas] * 2 + [False]
    # Cut metadata reads as nothing rather than past its end.
    metadata = plain.metadata.to_pybytes()
    for cut in range(len(metadata)):
        _record_batch_layout(metadata[:cut])
