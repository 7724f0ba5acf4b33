# Rows of device arrays selected by a mask or indices, planned and launched natively
# (_native/compute/select.h; for arrow_gpu/_compute/select.py). Included in _cuda.pyx.

from pyarrow.includes.libarrow cimport MakeArray
from pyarrow.lib cimport pyarrow_unwrap_array, pyarrow_wrap_array


cdef class _SelectKernels:
    """The loaded kernels a native selection launches, resolved once per module."""
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
    kernels.c_kernels.mask_counts = <CUfunction><uintptr_t>functions["ag_mask_counts"]
    kernels.c_kernels.scan_reduce = <CUfunction><uintptr_t>functions["ag_scan_reduce"]
    kernels.c_kernels.scan_apply = <CUfunction><uintptr_t>functions["ag_scan_apply"]
    kernels.c_kernels.compact = <CUfunction><uintptr_t>functions["ag_compact"]
    kernels.c_kernels.compact_bits = <CUfunction><uintptr_t>functions["ag_compact_bits"]
    kernels.c_kernels.range_sizes = <CUfunction><uintptr_t>functions["ag_range_sizes"]
    kernels.c_kernels.gather_ranges = <CUfunction><uintptr_t>functions["ag_gather_ranges"]
    kernels.c_kernels.max_blocks = max_blocks
    return kernels


cdef shared_ptr[CArrayData] _array_data(array) except *:
    cdef shared_ptr[CArray] c_array = pyarrow_unwrap_array(array)
    if c_array.get() == NULL:
        raise TypeError(f"expected a pyarrow Array, got {type(array).__name__}")
    return c_array.get().data()


def _select_natively(_SelectKernels kernels, columns, selector, bint by_mask, bint emit_null,
                     int64_t bound, stream):
    """``columns`` (pyarrow Arrays) at the rows ``selector`` picks: a boolean mask
    (``by_mask``; its nulls dropped or, with ``emit_null``, null rows) or integer indices,
    each below ``bound``. Returns (the arrays, their rows), complete; or None, before any
    launch, where a column's type is not one the native plan gathers."""
    cdef vector[shared_ptr[CArrayData]] c_columns
    for column in columns:
        c_columns.push_back(_array_data(column))
        if not SelectSupports(deref(c_columns.back().get().type)):
            return None
    cdef CRowSelector c_selector
    c_selector.kind = ROWS_BY_MASK if by_mask else ROWS_BY_INDICES
    c_selector.data = _array_data(selector)
    c_selector.emit_null = emit_null
    c_selector.bound = bound
    cdef CUstream raw = _raw_stream(stream)
    cdef CResult[CSelected] selected
    cdef CSelected c_selected
    cdef size_t i
    with nogil:
        selected = SelectRows(kernels.context.manager, kernels.c_kernels, raw, c_columns,
                              c_selector)
    try:
        c_selected = GetResultValue(selected)
    except pa.ArrowCapacityError as error:  # as pyarrow's own offsets overflow reads
        raise OverflowError(str(error)) from None
    arrays = []
    for i in range(c_selected.columns.size()):
        arrays.append(pyarrow_wrap_array(MakeArray(c_selected.columns[i])))
    return arrays, c_selected.rows
