# Device IO (BufferReader, BufferWriter, IPC messages on the device), included into _cuda.pyx.
#
# The files are pyarrow NativeFiles over the C++ reader and writer in _native/columnar/device_io.cc,
# so every pyarrow facility that takes a file (pa.ipc above all) works on device memory.

from libcpp.utility cimport move

from pyarrow.includes.libarrow cimport CInputStream, CMemoryPool, ReadMessage
from pyarrow.lib cimport (Message, NativeFile, RecordBatch, maybe_unbox_memory_pool,
                          pyarrow_wrap_buffer)


cdef CudaBuffer _device_buffer(obj):
    if not isinstance(obj, Buffer):
        raise TypeError(f"expected a CudaBuffer, got '{type(obj).__name__}'")
    return CudaBuffer.from_buffer(obj)


cdef class BufferReader(NativeFile):
    """A seekable file reading a CudaBuffer.

    ``read``/``readinto`` copy to the host; ``read_buffer`` returns zero-copy device slices.
    ``pyarrow.ipc`` readers over this file keep record batch bodies on the device and read
    metadata and footers as host copies; a body that pyarrow would decompress, byte-swap or
    concatenate on the host (compressed, of a big-endian schema, or a delta dictionary
    batch) is refused with ``NotImplementedError``: copy such a buffer to the host and read
    it there.

    Parameters
    ----------
    obj : CudaBuffer or pyarrow.Buffer
        The device memory to read; a ``pyarrow.Buffer`` must be device memory of a CUDA
        context.

    Attributes
    ----------
    buffer : CudaBuffer or None
        The buffer being read; None once the file is closed.

    Raises
    ------
    TypeError
        If ``obj`` is not a buffer, or is host memory (``pyarrow.ArrowTypeError``).

    Examples
    --------
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
    def __cinit__(self, object obj):
        self.buffer = _device_buffer(obj)
        self._read_bodies(IPC_REFUSING_HOST_DECODING)
        self.is_readable = True

    cdef _read_bodies(self, CBufferReads reads):
        self.reader = GetResultValue(CDeviceBufferReader.Make(self.buffer.buffer, reads))
        self.set_random_access_file(AsRandomAccessFile(self.reader))

    def read(self, nbytes=None):
        """Copy the next bytes to the host and move the position past them.

        Parameters
        ----------
        nbytes : int, optional
            How many bytes; all up to the end if omitted. Near the end, fewer come back.

        Returns
        -------
        bytes
            The bytes read, on the host.

        Raises
        ------
        ValueError
            If ``nbytes`` is negative, or the file is closed.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferReader
        >>> reader = BufferReader(Context(0).buffer_from_data(b"abcdef"))
        >>> reader.read(4), reader.read(10)
        (b'abcd', b'ef')
        """
        return NativeFile.read(self, self._clipped(nbytes, self.tell()))

    def read_at(self, nbytes, offset):
        """Copy bytes from a given offset to the host; the position stays.

        Parameters
        ----------
        nbytes : int
            How many bytes; near the end, fewer come back.
        offset : int
            Where the bytes start in the buffer.

        Returns
        -------
        bytes
            The bytes read, on the host.

        Raises
        ------
        ValueError
            If ``nbytes`` is negative, or the file is closed.
        OSError
            If ``offset`` is outside the buffer.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferReader
        >>> reader = BufferReader(Context(0).buffer_from_data(b"abcdef"))
        >>> reader.read_at(2, 3), reader.tell()
        (b'de', 0)
        """
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
        """Read the next bytes as a zero-copy device slice and move the position past them.

        The slice keeps the buffer's memory alive, even after the file is closed.

        Parameters
        ----------
        nbytes : int, optional
            How many bytes; all up to the end if omitted. Near the end, fewer come back.

        Returns
        -------
        CudaBuffer
            A read-only slice of ``buffer``.

        Raises
        ------
        ValueError
            If ``nbytes`` is negative (``pyarrow.ArrowInvalid``), or the file is closed.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferReader
        >>> reader = BufferReader(Context(0).buffer_from_data(b"abcdef"))
        >>> _ = reader.seek(4)
        >>> piece = reader.read_buffer()
        >>> type(piece).__name__, piece.to_pybytes()
        ('CudaBuffer', b'ef')
        """
        self._assert_readable()
        cdef int64_t n = self.size() - self.tell() if nbytes is None else nbytes
        cdef shared_ptr[CBuffer] slice
        with nogil:
            slice = GetResultValue(self.reader.get().ReadSlice(n))
        return CudaBuffer.from_buffer(pyarrow_wrap_buffer(slice))

    def close(self):
        """Close the file and drop its reference to the buffer.

        Slices that ``read_buffer`` handed out stay valid. Closing twice does nothing.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferReader
        >>> reader = BufferReader(Context(0).buffer_from_data(b"abc"))
        >>> reader.close()
        >>> reader.closed, reader.buffer is None
        (True, True)
        """
        NativeFile.close(self)
        self.buffer = None  # slices already handed out keep their memory alive


def _host_decoding_reader(buffer):
    """A ``BufferReader`` whose IPC reads hand out the bodies pyarrow decodes on the host
    (compressed ones) as host copies, for a caller that moves what it reads to the device."""
    cdef BufferReader reader = BufferReader(buffer)
    reader._read_bodies(IPC_DECODING_ON_HOST)
    return reader


cdef class BufferWriter(NativeFile):
    """A file writing into a fixed-size CudaBuffer.

    Writing past the end of the buffer raises ``OSError`` and writes nothing. With
    ``buffer_size > 0``, small host writes are gathered in pinned host memory and copied to
    the device in one go (on ``flush``, ``close``, ``seek``, ``writeat`` or when the staging
    buffer is full). Device buffers passed to ``write`` are copied device-to-device.

    Parameters
    ----------
    obj : CudaBuffer or pyarrow.Buffer
        The mutable device memory to write into; a ``pyarrow.Buffer`` must be device memory
        of a CUDA context. Writing starts at its first byte.

    Attributes
    ----------
    buffer : CudaBuffer or None
        The buffer being written; None once the file is closed.

    Raises
    ------
    TypeError
        If ``obj`` is not a buffer, or is host memory (``pyarrow.ArrowTypeError``).
    ValueError
        If ``obj`` is read-only (``pyarrow.ArrowInvalid``).

    Examples
    --------
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
    def __cinit__(self, object obj):
        self.buffer = _device_buffer(obj)
        self.writer = GetResultValue(CDeviceBufferWriter.Make(self.buffer.buffer))
        self.set_output_stream(AsOutputStream(self.writer))
        self.is_writable = True

    def seek(self, int64_t position, int whence=0):
        """Move the write position, after copying the staged bytes to the device.

        Parameters
        ----------
        position : int
            The new position, counted as ``whence`` says.
        whence : int, default 0
            0: from the start of the buffer, 1: from the current position, 2: from the end.

        Returns
        -------
        int
            The new position, from the start of the buffer.

        Raises
        ------
        ValueError
            If ``whence`` is not 0, 1 or 2, or the file is closed.
        OSError
            If the new position is outside the buffer.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferWriter
        >>> writer = BufferWriter(Context(0).new_buffer(6))
        >>> writer.seek(-2, 2)
        4
        """
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
        """Write host data at a given position; the write position ends after it.

        Staged bytes are copied to the device first.

        Parameters
        ----------
        position : int
            Where the data starts in the buffer.
        data : bytes-like or pyarrow.Buffer
            Host data. Write device data with ``seek`` and ``write``.

        Returns
        -------
        int
            The number of bytes written.

        Raises
        ------
        TypeError
            If ``data`` is device memory or not bytes-like.
        ValueError
            If the file is closed.
        OSError
            If the data would not fit in the buffer at ``position`` (nothing is written).

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferWriter
        >>> writer = BufferWriter(Context(0).new_buffer(6))
        >>> writer.writeat(1, b"xy"), writer.tell()
        (2, 3)
        """
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
        """Bytes of pinned host staging memory (0: every write goes straight to the device).

        Setting it copies the staged bytes to the device first, then allocates new staging
        memory. It reads 0 once the file is closed.

        Raises
        ------
        ValueError
            On setting: if the size is negative (``pyarrow.ArrowInvalid``), or the file is
            closed.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferWriter
        >>> writer = BufferWriter(Context(0).new_buffer(6))
        >>> writer.buffer_size
        0
        >>> writer.buffer_size = 1024
        >>> writer.buffer_size
        1024
        """
        return self.writer.get().buffer_size()

    @buffer_size.setter
    def buffer_size(self, int64_t buffer_size):
        self._assert_open()
        with nogil:
            check_status(self.writer.get().SetBufferSize(buffer_size))

    @property
    def num_bytes_buffered(self):
        """Bytes written but still staged on the host.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferWriter
        >>> writer = BufferWriter(Context(0).new_buffer(6))
        >>> writer.buffer_size = 1024
        >>> _ = writer.write(b"ab")
        >>> writer.num_bytes_buffered
        2
        >>> writer.flush()
        >>> writer.num_bytes_buffered
        0
        """
        return self.writer.get().num_bytes_buffered()

    def close(self):
        """Copy the staged bytes to the device, close the file and drop the buffer.

        Closing twice does nothing.

        Raises
        ------
        OSError
            If the staged bytes cannot be copied to the device.

        Examples
        --------
        >>> from arrow_gpu import Context
        >>> from arrow_gpu.io import BufferWriter
        >>> buf = Context(0).new_buffer(2)
        >>> writer = BufferWriter(buf)
        >>> writer.buffer_size = 1024
        >>> _ = writer.write(b"ok")
        >>> writer.close()
        >>> writer.closed, buf.to_pybytes()
        (True, b'ok')
        """
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

    Parameters
    ----------
    batch : pyarrow.RecordBatch
        The batch, on the host or on the device.
    ctx : Context
        The context the buffer is allocated in.

    Returns
    -------
    CudaBuffer
        The message (metadata and body), of exactly its size. ``read_message`` and
        ``read_record_batch`` read it back.

    Raises
    ------
    TypeError
        If ``batch`` is not a RecordBatch (a Table is not), or ``ctx`` is not a Context.
    MemoryError
        If the device has not enough free memory (``pyarrow.ArrowMemoryError``).

    Examples
    --------
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

    Parameters
    ----------
    source : CudaBuffer, pyarrow.Buffer or pyarrow.NativeFile
        A device buffer that starts with the message, or a file such as a
        ``BufferReader``, which is left positioned after the message.
    pool : pyarrow.MemoryPool, optional
        The pool Arrow reads with where it must allocate (the default pool if omitted).

    Returns
    -------
    pyarrow.ipc.Message
        The message; for a device source, its ``body`` is a zero-copy slice of device
        memory and its metadata is on the host.

    Raises
    ------
    EOFError
        If the source is at its end (an empty buffer, or a stream's end marker).
    OSError
        If the bytes are not an IPC message.
    TypeError
        If ``source`` is neither a buffer nor a file, or is a host buffer
        (``pyarrow.ArrowTypeError``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> from arrow_gpu.io import BufferReader, read_message, write_to_new_buffer
    >>> batch = pa.record_batch({"x": [1, 2, 3]})
    >>> def write(sink):
    ...     _ = sink.write(batch.schema.serialize())
    ...     _ = sink.write(batch.serialize())
    >>> reader = BufferReader(write_to_new_buffer(Context(0), write))
    >>> read_message(reader).type
    'schema'
    >>> message = read_message(reader)
    >>> message.type, message.body.is_cpu
    ('record batch', False)
    >>> read_message(reader)
    Traceback (most recent call last):
    ...
    EOFError: End of Arrow stream
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


def _record_batch_layout(const uint8_t[::1] metadata not None):
    """What a record batch message's metadata (``Message.metadata``, host bytes) says of its
    body: ``(nodes, buffers, compressed, delta)``, nodes as (length, null count), buffers
    as (offset, length), ``delta`` for a dictionary batch that extends its dictionary; empty
    lists for another kind of message. The flatbuffer is read by the same native reader
    that vets device IPC reads."""
    cdef CRecordBatchLayout layout
    with nogil:
        layout = ReadRecordBatchLayout(&metadata[0] if metadata.shape[0] else NULL,
                                       metadata.shape[0])
    return ([(node.first, node.second) for node in layout.nodes],
            [(buffer.first, buffer.second) for buffer in layout.buffers],
            bool(layout.compressed), bool(layout.delta))


def _footer_blocks(const uint8_t[::1] footer not None):
    """The blocks an IPC file's footer (its flatbuffer, host bytes) lists, dictionaries
    first, as ``(offset, metadata length, body length)``; None if the footer cannot be
    read."""
    cdef vector[CFileBlock] blocks
    cdef c_bool read
    with nogil:
        read = ReadFooterBlocks(&footer[0] if footer.shape[0] else NULL, footer.shape[0],
                                &blocks)
    if not read:
        return None
    return [(block.offset, block.metadata_length, block.body_length) for block in blocks]
