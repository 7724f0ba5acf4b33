# The kernels' tables of ranges, written in one native walk (for arrow_gpu/_compute/copy_plan.py).
# Included into _cuda.pyx.
#
# A plan's ranges come a column of chunks at a time; written from Python, each field of
# each such piece is a NumPy call, and those calls were most of a launch's host time. The
# columns are read through the buffer protocol itself: a typed memoryview of each would
# cost about as much as the NumPy call.

from cpython.buffer cimport (PyBUF_FORMAT, PyBUF_STRIDES, PyBuffer_Release, PyObject_CheckBuffer,
                             PyObject_GetBuffer)


def _write_ranges(int64_t[:, ::1] rows, tuple fields, list pieces, resolved):
    """Write ``pieces`` of ranges into ``rows``, one range per row from the first: each
    piece is ``(count, columns)``, a column per field of ``fields`` (the table's column it
    fills), either a 1-d buffer of int64 values, one per range, or one value for them all:
    an int, or what ``resolved`` makes an int of. Returns the rows written."""
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t count, field, i
    cdef int64_t value
    cdef Py_buffer view
    cdef const char* values
    for count, columns in pieces:
        if at + count > rows.shape[0]:
            raise ValueError(f"{at + count} ranges for {rows.shape[0]} rows")
        for field, column in zip(fields, columns):
            if not 0 <= field < rows.shape[1]:
                raise ValueError(f"field {field} of rows of {rows.shape[1]}")
            if not PyObject_CheckBuffer(column):
                value = column if isinstance(column, int) else resolved(column)
                for i in range(count):
                    rows[at + i, field] = value
                continue
            PyObject_GetBuffer(column, &view, PyBUF_STRIDES | PyBUF_FORMAT)
            try:
                if (view.ndim != 1 or view.itemsize != 8 or view.shape[0] != count
                        or view.format[0] not in b"lq" or view.format[1] != 0):
                    raise ValueError(f"expected {count} int64 values")
                values = <const char*>view.buf
                for i in range(count):
                    rows[at + i, field] = (<const int64_t*>(values + i * view.strides[0]))[0]
            finally:
                PyBuffer_Release(&view)
        at += count
    return at


def _lay_blocks(str kind, int64_t[:, ::1] rows):
    """Fill the first block of each row of a table of ``kind``: "copy" (rows of 4 words),
    "bits" or "rebase" (8), as the native plans lay theirs out; returns the blocks of all."""
    cdef int64_t count = rows.shape[0]
    cdef Py_ssize_t width = {"copy": 4, "bits": 8, "rebase": 8}[kind]
    if rows.shape[1] != width:
        raise ValueError(f"a {kind} table has rows of {width} words, not {rows.shape[1]}")
    if count == 0:
        return 0
    cdef int64_t* first = &rows[0, 0]
    if kind == "copy":
        return LayCopyBlocks(<CCopyRow*>first, count)
    if kind == "bits":
        return LayBitBlocks(<CBitRow*>first, count)
    return LayRebaseBlocks(<CRebaseRow*>first, count)


def _range_block_sizes():
    """The work of one block of the batched copies: the bytes of a copy, the 64-bit words of
    a bitmap piece, the items of a rebase."""
    return kCopyBlockBytes, kBitBlockWords, kRebaseBlockItems
