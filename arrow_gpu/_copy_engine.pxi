# The copy engine's options, progress hook and coalesced transfers, included into _cuda.pyx.
#
# Public wrappers live in arrow_gpu/transfer_options.py and arrow_gpu/transfer.py.

from pyarrow.includes.libarrow cimport MakeArray
from pyarrow.lib cimport (Array, ChunkedArray, RecordBatch, Table, pyarrow_unwrap_array,
                          pyarrow_unwrap_batch, pyarrow_unwrap_chunked_array,
                          pyarrow_unwrap_table, pyarrow_wrap_array, pyarrow_wrap_batch,
                          pyarrow_wrap_chunked_array, pyarrow_wrap_table)


_OPTION_NAMES = ("staging_bytes", "chunk_bytes", "threads", "small_copy_bytes")


def _transfer_options():
    """The copy engine's options, as a dict (threads 0 means chosen from the cores)."""
    cdef CTransferOptions options = GetTransferOptions()
    return {"staging_bytes": options.staging_bytes, "chunk_bytes": options.chunk_bytes,
            "threads": options.threads, "small_copy_bytes": options.small_copy_bytes}


def _set_transfer_options(int64_t staging_bytes, int64_t chunk_bytes, int threads,
                          int64_t small_copy_bytes):
    cdef CTransferOptions options
    options.staging_bytes = staging_bytes
    options.chunk_bytes = chunk_bytes
    options.threads = threads
    options.small_copy_bytes = small_copy_bytes
    check_status(SetTransferOptions(options))


def _release_staging():
    """Free the pinned staging ring now (it is made again on the next large transfer)."""
    with nogil:
        ReleaseStaging()


def _staging_bytes_held():
    return StagingBytesHeld()


def _set_progress_callback(callback):
    """Call ``callback(nbytes)`` as transfers move bytes; None stops."""
    if callback is not None and not callable(callback):
        raise TypeError("the progress callback must be callable or None")
    SetProgressCallback(callback)


cdef vector[shared_ptr[CBuffer]] _unwrap_buffers(buffers) except *:
    cdef vector[shared_ptr[CBuffer]] out
    for index, buffer in enumerate(buffers):
        if not isinstance(buffer, Buffer):
            raise TypeError(f"item {index} is a '{type(buffer).__name__}', not a pyarrow.Buffer")
        out.push_back((<Buffer>buffer).buffer)
    return out


def _copy_buffers_to_device(Context ctx not None, buffers):
    """Host buffers -> device buffers, with one transfer into one allocation.

    Each result is a zero-copy slice (64-byte aligned) of that allocation, which lives as
    long as any of them.
    """
    cdef vector[shared_ptr[CBuffer]] sources = _unwrap_buffers(buffers)
    cdef vector[shared_ptr[CBuffer]] copies
    with nogil:
        copies = GetResultValue(CoalescedHostToDevice(ctx.manager, sources))
    return [CudaBuffer.wrap(copy, ctx) for copy in copies]


def _copy_buffers_to_host(buffers):
    """Device buffers -> host buffers (slices of one host allocation), one transfer each
    context."""
    cdef vector[shared_ptr[CBuffer]] sources = _unwrap_buffers(buffers)
    cdef vector[shared_ptr[CBuffer]] copies
    with nogil:
        copies = GetResultValue(CoalescedDeviceToHost(sources, NULL))
    return [pyarrow_wrap_buffer(copy) for copy in copies]


cdef list _wrap_arrays(vector[shared_ptr[CArrayData]]& arrays):
    return [pyarrow_wrap_array(MakeArray(data)) for data in arrays]


def _arrays_to_device(Context ctx not None, arrays):
    """Host arrays -> device arrays whose buffers all come from one coalesced transfer."""
    cdef vector[shared_ptr[CArrayData]] sources
    for index, array in enumerate(arrays):
        if not isinstance(array, Array):
            raise TypeError(f"item {index} is a '{type(array).__name__}', not a pyarrow.Array")
        sources.push_back(pyarrow_unwrap_array(array).get().data())
    cdef vector[shared_ptr[CArrayData]] copies
    with nogil:
        copies = GetResultValue(ArraysToDevice(ctx.manager, sources))
    return _wrap_arrays(copies)


def _on_device(data):
    """Whether any buffer of an Array, ChunkedArray, RecordBatch or Table is device memory."""
    if isinstance(data, Table):
        return OnDevice(deref(pyarrow_unwrap_table(data)))
    if isinstance(data, RecordBatch):
        return OnDevice(deref(pyarrow_unwrap_batch(data)))
    if isinstance(data, ChunkedArray):
        return OnDevice(deref(pyarrow_unwrap_chunked_array(data)))
    if isinstance(data, Array):
        return OnDevice(deref(pyarrow_unwrap_array(data).get().data()))
    raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                    f"'{type(data).__name__}'")


def _to_device(Context ctx not None, data):
    """A copy of host ``data`` (Array, ChunkedArray, RecordBatch or Table) on ``ctx``'s
    device: one planning pass, one coalesced transfer into one allocation, the result
    assembled in C++ and wrapped once.

    Raises TypeError if some buffer is not in host memory, MemoryError if the device is
    full (nothing is left allocated then).
    """
    cdef shared_ptr[CTable] table
    cdef shared_ptr[CRecordBatch] batch
    cdef shared_ptr[CChunkedArray] chunked
    if isinstance(data, Table):
        table = pyarrow_unwrap_table(data)
        with nogil:
            table = GetResultValue(TableToDevice(ctx.manager, table))
        return pyarrow_wrap_table(table)
    if isinstance(data, RecordBatch):
        batch = pyarrow_unwrap_batch(data)
        with nogil:
            batch = GetResultValue(BatchToDevice(ctx.manager, batch))
        return pyarrow_wrap_batch(batch)
    if isinstance(data, ChunkedArray):
        chunked = pyarrow_unwrap_chunked_array(data)
        with nogil:
            chunked = GetResultValue(ChunkedArrayToDevice(ctx.manager, chunked))
        return pyarrow_wrap_chunked_array(chunked)
    if isinstance(data, Array):
        return _arrays_to_device(ctx, [data])[0]
    raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                    f"'{type(data).__name__}'")


def _to_host(data, stream=None):
    """A host copy of device ``data``, one coalesced transfer per device, assembled in C++;
    ordered on the GPU after the work queued so far on ``stream`` (of the data's first device;
    the legacy default stream, which every copy follows anyway, for None or 0)."""
    cdef CUstream after = _raw_stream(stream)
    cdef shared_ptr[CTable] table
    cdef shared_ptr[CRecordBatch] batch
    cdef shared_ptr[CChunkedArray] chunked
    cdef vector[shared_ptr[CArrayData]] arrays
    if isinstance(data, Table):
        table = pyarrow_unwrap_table(data)
        with nogil:
            table = GetResultValue(TableToHost(table, after))
        return pyarrow_wrap_table(table)
    if isinstance(data, RecordBatch):
        batch = pyarrow_unwrap_batch(data)
        with nogil:
            batch = GetResultValue(BatchToHost(batch, after))
        return pyarrow_wrap_batch(batch)
    if isinstance(data, ChunkedArray):
        chunked = pyarrow_unwrap_chunked_array(data)
        with nogil:
            chunked = GetResultValue(ChunkedArrayToHost(chunked, after))
        return pyarrow_wrap_chunked_array(chunked)
    if isinstance(data, Array):
        arrays.push_back(pyarrow_unwrap_array(data).get().data())
        with nogil:
            arrays = GetResultValue(ArraysToHost(arrays, after))
        return _wrap_arrays(arrays)[0]
    raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                    f"'{type(data).__name__}'")
