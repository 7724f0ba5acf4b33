# Null counts made exact without reading device memory on the host (arrow_gpu/_interop/array_import.py).
# Included in _cuda.pyx.

from pyarrow.lib cimport pyarrow_unwrap_array


def _resolve_null_counts(array):
    """``array`` (a pyarrow Array, its data ready) with every unknown null count in it made
    exact, through the driver: pyarrow counts an unknown one on the host, and a device bitmap
    read there faults."""
    cdef shared_ptr[CArray] c_array = pyarrow_unwrap_array(array)
    if c_array.get() == NULL:
        raise TypeError(f"expected a pyarrow Array, got {type(array).__name__}")
    cdef shared_ptr[CArrayData] data = c_array.get().data()
    with nogil:
        check_status(ResolveNullCounts(data))
    return array
