# Device arrays of flat types concatenated, planned and launched natively
# (_native/compute/concat.h; for arrow_gpu/_compute/concat.py and compute.combine_chunks).
# Included in _cuda.pyx, after select.pxi (whose kernels and shapes it shares).


# The parts are appended to a column's vector in place: a vector returned and pushed would
# be copied on the way, each part's reference counted up and down again.
cdef int _chunks_into(const shared_ptr[CChunkedArray]& chunked,
                      vector[shared_ptr[CArrayData]]* datas) except -1:
    cdef int i
    if datas.empty():  # not when appending: a vector grown exactly each time grows every time
        datas.reserve(chunked.get().num_chunks())
    for i in range(chunked.get().num_chunks()):
        datas.push_back(chunked.get().chunk(i).get().data())
    return 0


cdef int _parts_into(parts, vector[shared_ptr[CArrayData]]* datas) except -1:
    """Appends the data of each part of ``parts``: a ChunkedArray's chunks, or a sequence of
    Arrays."""
    if isinstance(parts, pa.ChunkedArray):
        return _chunks_into(pyarrow_unwrap_chunked_array(parts), datas)
    for part in parts:
        if not isinstance(part, pa.Array):
            raise TypeError(f"expected a pyarrow Array, got '{type(part).__name__}'")
        datas.push_back(pyarrow_unwrap_array(part).get().data())
    return 0


cdef object _concat_data(_SelectKernels kernels,
                         const vector[vector[shared_ptr[CArrayData]]]& columns, bint copy_one,
                         stream, vector[shared_ptr[CArrayData]]* out):
    """Runs the native plan into ``out``: True, or None where it concatenates no column
    of these (checked before any launch)."""
    cdef CUstream raw = _raw_stream(stream)
    cdef CResult[vector[shared_ptr[CArrayData]]] joined
    with nogil:
        joined = ConcatColumns(kernels.context.manager, kernels.c_kernels, raw, columns,
                               copy_one)
    try:
        out[0] = GetResultValue(joined)
    except pa.ArrowNotImplementedError:
        return None
    except pa.ArrowCapacityError as error:  # as pyarrow's own offsets overflow reads
        raise OverflowError(str(error)) from None
    return True


def _concat_natively(_SelectKernels kernels, columns, bint copy_one, stream):
    """Each column's parts (a ChunkedArray, or a sequence of Arrays) end to end, as Arrays
    complete on return (a lone part as it is unless ``copy_one``); None, before any launch,
    where a column is not one the native plan concatenates (a type it does not copy, parts
    of different types or dictionaries, no parts)."""
    cdef vector[vector[shared_ptr[CArrayData]]] c_columns
    cdef vector[shared_ptr[CArrayData]] joined
    cdef size_t c = 0
    c_columns.resize(len(columns))
    for parts in columns:
        _parts_into(parts, &c_columns[c])
        c += 1
    if _concat_data(kernels, c_columns, copy_one, stream, &joined) is None:
        return None
    return [pyarrow_wrap_array(MakeArray(data)) for data in joined]


def _combine_natively(_SelectKernels kernels, data, stream):
    """A ChunkedArray's chunks as one Array, or a Table with one chunk per column, complete
    on return; None, before any launch, where a column is not one the native plan
    concatenates, or has no chunks."""
    cdef vector[vector[shared_ptr[CArrayData]]] c_columns
    cdef vector[shared_ptr[CArrayData]] joined
    cdef shared_ptr[CTable] c_table
    cdef int i
    if isinstance(data, pa.ChunkedArray):
        c_columns.resize(1)
        _parts_into(data, &c_columns[0])
    else:
        c_table = pyarrow_unwrap_table(data)
        if c_table.get() == NULL:
            raise TypeError(f"expected a pyarrow ChunkedArray or Table, got "
                            f"'{type(data).__name__}'")
        if c_table.get().num_columns() == 0:
            return None
        c_columns.resize(c_table.get().num_columns())
        for i in range(c_table.get().num_columns()):
            _chunks_into(c_table.get().column(i), &c_columns[i])
    if _concat_data(kernels, c_columns, False, stream, &joined) is None:
        return None
    if isinstance(data, pa.ChunkedArray):
        return pyarrow_wrap_array(MakeArray(joined[0]))
    return _shaped(data, joined, c_table.get().num_rows())


def _concat_frames_natively(_SelectKernels kernels, parts, stream):
    """The columns of ``parts``, Tables or RecordBatches of one schema, end to end, as Arrays
    complete on return; None, before any launch, where a column is not one the native plan
    concatenates (or there are none). The columns are read here: wrapping each column and
    chunk of each part in a Python object cost more than the concatenation."""
    cdef vector[vector[shared_ptr[CArrayData]]] c_columns
    cdef vector[shared_ptr[CArrayData]] joined
    cdef shared_ptr[CRecordBatch] c_batch
    cdef shared_ptr[CTable] c_table
    cdef int i, n = len(parts[0].schema)
    if n == 0:
        return None
    c_columns.resize(n)
    for part in parts:
        if isinstance(part, pa.RecordBatch):
            c_batch = pyarrow_unwrap_batch(part)
            for i in range(n):
                c_columns[i].push_back(c_batch.get().column(i).get().data())
            continue
        c_table = pyarrow_unwrap_table(part)
        if c_table.get() == NULL:
            raise TypeError(f"expected a pyarrow Table or RecordBatch, got "
                            f"'{type(part).__name__}'")
        for i in range(n):
            _chunks_into(c_table.get().column(i), &c_columns[i])
    if _concat_data(kernels, c_columns, True, stream, &joined) is None:
        return None
    return [pyarrow_wrap_array(MakeArray(data)) for data in joined]


def _read_ranges(_SelectKernels kernels, const int64_t[::1] src not None,
                 const int64_t[::1] nbytes not None, stream):
    """The bytes of each device range (addresses ``src``, sizes ``nbytes``) one after
    another, once the work queued on ``stream`` so far is done: one launch, one copy back."""
    cdef vector[uint64_t] c_src
    cdef vector[int64_t] c_nbytes
    cdef Py_ssize_t i
    for i in range(src.shape[0]):
        c_src.push_back(<uint64_t>src[i])
        c_nbytes.push_back(nbytes[i])
    cdef CUstream raw = _raw_stream(stream)
    cdef CResult[vector[uint8_t]] read
    with nogil:
        read = ReadRanges(kernels.context.manager, kernels.c_kernels, raw, c_src, c_nbytes)
    cdef vector[uint8_t] data = GetResultValue(read)
    return (<char*>data.data())[:data.size()] if data.size() else b""
