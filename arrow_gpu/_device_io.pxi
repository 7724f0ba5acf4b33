# Device IO (BufferReader, BufferWriter, IPC messages on the device), included into _cuda.pyx.
#
# The files are pyarrow NativeFiles over the C++ reader and writer in _native/device_io.cc,
# so every pyarrow facility that takes a file (pa.ipc above all) works on device memory.

from libcpp.utility cimport move

from pyarrow.includes.libarrow cimport CInputStream, CMemoryPool, ReadMessage
from pyarrow.lib cimport Message, NativeFile, RecordBatch, maybe_unbox_memory_pool


cdef CudaBuffer _device_buffer(obj):
    if not isinstance(obj, Buffer):
        raise TypeError(f"expected a CudaBuffer, got '{type(obj).__name__}'")
    return CudaBuffer.from_buffer(obj)


cdef class BufferReader(NativeFile):
    """A seekable file reading a CudaBuffer.

    ``read``/``readinto`` copy to the host; ``read_buffer`` returns zero-copy device slices,
    so ``pyarrow.ipc`` readers over this file keep record batch bodies on the device.

    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> from arrow_gpu.io import BufferReader
    >>> reader = BufferReader(Context(0).buffer_from_data(b"abcdef"))
    >>> reader.read(2), reader.tell()
    (b'ab', 2)
    >>> piece = reader.read_buffer(3)
    >>> piece.is_cpu, piece.to_pybytes()
    (False, b'cde')
    """
    cdef readonly CudaBuffer buffer

    def __cinit__(self, object obj):
        self.buffer = _device_buffer(obj)
        self.set_random_access_file(GetResultValue(MakeDeviceBufferReader(self.buffer.buffer)))
        self.is_readable = True

    def read(self, nbytes=None):
        """Copy the next ``nbytes`` (default: the rest) to the host, as bytes."""
        return NativeFile.read(self, self._clipped(nbytes, self.tell()))

    def read_at(self, nbytes, offset):
        """Copy ``nbytes`` from ``offset`` to the host, as bytes; the position stays."""
        return NativeFile.read_at(self, self._clipped(nbytes, offset), offset)

    def _clipped(self, nbytes, position):
        # pyarrow allocates the requested size before reading: a huge request would fail
        # with MemoryError and a negative one with SystemError, not read what is there.
        if nbytes is None:
            return None
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative (or None for the rest), got {nbytes}")
        return max(0, min(nbytes, self.size() - position))

    def read_buffer(self, nbytes=None):
        """The next ``nbytes`` (default: the rest) as a zero-copy device slice."""
        return CudaBuffer.from_buffer(NativeFile.read_buffer(self, nbytes))

    def close(self):
        NativeFile.close(self)
        self.buffer = None  # slices already handed out keep their memory alive


cdef class BufferWriter(NativeFile):
    """A file writing into a fixed-size CudaBuffer.

    Writing past the end of the buffer raises and writes nothing. With ``buffer_size > 0``,
    small host writes are gathered in pinned host memory and copied to the device in one go
    (on ``flush``, ``close``, ``seek``, ``writeat`` or when the staging buffer is full). Device
    buffers passed to ``write`` are copied device-to-device.

    >>> from arrow_gpu import Context
    >>> from arrow_gpu.io import BufferWriter
    >>> buf = Context(0).new_buffer(6)
    >>> with BufferWriter(buf) as writer:
    ...     writer.buffer_size = 1 << 16
    ...     _ = writer.write(b"abc")
    ...     writer.num_bytes_buffered
    3
    >>> _ = BufferWriter(buf).writeat(3, b"xyz")
    >>> buf.to_pybytes()
    b'abcxyz'
    """
    cdef shared_ptr[CDeviceBufferWriter] writer
    cdef readonly CudaBuffer buffer

    def __cinit__(self, object obj):
        self.buffer = _device_buffer(obj)
        self.writer = GetResultValue(CDeviceBufferWriter.Make(self.buffer.buffer))
        self.set_output_stream(AsOutputStream(self.writer))
        self.is_writable = True

    def seek(self, int64_t position, int whence=0):
        """Move the write position (``whence`` as for files); returns the new position."""
        self._assert_open()
        if whence == 1:
            position += self.tell()
        elif whence == 2:
            position += self.buffer.size
        elif whence != 0:
            raise ValueError(f"Invalid value of whence: {whence}")
        with nogil:
            check_status(self.writer.get().Seek(position))
        return position

    def writeat(self, int64_t position, data):
        """Write host data at ``position``; the write position ends after it."""
        self._assert_open()
        cdef Buffer source = data if isinstance(data, Buffer) else pa.py_buffer(data)
        if not source.is_cpu:
            raise TypeError("writeat takes host data; seek() and write() copy device data")
        cdef const void* src = <const void*><uintptr_t>source.address
        cdef int64_t nbytes = source.size
        with nogil:
            check_status(self.writer.get().WriteAt(position, src, nbytes))
        return nbytes

    @property
    def buffer_size(self):
        """Bytes of pinned host staging memory (0: every write goes straight to the device)."""
        return self.writer.get().buffer_size()

    @buffer_size.setter
    def buffer_size(self, int64_t buffer_size):
        self._assert_open()
        with nogil:
            check_status(self.writer.get().SetBufferSize(buffer_size))

    @property
    def num_bytes_buffered(self):
        """Bytes written but still staged on the host."""
        return self.writer.get().num_bytes_buffered()

    def close(self):
        NativeFile.close(self)
        self.buffer = None


def write_to_new_buffer(Context ctx not None, write):
    """A new device buffer of ``ctx`` holding exactly what ``write(sink)`` writes.

    A device buffer cannot grow, so ``write`` runs twice: first into a sink that only
    counts the bytes, then into a ``BufferWriter`` on the new buffer. It must write the same
    bytes both times.

    Parameters
    ----------
    ctx : Context
        The context the buffer is allocated in.
    write : callable
        ``write(sink)`` writes to ``sink``, a ``pyarrow.NativeFile``.

    Returns
    -------
    CudaBuffer
        A buffer of exactly the size written.

    Raises
    ------
    OSError
        If the second pass writes more than the first counted (the buffer is freed).

    Examples
    --------
    >>> from arrow_gpu import Context
    >>> from arrow_gpu.io import write_to_new_buffer
    >>> write_to_new_buffer(Context(0), lambda sink: sink.write(b"abc")).to_pybytes()
    b'abc'
    """
    counter = pa.MockOutputStream()
    write(counter)
    cdef CudaBuffer result = ctx.new_buffer(counter.size())
    with BufferWriter(result) as writer:
        write(writer)
    return result


def serialize_record_batch(RecordBatch batch not None, Context ctx not None):
    """Write ``batch`` as one IPC message into a new device buffer of ``ctx``.

    The bytes equal ``batch.serialize()`` for a host batch. A batch already on the device
    is copied device-to-device.

    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> from arrow_gpu.io import serialize_record_batch
    >>> batch = pa.record_batch({"x": [1, 2, 3]})
    >>> serialize_record_batch(batch, Context(0)).to_pybytes() == batch.serialize().to_pybytes()
    True
    """
    def write(NativeFile sink):
        cdef CIpcWriteOptions options = CIpcWriteOptions.Defaults()
        cdef shared_ptr[COutputStream] stream = sink.get_output_stream()
        with nogil:
            check_status(SerializeRecordBatchTo(deref(batch.batch), options, stream.get()))

    return write_to_new_buffer(ctx, write)


def read_message(source, pool=None):
    """Read one IPC message whose body stays on the device.

    ``source`` is a CudaBuffer (or a device ``pyarrow.Buffer``) or a file such as a
    ``BufferReader``, which is left positioned after the message.
    """
    cdef NativeFile reader = source if isinstance(source, NativeFile) else BufferReader(source)
    cdef shared_ptr[CInputStream] stream = reader.get_input_stream()
    cdef CMemoryPool* c_pool = maybe_unbox_memory_pool(pool)
    cdef Message result = Message.__new__(Message)
    with nogil:
        result.message = move(GetResultValue(ReadMessage(stream.get(), c_pool)))
    if result.message.get() == NULL:
        raise EOFError("End of Arrow stream")
    return result
