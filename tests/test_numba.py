"""Numba interop: typed zero-copy views (to_numba), Arrow arrays over Numba memory
(from_numba), device functions in kernels, the EMM plugin, and bad input.

Runs on a GPU and on the simulators (ARROW_GPU_SIMULATOR=1 NUMBA_ENABLE_CUDASIM=1); what the
Numba simulator cannot do (DeviceNDArray over raw pointers, CUDA array interface, EMM, launch
errors) is marked ``gpu``.
"""

import decimal
import gc
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

numba_cuda = pytest.importorskip("numba.cuda")
cuda = numba_cuda

import arrow_gpu  # noqa: E402
from arrow_gpu.numba import NumbaArrowView, from_numba, pack_bits, to_numba  # noqa: E402
from arrow_gpu.numba_kernels import get_bit, is_valid, value_bounds, value_length  # noqa: E402

CPU = pa.default_cpu_memory_manager()
THREADS = 32


def blocks(n):
    return max(1, (n + THREADS - 1) // THREADS)


def host(array):
    return array.copy_to(CPU)


def on_device(ctx, values, type=None):
    return pa.array(values, type).copy_to(ctx.memory_manager)


# --- Kernels (the examples the README shows) ---------------------------------------------------


@cuda.jit
def increment_by_one(an_array):
    pos = cuda.grid(1)
    if pos < an_array.size:
        an_array[pos] += 1


@cuda.jit
def null_aware_sum(values, bitmap, bit_offset, total):
    i = cuda.grid(1)
    if i < values.size and is_valid(bitmap, bit_offset, i):
        cuda.atomic.add(total, 0, values[i])


@cuda.jit
def string_lengths(offsets, bitmap, bit_offset, lengths, nulls):
    i = cuda.grid(1)
    if i < lengths.size:
        lengths[i] = value_length(offsets, i)
        nulls[i] = not is_valid(bitmap, bit_offset, i)


@cuda.jit
def count_byte(offsets, data, byte, counts):
    i = cuda.grid(1)
    if i < counts.size:
        start, end = value_bounds(offsets, i)
        n = 0
        for k in range(start, end):
            if data[k] == byte:
                n += 1
        counts[i] = n


@cuda.jit
def add_with_nulls(a, a_bitmap, a_offset, b, b_bitmap, b_offset, out, out_nulls):
    i = cuda.grid(1)
    if i < out.size:
        valid = is_valid(a_bitmap, a_offset, i) and is_valid(b_bitmap, b_offset, i)
        out_nulls[i] = not valid
        out[i] = a[i] + b[i] if valid else 0


@cuda.jit
def read_bits(bits, bit_offset, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = get_bit(bits, bit_offset, i)


# --- to_numba ------------------------------------------------------------------------------------


def test_kernel_increments_arrow_array_in_place(ctx):
    # The seed's "Arrow to Numba" example without a hand-built DeviceNDArray.
    array = on_device(ctx, np.arange(4, dtype=np.int32))
    view = to_numba(array)
    assert isinstance(view, NumbaArrowView)
    assert view.values.dtype == np.int32 and view.values.shape == (4,)
    increment_by_one[16, 16](view.values)
    assert host(array).to_pylist() == [1, 2, 3, 4]


@pytest.mark.parametrize("type, dtype", [
    (pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32),
    (pa.int64(), np.int64), (pa.uint8(), np.uint8), (pa.uint16(), np.uint16),
    (pa.uint32(), np.uint32), (pa.uint64(), np.uint64), (pa.float16(), np.float16),
    (pa.float32(), np.float32), (pa.float64(), np.float64)])
def test_numeric_values_have_the_arrow_dtype(ctx, type, dtype):
    expected = np.arange(10).astype(dtype)
    view = to_numba(pa.array(expected, type).copy_to(ctx.memory_manager))
    assert view.values.dtype == expected.dtype
    np.testing.assert_array_equal(view.values.copy_to_host(), expected)
    assert view.validity is None and view.null_count() == 0


def test_offset_is_honoured_for_values_and_validity(ctx):
    values = [None if i % 3 == 0 else i for i in range(40)]
    array = on_device(ctx, values, pa.int64()).slice(11, 20)
    view = to_numba(array)
    assert view.length == 20 and view.values.shape == (20,)
    assert view.offset == 11 % 8
    expected = values[11:31]
    got = view.values.copy_to_host()
    mask = view.null_mask().copy_to_host()
    assert mask.dtype == np.bool_
    assert mask.tolist() == [v is None for v in expected]
    present = [int(x) for x, null in zip(got, mask) if not null]
    assert present == [v for v in expected if v is not None]
    assert view.null_count() == sum(v is None for v in expected)


def test_views_share_memory_and_keep_it_alive(ctx):
    array = on_device(ctx, [5, 6, 7], pa.int32())
    view = to_numba(array)
    del array
    gc.collect()
    increment_by_one[1, THREADS](view.values)
    assert view.values.copy_to_host().tolist() == [6, 7, 8]


def test_null_aware_sum(ctx):
    array = on_device(ctx, [1, None, 3, None, 5, 6], pa.int64()).slice(1)
    view = to_numba(array)
    total = cuda.to_device(np.zeros(1, np.int64))
    null_aware_sum[blocks(view.length), THREADS](view.values, view.bitmap, view.offset, total)
    assert int(total.copy_to_host()[0]) == 3 + 5 + 6


def test_null_aware_sum_without_nulls(ctx):
    view = to_numba(on_device(ctx, [1, 2, 3], pa.int64()))
    assert view.validity is None and view.bitmap.size == 0
    total = cuda.to_device(np.zeros(1, np.int64))
    null_aware_sum[1, THREADS](view.values, view.bitmap, view.offset, total)
    assert int(total.copy_to_host()[0]) == 6


@pytest.mark.parametrize("type", [pa.string(), pa.large_string(), pa.binary(),
                                  pa.large_binary()])
def test_string_length_kernel_writes_an_arrow_int32_array(ctx, type):
    values = ["a", None, "", "héllo", "xyz", None, "abcdefgh"]
    if pa.types.is_binary(type) or pa.types.is_large_binary(type):
        values = [None if v is None else v.encode() for v in values]
    array = on_device(ctx, values, type).slice(1)
    view = to_numba(array)
    offset_dtype = np.int64 if "large" in str(type) else np.int32
    assert view.offsets.dtype == offset_dtype and view.offsets.shape == (view.length + 1,)
    assert view.data.dtype == np.uint8 and view.values is None
    lengths = cuda.device_array(view.length, np.int32)
    nulls = cuda.device_array(view.length, np.bool_)
    string_lengths[blocks(view.length), THREADS](view.offsets, view.bitmap, view.offset,
                                                 lengths, nulls)
    result = from_numba(lengths, mask=nulls)
    assert result.type == pa.int32() and not result.is_cpu
    assert host(result).null_count == 2
    expected = [None if v is None else len(v.encode() if isinstance(v, str) else v)
                for v in values[1:]]
    assert host(result).to_pylist() == expected


def test_value_bounds_reads_the_bytes_of_each_string(ctx):
    values = ["banana", "", "abc", "aaa"]
    view = to_numba(on_device(ctx, values).slice(1))
    counts = cuda.device_array(view.length, np.int32)
    count_byte[1, THREADS](view.offsets, view.data, ord("a"), counts)
    assert counts.copy_to_host().tolist() == [v.count("a") for v in values[1:]]


def test_elementwise_kernel_propagates_nulls(ctx):
    a = on_device(ctx, [1.0, None, 3.0, 4.0, None], pa.float64())
    b = on_device(ctx, [10.0, 20.0, None, 40.0, 50.0, 60.0], pa.float64()).slice(1)
    va, vb = to_numba(a), to_numba(b)
    out = cuda.device_array(len(a), np.float64)
    out_nulls = cuda.device_array(len(a), np.bool_)
    add_with_nulls[1, THREADS](va.values, va.bitmap, va.offset, vb.values, vb.bitmap,
                               vb.offset, out, out_nulls)
    result = from_numba(out, mask=out_nulls)
    assert host(result).to_pylist() == [21.0, None, 43.0, 54.0, None]
    assert host(result).null_count == 2


def test_boolean_arrays_are_bits(ctx):
    values = [True, False, None, True, True, False, False, True, True, False, True]
    array = on_device(ctx, values).slice(3)
    view = to_numba(array)
    assert view.values.dtype == np.uint8
    expected = [bool(v) for v in values[3:]]
    assert view.to_bools().copy_to_host().tolist() == expected
    bits = cuda.device_array(view.length, np.bool_)
    read_bits[1, THREADS](view.values, view.offset, bits)
    assert bits.copy_to_host().tolist() == expected


@pytest.mark.parametrize("type,metadata,dtype", [
    (pa.timestamp("us", tz="UTC"), {"unit": "us", "tz": "UTC"}, np.int64),
    (pa.timestamp("s"), {"unit": "s", "tz": None}, np.int64),
    (pa.date32(), {"unit": "D"}, np.int32),
    (pa.date64(), {"unit": "ms"}, np.int64),
    (pa.time32("ms"), {"unit": "ms"}, np.int32),
    (pa.time64("ns"), {"unit": "ns"}, np.int64),
    (pa.duration("ms"), {"unit": "ms"}, np.int64),
])
def test_temporal_types_map_to_their_storage(ctx, type, metadata, dtype):
    storage = pa.array([0, 86_400_000, None, 7], pa.int64() if np.dtype(dtype).itemsize == 8
                       else pa.int32())
    array = storage.cast(type) if not pa.types.is_date64(type) else \
        pa.Array.from_buffers(type, 4, storage.buffers())
    view = to_numba(array.copy_to(ctx.memory_manager))
    assert dict(view.metadata) == metadata
    assert view.values.dtype == dtype
    got = view.values.copy_to_host()
    assert [got[i] for i in (0, 1, 3)] == [0, 86_400_000, 7]


def test_decimal128_maps_to_little_endian_words(ctx):
    values = [decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None]
    array = pa.array(values, pa.decimal128(10, 2))
    view = to_numba(array.copy_to(ctx.memory_manager))
    assert view.values.dtype == np.uint64 and view.values.shape == (3, 2)
    assert dict(view.metadata) == {"precision": 10, "scale": 2}
    words = view.values.copy_to_host()
    assert words[0].tolist() == [125, 0]
    assert words[1].view(np.int64).tolist() == [-350, -1]
    # and back, zero-copy, with the type given
    back = from_numba(view.values, type=pa.decimal128(10, 2), mask=view.null_mask())
    assert host(back).to_pylist() == values


def test_fixed_size_binary_values_are_rows_of_bytes(ctx):
    view = to_numba(on_device(ctx, [b"ab", b"cd", b"ef"], pa.binary(2)).slice(1))
    assert view.values.shape == (2, 2)
    assert view.values.copy_to_host().tobytes() == b"cdef"


def test_list_offsets_and_child(ctx):
    array = on_device(ctx, [[1, 2], None, [3], [], [4, 5, 6]], pa.list_(pa.int16())).slice(2)
    view = to_numba(array)
    assert view.offsets.copy_to_host().tolist() == [2, 3, 3, 6]
    (child,) = view.children
    assert child.values.dtype == np.int16
    assert child.values.copy_to_host().tolist() == [1, 2, 3, 4, 5, 6]


def test_fixed_size_list_child_is_aligned_with_the_slots(ctx):
    array = on_device(ctx, [[1, 2], [3, 4], [5, 6]], pa.list_(pa.int8(), 2)).slice(1)
    view = to_numba(array)
    assert view.metadata["list_size"] == 2
    assert view.children[0].values.copy_to_host().tolist() == [3, 4, 5, 6]


def test_struct_fields_are_children(ctx):
    type = pa.struct([("x", pa.int64()), ("s", pa.string())])  # inferred field order varies
    array = on_device(ctx, [{"x": 1, "s": "a"}, {"x": 2, "s": "bb"}, None], type).slice(1)
    view = to_numba(array)
    x, s = view.children
    assert x.values.copy_to_host().tolist()[:1] == [2]
    assert s.offsets.copy_to_host().tolist()[:2] == [1, 3]
    assert view.null_mask().copy_to_host().tolist() == [False, True]


def test_dictionary_indices_and_dictionary(ctx):
    array = pa.array(["a", "b", "a", None]).dictionary_encode().copy_to(ctx.memory_manager)
    view = to_numba(array)
    assert view.values.copy_to_host().tolist()[:3] == [0, 1, 0]
    assert view.children[0].offsets.copy_to_host().tolist() == [0, 1, 2]


def test_empty_arrays(ctx):
    view = to_numba(on_device(ctx, [], pa.string()))
    assert view.length == 0 and view.data.size == 0 and view.null_mask().size == 0
    assert to_numba(on_device(ctx, [], pa.int32())).values.shape == (0,)


# --- from_numba ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.float32,
                                   np.float64])
def test_from_numba_infers_the_type(ctx, dtype):
    data = np.arange(7).astype(dtype)
    array = from_numba(cuda.to_device(data))
    assert array.type == pa.from_numpy_dtype(dtype) and host(array).null_count == 0
    assert array.device_type == pa.DeviceAllocationType.CUDA
    assert host(array).to_pylist() == data.tolist()


def test_from_numba_is_zero_copy_and_holds_the_memory(ctx):
    device_array = cuda.to_device(np.arange(5, dtype=np.int32))
    array = from_numba(device_array)
    increment_by_one[1, THREADS](device_array)  # the Arrow array sees the kernel's writes
    del device_array
    gc.collect()
    assert host(array).to_pylist() == [1, 2, 3, 4, 5]


def test_from_numba_with_type_and_mask(ctx):
    array = from_numba(cuda.to_device(np.array([0, 86_400, 7], np.int64)), type=pa.timestamp("s"),
                       mask=cuda.to_device(np.array([False, False, True])))
    assert array.type == pa.timestamp("s") and host(array).null_count == 1
    assert host(array).to_pylist()[2] is None
    assert host(array).cast(pa.int64()).to_pylist()[:2] == [0, 86_400]


def test_from_numba_with_a_packed_validity_bitmap(ctx):
    validity = cuda.to_device(np.array([0b101], np.uint8))
    array = from_numba(cuda.to_device(np.array([1, 2, 3], np.int16)), validity=validity)
    assert host(array).to_pylist() == [1, None, 3]
    assert host(array).null_count == 1
    bitmap = ctx.buffer_from_data(bytes([0b101]))  # or a device buffer
    array = from_numba(cuda.to_device(np.array([1, 2, 3], np.int16)), validity=bitmap)
    assert host(array).to_pylist() == [1, None, 3] and host(array).null_count == 1


def test_from_numba_validity_of_bools_is_true_for_valid(ctx):
    # The convention of from_cuda_array and from_dlpack: mask True = null, validity True = valid.
    values = cuda.to_device(np.array([1, 2, 3], np.int16))
    valid = cuda.to_device(np.array([True, False, True]))
    assert host(from_numba(values, validity=valid)).to_pylist() == [1, None, 3]
    assert host(from_numba(values, mask=valid)).to_pylist() == [None, 2, None]


def test_from_numba_bools_are_packed(ctx):
    flags = [True, False, True, True, False, False, False, False, True]
    array = from_numba(cuda.to_device(np.array(flags)))
    assert array.type == pa.bool_()
    assert host(array).to_pylist() == flags


def test_pack_bits_round_trips_through_is_valid(ctx):
    flags = np.array([True, False] * 9 + [True])
    bitmap = pack_bits(cuda.to_device(flags))
    assert bitmap.copy_to_host().tolist() == np.packbits(flags, bitorder="little").tolist()
    out = cuda.device_array(flags.size, np.bool_)
    read_bits[1, THREADS](bitmap, 0, out)
    assert out.copy_to_host().tolist() == flags.tolist()


def test_round_trip_to_numba_from_numba(ctx):
    original = on_device(ctx, [1.5, None, 2.5, None], pa.float32()).slice(1)
    view = to_numba(original)
    again = from_numba(view.values, mask=view.null_mask())
    assert host(again).to_pylist() == host(original).to_pylist()


# --- Bad input -----------------------------------------------------------------------------------


def test_to_numba_rejects_host_arrays():
    # The same mistake as from_numba(host), so the same exception type, with the remedy.
    with pytest.raises(TypeError, match=r"in CPU memory: copy it to the device first with "
                                        r"arrow_gpu\.to_device\(array\)"):
        to_numba(pa.array([1, 2, 3]))


def test_to_numba_rejects_chunked_arrays_and_other_objects(ctx):
    with pytest.raises(TypeError, match="chunks"):
        to_numba(pa.chunked_array([[1]]))
    with pytest.raises(TypeError, match="pyarrow.Array"):
        to_numba(np.arange(3))


@pytest.mark.parametrize("array", [
    pa.array([(1, 2, 3)], pa.month_day_nano_interval()),
    pa.array(["a"], pa.string_view()),
    pa.RunEndEncodedArray.from_arrays([2], [1]),
    pa.UnionArray.from_sparse(pa.array([0], pa.int8()), [pa.array([1])]),
], ids=["interval", "string_view", "run_end_encoded", "sparse_union"])
def test_to_numba_rejects_unsupported_types(ctx, array):
    with pytest.raises(TypeError, match="does not support Arrow type"):
        to_numba(array.copy_to(ctx.memory_manager))


def test_from_numba_rejects_host_arrays():
    with pytest.raises(TypeError, match=r"host memory; copy it to the device first "
                                        r"\(numba\.cuda\.to_device\)"):
        from_numba(np.arange(3))
    with pytest.raises(TypeError, match="host memory"):
        from_numba(cuda.to_device(np.arange(3)), mask=np.zeros(3, bool))
    with pytest.raises(TypeError, match="Numba device array"):
        from_numba([1, 2, 3])


def test_from_numba_rejects_non_contiguous_arrays():
    strided = cuda.to_device(np.arange(10, dtype=np.int64))[::2]
    with pytest.raises(ValueError, match="not contiguous"):
        from_numba(strided)


@pytest.mark.parametrize("dtype,type", [(np.int64, pa.int32()), (np.float32, pa.float64()),
                                        (np.int32, pa.decimal128(5, 2)),
                                        (np.uint8, pa.binary(4))])
def test_from_numba_rejects_dtype_type_mismatch(dtype, type):
    with pytest.raises(TypeError, match="dtype/type mismatch"):
        from_numba(cuda.to_device(np.zeros(4, dtype)), type=type)


def test_from_numba_rejects_variable_length_and_bad_types():
    data = cuda.to_device(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="fixed-width"):
        from_numba(data, type=pa.string())
    with pytest.raises(TypeError, match="pyarrow.DataType"):
        from_numba(data, type="int32")
    with pytest.raises(TypeError, match="no Arrow type"):
        from_numba(cuda.to_device(np.zeros(2, np.complex64)))


def test_from_numba_rejects_bad_masks():
    data = cuda.to_device(np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="mask length mismatch"):
        from_numba(data, mask=cuda.to_device(np.zeros(3, np.bool_)))
    with pytest.raises(TypeError, match="mask must hold bools"):
        from_numba(data, mask=cuda.to_device(np.zeros(4, np.int8)))
    with pytest.raises(ValueError, match="validity length mismatch"):
        from_numba(cuda.to_device(np.zeros(9, np.int32)),
                   validity=cuda.to_device(np.zeros(1, np.uint8)))
    with pytest.raises(ValueError, match="either mask"):
        from_numba(data, mask=cuda.to_device(np.zeros(4, np.bool_)),
                   validity=cuda.to_device(np.zeros(1, np.uint8)))


def test_to_bools_needs_a_boolean_array(ctx):
    with pytest.raises(TypeError, match="boolean"):
        to_numba(on_device(ctx, [1, 2])).to_bools()


def run_python(code, **env):
    """Run ``code`` in a fresh interpreter (Numba picks its memory manager once per process)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=300)
    return result


def test_mismatched_simulators_are_a_clear_error():
    result = run_python("""
        import pyarrow as pa, arrow_gpu
        from arrow_gpu.numba import to_numba
        to_numba(pa.array([1]).copy_to(arrow_gpu.Context(0).memory_manager))
    """, ARROW_GPU_SIMULATOR="1", NUMBA_ENABLE_CUDASIM="0")
    assert result.returncode != 0
    assert "RuntimeError" in result.stderr and "NUMBA_ENABLE_CUDASIM=1" in result.stderr


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="checks the simulator's message")
def test_memory_manager_under_the_simulator_says_it_needs_a_gpu():
    import arrow_gpu.numba

    with pytest.raises(ImportError, match="needs a real GPU"):
        arrow_gpu.numba._numba_memory_manager


# --- GPU only: raw-pointer Numba objects, CUDA array interface, EMM, launch errors --------------


@pytest.mark.gpu
def test_seed_arrow_to_numba_example(ctx):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    arr = np.arange(4, dtype=np.int32)
    cuda_buf = ctx.buffer_from_data(arr)
    device_arr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cuda_buf.to_numba())
    increment_by_one[16, 16](device_arr)
    assert np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32).tolist() == [1, 2, 3, 4]


@pytest.mark.gpu
def test_seed_numba_to_arrow_example(ctx):
    from pyarrow import cuda as pa_cuda

    arr = np.arange(10, 14, dtype=np.int32)
    device_arr = cuda.to_device(arr)
    cuda_buf = pa_cuda.CudaBuffer.from_numba(device_arr.gpu_data)
    assert cuda_buf.size == 16
    assert cuda_buf.address == device_arr.__cuda_array_interface__["data"][0]
    assert cuda_buf.context.device_number == 0
    assert np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32).tolist() == [10, 11, 12, 13]


@pytest.mark.gpu
def test_views_are_numba_device_arrays_with_the_arrow_address(ctx):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    array = on_device(ctx, list(range(10)), pa.int64()).slice(3)
    view = to_numba(array)
    assert isinstance(view.values, DeviceNDArray)
    assert view.values.__cuda_array_interface__["data"][0] == array.buffers()[1].address + 3 * 8


@pytest.mark.gpu
def test_from_numba_accepts_cuda_array_interface_objects(ctx):
    cupy = pytest.importorskip("cupy")
    data = cupy.arange(6, dtype=cupy.int32)
    array = from_numba(data)
    assert array.buffers()[1].address == data.data.ptr
    assert host(array).to_pylist() == list(range(6))


@pytest.mark.gpu
def test_kernel_launch_error_names_the_cuda_error(ctx):
    # The seed's error example: 2048 threads per block is more than any GPU runs.
    @cuda.jit
    def vecadd(A, B, C):
        work_index = cuda.grid(1)
        C[work_index] = A[work_index] + B[work_index]

    n = 4096
    a = to_numba(on_device(ctx, np.ones(n))).values
    b = to_numba(on_device(ctx, np.ones(n))).values
    c = cuda.device_array(n)
    with pytest.raises(Exception, match="CUDA_ERROR_INVALID_VALUE"):
        vecadd[n // 2048, 2048](a, b, c)
        cuda.synchronize()


EMM_CHECK = """
    import ctypes, gc, json
    import numpy as np
    import arrow_gpu
    from numba import cuda
    {setup}
    from arrow_gpu.numba import from_numba
    ctx = arrow_gpu.Context(0)
    base = ctx.bytes_allocated
    d = cuda.to_device(np.arange(1000, dtype=np.int64))
    grown = ctx.bytes_allocated - base
    manager = type(cuda.current_context().memory_manager).__name__
    free, total = cuda.current_context().get_memory_info()
    ipc = d.get_ipc_handle()._ipc_handle
    exported = arrow_gpu.CudaBuffer.from_numba(d.gpu_data).export_for_ipc()
    same_handle = (ctypes.string_at(ipc.handle.getPtr(), 64)
                   == exported.driver_handle)
    total_on_device = from_numba(d).copy_to(arrow_gpu.Context(0).memory_manager)
    values = total_on_device.copy_to(__import__("pyarrow").default_cpu_memory_manager())
    ok_values = values.to_pylist() == list(range(1000))
    del d, ipc, exported, total_on_device
    gc.collect()
    print(json.dumps(dict(manager=manager, grown=grown, freed=ctx.bytes_allocated == base,
                          free=free, total=total, same_handle=same_handle,
                          ok_values=ok_values)))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["environment", "set_memory_manager"])
def test_numba_allocates_through_arrow_gpu(how):
    setup = ("from arrow_gpu.numba import ArrowGpuMemoryManager; "
             "cuda.set_memory_manager(ArrowGpuMemoryManager)") if how == "set_memory_manager" \
        else ""
    env = {"NUMBA_CUDA_MEMORY_MANAGER": "arrow_gpu.numba"} if how == "environment" else {}
    result = run_python(EMM_CHECK.format(setup=setup), **env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["manager"] == "ArrowGpuMemoryManager"
    assert report["grown"] == 8000  # one pool, one accounting
    assert report["freed"]
    assert 0 < report["free"] <= report["total"]
    assert report["same_handle"] and report["ok_values"]
