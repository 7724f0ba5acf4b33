"""Arrow memory managers for CUDA: how pyarrow allocates on, and copies to and from, GPUs.

Importing arrow_gpu registers device mappers for ``kCUDA`` and ``kCUDA_HOST`` with Arrow,
so that pyarrow's ``copy_to`` and its C Device Data Interface importer find this package's
memory managers. Every device allocation they make comes from one pluggable allocator.
"""

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

from arrow_gpu._cuda import (_allocator_name, _pinned_memory_manager, _pinned_memory_pool,
                             _pinned_pool_stats, _register_device_mappers, _release_pinned_pool,
                             _set_allocator, _set_pinned_cache_limit)
from arrow_gpu.device import Context, DeviceLike, as_context

__all__ = [
    "DeviceMemoryResource",
    "allocator_name",
    "cuda_memory_manager",
    "memory_stats",
    "pinned_memory_manager",
    "pinned_memory_pool",
    "pinned_pool_stats",
    "register",
    "release_pinned_memory",
    "set_allocator",
    "set_pinned_cache_limit",
    "trim",
]

_log = logging.getLogger("arrow_gpu")
_registered: bool | None = None

AllocateFn = Callable[[int, int], int]
FreeFn = Callable[[int, int, int], None]


@runtime_checkable
class DeviceMemoryResource(Protocol):
    """An object that hands out and takes back device memory, for ``set_allocator``.

    A wrapper of another library's pool (RMM, CuPy's, cuda.core's) fits in a few lines.
    Both methods are called with the GIL held and the device's primary context current;
    ``allocate`` raises (any exception becomes ``MemoryError``) when it has no memory.

    Examples
    --------
    >>> import arrow_gpu
    >>> class PinnedResource:  # host memory the device can address, as a stand-in
    ...     def __init__(self):
    ...         self.blocks = {}
    ...     def allocate(self, nbytes, device):
    ...         block = arrow_gpu.new_host_buffer(nbytes)
    ...         address = arrow_gpu.Context(device).get_device_address(block.address)
    ...         self.blocks[address] = block
    ...         return address
    ...     def deallocate(self, address, nbytes, device):
    ...         del self.blocks[address]
    >>> isinstance(PinnedResource(), DeviceMemoryResource)
    True
    """

    def allocate(self, nbytes: int, device: int) -> int:
        """Allocate device memory.

        Parameters
        ----------
        nbytes : int
            How many bytes.
        device : int
            The device number.

        Returns
        -------
        int
            The device address of the new memory.

        Raises
        ------
        Exception
            Any, when there is no memory; the caller sees ``MemoryError``.
        """

    def deallocate(self, address: int, nbytes: int, device: int) -> None:
        """Take back memory that ``allocate`` returned.

        Parameters
        ----------
        address : int
            The address ``allocate`` returned.
        nbytes : int
            The size it was asked for.
        device : int
            The device number it was asked for.
        """


def register() -> bool:
    """Register the device mappers with Arrow, once.

    Importing arrow_gpu calls it; later calls repeat the first answer.

    Returns
    -------
    bool
        True if registered; False if another CUDA backend (a CUDA-enabled Arrow build)
        already has kCUDA.

    Examples
    --------
    >>> register() == register()
    True
    """
    global _registered
    if _registered is None:
        _registered = _register_device_mappers()
    return _registered


def cuda_memory_manager(device: DeviceLike = 0) -> pa.MemoryManager:
    """The memory manager of a device's primary context (or of the Context given).

    Parameters
    ----------
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    pyarrow.MemoryManager
        The memory manager, for ``copy_to`` and friends.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.
    pyarrow.ArrowInvalid
        If no device has that number.
    OSError
        If the CUDA driver cannot be loaded.

    Examples
    --------
    >>> import pyarrow as pa
    >>> arr = pa.array([1, 2, 3]).copy_to(cuda_memory_manager(0))
    >>> arr.is_cpu
    False
    """
    return as_context(device).memory_manager


def pinned_memory_manager(device: DeviceLike = 0) -> pa.MemoryManager:
    """A memory manager of pinned (page-locked) host memory, for fast copies with ``device``.

    Arrays copied to it have ``device_type`` ``CUDA_HOST``. (A ``HostBuffer``'s own
    ``memory_manager`` is the CPU's, as in pyarrow.cuda.)

    Parameters
    ----------
    device : DeviceLike, default 0
        The device the copies go to or come from, in any spelling
        ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    pyarrow.MemoryManager
        A memory manager of pinned host memory.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> import pyarrow as pa
    >>> pa.array([1, 2, 3]).copy_to(pinned_memory_manager(0)).device_type
    <DeviceAllocationType.CUDA_HOST: 3>
    """
    return _pinned_memory_manager(as_context(device).device_number)


def pinned_memory_pool(device: DeviceLike = 0) -> pa.MemoryPool:
    """A pyarrow memory pool of pinned (page-locked) host memory, for data bound for ``device``.

    Give it to a reader or a kernel (``memory_pool=``) and the buffers it fills need no
    staging on their way to the device: ``to_device`` moves them by DMA alone, leaving the
    CPU free to decode. ``arrow_gpu.loading.read_parquet`` decodes into it. The data stays
    ordinary CPU data (``is_cpu`` is True) that every pyarrow function accepts.

    Pinning memory is slow, so freed blocks stay pinned for the next allocation (one pool
    per device, for the life of the process), up to a bound: by default a quarter of the
    host's physical memory (pinned pages cannot be swapped out), past which the largest free
    blocks go back to the driver (``set_pinned_cache_limit`` sets it).
    ``release_pinned_memory`` and ``trim`` give every free block back.
    (pyarrow's ``MemoryPool.release_unused()`` acts on pyarrow's default pool whatever the
    pool it is called on.)
    Where the system has no pinned memory left, allocations come from the system allocator
    instead (``pinned_pool_stats`` counts them).

    Parameters
    ----------
    device : DeviceLike, default 0
        The device whose primary context allocates the memory (any context can copy it),
        in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    pyarrow.MemoryPool
        The same pool for every call with the same device.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> pool = pinned_memory_pool(0)
    >>> doubled = pc.multiply(pa.array([1, 2, 3]), 2, memory_pool=pool)
    >>> pool.backend_name, doubled.to_pylist()
    ('arrow_gpu_pinned', [2, 4, 6])
    """
    return _pinned_memory_pool(as_context(device).device_number)


def pinned_pool_stats(device: DeviceLike = 0) -> dict[str, int | None]:
    """What the pinned memory pool of ``device`` holds (see ``pinned_memory_pool``).

    Parameters
    ----------
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    dict of str to int or None
        ``bytes_allocated`` and ``max_memory`` (what buffers hold now, and at most),
        ``reserved_bytes`` (pinned memory held from the driver, in use or not),
        ``cached_bytes`` (of which free, kept for reuse), ``cache_limit`` (the most kept
        free: see ``set_pinned_cache_limit``; None for no bound), ``driver_allocations`` and
        ``driver_frees`` (the pool's driver calls) and ``pageable_allocations``
        (allocations served by the system allocator when pinned memory ran out).

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> pool = pinned_memory_pool(0)
    >>> buffer = pa.allocate_buffer(1 << 20, memory_pool=pool)
    >>> pinned_pool_stats(0)["bytes_allocated"] >= 1 << 20
    True
    """
    pool = pinned_memory_pool(device)
    return {"bytes_allocated": pool.bytes_allocated(), "max_memory": pool.max_memory(),
            **_pinned_pool_stats(pool)}


def release_pinned_memory(device: DeviceLike = 0) -> int:
    """Give the pinned memory that no buffer of ``device``'s pinned pool uses back to the
    driver (see ``pinned_memory_pool``).

    Parameters
    ----------
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    int
        The bytes given back.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> buffer = pa.allocate_buffer(1 << 20, memory_pool=pinned_memory_pool(0))
    >>> del buffer
    >>> release_pinned_memory(0) >= 1 << 20
    True
    """
    released: int = _release_pinned_pool(pinned_memory_pool(device))
    _log.debug("released %d bytes of pinned pool memory", released)
    return released


def set_pinned_cache_limit(nbytes: int | None, device: DeviceLike = 0) -> int:
    """Bound the free pinned memory that ``device``'s pinned pool keeps for reuse.

    The pool keeps freed blocks pinned, since pinning is slow (see ``pinned_memory_pool``);
    past ``nbytes`` of them it gives the largest back to the driver, now and whenever a
    freed block takes it past again. A small block whose neighbours (carved from one driver
    allocation) are still in use stays until they are freed. The default is a quarter of
    the host's physical memory.

    Parameters
    ----------
    nbytes : int or None
        The most free pinned memory kept, in bytes: 0 gives every block back as it is
        freed; None keeps every freed block.
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    int
        The bytes given back now.

    Raises
    ------
    TypeError
        If ``nbytes`` is neither an int nor None, or ``device`` is not a spelling of a
        device.
    ValueError
        If ``nbytes`` is negative.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> before = pinned_pool_stats(0)["cache_limit"]
    >>> buffer = pa.allocate_buffer(4 << 20, memory_pool=pinned_memory_pool(0))
    >>> del buffer
    >>> set_pinned_cache_limit(1 << 20) >= 4 << 20
    True
    >>> pinned_pool_stats(0)["cached_bytes"] <= 1 << 20
    True
    >>> set_pinned_cache_limit(before)
    0
    """
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int)):
        raise TypeError(f"the pinned cache limit is an int of bytes or None, not "
                        f"'{type(nbytes).__name__}'")
    if nbytes is not None and nbytes < 0:
        raise ValueError(f"the pinned cache limit cannot be negative: {nbytes}")
    if nbytes is not None:
        nbytes = min(nbytes, (1 << 63) - 1)  # more than any host has: no bound either way
    released: int = _set_pinned_cache_limit(pinned_memory_pool(device), nbytes)
    _log.debug("pinned cache limit %s bytes; %d bytes given back", nbytes, released)
    return released


_ALLOCATOR_NAMES = ("caching", "device", "pool")
_ALLOCATOR_CHOICES = ("choose 'caching', 'device' or 'pool', or pass a DeviceMemoryResource, "
                      "or an allocate(nbytes, device_number) function with its free function")


def set_allocator(
        allocator: Literal["caching", "device", "pool"] | DeviceMemoryResource | AllocateFn = "caching",
        free: FreeFn | None = None) -> None:
    """Choose where new device buffers get their memory.

    - ``"caching"`` (default): ``cuMemAlloc``'d memory that freed buffers leave in a
      per-device cache, so that steady-state allocations make no driver call. Buffers of up
      to 1 MiB are carved from shared 2 MiB driver allocations; every buffer can be shared
      through CUDA IPC (the handle carries its offset). ``trim()`` gives unused memory back,
      as allocations do by themselves before raising MemoryError. Contexts other than a
      device's primary one are not cached. Work queued on a non-blocking stream that reads
      a buffer must be synchronized before the buffer is dropped (as with CuPy's and
      PyTorch's caching allocators); work on the default stream and blocking streams is
      ordered for you.
    - ``"device"``: ``cuMemAlloc`` and ``cuMemFree`` for every buffer, nothing cached.
    - ``"pool"``: the device's stream-ordered memory pool (``cuMemAllocAsync``), which reuses
      freed memory cheaply; its memory cannot be exported through CUDA IPC.
    - a ``DeviceMemoryResource`` (an object with ``allocate`` and ``deallocate``), or a
      callable ``allocate(nbytes, device_number) -> address`` together with
      ``free(address, nbytes, device_number)``: memory from another allocator (RMM, CuPy's
      pool, ...). It is called with the GIL held and the device's context current.

    Buffers already allocated keep (and are returned to) the allocator that made them.

    Parameters
    ----------
    allocator : str, DeviceMemoryResource or callable, default "caching"
        The allocator, as listed above.
    free : callable, optional
        ``free(address, nbytes, device_number)``; given with a callable ``allocator``
        only, and then required.

    Raises
    ------
    ValueError
        If ``allocator`` is not a known name (the message lists them).
    TypeError
        If ``allocator`` is neither a name, a DeviceMemoryResource nor a callable, or
        ``free`` is missing for a callable allocator, or given with anything else.
    NotImplementedError
        For ``"pool"``, if the CUDA driver has no stream-ordered memory pool
        (``pyarrow.ArrowNotImplementedError``).

    Examples
    --------
    >>> set_allocator("pool"); allocator_name()
    'pool'
    >>> set_allocator(); allocator_name()
    'caching'
    >>> set_allocator("largest")
    Traceback (most recent call last):
    ...
    ValueError: unknown allocator 'largest'; choose 'caching', 'device' or 'pool', ...
    """
    if isinstance(allocator, DeviceMemoryResource):
        if free is not None:
            raise TypeError("a DeviceMemoryResource frees through its own deallocate; "
                            "pass no free function")
        _set_allocator("callback", allocator.allocate, allocator.deallocate)
    elif callable(allocator):
        if not callable(free):
            raise TypeError("a callable allocator needs a callable free(address, nbytes, device)")
        _set_allocator("callback", allocator, free)
    elif free is not None:
        raise TypeError("free is only given with a callable allocator")
    elif isinstance(allocator, str):
        if allocator not in _ALLOCATOR_NAMES:
            raise ValueError(f"unknown allocator {allocator!r}; {_ALLOCATOR_CHOICES}")
        _set_allocator(allocator)
    else:
        raise TypeError(f"an allocator cannot be a '{type(allocator).__name__}'; "
                        f"{_ALLOCATOR_CHOICES}")
    _log.debug("device allocator set to %s", allocator_name())


def allocator_name() -> str:
    """The name of the allocator in use.

    Returns
    -------
    str
        ``"caching"``, ``"device"``, ``"pool"`` or ``"callback"`` (an allocator from
        another library).

    Examples
    --------
    >>> allocator_name() in {"caching", "device", "pool", "callback"}
    True
    """
    return _allocator_name()


def trim(device: DeviceLike | None = None) -> int:
    """Give the memory arrow_gpu keeps for reuse back to the driver: the caching
    allocator's unused device memory, and the pinned host memory no buffer of the pinned
    pool uses (``release_pinned_memory``; repeated ``to_host(..., memory_pool=
    pinned_memory_pool())`` downloads keep theirs for the next one).

    Memory still used by buffers stays. Useful before handing the GPU, or host memory, to
    another library or process; allocations that run out of memory trim by themselves first.

    Parameters
    ----------
    device : DeviceLike, optional
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts; every device if
        omitted.

    Returns
    -------
    int
        The number of bytes freed.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.
    pyarrow.ArrowInvalid
        If no device has that number.

    Examples
    --------
    >>> trim() >= 0
    True
    """
    contexts = ([as_context(device)] if device is not None
                else [Context(number) for number in range(Context.get_num_devices())])
    return sum(context.trim() + release_pinned_memory(context) for context in contexts)


def memory_stats(device: DeviceLike = 0) -> dict[str, Any]:
    """Allocation counters of a device's primary context (or of the Context given), with
    the device's free and total bytes.

    Parameters
    ----------
    device : DeviceLike, default 0
        The device, in any spelling ``arrow_gpu.device.as_context`` accepts.

    Returns
    -------
    dict of str to int or str
        The counters of ``Context.memory_stats``, and ``allocator`` (as
        ``allocator_name`` says), ``device_free_bytes`` and ``device_total_bytes``.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``device`` is a pyarrow MemoryManager or Device that is not CUDA's.
    pyarrow.ArrowInvalid
        If no device has that number.
    OSError
        If the driver cannot report the free memory.

    Examples
    --------
    >>> stats = memory_stats(0)
    >>> {"allocator", "bytes_allocated", "device_free_bytes"} <= stats.keys()
    True
    """
    context = as_context(device)
    free, total = context.memory_info()
    return {
        **context.memory_stats(),
        "allocator": allocator_name(),
        "device_free_bytes": free,
        "device_total_bytes": total,
    }
