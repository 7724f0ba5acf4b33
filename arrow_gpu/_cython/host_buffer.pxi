# HostBuffer: pinned (page-locked) host memory, its memory manager for copying whole Arrow
# objects into it, and its memory pool for decoders to fill.

from pyarrow.lib cimport MemoryManager, MemoryPool


cdef class HostBuffer(Buffer):
    """Pinned (page-locked) host memory: CPU buffer-protocol access, fast device copies.

    Create one with ``new_host_buffer``; ``Context.buffer_from_object`` maps it into a
    device.

    Examples
    --------
    >>> import numpy as np
    >>> from arrow_gpu import new_host_buffer
    >>> buf = new_host_buffer(8)
    >>> np.frombuffer(buf, dtype=np.uint8)[:] = 7
    >>> buf.to_pybytes()
    b'\\x07\\x07\\x07\\x07\\x07\\x07\\x07\\x07'
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Do not call HostBuffer's constructor directly, use "
                        "new_host_buffer() instead")

    @staticmethod
    cdef HostBuffer wrap(const shared_ptr[CBuffer]& buffer):
        cdef HostBuffer self = HostBuffer.__new__(HostBuffer)
        self.init(buffer)
        return self


def new_host_buffer(size, device=0):
    """Allocate pinned host memory for fast transfers with a device.

    Parameters
    ----------
    size : int
        The size of the buffer, in bytes.
    device : int, default 0
        The device whose transfers the memory is for.

    Returns
    -------
    HostBuffer
        A new buffer of uninitialised pinned memory.

    Raises
    ------
    TypeError
        If ``size`` or ``device`` is not an int.
    ValueError
        If ``size`` is negative, or no device has the number ``device`` (then
        ``pyarrow.ArrowInvalid``).
    MemoryError
        If the pinned memory cannot be allocated (``pyarrow.ArrowMemoryError``).

    Examples
    --------
    >>> from arrow_gpu import new_host_buffer
    >>> buf = new_host_buffer(16)
    >>> buf.size, buf.is_cpu
    (16, True)
    """
    cdef int64_t nbytes = as_int("size", size)
    if size < 0:
        raise ValueError(f"size must be non-negative, got {size}")
    cdef shared_ptr[CCudaHostMemoryManager] manager = GetResultValue(
        CCudaHostMemoryManager.Primary(as_int("device", device)))
    cdef shared_ptr[CBuffer] buffer
    with nogil:
        buffer = GetResultValue(AllocateShared(manager.get(), nbytes))
    return HostBuffer.wrap(buffer)


def _pinned_memory_manager(device=0):
    """The memory manager that allocates pinned host memory for ``device``."""
    return MemoryManager.wrap(AsMemoryManager(GetResultValue(
        CCudaHostMemoryManager.Primary(as_int("device", device)))))


def _pinned_memory_pool(device=0):
    """The pyarrow.MemoryPool of pinned host memory allocated for ``device``."""
    cdef CMemoryPool* pool = GetResultValue(PinnedPool(as_int("device", device)))
    cdef MemoryPool wrapped = MemoryPool.__new__(MemoryPool)
    wrapped.init(pool)
    return wrapped


def _pinned_pool_stats(MemoryPool pool not None):
    """The pinned pool's figures (zeros for another pool); its cache limit None for none."""
    cdef CPinnedPoolStats stats = PinnedPoolStatsOf(pool.pool)
    return {"reserved_bytes": stats.reserved_bytes, "cached_bytes": stats.cached_bytes,
            "cache_limit": (None if stats.cache_limit == kNoPinnedCacheLimit
                            else stats.cache_limit),
            "driver_allocations": stats.driver_allocations,
            "driver_frees": stats.driver_frees,
            "pageable_allocations": stats.pageable_allocations}


def _set_pinned_cache_limit(MemoryPool pool not None, limit):
    """Bound what the pinned pool keeps in free blocks (None: no bound); the bytes this gave
    back."""
    cdef int64_t c_limit = kNoPinnedCacheLimit if limit is None else limit
    cdef int64_t released
    with nogil:
        released = SetPinnedPoolCacheLimit(pool.pool, c_limit)
    return released


def _release_pinned_pool(MemoryPool pool not None):
    """Give the pinned pool's unused memory back to the driver; the bytes given back."""
    cdef int64_t released
    with nogil:
        released = ReleasePinnedPool(pool.pool)
    return released
