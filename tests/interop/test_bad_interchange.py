"""Malformed input to the interchange API (C device interface, CAI, DLPack, Numba).

Each case must end in a Python exception that names the problem, with every exported struct
released exactly once and no device memory left behind (the ``ctx`` fixture checks that).
"""

import ctypes
import gc
import weakref

import nanoarrow as na
import numpy as np
import pyarrow as pa
import pytest

from arrow_gpu import _cuda
from arrow_gpu import c_device_interface as cdi
from arrow_gpu.c_device_interface import DeviceData, import_array, import_stream
from arrow_gpu.testing.c_structs import (SCHEMA_RELEASE, STREAM_GET_NEXT, STREAM_RELEASE, ArrowDeviceArray,
                       ArrowDeviceArrayStream, ArrowSchema, in_new_capsule, moved_from_capsule,
                       release)
from arrow_gpu.interop import as_cuda_array, from_cuda_array, from_dlpack
from arrow_gpu.transfer import to_device


pytestmark = pytest.mark.usefixtures("nothing_left_exported")


def on_device(ctx, array):
    return array.copy_to(ctx.memory_manager)


def device_table(ctx, chunks):
    table = pa.table({"x": pa.chunked_array(chunks, pa.int64())})
    return pa.Table.from_batches([b.copy_to(ctx.memory_manager) for b in table.to_batches()])


@SCHEMA_RELEASE
def _mark_schema_released(pointer):
    pointer.contents.release = SCHEMA_RELEASE()


# --- C device interface: export ----------------------------------------------------------------


def _month_interval_struct():
    """A struct with a child type pyarrow has no Python class for."""
    children = [na.c_array([1, 2], na.int64()), na.c_array([3, 4], na.interval_months())]
    schema = na.struct({"a": na.int64(), "m": na.interval_months()})
    return pa.array(na.c_array_from_buffers(schema, 2, [None], children=children))


@pytest.mark.parametrize("shape", ["batch", "nested struct"])
def test_types_without_python_classes_export(ctx, shape):
    months = on_device(ctx, _month_interval_struct())
    if shape == "batch":
        data = pa.record_batch([on_device(ctx, pa.array([1, 2])), months], names=["x", "s"])
    else:
        data = pa.StructArray.from_arrays([on_device(ctx, pa.array([1, 2])), months],
                                          names=["x", "s"])
    result = cdi.import_record_batch(DeviceData(data)) if shape == "batch" \
        else import_array(DeviceData(data))
    assert str(result.copy_to(pa.default_cpu_memory_manager())) == \
        str(data.copy_to(pa.default_cpu_memory_manager()))


def test_mixed_devices_fail_before_anything_is_exported(ctx):
    data = pa.record_batch([on_device(ctx, pa.array([1, 2])), pa.array([3, 4])], names=["x", "y"])
    with pytest.raises(ValueError, match="several devices"):
        DeviceData(data).__arrow_c_device_array__()
    gc.collect()
    assert _cuda._live_exports() == 0, "the first column's export still holds its device memory"


def test_requested_schema_that_is_no_capsule_releases_the_export(ctx):
    data = DeviceData(pa.record_batch([pa.array([1])], names=["x"]))
    with pytest.raises(TypeError, match="PyCapsule"):
        data.__arrow_c_device_array__(pa.schema([("x", pa.int64())]))
    gc.collect()
    assert _cuda._live_exports() == 0, "the exported array was never released"


def test_consumed_requested_schema_is_refused(ctx):
    requested = pa.int64().__arrow_c_schema__()
    pa.DataType._import_from_c_capsule(requested)  # pyarrow moves it out: released
    with pytest.raises(ValueError, match="released ArrowSchema.*only once"):
        DeviceData(on_device(ctx, pa.array([1]))).__arrow_c_device_array__(requested)


# --- C device interface: import ----------------------------------------------------------------


def test_requested_schema_cannot_apply_to_capsules(ctx):
    data = DeviceData(on_device(ctx, pa.array([1])))
    with pytest.raises(ValueError, match="requested_schema.*producer"):
        import_array(data.__arrow_c_device_array__(), requested_schema=pa.int32())
    with pytest.raises(ValueError, match="requested_schema.*producer"):
        import_stream(data.__arrow_c_device_stream__(),
                      requested_schema=pa.schema([("y", pa.int32())]))


def test_schema_with_null_children_pointer(ctx):
    _, array_capsule = DeviceData(on_device(ctx, pa.array([{"x": 1}]))).__arrow_c_device_array__()
    schema = ArrowSchema(format=b"+s", n_children=1, release=_mark_schema_released)
    with pytest.raises(ValueError, match="1 children but a NULL children pointer"):
        import_array((in_new_capsule(schema), array_capsule))


def test_empty_view_array_with_null_variadic_sizes(ctx):
    empty = on_device(ctx, pa.array(["a" * 20, "b" * 30], pa.string_view()).slice(0, 0))
    schema_capsule, array_capsule = DeviceData(empty).__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    assert device_array.array.n_buffers > 3, "the export has variadic data buffers"
    device_array.array.buffers[device_array.array.n_buffers - 1] = None
    with pytest.raises(ValueError, match="variadic buffer sizes"):
        import_array((schema_capsule, in_new_capsule(device_array)))


# --- C device interface: streams ---------------------------------------------------------------


def test_stream_dropped_before_its_first_batch_is_released(ctx):
    schema, batches = cdi.iter_stream(DeviceData(device_table(ctx, [[1, 2], [3]])))
    assert schema.names == ["x"]
    del batches
    gc.collect()
    assert _cuda._live_exports() == 0, "the stream was never released"


def _stream_with(ctx, **members):
    capsule = DeviceData(device_table(ctx, [[1, 2], [3]])).__arrow_c_device_stream__()
    stream = moved_from_capsule(capsule, ArrowDeviceArrayStream)
    for name, value in members.items():
        setattr(stream, name, value)
    return in_new_capsule(stream)


def test_stream_with_null_callbacks(ctx):
    with pytest.raises(ValueError, match="NULL get_schema or get_next"):
        import_stream(_stream_with(ctx, get_next=STREAM_GET_NEXT()))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the raise
def test_stream_release_that_raises_is_still_called_once(ctx):
    calls = []

    capsule = DeviceData(device_table(ctx, [[1, 2], [3]])).__arrow_c_device_stream__()
    stream = moved_from_capsule(capsule, ArrowDeviceArrayStream)
    original = ArrowDeviceArrayStream()
    ctypes.memmove(ctypes.addressof(original), ctypes.addressof(stream), ctypes.sizeof(stream))

    @STREAM_RELEASE
    def failing_release(pointer):
        calls.append(pointer.contents.private_data)
        release(original)  # frees the producer's state, leaves this struct's release set
        raise RuntimeError("the producer's release fails")

    stream.release = failing_release
    capsule = in_new_capsule(stream)
    _, batches = cdi.iter_stream(capsule)
    assert [len(batch) for batch in batches] == [2, 1]
    del batches
    gc.collect()
    assert len(calls) == 1


def test_stream_callbacks_after_release_fail(ctx):
    capsule = DeviceData(device_table(ctx, [[1, 2]])).__arrow_c_device_stream__()
    stream = moved_from_capsule(capsule, ArrowDeviceArrayStream)
    get_next, get_schema, get_last_error = stream.get_next, stream.get_schema, stream.get_last_error
    release(stream)
    stream.get_next, stream.get_schema, stream.get_last_error = get_next, get_schema, get_last_error
    out = ArrowDeviceArray()
    assert stream.get_next(ctypes.pointer(stream), ctypes.pointer(out)) != 0
    assert stream.get_schema(ctypes.pointer(stream), ctypes.pointer(ArrowSchema())) != 0
    assert stream.get_last_error(ctypes.pointer(stream)) is None


# --- CUDA array interface and DLPack -----------------------------------------------------------


class CudaArray:
    """A CAI v3 producer over device memory the test allocates (works on the simulator)."""

    def __init__(self, ctx, values):
        self.buffer = ctx.buffer_from_data(values.tobytes())
        self.__cuda_array_interface__ = {
            "version": 3, "shape": values.shape, "typestr": values.dtype.str,
            "data": (self.buffer.address, False), "strides": None, "stream": None,
        }


@pytest.mark.parametrize("change", [
    lambda interface: interface.pop("shape"),
    lambda interface: interface.update(shape=(2.5,)),
    lambda interface: interface.update(shape=None),
    lambda interface: interface.update(typestr="not a dtype"),
    lambda interface: interface.update(data=None),
], ids=["no shape", "float shape", "shape None", "bad typestr", "data None"])
def test_from_cuda_array_names_a_malformed_interface(ctx, change):
    values = CudaArray(ctx, np.arange(4, dtype=np.int64))
    change(values.__cuda_array_interface__)
    with pytest.raises(ValueError, match="array's __cuda_array_interface__ is malformed"):
        from_cuda_array(values)
    flags = CudaArray(ctx, np.ones(4, dtype=np.bool_))
    change(flags.__cuda_array_interface__)
    with pytest.raises(ValueError, match="validity's __cuda_array_interface__ is malformed"):
        from_cuda_array(CudaArray(ctx, np.arange(4, dtype=np.int64)), validity=flags)
    with pytest.warns(FutureWarning), pytest.raises(
            ValueError, match="mask's __cuda_array_interface__ is malformed"):
        from_cuda_array(CudaArray(ctx, np.arange(4, dtype=np.int64)), mask=flags)


def test_to_numba_names_the_null_type(ctx):
    from arrow_gpu.numba import to_numba

    with pytest.raises(TypeError, match="type null"):
        to_numba(to_device(pa.nulls(3)))


def test_from_cuda_array_rejects_a_host_bitmap(ctx):
    values = CudaArray(ctx, np.arange(4, dtype=np.int64))
    with pytest.raises(ValueError, match="bitmap is in CPU memory.*copy it there"):
        from_cuda_array(values, validity=pa.py_buffer(b"\x05"))


class ChangedDLPack:
    """A DLPack producer whose tensor describes its dtype with other ``bits``."""

    def __init__(self, ctx, values, bits):
        self.view = as_cuda_array(to_device(pa.array(values)))
        self.bits = bits

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

    def __dlpack__(self, stream=None):
        capsule = self.view.__dlpack__(stream=stream)
        # DLTensor: data (8 bytes), device (8), ndim (4), then dtype's code and bits.
        ctypes.c_uint8.from_address(_capsule_pointer(capsule, b"dltensor") + 21).value = self.bits
        return capsule


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@pytest.mark.parametrize("bits", [12, 24, 0])
def test_from_dlpack_rejects_odd_bit_widths(ctx, bits):
    producer = ChangedDLPack(ctx, np.arange(4, dtype=np.int32), bits)
    exported = weakref.ref(producer.view)
    with pytest.raises(TypeError, match=f"unsupported DLPack dtype .*bits {bits}"):
        from_dlpack(producer)
    del producer
    gc.collect()
    assert exported() is None, "the refused tensor was not deleted"


# --- Numba -------------------------------------------------------------------------------------


def test_from_numba_booleans_need_bool_device_arrays():
    cuda = pytest.importorskip("numba.cuda")
    from arrow_gpu.numba import from_numba, pack_bits

    bytes_ = cuda.to_device(np.array([0, 2, 1], np.uint8))
    with pytest.raises(TypeError, match="dtype/type mismatch.*uint8"):
        from_numba(bytes_, type=pa.bool_())
    with pytest.raises(TypeError, match="dtype/type mismatch.*flags of dtype uint8"):
        pack_bits(bytes_)


@pytest.mark.parametrize("dtype,type", [("m8[ms]", pa.timestamp("ms")),
                                        ("M8[ms]", pa.duration("ms")),
                                        ("M8[ns]", pa.time64("ns"))])
def test_from_numba_keeps_datetimes_and_durations_apart(dtype, type):
    cuda = pytest.importorskip("numba.cuda")
    from arrow_gpu.numba import from_numba

    with pytest.raises(TypeError, match="dtype/type mismatch"):
        from_numba(cuda.to_device(np.zeros(2, dtype)), type=type)
