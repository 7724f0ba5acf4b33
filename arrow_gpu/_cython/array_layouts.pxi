# Where the buffers of many arrays are, read in one walk over their ArrayData (for
# arrow_gpu/_compute/layouts.py). Included into _cuda.pyx.
#
# Planning a concatenation asks each chunk for its offset, length and buffer addresses:
# through pyarrow's Python objects that is a dozen calls per chunk, here a loop in C. A
# ChunkedArray's chunks are walked in C too: no Python Array is made for them.

from libcpp.vector cimport vector
from pyarrow.includes.libarrow cimport (CChunkedArray, CDataType, CDeviceAllocationType,
                                        CDeviceAllocationType_kCUDA)
from pyarrow.lib cimport pyarrow_unwrap_batch, pyarrow_wrap_batch


cdef extern from "arrow/record_batch.h" nogil:
    shared_ptr[CRecordBatch] CMakeRecordBatchOn "arrow::RecordBatch::Make"(
        shared_ptr[CSchema] schema, int64_t num_rows, vector[shared_ptr[CArrayData]] columns,
        CDeviceAllocationType device_type)


def _rows_on_device(batch):
    """``batch``, whose columns hold no host buffer, labelled as device data. pyarrow labels
    a batch by where its first column's buffers are, and one without any (no columns, or a
    first column of the null type) as host data: its rows would look as if they had left
    the device."""
    cdef shared_ptr[CRecordBatch] c_batch = pyarrow_unwrap_batch(batch)
    cdef vector[shared_ptr[CArrayData]] columns
    cdef int i
    for i in range(c_batch.get().num_columns()):
        columns.push_back(c_batch.get().column(i).get().data())
        if _holds_a_host_buffer(columns.back()):
            raise ValueError("only a batch whose columns hold no host buffer takes its "
                             "device from its caller")
    return pyarrow_wrap_batch(CMakeRecordBatchOn(c_batch.get().schema(),
                                                 c_batch.get().num_rows(), columns,
                                                 CDeviceAllocationType_kCUDA))


cdef bint _holds_a_host_buffer(const shared_ptr[CArrayData]& data):
    for buffer in data.get().buffers:
        if buffer.get() != NULL and buffer.get().is_cpu():
            return True
    for child in data.get().child_data:
        if _holds_a_host_buffer(child):
            return True
    return (data.get().dictionary.get() != NULL
            and _holds_a_host_buffer(data.get().dictionary))


def _fill_array_layouts(parts, int64_t[:, ::1] out, bint dictionaries):
    """Fill ``out``, one row per array of ``parts`` (a sequence of Arrays, or a
    ChunkedArray's chunks): its offset, its length, where it starts when the arrays are
    laid one after another, the address of each of its first ``(out.shape[1] - 3) // 2``
    own buffers, then their sizes (0 for a buffer absent or beyond its count). With
    ``dictionaries``, of the arrays' dictionaries.

    Returns the index of the first array whose type differs from the first one's
    (``len(parts)`` when they all agree), and the sum of their lengths.
    """
    cdef vector[shared_ptr[CArrayData]] datas
    cdef CChunkedArray* chunked
    cdef int chunk
    if isinstance(parts, ChunkedArray):
        chunked = (<ChunkedArray>parts).chunked_array
        datas.reserve(chunked.num_chunks())
        for chunk in range(chunked.num_chunks()):
            datas.push_back(chunked.chunk(chunk).get().data())
    else:
        datas.reserve(len(parts))
        for part in parts:
            if not isinstance(part, Array):
                raise TypeError(f"expected pyarrow Arrays, got '{type(part).__name__}'")
            datas.push_back((<Array>part).ap.data())
    if <Py_ssize_t>datas.size() != out.shape[0]:
        raise ValueError(f"{datas.size()} arrays for {out.shape[0]} rows")
    return _fill_layouts(datas, out, dictionaries)


cdef tuple _fill_layouts(const vector[shared_ptr[CArrayData]]& datas,
                         int64_t[:, ::1] out, bint dictionaries):
    cdef Py_ssize_t count = (out.shape[1] - 3) // 2
    cdef int64_t position = 0
    cdef Py_ssize_t row
    cdef Py_ssize_t differing = -1
    cdef Py_ssize_t i
    cdef CArrayData* data
    cdef CDataType* first_type = NULL
    cdef CBuffer* buffer
    for row in range(<Py_ssize_t>datas.size()):
        data = datas[row].get()
        if dictionaries:
            data = data.dictionary.get()
            if data == NULL:
                raise TypeError("expected dictionary arrays, got "
                                + datas[row].get().type.get().ToString().decode())
        if first_type == NULL:
            first_type = data.type.get()
        elif differing < 0 and not first_type.Equals(deref(data.type.get()), False):
            differing = row
        out[row, 0] = data.offset
        out[row, 1] = data.length
        out[row, 2] = position
        position += data.length
        for i in range(count):
            buffer = data.buffers[i].get() if i < <Py_ssize_t>data.buffers.size() else NULL
            out[row, 3 + i] = 0 if buffer == NULL else <int64_t>buffer.address()
            out[row, 3 + count + i] = 0 if buffer == NULL else buffer.size()
    return (<Py_ssize_t>datas.size() if differing < 0 else differing), position
