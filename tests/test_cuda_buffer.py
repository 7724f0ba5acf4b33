"""CudaBuffer, HostBuffer and IpcMemHandle: the pyarrow.cuda buffer API."""

import gc
import pickle

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import CudaBuffer, HostBuffer, IpcMemHandle, new_host_buffer
from arrow_gpu._ipc import wire as _ipc_wire

DATA = bytes(range(16))


# Device buffers are made inside each test, not by a fixture: pytest holds fixture values
# until after the ``ctx`` fixture's leak check, which would then see them as leaks.


# --- type and attributes ---------------------------------------------------------------


def test_constructor_is_refused():
    with pytest.raises(TypeError):
        CudaBuffer()


def test_is_a_pyarrow_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert issubclass(CudaBuffer, pa.Buffer)
    assert isinstance(cbuf, pa.Buffer)


def test_attributes(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.size == 16
    assert isinstance(cbuf.address, int) and cbuf.address != 0
    assert cbuf.is_cpu is False
    assert cbuf.is_mutable is True
    assert cbuf.device_type == pa.DeviceAllocationType.CUDA
    assert cbuf.device == ctx.device
    assert cbuf.context == ctx
    assert cbuf.context.device_number == 0
    assert "CudaBuffer" in repr(cbuf)


def test_no_buffer_protocol(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(BufferError):
        memoryview(cbuf)
    with pytest.raises(BufferError):
        np.frombuffer(cbuf, dtype=np.uint8)


def test_pickling_is_not_implemented_as_in_pyarrow():
    cbuf = arrow_gpu.Context(0).buffer_from_data(DATA)
    try:
        for protocol in (4, 5):
            with pytest.raises(NotImplementedError, match="Implemented only for data on CPU device"):
                pickle.dumps(cbuf, protocol=protocol)
    finally:
        del cbuf  # a failure's traceback must not keep device memory alive into the next test


# --- from_buffer -------------------------------------------------------------------------


def test_from_buffer_of_a_cuda_buffer_is_itself(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert CudaBuffer.from_buffer(cbuf) is cbuf


def test_from_buffer_of_a_generic_device_buffer(ctx):
    device_array = pa.array(np.arange(4, dtype=np.int32)).copy_to(ctx.memory_manager)
    generic = device_array.buffers()[1]
    assert type(generic) is pa.Buffer
    converted = CudaBuffer.from_buffer(generic)
    assert isinstance(converted, CudaBuffer)
    assert (converted.address, converted.size) == (generic.address, generic.size)
    assert converted.context == ctx
    assert converted.to_pybytes() == np.arange(4, dtype=np.int32).tobytes()


@pytest.mark.parametrize("make", [lambda: pa.py_buffer(b"abc"), lambda: new_host_buffer(4)], ids=["cpu", "pinned"])
def test_from_buffer_of_host_memory(make):
    buf = make()
    with pytest.raises(pa.ArrowTypeError, match="buffer is not backed by a CudaBuffer"):
        CudaBuffer.from_buffer(buf)


def test_from_buffer_of_none():
    with pytest.raises(TypeError):
        CudaBuffer.from_buffer(None)


# --- indexing and slicing ----------------------------------------------------------------


def test_getitem_index(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf[0] == 0
    assert cbuf[15] == 15
    assert cbuf[-1] == 15
    assert cbuf[-16] == 0
    assert isinstance(cbuf[3], int)


@pytest.mark.parametrize("index", [16, 100, -17])
def test_getitem_out_of_range(ctx, index):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(IndexError):
        cbuf[index]


@pytest.mark.parametrize(
    "key", [slice(2, 5), slice(None, 4), slice(10, None), slice(-3, None), slice(5, 2), slice(0, 100), slice(16, None)]
)
def test_getitem_slice(ctx, key):
    cbuf = ctx.buffer_from_data(DATA)
    piece = cbuf[key]
    assert isinstance(piece, CudaBuffer)
    assert piece.to_pybytes() == DATA[key]


def test_getitem_slice_with_step(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(IndexError):
        cbuf[::2]


def test_slice_is_zero_copy_with_parent(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    baseline = ctx.bytes_allocated
    piece = cbuf.slice(4, 8)
    assert ctx.bytes_allocated == baseline
    assert piece.address == cbuf.address + 4
    assert piece.size == 8
    assert piece.context == ctx
    assert piece.to_pybytes() == DATA[4:12]
    parent = piece.parent
    assert isinstance(parent, CudaBuffer)
    assert (parent.address, parent.size) == (cbuf.address, cbuf.size)
    piece.copy_from_host(b"\xaa")
    assert cbuf[4] == 0xAA


def test_parent_of_an_allocation_is_none(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.parent is None


def test_slice_defaults_and_clipping(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.slice().to_pybytes() == DATA
    assert cbuf.slice(3).to_pybytes() == DATA[3:]
    assert cbuf.slice(3, 1000).to_pybytes() == DATA[3:]
    assert cbuf.slice(16).size == 0


def test_slice_keeps_memory_alive(ctx):
    baseline = ctx.bytes_allocated
    buf = ctx.buffer_from_data(DATA)
    piece = buf.slice(8)
    del buf
    gc.collect()
    assert ctx.bytes_allocated == baseline + 16
    assert piece.to_pybytes() == DATA[8:]


@pytest.mark.parametrize("offset", [-1, 17])
def test_slice_bad_offset(ctx, offset):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises((IndexError, ValueError), match="offset argument is out-of-range"):
        cbuf.slice(offset)


def test_slice_bad_offset_is_value_error_as_in_pyarrow_cuda():
    cbuf = arrow_gpu.Context(0).buffer_from_data(DATA)
    try:
        with pytest.raises(ValueError, match="offset argument is out-of-range"):
            cbuf.slice(-1)
    finally:
        del cbuf  # a failure's traceback must not keep device memory alive into the next test


def test_slice_negative_length(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError):
        cbuf.slice(0, -1)


# --- copy_to_host ------------------------------------------------------------------------


def test_copy_to_host_defaults(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    host = cbuf.copy_to_host()
    assert type(host) is pa.Buffer
    assert host.is_cpu
    assert host.to_pybytes() == DATA


def test_copy_to_host_position_and_nbytes(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.copy_to_host(position=5).to_pybytes() == DATA[5:]
    assert cbuf.copy_to_host(position=5, nbytes=3).to_pybytes() == DATA[5:8]
    assert cbuf.copy_to_host(position=16).to_pybytes() == b""
    assert cbuf.copy_to_host(nbytes=0).to_pybytes() == b""


def test_copy_to_host_into_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    out = pa.allocate_buffer(8)
    result = cbuf.copy_to_host(position=2, buf=out)
    assert result.address == out.address
    assert out.to_pybytes() == DATA[2:10]
    bigger = pa.allocate_buffer(32)
    cbuf.copy_to_host(buf=bigger, nbytes=4)
    assert bigger.to_pybytes()[:4] == DATA[:4]


def test_copy_to_host_into_pinned_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    out = new_host_buffer(16)
    cbuf.copy_to_host(buf=out)
    assert out.to_pybytes() == DATA


def test_copy_to_host_into_too_small_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested copy does not fit into host buffer"):
        cbuf.copy_to_host(nbytes=10, buf=pa.allocate_buffer(4))


@pytest.mark.parametrize("kind", ["read-only", "device"])
def test_copy_to_host_into_unusable_buffer(ctx, kind):
    cbuf = ctx.buffer_from_data(DATA)
    buf = pa.py_buffer(b"x" * 16) if kind == "read-only" else ctx.new_buffer(16)
    with pytest.raises(ValueError):
        cbuf.copy_to_host(buf=buf)


def test_copy_to_host_memory_pool_and_resizable(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    pool = pa.system_memory_pool()
    before = pool.bytes_allocated()
    host = cbuf.copy_to_host(memory_pool=pool, resizable=True)
    assert isinstance(host, pa.ResizableBuffer)
    assert host.to_pybytes() == DATA
    assert pool.bytes_allocated() >= before + 16


@pytest.mark.parametrize("position", [-1, 17])
def test_copy_to_host_bad_position(ctx, position):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="position argument is out-of-range"):
        cbuf.copy_to_host(position=position)


@pytest.mark.parametrize(("position", "nbytes"), [(0, 17), (10, 7), (16, 1)])
def test_copy_to_host_too_many_bytes(ctx, position, nbytes):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        cbuf.copy_to_host(position=position, nbytes=nbytes)


# --- copy_from_host ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"abcd", bytearray(b"abcd"), np.frombuffer(b"abcd", dtype=np.uint8), pa.py_buffer(b"abcd")],
    ids=["bytes", "bytearray", "numpy", "pa.Buffer"],
)
def test_copy_from_host_sources(ctx, data):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.copy_from_host(data, position=2) == 4
    assert cbuf.to_pybytes() == DATA[:2] + b"abcd" + DATA[6:]


def test_copy_from_host_pinned_source(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    host = new_host_buffer(4)
    np.frombuffer(host, dtype=np.uint8)[:] = 9
    assert cbuf.copy_from_host(host) == 4
    assert cbuf.to_pybytes()[:5] == b"\x09" * 4 + DATA[4:5]


def test_copy_from_host_default_nbytes_fills_the_device_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.copy_from_host(b"z" * 100, position=10) == 6
    assert cbuf.to_pybytes() == DATA[:10] + b"z" * 6


def test_copy_from_host_nbytes(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.copy_from_host(b"wxyz", nbytes=2) == 2
    assert cbuf.to_pybytes() == b"wx" + DATA[2:]


@pytest.mark.parametrize("position", [-1, 17])
def test_copy_from_host_bad_position(ctx, position):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="position argument is out-of-range"):
        cbuf.copy_from_host(b"a", position=position)


def test_copy_from_host_more_than_source(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available from host buffer"):
        cbuf.copy_from_host(b"abc", nbytes=4)


def test_copy_from_host_more_than_room(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available in device buffer"):
        cbuf.copy_from_host(b"x" * 10, position=10, nbytes=7)


def test_copy_from_host_refuses_device_data(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(TypeError, match="got device memory .'CudaBuffer'.; use "
                                        "copy_from_device for device data"):
        cbuf.copy_from_host(ctx.new_buffer(4))
    assert cbuf.to_pybytes() == DATA


# --- copy_from_device --------------------------------------------------------------------


def test_copy_from_device(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    source = ctx.buffer_from_data(b"ABCDEFGH")
    assert cbuf.copy_from_device(source, position=4) == 8
    assert cbuf.to_pybytes() == DATA[:4] + b"ABCDEFGH" + DATA[12:]
    assert cbuf.copy_from_device(source.slice(6), position=0, nbytes=1) == 1
    assert cbuf[0] == ord("G")


def test_copy_from_device_takes_a_stream_in_any_spelling(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    stream = arrow_gpu.Stream(ctx)
    for spelling, byte in ((stream, b"s"), (stream.handle, b"h"), (0, b"0")):
        assert cbuf.copy_from_device(ctx.buffer_from_data(byte * 4), stream=spelling) == 4
        stream.synchronize()
        assert cbuf.to_pybytes()[:4] == byte * 4
    with pytest.raises(TypeError, match="as a CUDA stream"):
        cbuf.copy_from_device(ctx.buffer_from_data(b"x"), stream="not a stream")
    assert cbuf.to_pybytes()[:4] == b"0000"  # a bad stream copies nothing


def test_copy_from_device_default_nbytes_fills_the_device_buffer(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.copy_from_device(ctx.buffer_from_data(b"z" * 64), position=12) == 4
    assert cbuf.to_pybytes() == DATA[:12] + b"zzzz"


@pytest.mark.parametrize("position", [-1, 17])
def test_copy_from_device_bad_position(ctx, position):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="position argument is out-of-range"):
        cbuf.copy_from_device(ctx.new_buffer(1), position=position)


def test_copy_from_device_more_than_source(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
        cbuf.copy_from_device(ctx.new_buffer(2), nbytes=3)


def test_copy_from_device_more_than_room(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(ValueError, match="requested more to copy than available in device buffer"):
        cbuf.copy_from_device(ctx.new_buffer(8), position=12, nbytes=5)


def test_copy_from_device_refuses_host_data(ctx):
    # It said "Argument 'buf' has incorrect type", naming no remedy.
    cbuf = ctx.buffer_from_data(DATA)
    for host in (pa.py_buffer(b"abc"), b"abc"):
        with pytest.raises(TypeError, match="copies from a CudaBuffer, got '(Buffer|bytes)'; "
                                            "use copy_from_host for host data"):
            cbuf.copy_from_device(host)
    with pytest.raises(TypeError, match="CudaBuffer"):
        cbuf.copy_from_device(None)
    assert cbuf.to_pybytes() == DATA


@pytest.mark.multi_gpu
def test_copy_from_device_peer(ctx, ctx1):
    baseline1 = ctx1.bytes_allocated
    remote = ctx1.buffer_from_data(b"from device one")
    local = ctx.new_buffer(remote.size)
    assert local.copy_from_device(remote) == remote.size
    assert local.to_pybytes() == b"from device one"
    back = ctx1.new_buffer(4)
    back.copy_from_device(local.slice(5, 4))
    assert back.to_pybytes() == b"devi"
    del remote, back
    gc.collect()
    assert ctx1.bytes_allocated == baseline1


# --- to_pybytes, hex, equals -------------------------------------------------------------


def test_to_pybytes(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.to_pybytes() == DATA
    assert cbuf.slice(1, 2).to_pybytes() == b"\x01\x02"


def test_hex_is_not_implemented_as_in_pyarrow():
    # pyarrow.cuda's CudaBuffer keeps pyarrow.Buffer.hex, which refuses device memory.
    cbuf = arrow_gpu.Context(0).buffer_from_data(DATA)
    try:
        with pytest.raises(NotImplementedError, match="Implemented only for data on CPU device"):
            cbuf.hex()
    finally:
        del cbuf  # a failure's traceback must not keep device memory alive into the next test


def test_equals_device_buffers(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    assert cbuf.equals(cbuf)
    assert cbuf.equals(ctx.buffer_from_data(DATA))
    assert not cbuf.equals(ctx.buffer_from_data(DATA[:15] + b"\x00"))
    assert not cbuf.equals(ctx.buffer_from_data(DATA[:8]))


def test_equals_host_buffer_raises(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    # The seed documents a segmentation fault here; it must be an exception.
    with pytest.raises(ValueError):
        pa.py_buffer(b"x" * 16).equals(cbuf)
    with pytest.raises(ValueError):
        cbuf.equals(pa.py_buffer(DATA))


def test_equals_none(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    with pytest.raises(TypeError):
        cbuf.equals(None)


# --- Numba (needs a real device: Numba's simulator has no device pointers) -------------


@pytest.mark.gpu
def test_numba_round_trip(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    pointer = cbuf.to_numba()
    assert pointer.size == cbuf.size
    view = CudaBuffer.from_numba(pointer)
    assert (view.address, view.size) == (cbuf.address, cbuf.size)
    assert view.context == ctx
    assert view.to_pybytes() == DATA


@pytest.mark.gpu
def test_context_numba_round_trip(ctx):
    assert arrow_gpu.Context.from_numba() == ctx
    assert arrow_gpu.Context.from_numba(ctx.to_numba()) == ctx


# --- HostBuffer --------------------------------------------------------------------------


def test_host_buffer_constructor_is_refused():
    with pytest.raises(TypeError):
        HostBuffer()


def test_new_host_buffer(ctx):
    baseline = ctx.bytes_allocated
    host = new_host_buffer(32)
    assert isinstance(host, HostBuffer) and isinstance(host, pa.Buffer)
    assert host.size == 32
    assert host.is_cpu is True
    assert host.is_mutable
    assert host.device_type == pa.DeviceAllocationType.CUDA_HOST
    # As in pyarrow.cuda: CPU memory, on the CPU device, of the CPU memory manager.
    assert host.device == pa.default_cpu_memory_manager().device
    assert host.memory_manager.is_cpu
    assert ctx.bytes_allocated == baseline  # pinned host memory is not device memory


def test_host_buffer_is_writable_through_numpy():
    host = new_host_buffer(16)
    view = np.frombuffer(host, dtype=np.int32)
    view[:] = [1, 2, 3, 4]
    assert host.to_pybytes() == np.array([1, 2, 3, 4], dtype=np.int32).tobytes()
    assert memoryview(host).nbytes == 16


def test_host_buffer_device_round_trip(ctx):
    host = new_host_buffer(8)
    np.frombuffer(host, dtype=np.uint8)[:] = np.arange(8, dtype=np.uint8) * 3
    device = ctx.new_buffer(8)
    assert device.copy_from_host(host) == 8
    back = new_host_buffer(8)
    device.copy_to_host(buf=back)
    assert back.to_pybytes() == host.to_pybytes() == bytes(range(0, 24, 3))


def test_new_host_buffer_of_size_zero():
    assert new_host_buffer(0).size == 0


def test_new_host_buffer_negative_size():
    with pytest.raises(ValueError):
        new_host_buffer(-1)


@pytest.mark.multi_gpu
def test_new_host_buffer_for_device_one():
    host = new_host_buffer(8, device=1)
    assert host.device_type == pa.DeviceAllocationType.CUDA_HOST


# --- IPC handles -------------------------------------------------------------------------


def test_ipc_handle_constructor_is_refused():
    with pytest.raises(TypeError):
        IpcMemHandle()


@pytest.mark.parametrize("size", [0, 1, 64, _ipc_wire.SERIALIZED_SIZE - 1,
                                  _ipc_wire.SERIALIZED_SIZE + 1])
def test_ipc_handle_from_buffer_wrong_size(size):
    with pytest.raises(ValueError):
        IpcMemHandle.from_buffer(b"\x00" * size)


def _raw_handle(offset, size, magic=_ipc_wire.MAGIC):
    raw = _ipc_wire.serialize(bytes(range(64)), offset, size)
    return magic + raw[len(magic):]


@pytest.mark.parametrize("source", [bytes, pa.py_buffer, bytearray])
def test_ipc_handle_serialize_round_trip(source):
    raw = _raw_handle(offset=256, size=1000)
    handle = IpcMemHandle.from_buffer(source(raw))
    serialized = handle.serialize()
    assert isinstance(serialized, pa.Buffer)
    assert serialized.to_pybytes() == raw
    assert IpcMemHandle.from_buffer(serialized).serialize().to_pybytes() == raw


@pytest.mark.parametrize(
    "raw",
    [_raw_handle(0, 10, magic=b"NOTAGPU!"), _raw_handle(-1, 10), _raw_handle(0, -5)],
    ids=["magic", "offset", "size"],
)
def test_ipc_handle_bad_header(raw):
    with pytest.raises(ValueError):
        IpcMemHandle.from_buffer(raw)


def test_export_for_ipc(ctx):
    cbuf = ctx.buffer_from_data(DATA)
    handle = cbuf.export_for_ipc()
    assert isinstance(handle, IpcMemHandle)
    serialized = handle.serialize()
    assert isinstance(serialized, pa.Buffer)
    assert IpcMemHandle.from_buffer(serialized).serialize().equals(serialized)
    assert cbuf.slice(4).export_for_ipc().serialize() != serialized


def test_export_for_ipc_of_an_empty_buffer(ctx):
    handle = ctx.new_buffer(0).export_for_ipc()
    opened = ctx.open_ipc_buffer(IpcMemHandle.from_buffer(handle.serialize()))
    assert isinstance(opened, CudaBuffer) and opened.size == 0


def test_open_ipc_buffer_requires_a_handle(ctx):
    with pytest.raises(TypeError):
        ctx.open_ipc_buffer(None)
    with pytest.raises(TypeError):
        ctx.open_ipc_buffer(_raw_handle(0, 10))
