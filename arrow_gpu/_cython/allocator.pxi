# Where device memory comes from: choosing the allocator that every context allocates
# with (caching, the driver's, a stream-ordered pool, or Python callbacks).

def _set_allocator(kind, allocate=None, free=None):
    """Choose where device memory comes from: "caching", "device", "pool" or "callback"."""
    cdef shared_ptr[CDeviceAllocator] allocator
    if kind == "caching":
        allocator = CachingAllocator()
    elif kind == "device":
        allocator = DriverAllocator()
    elif kind == "pool":
        allocator = GetResultValue(PoolAllocator())
    elif kind == "callback":
        allocator = CallbackAllocator(allocate, free)
    else:
        raise ValueError(f"unknown allocator {kind!r}")
    SetCurrentAllocator(allocator)


def _allocator_name():
    return CurrentAllocator().get().name().decode()
