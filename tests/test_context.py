"""Context: the pyarrow.cuda ``Context`` API (devices, accounting, buffer factories)."""

import ctypes
import gc
import re
import threading
import weakref

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import Context, CudaBuffer


class Keepalive:
    """A weakref-able object, to observe what a buffer keeps alive."""


class FakeCudaArray:
    """An object exposing ``__cuda_array_interface__`` over a real device buffer."""

    def __init__(self, buffer, shape, typestr, strides=None):
        self.buffer = buffer  # the memory must outlive the interface
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (buffer.address, False),
            "strides": strides,
            "version": 3,
        }


def test_device_number_and_handle(ctx):
    assert ctx.device_number == 0
    assert isinstance(ctx.handle, int) and ctx.handle != 0


def test_get_num_devices_is_static_and_matches_device_count():
    count = Context.get_num_devices()
    assert isinstance(count, int) and count >= 1
    assert count == arrow_gpu.device_count()


@pytest.mark.parametrize("which", ["negative", "count", "far"])
def test_bad_device_number(which):
    count = Context.get_num_devices()
    device_number = {"negative": -1, "count": count, "far": count + 100}[which]
    with pytest.raises(ValueError, match=f"device_number argument must be non-negative less than {count}"):
        Context(device_number)


@pytest.mark.multi_gpu
def test_second_device():
    ctx1 = Context(1)
    assert ctx1.device_number == 1
    assert ctx1.device.device_id == 1
    assert ctx1.handle != Context(0).handle


def test_bytes_allocated_counts_owned_memory_only(ctx):
    baseline = ctx.bytes_allocated
    buf = ctx.new_buffer(1000)
    assert ctx.bytes_allocated == baseline + 1000
    view = buf.slice(10, 100)
    foreign = ctx.foreign_buffer(buf.address, buf.size, base=buf)
    zero_copy = ctx.buffer_from_object(buf)
    assert ctx.bytes_allocated == baseline + 1000
    second = ctx.new_buffer(24)
    assert ctx.bytes_allocated == baseline + 1024
    del second
    gc.collect()
    assert ctx.bytes_allocated == baseline + 1000
    del buf
    gc.collect()
    # The views keep the allocation alive.
    assert ctx.bytes_allocated == baseline + 1000
    del view, foreign, zero_copy
    gc.collect()
    assert ctx.bytes_allocated == baseline


def test_contexts_of_one_device_share_accounting(ctx):
    other = Context(0)
    baseline = other.bytes_allocated
    assert baseline == ctx.bytes_allocated
    buf = ctx.new_buffer(64)
    assert other.bytes_allocated == baseline + 64
    del buf
    gc.collect()
    assert other.bytes_allocated == baseline


def test_context_equality(ctx):
    same = Context(0)
    assert same == ctx
    assert hash(same) == hash(ctx)
    assert ctx != "not a context"
    assert ctx.new_buffer(1).context == ctx


@pytest.mark.multi_gpu
def test_contexts_of_different_devices_differ(ctx):
    assert Context(1) != ctx


@pytest.mark.multi_gpu
def test_streams_and_data_keep_their_device():
    # A borrowed stream of device 1 is synchronized in device 1's context, not device 0's.
    from arrow_gpu.device import Stream, context_of
    stream = Stream(Context(1))
    assert Stream.wrap(stream).context == Context(1)
    table = arrow_gpu.to_device(pa.table({"x": [1, 2]}), device=1)
    assert context_of(table) == Context(1)
    assert context_of(table.column(0)) == Context(1)
    assert arrow_gpu.to_host(table, stream=stream).equals(pa.table({"x": [1, 2]}))


def test_wrapping_the_primary_handle(ctx):
    wrapped = Context(0, handle=ctx.handle)
    assert wrapped.handle == ctx.handle
    assert wrapped.device_number == 0
    buf = wrapped.buffer_from_data(b"abc")
    assert buf.to_pybytes() == b"abc"


def test_memory_manager_and_device(ctx):
    mm = ctx.memory_manager
    assert isinstance(mm, pa.MemoryManager)
    assert not mm.is_cpu
    device = ctx.device
    assert isinstance(device, pa.Device)
    assert device.device_type == pa.DeviceAllocationType.CUDA
    assert device.device_id == 0
    assert not device.is_cpu
    assert mm.device == device


def test_synchronize(ctx):
    buf = ctx.buffer_from_data(b"x" * 32)
    assert ctx.synchronize() is None
    assert buf.to_pybytes() == b"x" * 32


def test_new_buffer(ctx):
    buf = ctx.new_buffer(16)
    assert isinstance(buf, CudaBuffer)
    assert buf.size == 16
    assert buf.context == ctx
    assert buf.is_mutable


def test_new_buffer_of_size_zero(ctx):
    buf = ctx.new_buffer(0)
    assert buf.size == 0
    assert buf.to_pybytes() == b""
    assert buf.copy_to_host().size == 0


def test_new_buffer_negative_size(ctx):
    with pytest.raises(ValueError):
        ctx.new_buffer(-1)


def test_foreign_buffer_is_a_view(ctx):
    owner = ctx.buffer_from_data(bytes(range(16)))
    view = ctx.foreign_buffer(owner.address + 4, 8, base=owner)
    assert view.address == owner.address + 4
    assert view.to_pybytes() == bytes(range(4, 12))
    view.copy_from_host(b"\xff")
    assert owner[4] == 0xFF


def test_foreign_buffer_keeps_base_alive(ctx):
    owner = ctx.new_buffer(8)
    base = Keepalive()
    base.owner = owner
    alive = weakref.ref(base)
    view = ctx.foreign_buffer(owner.address, owner.size, base=base)
    del base, owner
    gc.collect()
    assert alive() is not None
    view.copy_from_host(b"12345678")
    assert view.to_pybytes() == b"12345678"
    del view
    gc.collect()
    assert alive() is None


def test_foreign_buffer_negative_size(ctx):
    with pytest.raises(ValueError):
        ctx.foreign_buffer(0, -1)


@pytest.mark.parametrize(
    "data",
    [b"abcdefgh", bytearray(b"abcdefgh"), np.frombuffer(b"abcdefgh", dtype=np.uint8), pa.py_buffer(b"abcdefgh")],
    ids=["bytes", "bytearray", "numpy", "pa.Buffer"],
)
def test_buffer_from_data_copies_host_data(ctx, data):
    baseline = ctx.bytes_allocated
    buf = ctx.buffer_from_data(data)
    assert isinstance(buf, CudaBuffer)
    assert buf.to_pybytes() == b"abcdefgh"
    assert ctx.bytes_allocated == baseline + 8


def test_buffer_from_data_offset_and_size(ctx):
    data = bytes(range(10))
    assert ctx.buffer_from_data(data, offset=3).to_pybytes() == data[3:]
    assert ctx.buffer_from_data(data, offset=3, size=4).to_pybytes() == data[3:7]
    assert ctx.buffer_from_data(data, offset=10).size == 0
    assert ctx.buffer_from_data(data, offset=0, size=10).to_pybytes() == data


def test_buffer_from_data_copies_device_data(ctx):
    source = ctx.buffer_from_data(bytes(range(10)))
    copy = ctx.buffer_from_data(source, offset=2, size=5)
    assert isinstance(copy, CudaBuffer)
    assert copy.address != source.address
    source.copy_from_host(b"\x00" * 10)
    assert copy.to_pybytes() == bytes(range(2, 7))


@pytest.mark.parametrize("offset", [-1, 11, 100])
def test_buffer_from_data_bad_offset(ctx, offset):
    with pytest.raises(ValueError, match="offset argument is out-of-range"):
        ctx.buffer_from_data(bytes(10), offset=offset)


@pytest.mark.parametrize(("offset", "size"), [(0, 11), (5, 6), (10, 1)])
def test_buffer_from_data_bad_size(ctx, offset, size):
    with pytest.raises(ValueError, match="requested larger slice than available in device buffer"):
        ctx.buffer_from_data(bytes(10), offset=offset, size=size)


def test_buffer_from_object_cuda_buffer_is_zero_copy(ctx):
    source = ctx.buffer_from_data(b"abcd")
    baseline = ctx.bytes_allocated
    view = ctx.buffer_from_object(source)
    assert isinstance(view, CudaBuffer)
    assert (view.address, view.size) == (source.address, source.size)
    assert ctx.bytes_allocated == baseline
    view.copy_from_host(b"z")
    assert source.to_pybytes() == b"zbcd"


def test_buffer_from_object_keeps_source_alive(ctx):
    source = ctx.buffer_from_data(b"abcd")
    baseline = ctx.bytes_allocated
    view = ctx.buffer_from_object(source)
    del source
    gc.collect()
    assert ctx.bytes_allocated == baseline
    assert view.to_pybytes() == b"abcd"


def test_buffer_from_object_host_buffer(ctx):
    host = arrow_gpu.new_host_buffer(8)
    np.frombuffer(host, dtype=np.uint8)[:] = np.arange(8, dtype=np.uint8)
    view = ctx.buffer_from_object(host)
    assert isinstance(view, CudaBuffer)
    assert view.size == 8
    assert view.address == ctx.get_device_address(host.address)
    assert view.to_pybytes() == bytes(range(8))
    view.copy_from_host(b"\xff\xff")
    assert host.to_pybytes()[:2] == b"\xff\xff"


@pytest.mark.parametrize(
    ("shape", "typestr", "strides", "nbytes"),
    [
        ((4,), "<i4", None, 16),
        ((4,), "<i4", (4,), 16),
        ((2, 3), "<i2", None, 12),
        ((2, 3), "<i2", (6, 2), 12),
        ((3, 1), "<f8", (8, 800), 24),  # a stride over an extent of 1 does not matter
        ((2, 2), "<i4", (4, 8), 16),  # Fortran order is contiguous too
        ((0,), "<i8", None, 0),
    ],
)
def test_buffer_from_object_cuda_array_interface(ctx, shape, typestr, strides, nbytes):
    memory = ctx.buffer_from_data(bytes(range(32)))
    view = ctx.buffer_from_object(FakeCudaArray(memory, shape, typestr, strides))
    assert isinstance(view, CudaBuffer)
    assert view.size == nbytes
    assert view.to_pybytes() == bytes(range(nbytes))


def test_buffer_from_object_negative_strides_view_the_whole_span(ctx):
    memory = ctx.buffer_from_data(bytes(range(16)))
    reversed_ints = FakeCudaArray(memory, (4,), "<i4", (-4,))
    reversed_ints.__cuda_array_interface__["data"] = (memory.address + 12, False)  # the last int
    view = ctx.buffer_from_object(reversed_ints)
    assert (view.address, view.size) == (memory.address, 16)


def test_buffer_from_object_cuda_array_interface_keeps_object_alive(ctx):
    fake = FakeCudaArray(ctx.buffer_from_data(b"abcd"), (4,), "|u1")
    alive = weakref.ref(fake)
    view = ctx.buffer_from_object(fake)
    del fake
    gc.collect()
    assert alive() is not None
    assert view.to_pybytes() == b"abcd"
    del view
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize(
    ("shape", "typestr", "strides"),
    [((2,), "<i4", (8,)), ((2, 2), "<i4", (4, 16)), ((2, 2), "<i2", (8, 2))],
)
def test_buffer_from_object_non_contiguous(ctx, shape, typestr, strides):
    memory = ctx.new_buffer(32)
    with pytest.raises(ValueError, match="array data is non-contiguous"):
        ctx.buffer_from_object(FakeCudaArray(memory, shape, typestr, strides))


@pytest.mark.parametrize("obj", [pa.py_buffer(b"abc"), pa.allocate_buffer(4)], ids=["py_buffer", "allocate"])
def test_buffer_from_object_cpu_buffer(ctx, obj):
    with pytest.raises(pa.ArrowTypeError, match="buffer is not backed by a CudaBuffer"):
        ctx.buffer_from_object(obj)


@pytest.mark.parametrize(
    ("obj", "name"),
    [(b"abc", "bytes"), (np.zeros(3), "numpy.ndarray"), (42, "int"), (None, "NoneType"), (object(), "object")],
)
def test_buffer_from_object_other_objects(ctx, obj, name):
    # Arrow's message, word for word: users match on it.
    expected = f"cannot create device buffer view from `<class '{name}'>` object"
    with pytest.raises(pa.ArrowTypeError, match=re.escape(expected)):
        ctx.buffer_from_object(obj)


def test_get_device_address_of_device_memory(ctx):
    buf = ctx.new_buffer(8)
    assert ctx.get_device_address(buf.address) == buf.address


def test_repr(ctx):
    assert "device_number=0" in repr(ctx)


def test_stream_record_returns_an_event_another_stream_waits_on(ctx):
    producer, consumer = arrow_gpu.Stream(ctx), arrow_gpu.Stream(ctx)
    event = producer.record()
    assert isinstance(event, arrow_gpu.Event) and event.context == ctx
    consumer.wait(event)
    consumer.synchronize()
    assert event.done
    mine = arrow_gpu.Event(ctx)
    assert producer.record(mine) is mine


def test_device_module_is_the_home_of_context_stream_and_event():
    from arrow_gpu import device

    assert (device.Context, device.Stream, device.Event) == (
        arrow_gpu.Context, arrow_gpu.Stream, arrow_gpu.Event)


@pytest.mark.parametrize("stream", [0, "object"])
def test_copies_between_host_and_device_take_a_stream(ctx, stream):
    stream = arrow_gpu.Stream(ctx) if stream == "object" else stream
    device = ctx.new_buffer(6)
    assert device.copy_from_host(b"abcdef", stream=stream) == 6
    assert device.copy_to_host(position=1, nbytes=4, stream=stream).to_pybytes() == b"bcde"
    with pytest.raises(TypeError, match="as a CUDA stream"):
        device.copy_to_host(stream="not a stream")


@pytest.mark.gpu
def test_calls_leave_the_threads_current_context_as_they_found_it(ctx):
    # Another library's context current on this thread stays current, and the data still goes
    # to the primary context of device 0; a thread with none current gets the primary one, as
    # the CUDA runtime would give it. (The test drives the driver itself to make the other
    # context, as such a library would.)
    libcuda = ctypes.CDLL("libcuda.so.1")

    def current():
        handle = ctypes.c_void_p()
        assert libcuda.cuCtxGetCurrent(ctypes.byref(handle)) == 0
        return handle.value or 0

    other = ctypes.c_void_p()
    # cuCtxCreate_v4 with no parameters is a plain context (drivers of CUDA 12.5 and later).
    assert libcuda.cuCtxCreate_v4(ctypes.byref(other), None, 0, 0) == 0
    table = pa.table({"x": [1, 2, 3]})
    try:
        assert current() == other.value
        assert arrow_gpu.to_host(arrow_gpu.to_device(table)).equals(table)
        assert arrow_gpu.device.context_of(arrow_gpu.to_device(table)) == ctx
        assert current() == other.value
    finally:
        assert libcuda.cuCtxDestroy_v2(other) == 0

    seen = []

    def fresh_thread():
        seen.append(current())
        arrow_gpu.to_device(table)
        seen.append(current())

    worker = threading.Thread(target=fresh_thread)
    worker.start()
    worker.join()
    assert seen == [0, ctx.handle]


_SLOW_FILL = r"""
extern "C" __global__ void slow_fill(long long* out, long long value, long long n, int naps) {
    for (int i = 0; i < naps; ++i) __nanosleep(1000000);  // about 1 ms each
    for (long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = value;
}
"""


@pytest.mark.gpu
def test_copies_given_a_stream_follow_its_queued_work():
    # A kernel on a non-blocking stream (nothing orders it with the legacy default stream)
    # sleeps, then writes: copies given that stream come after it, without the caller
    # synchronising, and a device-to-device copy comes before the stream's later reads; for
    # a pipelined and a direct size, the stream given as a CuPy stream and as an int.
    cupy = pytest.importorskip("cupy")
    kernel = cupy.RawKernel(_SLOW_FILL, "slow_fill")
    stream = cupy.cuda.Stream(non_blocking=True)
    n = 1 << 18  # 2 MiB: a pipelined copy, as well as the direct one of a small buffer

    def fill(values, value):
        kernel((1,), (256,), (values, np.int64(value), np.int64(values.size), np.int32(50)),
               stream=stream)

    for size, spelling in ((n, stream), (16, stream.ptr)):
        values = cupy.zeros(size, dtype=np.int64)
        array = arrow_gpu.from_cuda_array(values)
        fill(values, 7)
        assert arrow_gpu.to_host(array, stream=spelling).to_numpy().tolist() == [7] * size
        fill(values, 8)
        buffer = array.buffers()[1]
        device = CudaBuffer.from_buffer(buffer)
        assert np.frombuffer(device.copy_to_host(stream=spelling), np.int64).tolist() == [8] * size
        # A host-to-device copy overwrites the bytes only after the kernel's write.
        fill(values, 9)
        device.copy_from_host(np.full(size, 5, np.int64), stream=spelling)
        stream.synchronize()  # had the kernel come after the copy, its 9s would be there now
        assert values.get().tolist() == [5] * size
        # Device to device: after the kernel's write, and before what the stream does next,
        # also while the legacy default stream, where the copy is queued, is busy for longer.
        for busy in (False, True):
            fill(values, 6)
            if busy:
                kernel((1,), (1,), (cupy.zeros(1, dtype=np.int64), np.int64(0), np.int64(1),
                                    np.int32(100)), stream=cupy.cuda.Stream.null)
            target = cupy.zeros(size, dtype=np.int64)
            into = CudaBuffer.from_buffer(arrow_gpu.from_cuda_array(target).buffers()[1])
            assert into.copy_from_device(device, stream=spelling) == 8 * size
            with stream:
                seen = target.copy()  # a kernel on the stream reads the copy
            stream.synchronize()
            assert seen.get().tolist() == [6] * size


# --- as_context: the one reader of every device= argument ---------------------------------


class CoreDevice:
    """Names a device as cuda.core's Device does: by ``device_id``."""

    def __init__(self, device_id):
        self.device_id = device_id


class CoreStream:
    """A ``__cuda_stream__`` stream that says its device, as cuda.core's Stream does."""

    def __init__(self, device_id):
        self.device = CoreDevice(device_id)

    def __cuda_stream__(self):
        return (0, 0)


class BareStream:
    """A ``__cuda_stream__`` stream and nothing more: the protocol names no device."""

    def __cuda_stream__(self):
        return (0, 0)


DEVICE_SPELLINGS = {
    "int": lambda: 1,
    "numpy-int": lambda: np.int32(1),
    "context": lambda: Context(1),
    "stream": lambda: arrow_gpu.Stream(Context(1)),
    "memory-manager": lambda: Context(1).memory_manager,
    "device": lambda: Context(1).device,
    "pyarrow.cuda": lambda: __import__("pyarrow.cuda").cuda.Context(1),
    "device_id": lambda: CoreDevice(1),
    "stream-with-device": lambda: CoreStream(1),
}


@pytest.mark.multi_gpu
@pytest.mark.parametrize("spelling", DEVICE_SPELLINGS)
def test_as_context_reads_every_spelling_of_a_device(spelling):
    from arrow_gpu.device import as_context
    assert as_context(DEVICE_SPELLINGS[spelling]()) == Context(1)


def test_as_context_gives_a_context_back_unchanged(ctx):
    from arrow_gpu.device import as_context
    foreign = Context(0, handle=ctx.handle)
    assert as_context(foreign) is foreign
    assert as_context(arrow_gpu.Stream(foreign)) is foreign


@pytest.mark.parametrize("device, error, message", [
    (pa.default_cpu_memory_manager(), ValueError, "must be a CUDA device.*pass a device number"),
    (pa.default_cpu_memory_manager().device, ValueError, "must be a CUDA device.*to_host"),
    ("cuda:0", TypeError, r"must be an int \(a device number\), a Context.*got 'str'"),
    (True, TypeError, "must be an int.*got 'bool'"),
    (0.0, TypeError, "must be an int.*got 'float'"),
    (None, TypeError, "got 'NoneType'"),
    (CoreDevice("0"), TypeError, "object with a device_id.*got 'CoreDevice'"),
    (BareStream(), TypeError, "does not say which device.*pass the device number"),
    (64, pa.ArrowInvalid, "device 64 does not exist: this process sees"),
    (-1, pa.ArrowInvalid, "device -1 does not exist"),
], ids=["cpu-manager", "cpu-device", "str", "bool", "float", "none", "bad-device_id",
        "bare-stream", "too-large", "negative"])
def test_as_context_refuses_what_is_not_a_cuda_device_by_name(device, error, message):
    from arrow_gpu.device import as_context
    with pytest.raises(error, match=message):
        as_context(device)


@pytest.mark.multi_gpu
@pytest.mark.parametrize("spelling", ["memory-manager", "device_id", "stream-with-device"])
def test_every_device_parameter_reads_devices_through_as_context(spelling):
    from arrow_gpu import c_device_interface as cdi
    from arrow_gpu.io import export_batch, import_batch
    device = DEVICE_SPELLINGS[spelling]()
    batch = pa.record_batch({"x": [1, 2]})
    on_one = arrow_gpu.to_device(batch, device=device)
    assert arrow_gpu.device.context_of(on_one) == Context(1)
    assert arrow_gpu.cuda_memory_manager(device).device.device_id == 1
    assert str(arrow_gpu.pinned_memory_manager(device).device) == \
        str(arrow_gpu.pinned_memory_manager(1).device)
    assert arrow_gpu.memory_stats(device)["bytes_allocated"] == \
        Context(1).memory_stats()["bytes_allocated"]
    assert arrow_gpu.trim(device) >= 0
    assert cdi.import_record_batch(cdi.DeviceData(on_one), device=device).num_rows == 2
    with export_batch(batch, device) as shared:
        assert arrow_gpu.device.context_of(import_batch(shared.payload, device)) == Context(1)


def test_the_device_parameters_refuse_a_host_device_before_doing_anything(ctx):
    from arrow_gpu import c_device_interface as cdi
    from arrow_gpu.io import export_batch
    host = pa.default_cpu_memory_manager()
    data = arrow_gpu.to_device(pa.array([1]))
    for call in (lambda: arrow_gpu.to_device(pa.array([1]), device=host),
                 lambda: arrow_gpu.cuda_memory_manager(host),
                 lambda: arrow_gpu.pinned_memory_manager(host),
                 lambda: arrow_gpu.memory_stats(host),
                 lambda: arrow_gpu.trim(host),
                 lambda: cdi.import_array(cdi.DeviceData(data), device=host),
                 lambda: export_batch(pa.record_batch({"x": [1]}), host)):
        with pytest.raises(ValueError, match="must be a CUDA device"):
            call()
