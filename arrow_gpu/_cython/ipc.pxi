# IpcMemHandle: device memory one process exports for another to open (CUDA IPC); its bytes
# on the wire are arrow_gpu._ipc.wire's.

from arrow_gpu._ipc import wire as _ipc_wire

from libc.string cimport memcpy


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
        driver_handle, offset, size = _ipc_wire.parse(opaque_handle)
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
        return pa.py_buffer(_ipc_wire.serialize(self.driver_handle, self.offset, self.size))
