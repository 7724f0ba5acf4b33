"""Flags packed into Arrow bitmaps on the device (from_dlpack's mask= and validity=), checked
against NumPy's packbits: on the simulator the bytes are packed on the host, on a GPU by the
kernel, so the GPU run sweeps lengths around the kernel's blocks of 256 bytes (2,048 flags)."""

import numpy as np
import pyarrow as pa
import pytest

from arrow_gpu.interop import as_cuda_array, from_dlpack
from arrow_gpu.transfer import to_host


class Flags:
    """``count`` flag bytes (any nonzero value is true) at ``offset`` bytes into device memory."""

    def __init__(self, ctx, flags, offset, typestr):
        self.buffer = ctx.buffer_from_data(bytes(offset) + flags.tobytes())
        self.__cuda_array_interface__ = {
            "version": 3, "shape": flags.shape, "typestr": typestr,
            "data": (self.buffer.address + offset, False), "strides": None, "stream": None,
        }


def check_packing(ctx, length, offset, invert, seed=0):
    flags = np.random.default_rng(seed).integers(0, 4, length, dtype=np.uint8)
    flags[: length // 3] = 0  # long runs of each too, not only noise
    values = as_cuda_array(ctx.new_buffer(length))  # `length` uint8 values
    if invert:
        array = from_dlpack(values, mask=Flags(ctx, flags, offset, "|u1"))
    else:
        array = from_dlpack(values, validity=Flags(ctx, flags, offset, "|b1"))
    valid = (flags != 0) != invert
    expected = np.packbits(valid, bitorder="little")
    bitmap = to_host(array).buffers()[0]
    if bitmap is None:  # a copy may leave out the bitmap of an array without nulls
        assert valid.all()
    else:
        assert np.frombuffer(bitmap, np.uint8)[: expected.size].tolist() == expected.tolist()
    assert to_host(array).null_count == int(length - valid.sum())


@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 64, 1000])
@pytest.mark.parametrize("offset", [0, 3])
def test_packing_matches_numpy(ctx, length, offset, invert):
    check_packing(ctx, length, offset, invert)


@pytest.mark.gpu
def test_kernel_packing_matches_numpy(ctx):
    lengths = [1, 2, 7, 8, 9, 15, 16, 17, 255, 256, 257, 2047, 2048, 2049, 4095, 4096, 4097,
               65_535, 65_536, 65_537, 1_000_003]
    for seed, length in enumerate(lengths):
        for offset in (0, 1, 5, 8, 13):
            for invert in (False, True):
                check_packing(ctx, length, offset, invert, seed)


def test_packed_bitmaps_do_not_depend_on_the_flags_afterwards(ctx):
    flags = Flags(ctx, np.array([1, 0, 1], np.uint8), 0, "|b1")
    array = from_dlpack(as_cuda_array(ctx.new_buffer(3)), validity=flags)
    flags.buffer.copy_from_host(bytes(3))  # the bitmap is new memory, not a view of the flags
    assert to_host(array).null_count == 1
    assert pa.types.is_uint8(array.type)
