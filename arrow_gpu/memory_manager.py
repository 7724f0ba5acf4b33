"""Arrow memory managers for CUDA: how pyarrow allocates on, and copies to and from, GPUs.

Importing arrow_gpu registers device mappers for ``kCUDA`` and ``kCUDA_HOST`` with Arrow,
so that pyarrow's ``copy_to`` and its C Device Data Interface importer find this package's
memory managers.
"""

import pyarrow as pa

from arrow_gpu._cuda import Context, _register_device_mappers

__all__ = ["cuda_memory_manager", "register"]

_registered: bool | None = None


def register() -> bool:
    """Register the device mappers once; False if another CUDA backend already has kCUDA."""
    global _registered
    if _registered is None:
        _registered = _register_device_mappers()
    return _registered


def cuda_memory_manager(device: int = 0) -> pa.MemoryManager:
    """The memory manager of a device's primary context.

    >>> import pyarrow as pa
    >>> arr = pa.array([1, 2, 3]).copy_to(cuda_memory_manager(0))
    >>> arr.device_type
    <DeviceAllocationType.CUDA: 2>
    """
    return Context(device).memory_manager
