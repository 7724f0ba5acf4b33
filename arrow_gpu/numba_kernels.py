"""Numba CUDA device functions for reading Arrow data inside ``@cuda.jit`` kernels.

Use them with the device arrays of :func:`arrow_gpu.numba.to_numba`:

- ``is_valid(bitmap, bit_offset, i)``: whether slot ``i`` is non-null. ``bitmap`` is a view's
  ``.bitmap`` (an empty bitmap means "no nulls") and ``bit_offset`` its ``.offset``.
- ``get_bit(bits, bit_offset, i)``: bit ``i`` of a packed bit array (boolean values).
- ``value_bounds(offsets, i)``: ``(start, end)`` of variable-length value ``i`` (string, binary,
  list) — its bytes are ``data[start:end]``, its list items ``child[start:end]``.
- ``value_length(offsets, i)``: the length of value ``i`` (bytes of a string, items of a list).

>>> import pyarrow as pa
>>> from numba import cuda
>>> import arrow_gpu
>>> from arrow_gpu.numba import to_numba
>>> from arrow_gpu.numba_kernels import is_valid
>>> @cuda.jit
... def null_aware_sum(values, bitmap, bit_offset, total):
...     i = cuda.grid(1)
...     if i < values.size and is_valid(bitmap, bit_offset, i):
...         cuda.atomic.add(total, 0, values[i])
>>> view = to_numba(pa.array([1, None, 3], pa.int64()).copy_to(arrow_gpu.Context(0).memory_manager))
>>> total = cuda.to_device([0])
>>> null_aware_sum[1, 32](view.values, view.bitmap, view.offset, total)
>>> int(total.copy_to_host()[0])
4
"""

from numba import cuda

__all__ = ["get_bit", "is_valid", "value_bounds", "value_length"]

#: Threads per block of this package's helper kernels.
THREADS = 128


@cuda.jit(device=True)
def get_bit(bits, bit_offset, i):
    """Bit ``bit_offset + i`` of the packed, least-significant-bit-first array ``bits``."""
    position = bit_offset + i
    return ((bits[position >> 3] >> (position & 7)) & 1) == 1


@cuda.jit(device=True)
def is_valid(bitmap, bit_offset, i):
    """Whether slot ``i`` is valid; an empty ``bitmap`` (an array without nulls) is all valid."""
    if bitmap.size == 0:
        return True
    return get_bit(bitmap, bit_offset, i)


@cuda.jit(device=True)
def value_bounds(offsets, i):
    """``(start, end)`` of variable-length value ``i`` in the data (or child) array."""
    return offsets[i], offsets[i + 1]


@cuda.jit(device=True)
def value_length(offsets, i):
    """The length of variable-length value ``i`` (bytes of a string, items of a list)."""
    return offsets[i + 1] - offsets[i]


# Helper kernels of arrow_gpu.numba (one thread per output element or byte).


@cuda.jit
def unpack_bits_kernel(bits, bit_offset, out, invert):
    """out[i] = bit i (or its negation): bitmaps to byte masks, booleans to bool arrays."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = is_valid(bits, bit_offset, i) != invert


@cuda.jit
def count_unset_kernel(bits, bit_offset, length, count):
    """count[0] += number of zero bits among the ``length`` bits from ``bit_offset``."""
    i = cuda.grid(1)
    if i < length and not get_bit(bits, bit_offset, i):
        cuda.atomic.add(count, 0, 1)
