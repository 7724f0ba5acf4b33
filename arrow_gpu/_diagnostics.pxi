# Driver and device facts for `python -m arrow_gpu` (arrow_gpu/__main__.py).


def _driver_cuda_version():
    """The driver's CUDA version as (major, minor), or None when it cannot say (simulator)."""
    cdef int version = GetResultValue(DriverCudaVersion())
    return (version // 1000, version % 1000 // 10) if version else None


def _describe_device(int ordinal):
    """Name, total memory and peers (devices it can access directly) of one device."""
    cdef CDeviceDescription description = GetResultValue(DescribeDevice(ordinal))
    return {
        "name": description.name.decode(errors="replace"),
        "total_memory": description.total_memory,
        "peers": list(description.peers),
    }
