# Where the buffers of many arrays are, read in one walk over their ArrayData (for
# arrow_gpu/_layouts.py). Included into _cuda.pyx.
#
# Planning a concatenation asks each chunk for its offset, length and buffer addresses:
# through pyarrow's Python objects that is a dozen calls per chunk, here a loop in C.

from pyarrow.includes.libarrow cimport CDataType


def _fill_array_layouts(parts, int64_t[:, ::1] out, bint dictionaries):
    """Fill ``out``, one row per array of ``parts``: its offset, its length, the address of
    each of its first ``(out.shape[1] - 2) // 2`` own buffers, then their sizes (0 for a
    buffer absent or beyond its count). With ``dictionaries``, of the arrays' dictionaries.

    Returns the index of the first array whose type differs from the first one's
    (``len(parts)`` when they all agree).
    """
    cdef Py_ssize_t count = (out.shape[1] - 2) // 2
    cdef Py_ssize_t row = 0
    cdef Py_ssize_t differing = -1
    cdef Py_ssize_t i
    cdef CArrayData* data
    cdef CDataType* first_type = NULL
    cdef CBuffer* buffer
    if len(parts) != out.shape[0]:
        raise ValueError(f"{len(parts)} arrays for {out.shape[0]} rows")
    for part in parts:
        if not isinstance(part, Array):
            raise TypeError(f"expected pyarrow Arrays, got '{type(part).__name__}'")
        data = (<Array>part).ap.data().get()
        if dictionaries:
            data = data.dictionary.get()
            if data == NULL:
                raise TypeError(f"expected dictionary arrays, got {part.type}")
        if first_type == NULL:
            first_type = data.type.get()
        elif differing < 0 and not first_type.Equals(deref(data.type.get()), False):
            differing = row
        out[row, 0] = data.offset
        out[row, 1] = data.length
        for i in range(count):
            buffer = data.buffers[i].get() if i < <Py_ssize_t>data.buffers.size() else NULL
            out[row, 2 + i] = 0 if buffer == NULL else <int64_t>buffer.address()
            out[row, 2 + count + i] = 0 if buffer == NULL else buffer.size()
        row += 1
    return row if differing < 0 else differing
