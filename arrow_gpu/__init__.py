"""arrow_gpu: CUDA device support for pip-installed pyarrow.

Importing it teaches pyarrow about CUDA memory (``Array.copy_to``, C Device Data Interface
imports, printing device arrays) and makes ``import pyarrow.cuda`` work.

>>> import pyarrow as pa
>>> import arrow_gpu
>>> ctx = arrow_gpu.Context(0)
>>> on_gpu = pa.array([1, None, 3]).copy_to(ctx.memory_manager)
>>> on_gpu.is_cpu
False
>>> on_gpu.copy_to(pa.default_cpu_memory_manager()).to_pylist()
[1, None, 3]
"""

#: The package version (pyproject.toml reads it from here).
__version__ = "0.1.0"

from arrow_gpu._util.compat import check_pyarrow_version  # noqa: E402

check_pyarrow_version()

from arrow_gpu._interop import pyarrow_cuda as _pyarrow_cuda  # noqa: E402
from arrow_gpu import memory_manager  # noqa: E402
from arrow_gpu._cuda import CudaBuffer, HostBuffer, IpcMemHandle, new_host_buffer  # noqa: E402
from arrow_gpu.c_device_interface import (  # noqa: E402
    DeviceData,
    import_array,
    import_record_batch,
    import_stream,
)
from arrow_gpu.device import (  # noqa: E402
    Context,
    Event,
    Stream,
    device_count,
    is_available,
    stream_handle,
    using_simulator,
)
from arrow_gpu.interop import as_cuda_array, from_cuda_array, from_dlpack  # noqa: E402
from arrow_gpu.memory_manager import (  # noqa: E402
    allocator_name,
    cuda_memory_manager,
    memory_stats,
    pinned_memory_manager,
    pinned_memory_pool,
    pinned_pool_stats,
    release_pinned_memory,
    set_allocator,
    set_pinned_cache_limit,
    trim,
)
from arrow_gpu.transfer import to_device, to_host  # noqa: E402
from arrow_gpu.transfer_options import (  # noqa: E402
    get_transfer_options,
    set_transfer_options,
    transfer_progress,
)

__all__ = [
    "Context",
    "CudaBuffer",
    "DeviceData",
    "Event",
    "HostBuffer",
    "IpcMemHandle",
    "allocator_name",
    "as_cuda_array",
    "cuda_memory_manager",
    "device_count",
    "from_cuda_array",
    "from_dlpack",
    "get_transfer_options",
    "import_array",
    "import_record_batch",
    "import_stream",
    "is_available",
    "memory_stats",
    "Stream",
    "new_host_buffer",
    "pinned_memory_manager",
    "pinned_memory_pool",
    "pinned_pool_stats",
    "release_pinned_memory",
    "set_allocator",
    "set_pinned_cache_limit",
    "set_transfer_options",
    "stream_handle",
    "to_device",
    "to_host",
    "transfer_progress",
    "trim",
    "using_simulator",
]

#: Whether this package serves ``pyarrow.cuda`` (False under a CUDA-enabled pyarrow build).
serves_pyarrow_cuda = _pyarrow_cuda.install()
#: Whether pyarrow finds CUDA memory through this package's device mappers.
device_mappers_registered = memory_manager.register()
