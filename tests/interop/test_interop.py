"""Zero-copy CUDA array interface and DLPack, both ways."""

import gc
import warnings
import weakref

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu.interop import as_cuda_array, from_cuda_array, from_dlpack
from arrow_gpu.transfer import to_device, to_host


class FakeCudaArray:
    """A CAI v3 producer over device memory that the test allocates (works on the simulator)."""

    def __init__(self, ctx, values, typestr=None, strides=None, shape=None, stream=None):
        values = np.ascontiguousarray(values)
        self.buffer = ctx.buffer_from_data(values.tobytes())
        self.__cuda_array_interface__ = {
            "version": 3, "shape": shape or values.shape, "typestr": typestr or values.dtype.str,
            "data": (self.buffer.address, False), "strides": strides, "stream": stream,
        }


def test_from_cuda_array_is_zero_copy(ctx):
    source = FakeCudaArray(ctx, np.array([1.5, -2.0, 3.25]))
    array = from_cuda_array(source)
    assert array.type == pa.float64() and not array.is_cpu
    assert array.buffers()[1].address == source.buffer.address
    assert to_host(array).to_pylist() == [1.5, -2.0, 3.25]
    del source
    gc.collect()  # the pyarrow buffer keeps the producer alive
    assert to_host(array).to_pylist() == [1.5, -2.0, 3.25]


NULL_EVERY_THIRD = [None if i % 3 == 0 else i for i in range(10)]


def test_from_cuda_array_mask_is_true_for_null_as_in_pa_array(ctx):
    values = FakeCudaArray(ctx, np.arange(10, dtype=np.int32))
    nulls = np.array([i % 3 == 0 for i in range(10)])
    expected = pa.array(np.arange(10, dtype=np.int32), mask=nulls).to_pylist()
    assert expected == NULL_EVERY_THIRD
    for dtype in (np.bool_, np.uint8):  # uint8 bytes: nonzero = null
        with pytest.warns(FutureWarning, match="True = null.*validity="):
            array = from_cuda_array(values, mask=FakeCudaArray(ctx, nulls.astype(dtype)))
        assert to_host(array).to_pylist() == expected


def test_from_cuda_array_mask_warns_on_every_call(ctx):
    values = FakeCudaArray(ctx, np.arange(3, dtype=np.int8))
    nulls = FakeCudaArray(ctx, np.array([False, True, False]))
    for _ in range(2):
        with pytest.warns(FutureWarning, match=r"as pa\.array"):
            assert to_host(from_cuda_array(values, mask=nulls)).to_pylist() == [0, None, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # validity= says True = valid without a warning
        valid = FakeCudaArray(ctx, np.array([True, False, True]))
        assert to_host(from_cuda_array(values, validity=valid)).to_pylist() == [0, None, 2]


def test_from_cuda_array_validity(ctx):
    values = FakeCudaArray(ctx, np.arange(10, dtype=np.int32))
    valid = FakeCudaArray(ctx, np.array([i % 3 != 0 for i in range(10)]))
    assert to_host(from_cuda_array(values, validity=valid)).to_pylist() == NULL_EVERY_THIRD
    values.__cuda_array_interface__["mask"] = valid  # the interface's own mask: True = valid
    assert to_host(from_cuda_array(values)).to_pylist() == NULL_EVERY_THIRD
    bits = np.packbits([i % 3 != 0 for i in range(10)], bitorder="little")
    bitmap = ctx.buffer_from_data(bits.tobytes())
    packed = from_cuda_array(values, validity=bitmap)
    assert packed.buffers()[0].address == bitmap.address, "a packed bitmap is used as is"
    assert to_host(packed).to_pylist() == NULL_EVERY_THIRD
    as_uint8 = FakeCudaArray(ctx, bits)  # a packed bitmap as a uint8 CUDA array
    assert to_host(from_cuda_array(values, validity=as_uint8)).to_pylist() == NULL_EVERY_THIRD


def test_from_dlpack_takes_masks_as_from_cuda_array_does(ctx):
    values = pa.array(np.arange(10, dtype=np.int32))
    nulls = as_cuda_array(to_device(pa.array([int(i % 3 == 0) for i in range(10)], pa.uint8())))
    with_mask = from_dlpack(as_cuda_array(to_device(values)), mask=nulls)
    assert to_host(with_mask).to_pylist() == NULL_EVERY_THIRD
    valid = FakeCudaArray(ctx, np.array([i % 3 != 0 for i in range(10)]))
    with_validity = from_dlpack(as_cuda_array(to_device(values)), validity=valid)
    assert to_host(with_validity).to_pylist() == NULL_EVERY_THIRD


def test_mask_and_validity_together_are_refused(ctx):
    values = FakeCudaArray(ctx, np.arange(4, dtype=np.int8))
    flags = FakeCudaArray(ctx, np.zeros(4, np.bool_))
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="either mask.*or validity"):
        from_cuda_array(values, mask=flags, validity=flags)
    with pytest.raises(ValueError, match="either mask.*or validity"):
        from_dlpack(as_cuda_array(to_device(pa.array([1, 2, 3, 4], pa.int8()))), mask=flags,
                    validity=flags)


def test_from_cuda_array_waits_on_its_stream(ctx):
    stream = arrow_gpu.Stream(ctx)
    source = FakeCudaArray(ctx, np.array([7], np.uint16), stream=stream.handle)
    assert to_host(from_cuda_array(source)).to_pylist() == [7]


@pytest.mark.multi_gpu
@pytest.mark.filterwarnings("ignore:from_cuda_array.mask=:FutureWarning")
def test_masks_on_another_device_are_refused(ctx, ctx1):
    values = FakeCudaArray(ctx, np.arange(3, dtype=np.int64))
    elsewhere = FakeCudaArray(ctx1, np.zeros(3, np.bool_))
    for masks in (dict(mask=elsewhere), dict(validity=elsewhere)):
        with pytest.raises(ValueError, match="on device 1, the values on device 0"):
            from_cuda_array(values, **masks)


@pytest.mark.multi_gpu
def test_from_cuda_array_finds_the_device_of_its_memory(ctx1):
    source = FakeCudaArray(ctx1, np.arange(3, dtype=np.int64))
    array = from_cuda_array(source)
    assert array.buffers()[1].device.device_id == 1
    assert to_host(array).to_pylist() == [0, 1, 2]
    assert ctx1.get_device_number(source.buffer.address) == 1


@pytest.mark.parametrize("spelling", ["number", "context", "memory manager", "device"])
def test_from_cuda_array_takes_any_device_spelling(ctx, spelling):
    device = {"number": 0, "context": ctx, "memory manager": ctx.memory_manager,
              "device": ctx.memory_manager.device}[spelling]
    array = from_cuda_array(FakeCudaArray(ctx, np.arange(3, dtype=np.int64)), device=device)
    assert array.buffers()[1].device.device_id == 0
    assert to_host(array).to_pylist() == [0, 1, 2]


def test_from_cuda_array_refuses_memory_the_driver_does_not_know(ctx):
    source = FakeCudaArray(ctx, np.arange(3, dtype=np.int64))
    host = np.arange(3, dtype=np.int64)
    source.__cuda_array_interface__["data"] = (host.ctypes.data, False)
    with pytest.raises(ValueError, match="not memory the CUDA driver knows.*device="):
        from_cuda_array(source)


@pytest.mark.parametrize("change,error,message", [
    (dict(strides=(16,)), ValueError, "not contiguous"),
    (dict(typestr="<c16"), TypeError, "unsupported"),
    (dict(typestr=">i4"), TypeError, "unsupported"),
    (dict(shape=(2, 1)), ValueError, "1-D"),
])
def test_from_cuda_array_rejects(ctx, change, error, message):
    with pytest.raises(error, match=message):
        from_cuda_array(FakeCudaArray(ctx, np.array([1, 2], np.int64), **change))


@pytest.mark.filterwarnings("ignore:from_cuda_array.mask=:FutureWarning")
def test_bad_masks_and_objects(ctx):
    values = FakeCudaArray(ctx, np.arange(4, dtype=np.int8))
    with pytest.raises(ValueError, match="mask length mismatch"):
        from_cuda_array(values, mask=FakeCudaArray(ctx, np.array([True, False])))
    with pytest.raises(ValueError, match="validity length mismatch"):
        from_cuda_array(values, validity=FakeCudaArray(ctx, np.array([True, False])))
    with pytest.raises(TypeError):
        from_cuda_array(values, mask=[True] * 4)
    with pytest.raises(TypeError, match="must hold bools"):
        from_cuda_array(values, mask=FakeCudaArray(ctx, np.zeros(4, np.int8)))
    with pytest.raises(TypeError, match="validity="):  # a bitmap is no mask
        from_cuda_array(values, mask=ctx.new_buffer(1))
    with pytest.raises(ValueError, match="too short"):
        from_cuda_array(FakeCudaArray(ctx, np.arange(20, dtype=np.int8)),
                        validity=ctx.new_buffer(1))
    with pytest.raises(ValueError, match="too short"):
        from_cuda_array(FakeCudaArray(ctx, np.arange(20, dtype=np.int8)),
                        validity=FakeCudaArray(ctx, np.zeros(2, np.uint8)))
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        from_cuda_array(np.arange(3))


def test_as_cuda_array(ctx):
    device = to_device(pa.array([1, 2, 3, 4], pa.int16()).slice(1))
    view = as_cuda_array(device, stream=arrow_gpu.Stream(ctx))
    interface = view.__cuda_array_interface__
    assert interface["version"] == 3 and interface["shape"] == (3,) and interface["typestr"] == "<i2"
    assert interface["data"][0] == device.buffers()[1].address + 2
    assert interface["stream"] == view.stream.handle
    assert view.__dlpack_device__() == (2, 0)
    # back again without a copy: the same memory
    again = from_cuda_array(view)
    assert again.buffers()[1].address == interface["data"][0]
    assert to_host(again).to_pylist() == [2, 3, 4]


def test_as_cuda_array_rejects(ctx):
    with pytest.raises(ValueError, match="validity"):
        as_cuda_array(to_device(pa.array([1, None])))
    assert as_cuda_array(to_device(pa.array([1, None])), ignore_validity=True).length == 2
    with pytest.raises(TypeError, match="no CUDA array equivalent"):
        as_cuda_array(to_device(pa.array(["a"])))
    with pytest.raises(TypeError, match=r"in host memory: copy it to the device first with "
                                        r"arrow_gpu\.to_device\(array\)"):
        as_cuda_array(pa.array([1, 2]))
    with pytest.raises(TypeError):
        as_cuda_array([1, 2])


def test_cuda_buffer_view(ctx):
    buffer = ctx.buffer_from_data(b"abcd")
    view = as_cuda_array(buffer)
    assert view.__cuda_array_interface__["shape"] == (4,)
    assert to_host(from_dlpack(view)).to_pylist() == list(b"abcd")


def test_dlpack_round_trip_and_lifetimes(ctx):
    device = to_device(pa.array([0.5, 1.5, 2.5], pa.float32()))
    view = as_cuda_array(device, stream=arrow_gpu.Stream(ctx))
    array = from_dlpack(view)
    exported = weakref.ref(view)
    assert array.buffers()[1].address == device.buffers()[1].address
    del device, view
    gc.collect()
    assert exported() is not None, "the consumer holds the tensor, the tensor its producer"
    assert to_host(array).to_pylist() == [0.5, 1.5, 2.5]
    del array
    gc.collect()
    assert exported() is None, "the deleter ran"


def test_unconsumed_dlpack_capsule_is_deleted(ctx):
    view = as_cuda_array(to_device(pa.array([1], pa.int8())))
    capsule = view.__dlpack__()
    exported = weakref.ref(view)
    del view
    gc.collect()
    assert exported() is not None, "the capsule holds the tensor, the tensor its producer"
    del capsule
    gc.collect()
    assert exported() is None


def test_dlpack_rejects(ctx):
    view = as_cuda_array(to_device(pa.array([1], pa.int8())))
    with pytest.raises(BufferError):
        view.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(1, 0))
    with pytest.raises(TypeError, match="DLPack"):
        from_dlpack(object())
    with pytest.raises(TypeError, match=r"'ndarray' is in host \(CPU\) memory: copy host data "
                                        r"to the device with arrow_gpu\.to_device\(pa\.array"
                                        r"\(\.\.\.\)\) or Context\.buffer_from_data"):
        from_dlpack(np.arange(3))
    exported = weakref.ref(view)
    del view
    gc.collect()
    assert exported() is None, "a refused export left its tensor behind"


@pytest.mark.gpu
def test_arrays_with_nulls_know_their_null_count(ctx):
    # pyarrow's ChunkedArray and Table constructors count an unknown null count on the host,
    # where a device bitmap read faults.
    values = FakeCudaArray(ctx, np.arange(10, dtype=np.int32))
    valid = FakeCudaArray(ctx, np.array([i % 3 != 0 for i in range(10)]))
    nulls = FakeCudaArray(ctx, np.array([i % 3 == 0 for i in range(10)]))
    for array in (from_cuda_array(values, validity=valid),
                  from_dlpack(as_cuda_array(from_cuda_array(values)), mask=nulls)):
        chunked = pa.chunked_array([array])
        table = pa.table({"x": chunked})
        assert to_host(table)["x"].null_count == 4
        assert to_host(chunked).to_pylist() == NULL_EVERY_THIRD


@pytest.mark.gpu
def test_cupy_handoff(ctx):
    cupy = pytest.importorskip("cupy")
    device = to_device(pa.array(np.arange(5, dtype=np.int64)))
    as_cupy = cupy.asarray(as_cuda_array(device))
    assert as_cupy.data.ptr == device.buffers()[1].address
    assert int(as_cupy.sum()) == 10
    from_cupy = from_cuda_array(cupy.arange(4, dtype=cupy.float32) * 2)
    assert to_host(from_cupy).to_pylist() == [0.0, 2.0, 4.0, 6.0]
    from_dl = from_dlpack(cupy.arange(3, dtype=cupy.int32))
    assert to_host(from_dl).to_pylist() == [0, 1, 2]
    with pytest.raises(ValueError, match="not contiguous"):
        from_cuda_array(cupy.arange(10)[::2])


@pytest.mark.gpu
def test_torch_handoff(ctx):
    torch = pytest.importorskip("torch")
    device = to_device(pa.array([1.0, 2.0, 3.0], pa.float32()))
    tensor = torch.from_dlpack(as_cuda_array(device))
    assert tensor.data_ptr() == device.buffers()[1].address
    assert float(tensor.sum()) == 6.0
    back = from_dlpack(torch.arange(4, device="cuda", dtype=torch.int64))
    assert to_host(back).to_pylist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="1-D"):
        from_dlpack(torch.zeros((2, 2), device="cuda"))
