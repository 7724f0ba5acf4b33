# Null counts made exact without reading device memory on the host (arrow_gpu/_interop/array_import.py).
# Included in _cuda.pyx.

from pyarrow.lib cimport pyarrow_unwrap_array


cdef shared_ptr[CArray] _unwrapped(array) except *:
    cdef shared_ptr[CArray] c_array = pyarrow_unwrap_array(array)
    if c_array.get() == NULL:
        raise TypeError(f"expected a pyarrow Array, got {type(array).__name__}")
    return c_array


def _stored_null_count(array):
    """The null count ``array`` (a pyarrow Array) holds, or -1 where it is not known yet.
    Reading it costs nothing; pyarrow's ``null_count`` would count an unknown one on the
    host, which faults on a device bitmap."""
    return _unwrapped(array).get().data().get().null_count


def _resolve_null_counts(array):
    """``array`` (a pyarrow Array, its data ready) with every unknown null count in it made
    exact, through the driver: pyarrow counts an unknown one on the host, and a device bitmap
    read there faults."""
    cdef shared_ptr[CArrayData] data = _unwrapped(array).get().data()
    with nogil:
        check_status(ResolveNullCounts(data))
    return array
