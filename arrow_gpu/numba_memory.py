"""Numba External Memory Management (EMM) plugin: Numba allocates through arrow_gpu.

With it, Numba's device arrays come from the same allocator as Arrow's device buffers and
count in ``arrow_gpu.Context(device).bytes_allocated``: one pool, one accounting. Enable it
before Numba first touches the GPU, with the environment::

    NUMBA_CUDA_MEMORY_MANAGER=arrow_gpu.numba python app.py

or in code::

    from numba import cuda
    from arrow_gpu.numba_memory import ArrowGpuMemoryManager
    cuda.set_memory_manager(ArrowGpuMemoryManager)

IPC handles (``device_array.get_ipc_handle()``) and ``cuda.current_context().get_memory_info()``
work. It needs a real GPU: Numba's simulator has no memory managers.
"""

from __future__ import annotations

import ctypes
import functools
import weakref

from numba.cuda.core import config as _numba_config

if _numba_config.ENABLE_CUDASIM:
    raise ImportError("arrow_gpu's Numba memory manager needs a real GPU: Numba's simulator "
                      "(NUMBA_ENABLE_CUDASIM=1) has no External Memory Management")

from numba import cuda  # noqa: E402
from numba.cuda.cudadrv import driver as _driver  # noqa: E402

from arrow_gpu._cuda import CudaBuffer  # noqa: E402
from arrow_gpu.device import Context  # noqa: E402

__all__ = ["ArrowGpuMemoryManager"]


def _release(buffer: CudaBuffer) -> None:
    """Finalizer of a Numba allocation: dropping its reference to ``buffer`` frees it."""


class ArrowGpuMemoryManager(cuda.HostOnlyCUDAMemoryManager):
    """Numba device allocations from ``arrow_gpu.Context(device).new_buffer``.

    Pinned and mapped host memory stay with Numba (``HostOnlyCUDAMemoryManager``). Numba
    makes one per context and calls its methods; pass the class itself to
    ``numba.cuda.set_memory_manager``, or name this module in
    ``NUMBA_CUDA_MEMORY_MANAGER``.

    Parameters
    ----------
    context : numba.cuda context
        The Numba context it serves, a keyword argument (Numba passes it).

    Raises
    ------
    RuntimeError
        If no ``context`` is given.
    """

    @functools.cached_property
    def arrow_context(self) -> Context:
        """The arrow_gpu Context of Numba's (primary) context.

        Returns
        -------
        Context
            The primary context of the device Numba's context belongs to.
        """
        return Context(self.context.device.id)

    def initialize(self) -> None:
        """Get ready for allocations; Numba calls it when its context starts.

        Raises
        ------
        OSError
            If arrow_gpu cannot open the device's context, so that Numba fails at start-up
            rather than at the first allocation.
        """
        self.arrow_context  # fail at Numba's start-up, not at the first allocation

    def memalloc(self, size: int) -> _driver.MemoryPointer:
        """Allocate device memory for Numba from arrow_gpu's allocator.

        Parameters
        ----------
        size : int
            How many bytes.

        Returns
        -------
        numba.cuda.cudadrv.driver.MemoryPointer
            The memory; it is freed when Numba drops it.

        Raises
        ------
        MemoryError
            If the device has not enough free memory (``pyarrow.ArrowMemoryError``).
        """
        buffer = self.arrow_context.new_buffer(size)
        # The finalizer holds the buffer; Numba runs it (or drops it) to free the memory.
        return _driver.MemoryPointer(weakref.proxy(self.context),
                                     _driver.binding.CUdeviceptr(buffer.address), size,
                                     finalizer=functools.partial(_release, buffer))

    def get_ipc_handle(self, memory) -> _driver.IpcHandle:
        """A CUDA IPC handle of a Numba allocation, for ``device_array.get_ipc_handle()``.

        Parameters
        ----------
        memory : numba.cuda.cudadrv.driver.MemoryPointer
            Memory that ``memalloc`` returned (or a part of it).

        Returns
        -------
        numba.cuda.cudadrv.driver.IpcHandle
            The handle, with the memory's offset in the driver's allocation.

        Raises
        ------
        OSError
            If the driver cannot export the memory (memory of the ``"pool"`` allocator,
            for example).
        """
        exported = CudaBuffer.from_numba(memory).export_for_ipc()
        handle = _driver.binding.CUipcMemHandle()
        raw = exported.driver_handle
        ctypes.memmove(handle.getPtr(), raw, len(raw))
        return _driver.IpcHandle(memory, handle, memory.size,
                                 self.context.device.get_device_identity(),
                                 offset=exported.offset)

    def get_memory_info(self) -> cuda.MemoryInfo:
        """How much device memory is free, and how much the device has.

        Returns
        -------
        numba.cuda.MemoryInfo
            ``free`` and ``total``, in bytes.

        Raises
        ------
        OSError
            If the driver cannot report it.
        """
        free, total = self.arrow_context.memory_info()
        return cuda.MemoryInfo(free=free, total=total)

    @property
    def interface_version(self) -> int:
        """The version of Numba's memory-manager interface this implements: 1."""
        return 1


_numba_memory_manager = ArrowGpuMemoryManager
