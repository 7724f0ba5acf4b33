"""The Python examples of the pyarrow.cuda guide (seeds/arrow-cuda-integration.rst), verbatim.

Each statement of the guide appears as written; its shown output becomes an assertion, except
device addresses, which differ from run to run. The Numba examples need a real device:
Numba's simulator has neither ``DeviceNDArray`` nor ``gpu_data``.
"""


import numpy as np
import pyarrow as pa
import pyarrow.lib
import pytest

import arrow_gpu  # noqa: F401  (serves pyarrow._cuda)


# The guide's ``ctx = cuda.Context(0)`` is the suite's ``ctx`` fixture: pyarrow.cuda.Context
# is arrow_gpu.Context (test_cuda_contexts checks the guide's own spelling).


def test_cuda_contexts():
    from pyarrow import cuda
    ctx = cuda.Context(0)

    assert ctx.device_number == 0


def test_cuda_buffers(ctx):
    import numpy as np
    arr = np.arange(4, dtype=np.int32)
    assert arr.nbytes == 16
    cuda_buf = ctx.buffer_from_data(arr)
    import pyarrow._cuda
    assert type(cuda_buf) is pyarrow._cuda.CudaBuffer
    assert cuda_buf.size == 16  # The buffer's size in bytes
    assert isinstance(cuda_buf.address, int) and cuda_buf.address > 0  # The buffer's address in device memory
    assert cuda_buf.context.device_number == 0

    buf = cuda_buf.copy_to_host()
    assert type(buf) is pyarrow.lib.Buffer
    np.testing.assert_array_equal(np.frombuffer(buf, dtype=np.int32), np.array([0, 1, 2, 3], dtype=np.int32))


def test_crash_warning_is_an_exception(ctx):
    cuda_buf = ctx.buffer_from_data(np.arange(4, dtype=np.int32))
    # The guide warns of a segmentation fault here; arrow_gpu must raise instead.
    with pytest.raises(Exception):
        pa.py_buffer(b"x" * 16).equals(cuda_buf)


@pytest.mark.gpu
def test_arrow_to_numba(ctx):
    arr = np.arange(4, dtype=np.int32)
    cuda_buf = ctx.buffer_from_data(arr)

    import numba.cuda

    @numba.cuda.jit
    def increment_by_one(an_array):
        pos = numba.cuda.grid(1)
        if pos < an_array.size:
            an_array[pos] += 1

    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    device_arr = DeviceNDArray(arr.shape, arr.strides, arr.dtype, gpu_data=cuda_buf.to_numba())

    increment_by_one[16, 16](device_arr)

    np.testing.assert_array_equal(
        np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32), np.array([1, 2, 3, 4], dtype=np.int32)
    )
    del device_arr
    numba.cuda.synchronize()


@pytest.mark.gpu
def test_numba_to_arrow(ctx):
    from pyarrow import cuda
    import numba.cuda

    arr = np.arange(10, 14, dtype=np.int32)
    np.testing.assert_array_equal(arr, np.array([10, 11, 12, 13], dtype=np.int32))
    device_arr = numba.cuda.to_device(arr)

    cuda_buf = cuda.CudaBuffer.from_numba(device_arr.gpu_data)
    assert cuda_buf.size == 16
    assert isinstance(cuda_buf.address, int) and cuda_buf.address > 0
    assert cuda_buf.context.device_number == 0

    np.testing.assert_array_equal(
        np.frombuffer(cuda_buf.copy_to_host(), dtype=np.int32), np.array([10, 11, 12, 13], dtype=np.int32)
    )
    # A view: Numba owns the memory, so this Context's accounting does not change.
    assert cuda_buf.address == device_arr.device_ctypes_pointer.value
