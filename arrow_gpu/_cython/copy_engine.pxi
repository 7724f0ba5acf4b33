# The copy engine's options, progress hook and Arrow-object transfers, included into
# _cuda.pyx.
#
# Public wrappers live in arrow_gpu/transfer_options.py and arrow_gpu/transfer.py.

from pyarrow.includes.libarrow cimport CDatum, CMemoryPool
from pyarrow.lib cimport (Array, ChunkedArray, MemoryManager, RecordBatch, Table,
                          maybe_unbox_memory_pool, pyarrow_unwrap_array, pyarrow_unwrap_batch,
                          pyarrow_unwrap_chunked_array, pyarrow_unwrap_table, wrap_datum)


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


def _set_thread_copy_threads(int threads):
    """Set the copy threads of the transfers that the calling thread starts (0: the
    process-wide option); returns the previous setting."""
    return SetThreadCopyThreads(threads)


def _release_staging():
    """Free the pinned staging ring now (it is made again on the next large transfer)."""
    with nogil:
        ReleaseStaging()


def _staging_bytes_held():
    return StagingBytesHeld()


def _set_progress_callback(callback):
    """Call ``callback(moved, 0)`` as transfers move bytes and ``callback(0, expected)`` as
    each starts; None stops."""
    if callback is not None and not callable(callback):
        raise TypeError("the progress callback must be callable or None")
    SetProgressCallback(callback)


cdef CDatum _as_datum(data) except *:
    """The one type dispatch of a transfer: ``data`` as an arrow::Datum."""
    if isinstance(data, Table):
        return CDatum(pyarrow_unwrap_table(data))
    if isinstance(data, RecordBatch):
        return CDatum(pyarrow_unwrap_batch(data))
    if isinstance(data, ChunkedArray):
        return CDatum(pyarrow_unwrap_chunked_array(data))
    if isinstance(data, Array):
        return CDatum(pyarrow_unwrap_array(data))
    raise TypeError(f"expected a pyarrow Array, ChunkedArray, RecordBatch or Table, got "
                    f"'{type(data).__name__}'")


cdef _copy_to_device(Context ctx, data, const CMappedFile& mapped, stream=None):
    cdef CDatum source = _as_datum(data)
    cdef CUstream c_stream = _raw_stream(stream)
    cdef CDatum copy
    if OnDevice(source):
        return None
    with nogil:
        copy = GetResultValue(ToDevice(source, ctx.manager, mapped, c_stream))
    return wrap_datum(copy)


def _to_device(Context ctx not None, data, stream=None):
    """A copy of host ``data`` (Array, ChunkedArray, RecordBatch or Table) on ``ctx``'s
    device: one planning pass, one coalesced transfer into one allocation, the result
    assembled in C++ and wrapped once; complete when this returns. A small copy runs on
    ``stream`` (None: the legacy default stream) and waits for no other. None, and no copy,
    if some buffer is on a device already (the caller copies device to device).

    Raises MemoryError if the device is full (nothing is left allocated then).
    """
    cdef CMappedFile no_file
    no_file.fd = -1
    return _copy_to_device(ctx, data, no_file, stream)


def _to_device_from_file(Context ctx not None, data, Buffer mapping not None, int fd):
    """``_to_device`` of ``data`` whose buffers inside ``mapping``, a memory mapping of the
    open regular file ``fd`` from its start, are read from the file with pread instead of
    through the mapping: no page faults in this process (each page of a fresh mapping faults
    on first touch), the kernel copies from its page cache into the staging memory.

    Raises OSError if the file cannot be read, or ends before the mapping does (it was
    truncated since): nothing is left allocated then.
    """
    if fd < 0:
        raise ValueError(f"fd must be an open file descriptor, got {fd}")
    cdef CMappedFile mapped
    mapped.begin = mapping.address
    mapped.end = mapping.address + mapping.size
    mapped.fd = fd
    mapped.offset = 0
    return _copy_to_device(ctx, data, mapped)


def _data_context(data):
    """The context of the first device buffer of ``data`` (Array, ChunkedArray, RecordBatch
    or Table; children and dictionaries included); None when every buffer is in host memory.
    Raises pa.ArrowTypeError where that buffer is device memory but not CUDA memory."""
    cdef CBufferPlaces places = PlacesOf(_as_datum(data))
    if places.device.get() == NULL:
        return None
    return _context_of(places.device)


def _to_host(data, stream=None, memory_pool=None):
    """A host copy of device ``data``, one coalesced transfer per device, assembled in C++;
    ordered on the GPU after the work queued so far on ``stream`` (of the data's first device;
    the legacy default stream, which every copy follows anyway, for None or 0), allocated from
    ``memory_pool`` (pyarrow's current pool for None). None, and no copy, if every buffer is in
    host memory already."""
    cdef CUstream c_stream = _raw_stream(stream)
    cdef CDatum source = _as_datum(data)
    cdef CMemoryPool* c_pool = maybe_unbox_memory_pool(memory_pool)
    cdef CDatum copy
    if not OnDevice(source):
        return None
    with nogil:
        copy = GetResultValue(ToHost(source, c_stream, c_pool))
    return wrap_datum(copy)


def _cpu_memory_manager(memory_pool=None):
    """The host memory manager that allocates from ``memory_pool`` (a pyarrow MemoryPool;
    pyarrow's current pool for None)."""
    return MemoryManager.wrap(CPUMemoryManagerOf(maybe_unbox_memory_pool(memory_pool)))


# The planner, the staging ring's lease and the pipeline on their own, for their tests: the
# transfers above reach them only behind the small-copy and pinned-memory shortcuts.

cdef vector[CPiece] _pieces(pieces) except *:
    """Pieces from (host address, device address, size, region begin, region end) tuples."""
    cdef vector[CPiece] out
    cdef CPiece piece  # no file: its bytes are in host memory
    for host, device, size, region_begin, region_end in pieces:
        if size < 0:
            raise ValueError(f"a piece's size must not be negative (got {size})")
        piece.host = <uint8_t*><uintptr_t>host
        piece.device = device
        piece.size = size
        piece.region_begin = region_begin
        piece.region_end = region_end
        out.push_back(piece)
    return out


cdef int64_t _total(vector[CPiece]& pieces) noexcept nogil:
    cdef int64_t total = 0
    cdef CPiece piece
    for piece in pieces:
        total += piece.size
    return total


def _plan_transfer(pieces, int64_t smallest, int64_t largest, int64_t largest_task=kMaxTaskBytes,
                   int64_t host_page=0, bint grow=True, bint shrink=True):
    """How the planner cuts ``pieces`` (see ``_pieces``) into parts, packs them into chunks of
    ``smallest`` to ``largest`` bytes of staging, and groups them into tasks of at most
    ``largest_task`` bytes (a download's are larger), cutting the host ranges at pages of
    ``host_page`` bytes (a download's huge pages; 0: not cut); nothing moves. The chunks
    ``grow`` from the smallest at the start (an upload's) and ``shrink`` to it before the
    end (a download's).

    Returns (parts, chunks, tasks): tuples (host, device, size, slot_offset, joins),
    (begin, end, bytes, task_bytes) and (chunk, begin, end), where begin and end are indices
    of parts.
    """
    if smallest <= 0 or smallest % kAlignment or largest < smallest or largest % kAlignment:
        raise ValueError(f"chunk sizes must be multiples of {kAlignment}, the smallest positive "
                         f"and the largest at least the smallest (got {smallest}, {largest})")
    if host_page < 0:
        raise ValueError(f"a host page must not be negative (got {host_page})")
    cdef vector[CPiece] c_pieces = _pieces(pieces)
    cdef CChunkSizes sizes
    sizes.smallest = smallest
    sizes.largest = largest
    sizes.total = _total(c_pieces)
    sizes.largest_task = largest_task
    sizes.host_page = host_page
    sizes.grow = grow
    sizes.shrink = shrink
    cdef vector[CPart] parts
    cdef vector[CChunk] chunks
    cdef vector[CTask] tasks
    with nogil:
        PlanTransfer(c_pieces, sizes, &parts, &chunks)
        tasks = PlanTasks(parts, chunks)
    cdef CPart part
    cdef CChunk chunk
    cdef CTask task
    planned = ([], [], [])
    for part in parts:
        planned[0].append((<uintptr_t>part.host, part.device, part.size, part.slot_offset,
                           part.joins))
    for chunk in chunks:
        planned[1].append((chunk.begin, chunk.end, chunk.bytes, chunk.task_bytes))
    for task in tasks:
        planned[2].append((task.chunk, task.begin, task.end))
    return planned


def _with_staging_lease(Context context, callback):
    """``callback(held)`` while the calling thread holds the lease on the staging ring that a
    transfer takes, if it could take it (``held``); returns what ``callback`` returns."""
    cdef CTransferOptions options = EffectiveTransferOptions()
    cdef CLease lease
    with nogil:
        lease = AcquireLease(deref(context.c_context), options)
    return callback(lease.ring != NULL)


def _run_pipeline(Context context, bint to_device, pieces):
    """Moves ``pieces`` (see ``_pieces``) through the staging ring by the pipeline, with the
    copy engine's options, whatever their size; RuntimeError while another transfer holds the
    ring."""
    cdef CTransferOptions options = EffectiveTransferOptions()
    if options.staging_bytes == 0:
        raise RuntimeError("staging is off (staging_bytes=0): there is no pipeline to run")
    cdef vector[CPiece] c_pieces = _pieces(pieces)
    cdef int64_t total = _total(c_pieces)
    cdef CDirection direction = TO_DEVICE if to_device else TO_HOST
    cdef CAlongside nothing
    cdef CLease lease
    cdef CStatus status
    with nogil:
        lease = AcquireLease(deref(context.c_context), options)
        if lease.ring != NULL:
            status = RunPipeline(deref(context.c_context), direction, c_pieces, total, lease,
                                 options, nothing, NULL)
    if lease.ring == NULL:
        raise RuntimeError("another transfer holds the staging ring")
    check_status(status)
