"""Bad input to the public API: a clear exception, no crash, nothing leaked."""

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import IpcMemHandle, Stream, stream_handle
from arrow_gpu._ipc import wire as _ipc_wire
from arrow_gpu.io import BufferReader, read_record_batch, serialize_record_batch
from arrow_gpu.transfer import to_device
from arrow_gpu.transfer_options import get_transfer_options, set_transfer_options


@pytest.mark.parametrize("make", [
    lambda: arrow_gpu.Context(0.5),
    lambda: arrow_gpu.Context(True),
    lambda: arrow_gpu.new_host_buffer(8, device=1.0),
    lambda: arrow_gpu.memory_stats(0.0),
    lambda: to_device(pa.array([1]), device=0.9),
], ids=["context-float", "context-bool", "host-buffer", "memory-stats", "to-device"])
def test_device_number_is_not_truncated(make):
    with pytest.raises(TypeError, match="must be an int"):
        make()


def test_device_number_accepts_numpy_integers():
    assert arrow_gpu.Context(np.int64(0)).device_number == 0


def test_no_device_is_a_clear_error():
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_DEVICES="0")
    code = "import arrow_gpu\ntry:\n    arrow_gpu.Context(0)\nexcept ValueError as e:\n    print(e)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "no CUDA device is visible" in result.stdout


def test_view_of_the_null_address_is_refused(ctx):
    with pytest.raises(ValueError, match="non-null device address"):
        ctx.foreign_buffer(0, 16)

    class NullArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<u4", "data": (0, False),
                                    "version": 3}

    with pytest.raises(ValueError, match="non-null device address"):
        ctx.buffer_from_object(NullArray())
    assert ctx.foreign_buffer(0, 0).size == 0  # empty arrays may have no address


def test_view_of_an_empty_pinned_buffer(ctx):
    view = ctx.buffer_from_object(arrow_gpu.new_host_buffer(0))
    assert view.size == 0 and view.to_pybytes() == b""


@pytest.mark.parametrize("key", [1.5, None, "0", (0, 1)])
def test_getitem_of_a_non_integer_is_type_error(ctx, key):
    buf = ctx.buffer_from_data(b"abcd")
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        buf[key]


def test_buffer_from_data_size_that_overflows_is_refused(ctx):
    with pytest.raises(ValueError, match="requested larger slice than available"):
        ctx.buffer_from_data(b"abc", 1, 2**63 - 1)


def test_buffer_from_data_of_a_device_pyarrow_buffer(ctx):
    values = pa.array([1, 2, 3], pa.int64()).copy_to(ctx.memory_manager)
    data = values.buffers()[1]
    assert type(data) is pa.Buffer and not data.is_cpu
    copy = ctx.buffer_from_data(data, 8, 8)
    assert copy.to_pybytes() == struct.pack("<q", 2)


@pytest.mark.parametrize("stream", [2**64, 2**70, type("Ptr", (), {"ptr": -1})()],
                         ids=["2**64", "2**70", "negative-ptr"])
def test_stream_handle_that_fits_no_pointer(ctx, stream):
    with pytest.raises(ValueError, match="fits a pointer"):
        stream_handle(stream)
    with pytest.raises(ValueError, match="fits a pointer"):
        Stream.wrap(stream, ctx)
    with pytest.raises(ValueError, match="fits a pointer"):
        to_device(pa.array([1]), stream=stream)


def test_stream_handle_accepts_every_pointer_value():
    assert stream_handle(12345) == 12345
    assert stream_handle(2**64 - 1) == 2**64 - 1


def test_ipc_handle_whose_range_overflows():
    data = _ipc_wire.serialize(bytes(64), 2**62, 2**62)
    with pytest.raises(ValueError, match="impossible range"):
        IpcMemHandle.from_buffer(data)


FORGED_OPENER = textwrap.dedent(
    """
    import sys
    import arrow_gpu
    handle = arrow_gpu.IpcMemHandle.from_buffer(bytes.fromhex(sys.stdin.read().strip()))
    try:
        arrow_gpu.Context(0).open_ipc_buffer(handle)
    except ValueError as error:
        print(error)
    """
)


@pytest.mark.parametrize("offset, size", [(0, 1 << 30), (1 << 30, 8)])
def test_ipc_handle_reaching_past_its_allocation_is_refused(ctx, offset, size):
    # Forged, not corrupted: the checksum is right, only the driver's range check is left.
    buf = ctx.buffer_from_data(b"x" * 4096)
    forged = _ipc_wire.serialize(buf.export_for_ipc().driver_handle, offset, size)
    result = subprocess.run([sys.executable, "-c", FORGED_OPENER], input=forged.hex(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "does not fit in the exported allocation" in result.stdout


def test_reader_read_clips_at_the_end_and_refuses_negative_sizes(ctx):
    reader = BufferReader(ctx.buffer_from_data(b"abcdef"))
    reader.seek(4)
    assert reader.read(2**62) == b"ef"  # pyarrow would first allocate 2**62 bytes
    assert reader.read_at(2**62, 1) == b"bcdef"
    with pytest.raises(ValueError, match="nbytes must be non-negative"):
        reader.read(-1)
    with pytest.raises(ValueError, match="nbytes must be non-negative"):
        reader.read_at(-1, 0)


@pytest.mark.parametrize("options", [{"threads": 2.5}, {"chunk_bytes": "4096"},
                                     {"staging_bytes": True}])
def test_transfer_options_must_be_integers(options):
    before = get_transfer_options()
    name = next(iter(options))
    with pytest.raises(TypeError, match=f"{name} must be an int"):
        set_transfer_options(**options)
    assert get_transfer_options() == before


@pytest.mark.parametrize("address", [-1, 4096.0, None])
def test_callback_allocator_returning_no_address_names_the_value(ctx, address):
    arrow_gpu.set_allocator(lambda n, d: address, lambda *args: None)
    try:
        with pytest.raises(MemoryError, match=f"it returned {address!r}, not an address"):
            ctx.new_buffer(8)
    finally:
        arrow_gpu.set_allocator()


def test_callback_allocator_may_return_a_numpy_integer(ctx):
    blocks = []

    def allocate(nbytes, device):
        blocks.append(arrow_gpu.new_host_buffer(nbytes))
        return np.uint64(ctx.get_device_address(blocks[-1].address))

    arrow_gpu.set_allocator(allocate, lambda *args: None)
    try:
        assert ctx.buffer_from_data(b"numpy").to_pybytes() == b"numpy"
    finally:
        arrow_gpu.set_allocator()


@pytest.mark.parametrize("schema", [None, "x", {"x": pa.int64()}])
def test_read_record_batch_needs_a_schema(ctx, schema):
    message = serialize_record_batch(pa.record_batch({"x": [1]}), ctx)
    with pytest.raises(TypeError, match="schema must be a pyarrow.Schema"):
        read_record_batch(message, schema)


@pytest.mark.parametrize("call", [
    lambda ctx: ctx.new_buffer(1.5),
    lambda ctx: ctx.new_buffer(True),
    lambda ctx: ctx.new_buffer("8"),
    lambda ctx: ctx.new_buffer(8).slice(1.5),
    lambda ctx: ctx.new_buffer(8).slice(0, 2.0),
    lambda ctx: ctx.new_buffer(8).copy_to_host(position=1.0),
    lambda ctx: ctx.new_buffer(8).copy_to_host(nbytes=True),
    lambda ctx: ctx.new_buffer(8).copy_from_host(b"ab", position=0.5),
    lambda ctx: ctx.new_buffer(8).copy_from_device(ctx.new_buffer(2), nbytes=1.0),
    lambda ctx: ctx.buffer_from_data(b"abc", offset=1.0),
    lambda ctx: ctx.buffer_from_data(b"abc", size=False),
    lambda ctx: ctx.foreign_buffer(1.0, 0),
    lambda ctx: arrow_gpu.new_host_buffer(2.5),
], ids=["new-float", "new-bool", "new-str", "slice-offset", "slice-length", "to-host-position",
        "to-host-nbytes", "from-host", "from-device", "from-data-offset", "from-data-size",
        "foreign", "host-buffer"])
def test_sizes_and_positions_must_be_ints(ctx, call):
    # A C-typed argument silently truncated 1.5 to 1 and True to 1.
    with pytest.raises(TypeError, match="must be an int"):
        call(ctx)


def test_negative_foreign_address_is_refused(ctx):
    with pytest.raises(ValueError, match="address must be non-negative"):
        ctx.foreign_buffer(-8, 8)


@pytest.mark.parametrize("narrow", [pa.int32(), pa.int8(), pa.float32(), pa.date32()])
def test_read_record_batch_refuses_a_narrower_schema(ctx, narrow):
    # Node counts and minimum sizes fit, so the bytes would be reinterpreted silently. Writers
    # may send up to 64 bytes of padding, so only values beyond that can give a wider type away.
    batch = pa.record_batch({"x": pa.array(range(64), pa.int64())})
    with pytest.raises(pa.ArrowInvalid, match="wider type"):
        read_record_batch(serialize_record_batch(batch, ctx), pa.schema({"x": narrow}))


def test_read_record_batch_checks_nested_values(ctx):
    batch = pa.record_batch({"s": pa.array([{"a": i, "b": str(i)} for i in range(32)])})
    good = read_record_batch(serialize_record_batch(batch, ctx), batch.schema)
    assert good.copy_to(pa.default_cpu_memory_manager()).equals(batch)
    narrow = pa.schema({"s": pa.struct({"a": pa.int16(), "b": pa.string()})})
    with pytest.raises(pa.ArrowInvalid, match="'s.a'"):
        read_record_batch(serialize_record_batch(batch, ctx), narrow)


def test_read_record_batch_accepts_value_buffers_sent_with_their_padding(ctx):
    # Arrow's writer sends a 9-byte buffer of 8 int8 values whole: it fits the 64-byte padding.
    values = pa.Array.from_buffers(pa.int8(), 8, [None, pa.py_buffer(bytes(range(9)))])
    batch = pa.record_batch({"x": values})
    back = read_record_batch(serialize_record_batch(batch, ctx), batch.schema)
    assert arrow_gpu.transfer.to_host(back).equals(batch)
