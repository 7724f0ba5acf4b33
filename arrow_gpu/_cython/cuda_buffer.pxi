# CudaBuffer: a pyarrow.Buffer of device memory, with its copies to and from the host and
# other devices, its slices and its export for CUDA IPC.

from libc.string cimport memset

from pyarrow.lib cimport MemoryPool, maybe_unbox_memory_pool


cdef int64_t _check_position(int64_t position, int64_t size) except -1:
    if position < 0 or position > size:
        raise ValueError("position argument is out-of-range")
    return position


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
        self.c_context = context.c_context
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
        address = handle_value(getattr(mem, "device_ctypes_pointer", None)) or \
            handle_value(mem.handle)
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
        position = as_int("position", position)
        nbytes = as_int("nbytes", nbytes)
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
        cdef bint fresh = buf is None
        if fresh:
            buf = pa.allocate_buffer(nbytes, memory_pool=memory_pool, resizable=resizable)
        cdef void* dst = <void*><uintptr_t>buf.address
        if fresh and not IsPinnedPool(maybe_unbox_memory_pool(memory_pool)):
            AdviseHugePages(dst, nbytes)
        cdef uintptr_t src = self.address + position
        cdef int64_t count = nbytes
        cdef CUstream raw_stream = _raw_stream(stream)
        with nogil:
            check_status(EngineDeviceToHost(deref(self.c_context), dst, src, count,
                                            HOST_MEMORY_UNKNOWN, raw_stream))
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
        position = as_int("position", position)
        nbytes = as_int("nbytes", nbytes)
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
        cdef CUstream raw_stream = _raw_stream(stream)
        with nogil:
            check_status(EngineHostToDevice(deref(self.c_context), dst, src, count,
                                            HOST_MEMORY_UNKNOWN, raw_stream))
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
        position = as_int("position", position)
        nbytes = as_int("nbytes", nbytes)
        cdef int64_t room = self.size - _check_position(position, self.size)
        if nbytes < 0:
            nbytes = min(room, origin.size)
        if nbytes > origin.size:
            raise ValueError("requested more to copy than available from device buffer")
        if nbytes > room:
            raise ValueError("requested more to copy than available in device buffer")
        cdef uintptr_t dst = self.address + position
        cdef uintptr_t src = origin.address
        cdef int64_t count = nbytes
        cdef CUstream raw_stream = _raw_stream(stream)
        with nogil:
            check_status(self.c_context.CopyDeviceToDevice(dst, src, count,
                                                           deref(origin.c_context), raw_stream))
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
        check_status(self.c_context.AllocationRange(self.address, &base, &size))
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
        offset = as_int("offset", offset)
        if length is not None:
            length = as_int("length", length)
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
