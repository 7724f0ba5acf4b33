# Rows of device arrays selected by a mask or indices, planned and launched natively
# (_native/compute/select.h; for arrow_gpu/_compute/select.py). Included in _cuda.pyx.

from pyarrow.includes.libarrow cimport CChunkedArray, CTable, MakeArray
from libcpp.memory cimport make_shared
from pyarrow.lib cimport (pyarrow_unwrap_array, pyarrow_unwrap_batch,
                          pyarrow_unwrap_chunked_array, pyarrow_unwrap_data_type,
                          pyarrow_unwrap_table,
                          pyarrow_wrap_array, pyarrow_wrap_batch, pyarrow_wrap_chunked_array,
                          pyarrow_wrap_table)


def _device_context(datas):
    """The context of the first device buffer of ``datas`` (each an Array, ChunkedArray,
    RecordBatch or Table), the one device all their buffers are on; None when none has a
    device buffer. Host buffers are refused: device compute is for device data, and
    pyarrow.compute already does all of it on the host."""
    cdef CBufferPlaces places
    found = None
    for data in datas:
        if not isinstance(data, (Array, ChunkedArray, RecordBatch, Table)):
            raise TypeError("expected a pyarrow Array, ChunkedArray, RecordBatch or Table on a "
                            f"CUDA device, got '{type(data).__name__}'")
        places = PlacesOf(_as_datum(data))
        if places.host:
            raise TypeError("arrow_gpu.compute works on device data, and this is in host "
                            "memory: move it with arrow_gpu.to_device first, or use "
                            "pyarrow.compute on the host")
        if places.device.get() == NULL:
            continue
        context = _context_of(places.device)
        if places.elsewhere.get() != NULL:
            _on_two_devices(context, _context_of(places.elsewhere))
        if found is None:
            found = context
        else:
            _on_two_devices(found, context)
    return found


cdef _on_two_devices(Context first, Context second):
    """Raises ValueError where ``first`` and ``second`` are contexts of two devices."""
    if first.device_number != second.device_number:
        raise ValueError(f"the data is on devices {first.device_number} and "
                         f"{second.device_number}: move it to one device first "
                         "(arrow_gpu.to_device(data, device=n))")


cdef class _SelectKernels:
    """The loaded kernels a native selection or concatenation launches, resolved once per
    module."""
    cdef CSelectKernels c_kernels
    cdef Context context


def _select_kernels(Context context, dict functions, int64_t max_blocks):
    """The selection's kernels of ``functions`` (kernel name -> CUfunction handle)."""
    cdef _SelectKernels kernels = _SelectKernels.__new__(_SelectKernels)
    kernels.context = context
    kernels.c_kernels.fill_bytes = <CUfunction><uintptr_t>functions["ag_fill_bytes"]
    kernels.c_kernels.indices = <CUfunction><uintptr_t>functions["ag_indices"]
    kernels.c_kernels.gather = <CUfunction><uintptr_t>functions["ag_gather"]
    kernels.c_kernels.gather_bits = <CUfunction><uintptr_t>functions["ag_gather_bits"]
    kernels.c_kernels.mask_ranks = <CUfunction><uintptr_t>functions["ag_mask_ranks"]
    kernels.c_kernels.scan = <CUfunction><uintptr_t>functions["ag_scan"]
    kernels.c_kernels.compact = <CUfunction><uintptr_t>functions["ag_compact"]
    kernels.c_kernels.compact_bits = <CUfunction><uintptr_t>functions["ag_compact_bits"]
    kernels.c_kernels.compact_ranges = <CUfunction><uintptr_t>functions["ag_compact_ranges"]
    kernels.c_kernels.range_sizes = <CUfunction><uintptr_t>functions["ag_range_sizes"]
    kernels.c_kernels.gather_ranges = <CUfunction><uintptr_t>functions["ag_gather_ranges"]
    kernels.c_kernels.copy_ranges = <CUfunction><uintptr_t>functions["ag_copy_ranges"]
    kernels.c_kernels.copy_bit_ranges = <CUfunction><uintptr_t>functions["ag_copy_bit_ranges"]
    kernels.c_kernels.rebase_ranges = <CUfunction><uintptr_t>functions["ag_rebase_ranges"]
    kernels.c_kernels.popcount = <CUfunction><uintptr_t>functions["ag_popcount"]
    kernels.c_kernels.max_blocks = max_blocks
    check_status(SizeRangeGrid(deref(context.c_context), &kernels.c_kernels))
    return kernels


cdef shared_ptr[CArrayData] _one_chunk(const shared_ptr[CChunkedArray]& column):
    """The data of a column's only chunk; null where it has several (or none)."""
    if column.get().num_chunks() != 1:
        return shared_ptr[CArrayData]()
    return column.get().chunk(0).get().data()


def _select_natively(_SelectKernels kernels, data, selector, bint by_mask, bint emit_null,
                     stream):
    """``data`` (a pyarrow Array, ChunkedArray, RecordBatch or Table) at the rows
    ``selector`` picks, in its own shape and complete: a boolean mask (``by_mask``; its
    nulls dropped or, with ``emit_null``, made null rows) or integer indices. Before any
    launch, returns None where a column's type is not one the native plan gathers, and
    NotImplemented where a column has several chunks (or none) to combine first."""
    cdef vector[shared_ptr[CArrayData]] columns
    cdef vector[shared_ptr[CDataType]] types
    cdef shared_ptr[CArray] c_array
    cdef shared_ptr[CChunkedArray] c_chunked
    cdef shared_ptr[CRecordBatch] c_batch
    cdef shared_ptr[CTable] c_table
    cdef int64_t bound
    cdef int i
    if isinstance(data, pa.Array):
        c_array = pyarrow_unwrap_array(data)
        columns.push_back(c_array.get().data())
        types.push_back(c_array.get().type())
        bound = c_array.get().length()
    elif isinstance(data, pa.ChunkedArray):
        c_chunked = pyarrow_unwrap_chunked_array(data)
        columns.push_back(_one_chunk(c_chunked))
        types.push_back(c_chunked.get().type())
        bound = c_chunked.get().length()
    elif isinstance(data, pa.RecordBatch):
        c_batch = pyarrow_unwrap_batch(data)
        for i in range(c_batch.get().num_columns()):
            columns.push_back(c_batch.get().column(i).get().data())
            types.push_back(c_batch.get().column(i).get().type())
        bound = c_batch.get().num_rows()
    else:
        c_table = pyarrow_unwrap_table(data)
        if c_table.get() == NULL:
            raise TypeError(f"expected pyarrow data, got {type(data).__name__}")
        for i in range(c_table.get().num_columns()):
            columns.push_back(_one_chunk(c_table.get().column(i)))
            types.push_back(c_table.get().column(i).get().type())
        bound = c_table.get().num_rows()
    # Types first: a column the plan cannot gather goes to the Python walk uncombined.
    for column_type in types:
        if not SelectSupports(deref(column_type.get())):
            return None
    for column in columns:
        if column.get() == NULL:
            return NotImplemented
    cdef CRowSelector c_selector
    c_selector.kind = ROWS_BY_MASK if by_mask else ROWS_BY_INDICES
    c_selector.data = pyarrow_unwrap_array(selector).get().data()
    c_selector.emit_null = emit_null
    c_selector.bound = bound
    cdef CUstream raw = _raw_stream(stream)
    cdef CResult[CSelected] selected
    with nogil:
        selected = SelectRows(kernels.context.manager, kernels.c_kernels, raw, columns,
                              c_selector)
    try:
        result = GetResultValue(selected)
    except pa.ArrowCapacityError as error:  # as pyarrow's own offsets overflow reads
        raise OverflowError(str(error)) from None
    return _shaped(data, result.columns, result.rows)


cdef _shaped(data, const vector[shared_ptr[CArrayData]]& columns, int64_t rows):
    """``columns`` of ``rows`` rows, in the shape and schema of ``data``."""
    cdef vector[shared_ptr[CArray]] arrays
    cdef vector[shared_ptr[CChunkedArray]] chunked
    cdef size_t i
    for i in range(columns.size()):
        arrays.push_back(MakeArray(columns[i]))
    if isinstance(data, pa.Array):
        return pyarrow_wrap_array(arrays[0])
    if isinstance(data, pa.ChunkedArray):
        return pyarrow_wrap_chunked_array(GetResultValue(CChunkedArray.Make(
            arrays, pyarrow_unwrap_chunked_array(data).get().type())))
    if isinstance(data, pa.RecordBatch):
        # Labelled as device data also without a column to tell.
        return pyarrow_wrap_batch(CMakeRecordBatchOn(
            pyarrow_unwrap_batch(data).get().schema(), rows, columns,
            CDeviceAllocationType_kCUDA))
    for array in arrays:
        chunked.push_back(GetResultValue(CChunkedArray.Make(vector[shared_ptr[CArray]](1, array),
                                                            array.get().type())))
    return pyarrow_wrap_table(CTable.MakeWithRows(pyarrow_unwrap_table(data).get().schema(),
                                                  chunked, rows))


cdef class _NativeRows:
    """The rows a mask or indices pick, made by the native plan (``Gathers::Rows``), and the
    device memory they use: the Python walk's rows, as the native selection's."""
    cdef shared_ptr[CGathers] gathers
    cdef CGatherRows rows

    @property
    def length(self):
        return self.rows.length

    @property
    def may_have_nulls(self):
        """Whether some row is null (a null index, or a null mask slot emitted as a row)."""
        return self.rows.may_have_nulls

    @property
    def mask(self):
        """The mask the rows are compacted from, as ``_take_flat`` takes it (values, valid,
        offset, length, group mode, ranks: addresses and numbers); None for positions."""
        if not self.rows.by_mask:
            return None
        return (self.rows.mask_values, self.rows.mask_valid, self.rows.mask_offset,
                self.rows.mask_length, self.rows.mode, self.rows.ranks)

    def positions(self):
        """The address of the rows' int64 positions (-1 for a null row), made from the mask
        at the first call; 0 for no rows."""
        cdef CResult[uint64_t] made
        with nogil:
            made = self.gathers.get().Positions(&self.rows)
        return GetResultValue(made)


def _make_rows(_SelectKernels kernels, Array selector, bint by_mask, bint emit_null,
               int64_t bound, stream):
    """The rows ``selector`` picks, on ``stream``: a boolean mask (``by_mask``; its nulls
    dropped or, with ``emit_null``, made null rows) or integer indices below ``bound``
    (out of range: IndexError)."""
    cdef _NativeRows made = _NativeRows.__new__(_NativeRows)
    made.gathers = make_shared[CGathers](kernels.context.manager, kernels.c_kernels,
                                         _raw_stream(stream))
    cdef CRowSelector c_selector
    c_selector.kind = ROWS_BY_MASK if by_mask else ROWS_BY_INDICES
    c_selector.data = pyarrow_unwrap_array(selector).get().data()
    c_selector.emit_null = emit_null
    c_selector.bound = bound
    cdef CResult[CGatherRows] rows
    with nogil:
        rows = made.gathers.get().Rows(c_selector)
    made.rows = GetResultValue(rows)
    return made


def _scan(_SelectKernels kernels, uint64_t src, int src_width, int64_t n, uint64_t out,
          int out_width, stream):
    """The exclusive scan of ``n`` integers ``src_width`` (4 or 8) bytes wide at device
    address ``src`` into ``out`` (n + 1 entries of ``out_width`` bytes), on ``stream``;
    returns its total (one wait)."""
    cdef CGathers* gathers = new CGathers(kernels.context.manager, kernels.c_kernels,
                                          _raw_stream(stream))
    cdef CResult[int64_t] total
    try:
        with nogil:
            total = gathers.Scan(src, src_width, n, out, out_width)
    finally:
        del gathers  # its scratch: the scan was read, so its launches are done
    return GetResultValue(total)


def _count_set_bits(_SelectKernels kernels, uint64_t bits, int64_t offset, int64_t n, stream):
    """How many of the ``n`` bits at device address ``bits`` from bit ``offset`` are set,
    counted on ``stream`` (one wait)."""
    cdef CGathers* gathers = new CGathers(kernels.context.manager, kernels.c_kernels,
                                          _raw_stream(stream))
    cdef CResult[int64_t] count
    try:
        with nogil:
            count = gathers.CountSetBits(bits, offset, n)
    finally:
        del gathers  # its counter: read, so its launch is done
    return GetResultValue(count)


def _gathers_flat(type):
    """Whether arrays of ``type`` (a pyarrow DataType) are flat: gathered by ``_take_flat``,
    as the native selection gathers its columns."""
    return SelectSupports(deref(pyarrow_unwrap_data_type(type)))


cdef class _PendingTake:
    """A flat array's gathers, queued by ``_take_flat``: its array, once the counters they
    count into were read."""
    cdef shared_ptr[CGathers] gathers  # and the device memory its launches use
    cdef CPendingGather pending
    cdef int64_t rows
    cdef object positions  # holds the rows' positions, which a binary's gathers read at completion

    def complete(self, int64_t valid_bits, int64_t nbytes):
        """The array, given the counters' values: the set bits of its validity at the rows
        and a binary's selected bytes (gathered now: done once the stream reaches them)."""
        cdef CResult[shared_ptr[CArrayData]] done
        with nogil:
            done = self.gathers.get().Complete(self.pending, self.rows, valid_bits, nbytes)
        try:
            data = GetResultValue(done)
        except pa.ArrowCapacityError as error:  # as pyarrow's own offsets overflow reads
            raise OverflowError(str(error)) from None
        return pyarrow_wrap_array(MakeArray(data))


def _take_flat(_SelectKernels kernels, array, int64_t rows, bint may_have_nulls, mask,
               uint64_t positions, positions_owner, uint64_t valid_count,
               uint64_t bytes_count, stream):
    """Queues the gathers of ``array`` (of a type ``_gathers_flat`` accepts) at ``rows`` rows
    (``may_have_nulls`` where some is null), on ``stream``: compacted by ``mask`` (its
    values, valid, offset, length, group mode and ranks: addresses and numbers) where given,
    else by the int64 ``positions`` (a device address, its memory held by
    ``positions_owner``; -1 for a null row). The set bits of its validity at the rows are
    added to the counter at
    ``valid_count``, a binary's selected bytes written to the one at ``bytes_count``.
    Returns a ``_PendingTake``."""
    cdef CGatherRows c_rows
    c_rows.length = rows
    c_rows.may_have_nulls = may_have_nulls
    c_rows.positions = positions
    if mask is not None:
        c_rows.by_mask = True
        (c_rows.mask_values, c_rows.mask_valid, c_rows.mask_offset, c_rows.mask_length,
         c_rows.mode, c_rows.ranks) = mask
    cdef shared_ptr[CArrayData] data = pyarrow_unwrap_array(array).get().data()
    cdef _PendingTake pending = _PendingTake.__new__(_PendingTake)
    pending.gathers = make_shared[CGathers](kernels.context.manager, kernels.c_kernels,
                                            _raw_stream(stream))
    pending.rows = rows
    pending.positions = positions_owner
    cdef CResult[CPendingGather] queued
    with nogil:
        queued = pending.gathers.get().Queue(deref(data), &c_rows, valid_count, bytes_count)
    pending.pending = GetResultValue(queued)
    return pending
