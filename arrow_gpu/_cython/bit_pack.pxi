# Bytes to Arrow bitmaps on the device (arrow_gpu/_interop/array_import.py). Included in _cuda.pyx.


def _pack_bits(Context context, uintptr_t bitmap, uintptr_t flags, int64_t count,
               bint invert=False, stream=None):
    """Write the Arrow bitmap of ``count`` flag bytes (nonzero = 1; 0 with ``invert``).

    ``bitmap`` and ``flags`` are device addresses of ``context``'s device; the bitmap takes
    ``ceil(count / 8)`` bytes. Queued on ``stream`` (None: the legacy default stream).
    """
    cdef CUstream raw = _raw_stream(stream)
    with nogil:
        check_status(PackBits(deref(context.c_context), bitmap, flags, count, invert, raw))
