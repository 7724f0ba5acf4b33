# distutils: language = c++
# cython: language_level = 3, embedsignature = True
"""CUDA contexts and buffers for pyarrow: the API of ``pyarrow.cuda``.

Everything here is a thin, typed layer over the C++ core in ``_native/``; copies release
the GIL.
"""

import operator
import struct

import pyarrow as pa

from arrow_gpu._sealed import seal, sealed_size, unseal

from cython.operator cimport dereference as deref
from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uintptr_t
from libc.string cimport memcpy, memset
from libcpp.memory cimport shared_ptr

from pyarrow.includes.common cimport GetResultValue
from pyarrow.includes.libarrow cimport CBuffer, CMemoryManager
from pyarrow.lib cimport (Buffer, Device, MemoryManager, MemoryPool, check_status,
                          pyarrow_unwrap_buffer, pyarrow_wrap_buffer)


def _register_device_mappers():
    """Tell Arrow how to find memory managers for kCUDA and kCUDA_HOST device ids.

    Returns False when another CUDA backend (a CUDA-enabled Arrow build) already has them.
    """
    return GetResultValue(RegisterDeviceMappers())


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


def using_simulator():
    """Whether the host simulator (``ARROW_GPU_SIMULATOR=1``) stands in for the driver.

    Returns
    -------
    bool
        True when the simulator is on, False when the CUDA driver is used.

    Raises
    ------
    pyarrow.ArrowInvalid
        If ``ARROW_GPU_SIMULATOR`` is set to a value that is not a switch (1, true, yes,
        on, or 0, false, no, off).

    Examples
    --------
    >>> import os
    >>> using_simulator() == (os.environ.get("ARROW_GPU_SIMULATOR") == "1")
    True
    """
    return GetResultValue(UsingSimulator())


cdef int64_t _check_position(int64_t position, int64_t size) except -1:
    if position < 0 or position > size:
        raise ValueError("position argument is out-of-range")
    return position


def _as_int(name, value):
    """``value`` as an int; a C-typed argument would silently truncate a float instead."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got '{type(value).__name__}'") from None


def _handle_value(handle):
    """The integer value of a driver handle from ctypes, cuda-bindings or a plain int."""
    if handle is None:
        return 0
    value = getattr(handle, "value", handle)  # ctypes.c_void_p
    return int(value or 0)


cdef class Context:
    """A CUDA context: the handle through which device memory is allocated and copied.

    By default it uses the device's primary context, the one that Numba, CuPy and PyTorch
    use, so memory can be handed between them. Contexts compare equal when they wrap the
    same driver context.

    Parameters
    ----------
    device_number : int, default 0
        The device, counted from 0.
    handle : int or driver handle, default 0
        A ``CUcontext`` created elsewhere, as an int, a ``ctypes.c_void_p`` or a
        cuda-bindings object; 0 or None for the primary context. That context must stay
        alive as long as this object.

    Raises
    ------
    TypeError
        If ``device_number`` is not an int.
    pyarrow.ArrowInvalid
        If no device has that number, or ``handle`` belongs to another device.
    OSError
        If the CUDA driver cannot be loaded or refuses the context.

    Examples
    --------
    >>> from arrow_gpu import Context
    >>> ctx = Context(0)
    >>> buf = ctx.buffer_from_data(b"abcd")
    >>> buf.size, buf.copy_to_host().to_pybytes()
    (4, b'abcd')
    """

    def __init__(self, device_number=0, handle=0):
        cdef int c_device = _as_int("device_number", device_number)
        cdef uintptr_t c_handle = _handle_value(handle)
        cdef shared_ptr[CCudaContext] foreign
        if c_handle == 0:
            self._init(GetResultValue(CCudaMemoryManager.Primary(c_device)))
        else:
            foreign = GetResultValue(CCudaContext.Foreign(c_device, c_handle))
            self._init(GetResultValue(CCudaMemoryManager.ForContext(foreign)))

    cdef _init(self, const shared_ptr[CCudaMemoryManager]& manager):
        self.manager = manager
        self.context = manager.get().cuda_context().get()

    @staticmethod
    cdef Context wrap(const shared_ptr[CCudaMemoryManager]& manager):
        cdef Context self = Context.__new__(Context)
        self._init(manager)
        return self

    @staticmethod
    def get_num_devices():
        """The number of CUDA devices (simulated ones under the simulator).

        Returns
        -------
        int
            How many devices this process can see.

        Raises
        ------
        OSError
            If the CUDA driver cannot be loaded and the simulator is off.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context.get_num_devices() >= 1
        True
        """
        return GetResultValue(CCudaContext.DeviceCount())

    @staticmethod
    def from_numba(context=None):
        """The Context of a Numba CUDA context.

        Parameters
        ----------
        context : numba.cuda context, optional
            The context to wrap; Numba's current context if omitted.

        Returns
        -------
        Context
            A Context over the same driver context and device.
        """
        import numba.cuda
        if context is None:
            context = numba.cuda.current_context()
        return Context(context.device.id, _handle_value(context.handle))

    def to_numba(self):
        """The Numba context of this device.

        Numba always uses the device's primary context, so this works only for a Context
        over that one.

        Returns
        -------
        numba.cuda context
            Numba's context for ``device_number``.

        Raises
        ------
        ValueError
            If this Context wraps a context other than the device's primary one.
        """
        import numba.cuda
        with numba.cuda.gpus[self.device_number]:
            context = numba.cuda.current_context()
        if _handle_value(context.handle) != self.handle:
            raise ValueError("Numba can only use the device's primary context; this Context "
                             "wraps another one")
        return context

    @property
    def device_number(self):
        """The number of the device this context belongs to.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).device_number
        0
        """
        return self.context.device_number()

    @property
    def handle(self):
        """The CUcontext handle, as an integer."""
        return ContextHandle(deref(self.context))

    @property
    def bytes_allocated(self):
        """Bytes of device memory this context's buffers hold (views and IPC not counted).

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> ctx = Context(0)
        >>> before = ctx.bytes_allocated
        >>> buf = ctx.new_buffer(100)
        >>> ctx.bytes_allocated - before
        100
        """
        return self.context.bytes_allocated()

    @property
    def memory_manager(self):
        """This context as a ``pyarrow.MemoryManager``, for ``Array.copy_to`` and friends.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import Context
        >>> on_gpu = pa.array([1, 2, 3]).copy_to(Context(0).memory_manager)
        >>> on_gpu.is_cpu
        False
        """
        return MemoryManager.wrap(AsMemoryManager(self.manager))

    @property
    def device(self):
        """The ``pyarrow.Device`` of this context.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).device.device_id
        0
        """
        return Device.wrap(self.manager.get().device())

    def synchronize(self):
        """Block until all work queued in this context has finished.

        Raises
        ------
        OSError
            If the driver reports an error, such as a kernel that failed.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).synchronize()
        """
        with nogil:
            check_status(self.context.Synchronize())

    def memory_stats(self):
        """This context's allocation counters, as a dict.

        Returns
        -------
        dict of str to int
            ``bytes_allocated`` (held by buffers now, as requested),
            ``peak_bytes_allocated``, ``live_allocations``, ``total_allocations`` and
            ``total_bytes_allocated`` (ever); and the caching allocator's:
            ``reserved_bytes`` (held from the driver, in use or not), ``cached_bytes`` (of
            which unused), ``cache_hits`` (allocations served without a driver call),
            ``driver_allocations`` and ``driver_frees`` (its driver calls).

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> stats = Context(0).memory_stats()
        >>> stats["bytes_allocated"] <= stats["peak_bytes_allocated"]
        True
        """
        cdef CMemoryStats stats = self.context.stats()
        cdef CCacheStats cache = CachingStats(deref(self.context))
        return {
            "bytes_allocated": stats.bytes_allocated,
            "peak_bytes_allocated": stats.peak_bytes_allocated,
            "live_allocations": stats.live_allocations,
            "total_allocations": stats.total_allocations,
            "total_bytes_allocated": stats.total_bytes_allocated,
            "reserved_bytes": cache.reserved_bytes,
            "cached_bytes": cache.cached_bytes,
            "cache_hits": cache.cache_hits,
            "driver_allocations": cache.driver_allocations,
            "driver_frees": cache.driver_frees,
        }

    def trim(self):
        """Give the caching allocator's unused device memory back to the driver.

        Memory that buffers still use stays. Allocations do this by themselves before they
        raise MemoryError.

        Returns
        -------
        int
            The number of bytes given back.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).trim() >= 0
        True
        """
        cdef int64_t released
        with nogil:
            released = TrimCache(deref(self.context))
        return released

    def memory_info(self):
        """How much device memory is free, and how much the device has.

        Returns
        -------
        tuple of (int, int)
            ``(free, total)``, in bytes.

        Raises
        ------
        OSError
            If the driver cannot report it.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> free, total = Context(0).memory_info()
        >>> 0 <= free <= total
        True
        """
        cdef int64_t free = 0, total = 0
        check_status(self.context.MemoryInfo(&free, &total))
        return free, total

    def get_device_address(self, uintptr_t address):
        """The device address that kernels in this context use for ``address``.

        Parameters
        ----------
        address : int
            A device address, or the host address of pinned memory mapped into the device.

        Returns
        -------
        int
            The address to use on the device.

        Raises
        ------
        OSError
            If ``address`` is not memory the CUDA driver knows.
        OverflowError
            If ``address`` is negative.

        Examples
        --------
        >>> from arrow_gpu import Context, new_host_buffer
        >>> pinned = new_host_buffer(8)
        >>> Context(0).get_device_address(pinned.address) != 0
        True
        """
        return GetResultValue(self.context.DeviceAddress(address))

    def get_device_number(self, uintptr_t address):
        """The number of the device that owns the memory at ``address``.

        Parameters
        ----------
        address : int
            An address of memory the CUDA driver allocated.

        Returns
        -------
        int
            The device number.

        Raises
        ------
        OSError
            If ``address`` is not memory the CUDA driver knows.
        OverflowError
            If ``address`` is negative.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> ctx = Context(0)
        >>> ctx.get_device_number(ctx.new_buffer(8).address)
        0
        """
        return GetResultValue(self.context.DeviceOrdinal(address))

    def new_buffer(self, nbytes):
        """Allocate device memory; its bytes are not initialised.

        Parameters
        ----------
        nbytes : int
            The size of the buffer, in bytes.

        Returns
        -------
        CudaBuffer
            A new buffer that owns the memory.

        Raises
        ------
        TypeError
            If ``nbytes`` is not an int.
        ValueError
            If ``nbytes`` is negative.
        MemoryError
            If the device has not enough free memory (``pyarrow.ArrowMemoryError``).

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).new_buffer(16).size
        16
        """
        cdef shared_ptr[CBuffer] buffer
        cdef int64_t size = _as_int("nbytes", nbytes)
        if size < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        with nogil:
            buffer = GetResultValue(AllocateShared(self.manager.get(), size))
        return CudaBuffer.wrap(buffer, self)

    def foreign_buffer(self, address, size, base=None):
        """A view of device memory that this buffer does not own.

        Parameters
        ----------
        address : int
            The device address where the view starts.
        size : int
            The size of the view, in bytes.
        base : object, optional
            An object that owns the memory; the view keeps a reference to it, so the memory
            stays alive as long as the view.

        Returns
        -------
        CudaBuffer
            The view. Nothing is copied, and nothing is freed when it goes.

        Raises
        ------
        TypeError
            If ``address`` or ``size`` is not an int.
        ValueError
            If ``address`` or ``size`` is negative, or ``address`` is 0 and ``size`` is not.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> ctx = Context(0)
        >>> owner = ctx.buffer_from_data(b"abcdef")
        >>> view = ctx.foreign_buffer(owner.address + 1, 3, base=owner)
        >>> view.to_pybytes()
        b'bcd'
        """
        address = _as_int("address", address)
        size = _as_int("size", size)
        if size < 0:
            raise ValueError(f"size must be non-negative, got {size}")
        if address < 0:
            raise ValueError(f"address must be non-negative, got {address}")
        if address == 0 and size > 0:
            # No device memory lives at address 0: copies through such a view would fault.
            raise ValueError(f"a view of {size} bytes needs a non-null device address")
        cdef shared_ptr[void] owner
        if base is not None:
            owner = HoldPyObject(base)
        return CudaBuffer.wrap(AsBuffer(self.manager.get().View(address, size, owner)), self)

    def open_ipc_buffer(self, IpcMemHandle ipc_handle not None):
        """Open device memory that another process exported.

        The exporting process makes the handle with ``CudaBuffer.export_for_ipc``. A
        process cannot open a handle it exported itself.

        Parameters
        ----------
        ipc_handle : IpcMemHandle
            The handle, as rebuilt by ``IpcMemHandle.from_buffer``.

        Returns
        -------
        CudaBuffer
            A buffer over the exported memory; the memory is closed when it goes.

        Raises
        ------
        TypeError
            If ``ipc_handle`` is not an IpcMemHandle.
        pyarrow.ArrowInvalid
            If this process exported the handle (CUDA opens it only in another process:
            here, use the exported buffer itself, or a copy made with
            ``CudaBuffer.copy_from_device``), or if the handle's range lies outside the
            memory it names.
        OSError
            If the driver cannot open the handle.
        """
        if ipc_handle.size == 0:
            return self.new_buffer(0)
        cdef shared_ptr[CDeviceBuffer] buffer
        with nogil:
            buffer = GetResultValue(self.manager.get().OpenIpc(
                ipc_handle.handle, ipc_handle.offset, ipc_handle.size))
        return CudaBuffer.wrap(AsBuffer(buffer), self)

    def buffer_from_data(self, object data, offset=0, size=-1):
        """Copy host or device data into a new device buffer.

        Parameters
        ----------
        data : buffer-like or pyarrow.Buffer
            Host bytes (any object with the buffer protocol, or a host ``pyarrow.Buffer``),
            or a ``pyarrow.Buffer`` of device memory, which is copied on the device.
        offset : int, default 0
            Where in ``data`` the bytes start.
        size : int, default -1
            How many bytes; -1 for all from ``offset``.

        Returns
        -------
        CudaBuffer
            A new buffer holding the bytes.

        Raises
        ------
        TypeError
            If ``offset`` or ``size`` is not an int, or ``data`` is not buffer-like.
        ValueError
            If the range lies outside ``data``.
        pyarrow.ArrowTypeError
            If ``data`` is device memory that is not CUDA memory.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).buffer_from_data(b"abcdef", offset=1, size=3).to_pybytes()
        b'bcd'
        """
        offset = _as_int("offset", offset)
        size = _as_int("size", size)
        if isinstance(data, Buffer):
            # Device memory handed out by pyarrow (e.g. Array.buffers()) is a plain Buffer.
            source = data if data.is_cpu else CudaBuffer.from_buffer(data)
        else:
            source = pa.py_buffer(data)
        cdef int64_t length = source.size
        # offset == length gives an empty buffer, as slicing does (Arrow raises there).
        if offset < 0 or offset > length:
            raise ValueError("offset argument is out-of-range")
        if size < 0:
            size = length - offset
        elif size > length - offset:  # not offset + size, which can overflow
            raise ValueError("requested larger slice than available in device buffer")
        cdef CudaBuffer result = self.new_buffer(size)
        if isinstance(source, CudaBuffer):
            result.copy_from_device(source.slice(offset, size))
        else:
            result.copy_from_host(source.slice(offset, size))
        return result

    def buffer_from_object(self, obj):
        """A zero-copy device buffer over ``obj``.

        Parameters
        ----------
        obj : HostBuffer, pyarrow.Buffer or object
            A HostBuffer (pinned memory is mapped into the device), a CudaBuffer or another
            ``pyarrow.Buffer`` of device memory (``CudaBuffer.from_buffer``), or any object
            exposing ``__cuda_array_interface__`` whose data is one contiguous span (C or
            Fortran order, negative strides included).

        Returns
        -------
        CudaBuffer
            A view of the same memory; it keeps ``obj`` alive.

        Raises
        ------
        pyarrow.ArrowTypeError
            For a buffer of other memory ("buffer is not backed by a CudaBuffer"), or an
            object of none of the kinds above ("cannot create device buffer view from ...").
        ValueError
            If the ``__cuda_array_interface__`` is malformed, or its data has gaps.

        Examples
        --------
        >>> from arrow_gpu import Context, new_host_buffer
        >>> pinned = new_host_buffer(4)
        >>> view = Context(0).buffer_from_object(pinned)
        >>> view.copy_from_host(b"wxyz")
        4
        >>> pinned.to_pybytes()
        b'wxyz'
        """
        if isinstance(obj, HostBuffer):
            # An empty pinned buffer has no memory for the driver to map.
            address = self.get_device_address(obj.address) if obj.size else 0
            return self.foreign_buffer(address, obj.size, base=obj)
        if isinstance(obj, Buffer):
            return CudaBuffer.from_buffer(obj)
        interface = getattr(obj, "__cuda_array_interface__", None)
        if interface is not None:
            address, shape, dtype, strides = _cuda_array_interface(interface, "object")
            start, end = _contiguous_span(shape, strides, dtype.itemsize)
            return self.foreign_buffer(address + start if address else 0, end - start,
                                       base=obj)
        # The text of Arrow's message, which users match on.
        raise pa.ArrowTypeError(f"cannot create device buffer view from `{type(obj)}` object")

    def __repr__(self):
        return f"<arrow_gpu.Context device_number={self.device_number} handle={self.handle:#x}>"

    def __eq__(self, other):
        if not isinstance(other, Context):
            return NotImplemented
        return self.handle == other.handle

    def __hash__(self):
        return hash(self.handle)


def _cuda_array_interface(interface, what):
    """(address, shape, dtype, strides) of a ``__cuda_array_interface__`` dict.

    Strides are None for C order. A malformed interface is a ValueError naming ``what``
    holds it.
    """
    import numpy as np
    try:
        shape = tuple(operator.index(extent) for extent in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        address = interface["data"][0] or 0
        strides = interface.get("strides")
        strides = None if strides is None else tuple(operator.index(s) for s in strides)
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(f"the {what}'s __cuda_array_interface__ is malformed ({error!r}): it "
                         "needs 'shape' (a tuple of ints), 'typestr' and 'data' (ptr, "
                         "readonly)") from error
    return address, shape, dtype, strides


def _contiguous_span(shape, strides, itemsize):
    """(start, end) byte offsets, from the data pointer, of the elements an array addresses.

    ValueError if they do not fill that span (the array has gaps).
    """
    count = 1
    for extent in shape:
        count *= extent
    if count == 0:
        return 0, 0
    if strides is None:
        return 0, count * itemsize
    start = end = 0
    for extent, stride in zip(shape, strides):
        reach = stride * (extent - 1)  # negative strides reach below the data pointer
        if reach < 0:
            start += reach
        else:
            end += reach
    end += itemsize
    if end - start != count * itemsize:
        raise ValueError("array data is non-contiguous")
    return start, end


cdef Context _context_of(const shared_ptr[CBuffer]& buffer):
    cdef shared_ptr[CCudaMemoryManager] manager = CudaManagerOf(deref(buffer))
    if manager.get() == NULL:
        raise pa.ArrowTypeError("buffer is not backed by a CudaBuffer")
    return Context.wrap(manager)


cdef class CudaBuffer(Buffer):
    """An Arrow buffer in CUDA device memory: a ``pyarrow.Buffer`` whose bytes live on a GPU.

    Create one with ``Context.new_buffer``, ``Context.buffer_from_data`` and friends, or
    convert a device buffer that pyarrow handed out with ``CudaBuffer.from_buffer``. Device
    memory is freed when the last reference to it goes.

    >>> from arrow_gpu import Context
    >>> buf = Context(0).buffer_from_data(bytes(range(8)))
    >>> buf[2], buf[2:5].to_pybytes()
    (2, b'\\x02\\x03\\x04')
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Do not call CudaBuffer's constructor directly, use "
                        "Context.new_buffer(), Context.buffer_from_data() or "
                        "CudaBuffer.from_buffer() instead")

    @staticmethod
    cdef CudaBuffer wrap(const shared_ptr[CBuffer]& buffer, Context context):
        cdef CudaBuffer self = CudaBuffer.__new__(CudaBuffer)
        self.init(buffer)
        self.context = context
        return self

    @staticmethod
    def from_buffer(Buffer buf not None):
        """The CudaBuffer of a generic ``pyarrow.Buffer`` holding device memory.

        pyarrow hands out device memory as plain ``pyarrow.Buffer`` objects, for example
        from ``Array.buffers()``; this gives the same memory as a CudaBuffer, without a
        copy.

        Parameters
        ----------
        buf : pyarrow.Buffer
            A buffer of CUDA device memory. A CudaBuffer is returned as it is.

        Returns
        -------
        CudaBuffer
            A buffer over the same memory.

        Raises
        ------
        pyarrow.ArrowTypeError
            If ``buf`` is not CUDA device memory (host memory, for example).
        TypeError
            If ``buf`` is not a ``pyarrow.Buffer``.

        Examples
        --------
        >>> import pyarrow as pa
        >>> from arrow_gpu import Context, CudaBuffer
        >>> on_gpu = pa.array([97, 98, 99], pa.int8()).copy_to(Context(0).memory_manager)
        >>> CudaBuffer.from_buffer(on_gpu.buffers()[1]).to_pybytes()
        b'abc'
        """
        if isinstance(buf, CudaBuffer):
            return buf
        return CudaBuffer.wrap(buf.buffer, _context_of(buf.buffer))

    @staticmethod
    def from_numba(mem):
        """A view of a Numba ``MemoryPointer`` (e.g. ``device_array.gpu_data``).

        Parameters
        ----------
        mem : numba.cuda MemoryPointer
            The device memory to view.

        Returns
        -------
        CudaBuffer
            A view of the same memory; it keeps ``mem`` alive.
        """
        context = Context.from_numba(mem.context)
        address = _handle_value(getattr(mem, "device_ctypes_pointer", None)) or \
            _handle_value(mem.handle)
        return context.foreign_buffer(address, mem.size, base=mem)

    def to_numba(self):
        """A Numba ``MemoryPointer`` over this buffer; it keeps the buffer alive.

        Returns
        -------
        numba.cuda MemoryPointer
            A pointer to the same memory, in Numba's context of this device.

        Raises
        ------
        ValueError
            If the buffer's Context wraps a context other than the device's primary one.
        """
        from numba.cuda.cudadrv.driver import MemoryPointer
        context = self.context.to_numba()
        pointer = MemoryPointer(context, self.address, self.size, owner=self)
        return pointer

    def copy_to_host(self, position=0, nbytes=-1, Buffer buf=None,
                     MemoryPool memory_pool=None, bint resizable=False, *, stream=None):
        """Copy device bytes into host memory (a new buffer, or ``buf``).

        The copy is complete when this returns. Work queued on other streams than ``stream``
        is not waited for: call ``context.synchronize()`` first when a kernel may still be
        writing.

        Parameters
        ----------
        position : int, default 0
            Where in this buffer the bytes start.
        nbytes : int, default -1
            How many bytes; -1 for all from ``position`` (that fit ``buf``, if given).
        buf : pyarrow.Buffer, optional
            A mutable host buffer to copy into; a new one if omitted.
        memory_pool : pyarrow.MemoryPool, optional
            Where a new buffer comes from (the default pool if omitted).
        resizable : bool, default False
            Whether a new buffer is resizable.
        stream : stream-like, optional
            The stream that produces the bytes, in any spelling ``stream_handle`` accepts:
            its queued work finishes before the copy.

        Returns
        -------
        pyarrow.Buffer
            The host buffer holding the bytes.

        Raises
        ------
        ValueError
            If the range lies outside this buffer, or does not fit ``buf``.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> device = Context(0).buffer_from_data(b"abcdef")
        >>> device.copy_to_host(position=2, nbytes=3, stream=0).to_pybytes()
        b'cde'
        """
        position = _as_int("position", position)
        nbytes = _as_int("nbytes", nbytes)
        cdef int64_t available = self.size - _check_position(position, self.size)
        if buf is not None:
            if not buf.is_cpu or not buf.is_mutable:
                raise ValueError("buf must be a mutable host buffer")
            # Checked before the device side, as Arrow does, so the messages are Arrow's.
            if nbytes > buf.size:
                raise ValueError("requested copy does not fit into host buffer")
        if nbytes < 0:
            nbytes = available if buf is None else min(available, buf.size)
        if nbytes > available:
            raise ValueError("requested more to copy than available from device buffer")
        if buf is None:
            buf = pa.allocate_buffer(nbytes, memory_pool=memory_pool, resizable=resizable)
        cdef void* dst = <void*><uintptr_t>buf.address
        cdef uintptr_t src = self.address + position
        cdef int64_t count = nbytes
        cdef CUstream after = _raw_stream(stream)
        with nogil:
            check_status(EngineDeviceToHost(deref(self.context.context), dst, src, count,
                                            HOST_MEMORY_UNKNOWN, after))
        return buf

    def copy_from_host(self, data, position=0, nbytes=-1, *, stream=None):
        """Copy host data into this buffer.

        The copy is complete when this returns, so any stream may use the bytes then.

        Parameters
        ----------
        data : buffer-like
            Host bytes: a host ``pyarrow.Buffer``, or any object with the buffer protocol.
        position : int, default 0
            Where in this buffer the bytes land.
        nbytes : int, default -1
            How many bytes; -1 for as many as ``data`` has and this buffer has room for.
        stream : stream-like, optional
            A stream whose queued work may still use this buffer, in any spelling
            ``stream_handle`` accepts: that work finishes before the bytes are overwritten.

        Returns
        -------
        int
            The number of bytes copied.

        Raises
        ------
        TypeError
            If ``data`` is device memory (``copy_from_device`` copies that).
        ValueError
            If the range does not fit ``data`` or this buffer.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> device = Context(0).new_buffer(4)
        >>> device.copy_from_host(b"wxyz", stream=0)
        4
        >>> device.to_pybytes()
        b'wxyz'
        """
        position = _as_int("position", position)
        nbytes = _as_int("nbytes", nbytes)
        cdef Buffer source = data if isinstance(data, Buffer) else pa.py_buffer(data)
        if not source.is_cpu:
            raise TypeError(f"copy_from_host copies host data, got device memory "
                            f"('{type(data).__name__}'); use copy_from_device for device data")
        cdef int64_t room = self.size - _check_position(position, self.size)
        if nbytes < 0:
            nbytes = min(room, source.size)
        if nbytes > source.size:
            raise ValueError("requested more to copy than available from host buffer")
        if nbytes > room:
            raise ValueError("requested more to copy than available in device buffer")
        cdef uintptr_t dst = self.address + position
        cdef const void* src = <const void*><uintptr_t>source.address
        cdef int64_t count = nbytes
        cdef CUstream after = _raw_stream(stream)
        with nogil:
            check_status(EngineHostToDevice(deref(self.context.context), dst, src, count,
                                            HOST_MEMORY_UNKNOWN, after))
        return nbytes

    def copy_from_device(self, buf, position=0, nbytes=-1, *, stream=None):
        """Copy from another device buffer into this one.

        A buffer of another device is copied peer to peer. The copy is queued on the
        legacy default stream. Given ``stream``, it also comes after the stream's queued work
        and the stream's later work comes after it, on the GPU; work on other
        (non-blocking) streams that reads the bytes must wait for it
        (``context.synchronize()`` does).

        Parameters
        ----------
        buf : CudaBuffer
            The buffer to copy from, starting at its first byte.
        position : int, default 0
            Where in this buffer the bytes land.
        nbytes : int, default -1
            How many bytes; -1 for as many as ``buf`` has and this buffer has room for.
        stream : stream-like, optional
            A stream of this buffer's device that produces ``buf``'s bytes or reads this
            buffer's, in any spelling ``stream_handle`` accepts.

        Returns
        -------
        int
            The number of bytes copied.

        Raises
        ------
        ValueError
            If ``position`` lies outside this buffer, or ``nbytes`` is more than ``buf``
            has or this buffer has room for.
        TypeError
            If ``buf`` is not a CudaBuffer (``copy_from_host`` copies host data), or
            ``stream`` is of the wrong type.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> ctx = Context(0)
        >>> target = ctx.buffer_from_data(b"------")
        >>> target.copy_from_device(ctx.buffer_from_data(b"abc"), position=2)
        3
        >>> target.to_pybytes()
        b'--abc-'
        """
        if not isinstance(buf, CudaBuffer):
            raise TypeError(f"copy_from_device copies from a CudaBuffer, got "
                            f"'{type(buf).__name__}'; use copy_from_host for host data (or "
                            f"CudaBuffer.from_buffer for a pyarrow.Buffer of device memory)")
        cdef CudaBuffer origin = buf
        position = _as_int("position", position)
        nbytes = _as_int("nbytes", nbytes)
        cdef int64_t room = self.size - _check_position(position, self.size)
        if nbytes < 0:
            nbytes = min(room, origin.size)
        if nbytes > origin.size:
            raise ValueError("requested more to copy than available from device buffer")
        if nbytes > room:
            raise ValueError("requested more to copy than available in device buffer")
        cdef uintptr_t dst = self.address + position
        cdef uintptr_t src = origin.address
        cdef CCudaContext* source = origin.context.context
        cdef int64_t count = nbytes
        cdef CUstream after = _raw_stream(stream)
        with nogil:
            check_status(self.context.context.CopyDeviceToDevice(dst, src, count, deref(source),
                                                                 after))
        return nbytes

    def export_for_ipc(self, *, isolated=False):
        """An ``IpcMemHandle`` through which another process can open this memory.

        CUDA IPC shares whole driver allocations: the opener can reach every byte of the
        allocation this buffer lives in, and small buffers share theirs with other buffers
        (the caching allocator carves them from 2 MiB blocks; the driver itself may too).
        With ``isolated=True`` the bytes are first copied into a driver allocation of their
        own, rounded up to 2 MiB and zero past the copy, and that is exported instead: the
        opener sees these bytes and nothing else. The copy is complete when this returns;
        later writes to this buffer do not reach it.

        The handle object keeps the exported memory alive; the exporting process must keep
        it (or, without ``isolated``, the buffer) until the importers are done.

        Parameters
        ----------
        isolated : bool, default False
            Whether to export a copy in an allocation of its own.

        Returns
        -------
        IpcMemHandle
            The handle; ``serialize()`` gives the bytes to send.

        Raises
        ------
        OSError
            If the driver cannot export the memory (memory from an allocator without
            IPC support, for example).
        MemoryError
            If ``isolated`` and the device has no room for the copy.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> handle = Context(0).buffer_from_data(b"abcdef").export_for_ipc()
        >>> handle.size
        6
        >>> Context(0).buffer_from_data(b"abcdef").export_for_ipc(isolated=True).offset
        0
        """
        if isolated and self.size > 0:
            return self._isolated_copy().export_for_ipc()
        cdef int64_t offset = 0
        cdef CUipcMemHandle handle
        memset(handle.reserved, 0, sizeof(handle.reserved))
        # An empty buffer has no memory to export: its handle opens as an empty buffer.
        if self.size > 0:
            handle = GetResultValue(self.context.manager.get().ExportIpc(self.buffer, &offset))
        return IpcMemHandle._make(handle, offset, self.size, self)

    cdef CudaBuffer _isolated_copy(self):
        """A copy of this buffer at the start of a driver allocation of its own."""
        cdef shared_ptr[CDeviceBuffer] dedicated
        cdef int64_t nbytes = self.size
        cdef CCudaMemoryManager* manager = self.context.manager.get()
        with nogil:
            dedicated = GetResultValue(manager.AllocateIsolatedBuffer(nbytes))
        whole = CudaBuffer.wrap(AsBuffer(dedicated), self.context)
        copy = whole.slice(0, nbytes)
        copy.copy_from_device(self)
        # The opener, another process, is not ordered after this process's streams.
        self.context.synchronize()
        return copy

    def _driver_allocation(self):
        """(base address, size) of the driver allocation this buffer lives in: what CUDA
        IPC shares when the buffer is exported, or what an opened buffer can reach."""
        cdef uintptr_t base = 0
        cdef int64_t size = 0
        check_status(self.context.context.AllocationRange(self.address, &base, &size))
        return base, size

    def slice(self, offset=0, length=None):
        """A zero-copy slice of this buffer.

        Parameters
        ----------
        offset : int, default 0
            Where the slice starts.
        length : int, optional
            How many bytes; up to the end if omitted. A length past the end is clipped to
            the end.

        Returns
        -------
        CudaBuffer
            A view of the same memory; it keeps this buffer alive.

        Raises
        ------
        ValueError
            If ``offset`` lies outside the buffer, or ``length`` is negative.
        TypeError
            If ``offset`` or ``length`` is not an int.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> buf = Context(0).buffer_from_data(b"abcdef")
        >>> buf.slice(2, 100).to_pybytes()
        b'cdef'
        """
        offset = _as_int("offset", offset)
        if length is not None:
            length = _as_int("length", length)
        if offset < 0 or offset > self.size:
            raise ValueError("offset argument is out-of-range")
        if length is None or offset + length > self.size:
            length = self.size - offset
        elif length < 0:
            raise ValueError("length must be non-negative")
        return CudaBuffer.wrap(CDeviceBuffer.Slice(self.buffer, offset, length), self.context)

    @property
    def parent(self):
        """The buffer this one is a slice of, or None.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> buf = Context(0).buffer_from_data(b"abcdef")
        >>> buf.parent is None, buf.slice(2).parent.size
        (True, 6)
        """
        cdef shared_ptr[CBuffer] parent = self.buffer.get().parent()
        if parent.get() == NULL:
            return None
        return CudaBuffer.wrap(parent, self.context)

    def to_pybytes(self):
        """The buffer's bytes, copied to the host.

        Returns
        -------
        bytes
            A copy of the whole buffer.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> Context(0).buffer_from_data(b"abc").to_pybytes()
        b'abc'
        """
        return self.copy_to_host().to_pybytes()

    def equals(self, Buffer other not None):
        """Whether ``other``, also device memory, holds the same bytes.

        Parameters
        ----------
        other : pyarrow.Buffer
            A buffer on the same device.

        Returns
        -------
        bool
            True when both have the same size and bytes.

        Raises
        ------
        ValueError
            If ``other`` lives on another device, host memory included.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> ctx = Context(0)
        >>> ctx.buffer_from_data(b"abc").equals(ctx.buffer_from_data(b"abc"))
        True
        """
        if self.device != other.device:
            raise ValueError(
                "Device on which the data resides differs between buffers: "
                f"{self.device.type_name} and {other.device.type_name}.")
        other = CudaBuffer.from_buffer(other)
        return self.size == other.size and self.to_pybytes() == other.to_pybytes()

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step != 1:
                raise IndexError("only slices with step 1 supported")
            return self.slice(start, max(stop - start, 0))
        index = operator.index(key)  # TypeError, not AttributeError, for non-integers
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError("index out of bounds")
        return self.copy_to_host(index, 1).to_pybytes()[0]

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        raise BufferError("buffer protocol for device buffer not supported; use "
                          "copy_to_host()")

    def __repr__(self):
        return (f"<arrow_gpu.CudaBuffer address={self.address:#x} size={self.size} "
                f"device_number={self.context.device_number}>")


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
    cdef int64_t nbytes = _as_int("size", size)
    if size < 0:
        raise ValueError(f"size must be non-negative, got {size}")
    cdef shared_ptr[CCudaHostMemoryManager] manager = GetResultValue(
        CCudaHostMemoryManager.Primary(_as_int("device", device)))
    cdef shared_ptr[CBuffer] buffer
    with nogil:
        buffer = GetResultValue(AllocateShared(manager.get(), nbytes))
    return HostBuffer.wrap(buffer)


def _pinned_memory_manager(device=0):
    """The memory manager that allocates pinned host memory for ``device``."""
    return MemoryManager.wrap(AsMemoryManager(GetResultValue(
        CCudaHostMemoryManager.Primary(_as_int("device", device)))))


# A serialized handle is a sealed record (see arrow_gpu._sealed) whose body is the offset and
# size of the exported bytes in the driver's allocation, then the driver's 64-byte handle.
_IPC_MAGIC = b"AGPU-IPC"
_IPC_VERSION = 2
_IPC_BODY = struct.Struct("<qq64s")
_IPC_SIZE = sealed_size(_IPC_BODY.size)
_IPC_REMEDY = ("send the bytes of IpcMemHandle.serialize() unchanged, or export the buffer "
               "again with CudaBuffer.export_for_ipc()")


def _serialized_ipc_handle(bytes driver_handle, int64_t offset, int64_t size):
    """The bytes ``IpcMemHandle.serialize()`` gives for this driver handle and range."""
    return seal(_IPC_MAGIC, _IPC_VERSION, _IPC_BODY.pack(offset, size, driver_handle))


cdef class IpcMemHandle:
    """A handle to device memory that another process can open (CUDA IPC).

    ``serialize()`` gives bytes to send; the other process calls
    ``IpcMemHandle.from_buffer(data)`` and ``Context.open_ipc_buffer(handle)``. Make one
    with ``CudaBuffer.export_for_ipc``; the constructor raises TypeError. The serialized
    bytes carry a checksum: bytes changed on the way are refused, never opened as other
    memory.

    Attributes
    ----------
    offset : int
        Where the exported bytes start in the driver's allocation.
    size : int
        The number of exported bytes.

    Examples
    --------
    >>> from arrow_gpu import Context, IpcMemHandle
    >>> handle = Context(0).buffer_from_data(b"abcdef").export_for_ipc()
    >>> IpcMemHandle.from_buffer(handle.serialize()).size
    6
    """
    def __init__(self, *args, **kwargs):
        raise TypeError("use CudaBuffer.export_for_ipc() or IpcMemHandle.from_buffer()")

    @staticmethod
    cdef IpcMemHandle _make(CUipcMemHandle handle, int64_t offset, int64_t size, exported):
        cdef IpcMemHandle self = IpcMemHandle.__new__(IpcMemHandle)
        self.handle = handle
        self.offset = offset
        self.size = size
        self.exported = exported
        return self

    @staticmethod
    def from_buffer(opaque_handle):
        """Rebuild a handle from the bytes ``serialize()`` produced.

        Parameters
        ----------
        opaque_handle : buffer-like
            The serialized handle: a ``pyarrow.Buffer``, bytes or any object with the
            buffer protocol.

        Returns
        -------
        IpcMemHandle
            The handle, to pass to ``Context.open_ipc_buffer``.

        Raises
        ------
        ValueError
            If the bytes are not an arrow_gpu IPC handle, or one that was truncated,
            extended or changed since ``serialize()`` made it (it is corrupt), or one of
            another format version.
        TypeError
            If ``opaque_handle`` does not support the buffer protocol.

        Examples
        --------
        >>> from arrow_gpu import Context, IpcMemHandle
        >>> data = Context(0).buffer_from_data(b"abc").export_for_ipc().serialize()
        >>> IpcMemHandle.from_buffer(data).size
        3
        >>> IpcMemHandle.from_buffer(data.to_pybytes()[:-1])
        Traceback (most recent call last):
        ...
        ValueError: an arrow_gpu IPC handle is corrupt: ... (it was truncated on the way); ...
        """
        body = unseal(memoryview(opaque_handle).tobytes(), _IPC_MAGIC, _IPC_VERSION,
                      _IPC_BODY.size, "an arrow_gpu IPC handle", _IPC_REMEDY)
        offset, size, driver_handle = _IPC_BODY.unpack(body)
        if offset < 0 or size < 0 or offset > INT64_MAX - size:
            raise ValueError(f"an arrow_gpu IPC handle names an impossible range (offset "
                             f"{offset}, size {size}); {_IPC_REMEDY}")
        cdef CUipcMemHandle handle
        memcpy(handle.reserved, <const char*>driver_handle, 64)
        return IpcMemHandle._make(handle, offset, size, None)

    @property
    def driver_handle(self):
        """The driver's ``CUipcMemHandle`` (64 bytes), for other CUDA libraries' IPC APIs.

        It names the whole driver allocation; ``offset`` and ``size`` say which bytes of it
        were exported.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> len(Context(0).buffer_from_data(b"abc").export_for_ipc().driver_handle)
        64
        """
        return (<char*>self.handle.reserved)[:64]

    def serialize(self, pool=None):
        """The handle as a ``pyarrow.Buffer`` of bytes, to send to another process.

        Parameters
        ----------
        pool : pyarrow.MemoryPool, optional
            Accepted for compatibility with pyarrow.cuda and not used; the bytes are few.

        Returns
        -------
        pyarrow.Buffer
            The serialized handle, in host memory, checksummed.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> handle = Context(0).buffer_from_data(b"abc").export_for_ipc()
        >>> handle.serialize().size
        108
        """
        return pa.py_buffer(_serialized_ipc_handle(self.driver_handle, self.offset, self.size))


cdef uintptr_t _POINTER_MAX = <uintptr_t>-1  # the largest value a CUstream pointer can hold


cdef CUstream _raw_stream(stream) except? NULL:
    """The driver handle of a stream in any spelling ``stream_handle`` accepts (None: 0)."""
    return <CUstream><uintptr_t>stream_handle(stream)


def stream_handle(stream):
    """The raw ``CUstream`` of a stream given in any of the common spellings.

    Parameters
    ----------
    stream : int, Stream or stream object
        An int (0 is the legacy default stream), an arrow_gpu ``Stream``, an object with
        the ``__cuda_stream__`` protocol (cuda.core), a CuPy stream (``.ptr``), a PyTorch
        stream (``.cuda_stream``), or an object with a ``.handle``. None means 0.

    Returns
    -------
    int
        The ``CUstream`` handle, as an integer.

    Raises
    ------
    TypeError
        If ``stream`` is none of the spellings above.
    ValueError
        If the handle is negative or does not fit a pointer.

    Examples
    --------
    >>> stream_handle(0)
    0
    >>> from arrow_gpu import Context, Stream
    >>> stream = Stream(Context(0))
    >>> stream_handle(stream) == stream.handle
    True
    """
    if stream is None:
        return 0
    handle = stream if isinstance(stream, int) else _foreign_stream_handle(stream)
    # Every spelling ends up as a CUstream pointer: refuse what no pointer can be.
    if not 0 <= handle <= _POINTER_MAX:
        raise ValueError(f"a stream handle is a non-negative integer that fits a pointer, got "
                         f"{handle}")
    return handle


def _foreign_stream_handle(stream):
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        version, handle = protocol() if callable(protocol) else protocol
        return int(handle)
    for attribute in ("cuda_stream", "ptr", "handle"):
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return _handle_value(handle)
    raise TypeError(f"cannot use a '{type(stream).__name__}' object as a CUDA stream; pass an "
                    "int handle or an object with __cuda_stream__")


cdef class Stream:
    """A CUDA stream: work on it runs in order, asynchronously to the host.

    ``Stream(context)`` creates one (owned, destroyed with this object);
    ``Stream.wrap(obj)`` borrows another library's stream without taking ownership.

    Parameters
    ----------
    context : Context, optional
        The context the stream belongs to; ``Context(0)`` if omitted.
    non_blocking : bool, default False
        Whether the stream runs without waiting for the legacy default stream
        (``CU_STREAM_NON_BLOCKING``).

    Raises
    ------
    OSError
        If the driver cannot create the stream.

    Examples
    --------
    >>> from arrow_gpu import Context, Stream
    >>> stream = Stream(Context(0))
    >>> stream.synchronize()
    """

    def __init__(self, Context context=None, *, bint non_blocking=False):
        self.context = context if context is not None else Context(0)
        self.handle_ = GetResultValue(self.context.context.CreateStream(1 if non_blocking else 0))
        self.owned = True

    @staticmethod
    def wrap(stream, Context context=None):
        """Borrow a stream that another object owns.

        The stream is not destroyed with the returned object, which keeps a reference to
        ``stream``.

        Parameters
        ----------
        stream : int, Stream or stream object
            The stream, in any spelling ``stream_handle`` accepts.
        context : Context, optional
            The context the stream belongs to. If omitted: a Stream's own context, else
            ``Context(0)``.

        Returns
        -------
        Stream
            A Stream over the same handle, which it does not own.

        Raises
        ------
        TypeError
            If ``stream`` is not a spelling of a stream.
        ValueError
            If the handle is negative or does not fit a pointer.

        Examples
        --------
        >>> from arrow_gpu import Stream
        >>> Stream.wrap(0).handle
        0
        """
        cdef Stream self = Stream.__new__(Stream)
        if context is None:
            context = (<Stream>stream).context if isinstance(stream, Stream) else Context(0)
        self.context = context
        self.handle_ = <CUstream><uintptr_t>stream_handle(stream)
        self.owned = False
        self.source = stream
        return self

    def __dealloc__(self):
        if self.owned and self.context is not None:
            self.context.context.DestroyStream(self.handle_)

    @property
    def handle(self):
        """The ``CUstream`` handle, as an integer (0 for the legacy default stream)."""
        return <uintptr_t>self.handle_

    def __cuda_stream__(self):
        """The ``(version, handle)`` pair of the ``__cuda_stream__`` protocol.

        Examples
        --------
        >>> from arrow_gpu import Stream
        >>> Stream.wrap(0).__cuda_stream__()
        (0, 0)
        """
        return (0, <uintptr_t>self.handle_)

    def synchronize(self):
        """Block until all work queued on this stream has finished.

        Raises
        ------
        OSError
            If the driver reports an error, such as a kernel that failed.

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> Stream(Context(0)).synchronize()
        """
        with nogil:
            check_status(self.context.context.SynchronizeStream(self.handle_))

    def record(self, Event event=None):
        """Mark this point of the stream's work with an event that others can wait for.

        Parameters
        ----------
        event : Event, optional
            The event to record; a new one of the stream's context if omitted.

        Returns
        -------
        Event
            The recorded event: it completes when the work queued so far has finished.

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> producer, consumer = Stream(Context(0)), Stream(Context(0))
        >>> consumer.wait(producer.record())
        >>> consumer.synchronize()
        """
        if event is None:
            event = Event(self.context)
        check_status(self.context.context.RecordEvent(event.handle_, self.handle_))
        return event

    def wait(self, Event event not None):
        """Make later work on this stream wait for ``event``, without blocking the host.

        Parameters
        ----------
        event : Event
            A recorded event, of this stream's device.

        Raises
        ------
        OSError
            If the driver refuses the wait (an event of a destroyed context, say).

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> stream = Stream(Context(0))
        >>> stream.wait(Stream.wrap(0).record())
        """
        check_status(self.context.context.WaitEvent(self.handle_, event.handle_))

    def wait_event(self, Event event not None):
        """Make later work on this stream wait for ``event``; the same as ``wait``.

        Parameters
        ----------
        event : Event
            A recorded event, of this stream's device.

        Raises
        ------
        OSError
            If the driver refuses the wait.

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> producer, consumer = Stream(Context(0)), Stream(Context(0))
        >>> consumer.wait_event(producer.record())
        """
        self.wait(event)

    def __repr__(self):
        return f"<arrow_gpu.Stream handle={self.handle:#x} owned={bool(self.owned)}>"


cdef class Event:
    """A CUDA event: a point in a stream's work that others can wait for.

    ``Event(context)`` creates one (owned, destroyed with this object); ``Event.wrap``
    borrows an existing one.

    Parameters
    ----------
    context : Context, optional
        The context the event belongs to; ``Context(0)`` if omitted.

    Raises
    ------
    OSError
        If the driver cannot create the event.

    Examples
    --------
    >>> from arrow_gpu import Context, Event
    >>> event = Event(Context(0))
    >>> event.record()
    >>> event.synchronize(); event.done
    True
    """

    def __init__(self, Context context=None):
        self.context = context if context is not None else Context(0)
        self.handle_ = GetResultValue(self.context.context.CreateEvent())
        self.owned = True

    @staticmethod
    def wrap(uintptr_t handle, Context context=None):
        """Borrow an existing ``CUevent`` handle.

        Parameters
        ----------
        handle : int
            The ``CUevent``, as an integer. It must stay alive as long as the returned
            object, which does not destroy it.
        context : Context, optional
            The context the event belongs to; ``Context(0)`` if omitted.

        Returns
        -------
        Event
            An Event over the same handle, which it does not own.

        Raises
        ------
        TypeError
            If ``handle`` is not an int.
        OverflowError
            If ``handle`` is negative.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> owner = Event(Context(0))
        >>> Event.wrap(owner.handle).handle == owner.handle
        True
        """
        cdef Event self = Event.__new__(Event)
        self.context = context if context is not None else Context(0)
        self.handle_ = <CUevent>handle
        self.owned = False
        return self

    def __dealloc__(self):
        if self.owned and self.context is not None:
            self.context.context.DestroyEvent(self.handle_)

    @property
    def handle(self):
        """The ``CUevent`` handle, as an integer."""
        return <uintptr_t>self.handle_

    def record(self, stream=None):
        """Record this event on a stream: it completes when the work queued so far finishes.

        Parameters
        ----------
        stream : stream-like, optional
            The stream, in any spelling ``stream_handle`` accepts; the legacy default
            stream if omitted.

        Raises
        ------
        TypeError
            If ``stream`` is not a spelling of a stream.
        ValueError
            If the stream handle is negative or does not fit a pointer.
        OSError
            If the driver refuses to record the event.

        Examples
        --------
        >>> from arrow_gpu import Context, Event, Stream
        >>> ctx = Context(0)
        >>> Event(ctx).record(Stream(ctx))
        """
        Stream.wrap(stream, self.context).record(self)

    def synchronize(self):
        """Block the host until the recorded work has finished.

        Raises
        ------
        OSError
            If the driver reports an error, such as a kernel that failed.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> event = Event(Context(0))
        >>> event.record()
        >>> event.synchronize()
        """
        with nogil:
            check_status(self.context.context.SynchronizeEvent(self.handle_))

    @property
    def done(self):
        """Whether the recorded work has finished (never blocks).

        An event that was never recorded counts as done.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> Event(Context(0)).done
        True
        """
        return GetResultValue(self.context.context.EventDone(self.handle_))


include "_device_io.pxi"
include "_copy_engine.pxi"
include "_c_device.pxi"
include "_dlpack.pxi"
include "_diagnostics.pxi"
