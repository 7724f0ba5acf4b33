# The native core's python layer (_native/python/) as Cython sees it: Python objects held
# and called from C++. Included by _cuda.pxd, last.

from libcpp.memory cimport shared_ptr


cdef extern from "python/python_glue.h" namespace "arrow_gpu":
    shared_ptr[void] HoldPyObject(object owner)


cdef extern from "python/progress_callback.h" namespace "arrow_gpu":
    void SetProgressCallback(object callback)


cdef extern from "python/callback_allocator.h" namespace "arrow_gpu" nogil:
    shared_ptr[CDeviceAllocator] CallbackAllocator(object allocate, object free) with gil
