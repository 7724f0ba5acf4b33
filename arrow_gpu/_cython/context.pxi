# Context: a device's CUDA context, through which its memory is allocated, viewed, opened
# from other processes and measured.

from pyarrow.lib cimport Device, MemoryManager


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
        cdef int c_device = as_int("device_number", device_number)
        cdef uintptr_t c_handle = handle_value(handle)
        cdef shared_ptr[CCudaContext] foreign
        if c_handle == 0:
            self._init(GetResultValue(CCudaMemoryManager.Primary(c_device)))
        else:
            foreign = GetResultValue(CCudaContext.Foreign(c_device, c_handle))
            self._init(GetResultValue(CCudaMemoryManager.ForContext(foreign)))

    cdef _init(self, const shared_ptr[CCudaMemoryManager]& manager):
        self.manager = manager
        self.c_context = manager.get().cuda_context().get()

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
        return Context(context.device.id, handle_value(context.handle))

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
        if handle_value(context.handle) != self.handle:
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
        return self.c_context.device_number()

    @property
    def handle(self):
        """The CUcontext handle, as an integer."""
        return ContextHandle(deref(self.c_context))

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
        return self.c_context.bytes_allocated()

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
            check_status(self.c_context.Synchronize())

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
        cdef CMemoryStats stats = self.c_context.stats()
        cdef CCacheStats cache = CachingStats(deref(self.c_context))
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
            released = TrimCache(deref(self.c_context))
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
        check_status(self.c_context.MemoryInfo(&free, &total))
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
        return GetResultValue(self.c_context.DeviceAddress(address))

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
        return GetResultValue(self.c_context.DeviceOrdinal(address))

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
        cdef int64_t size = as_int("nbytes", nbytes)
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
        address = as_int("address", address)
        size = as_int("size", size)
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
        offset = as_int("offset", offset)
        size = as_int("size", size)
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
            address, shape, dtype, strides = parse_cuda_array_interface(interface, "object")
            start, end = contiguous_span(shape, strides, dtype.itemsize)
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
