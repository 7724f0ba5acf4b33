# distutils: language = c++
# The extension types other Cython modules build on, and the C++ core as Cython sees it.
#
# The core's declarations are in _cython/extern_*.pxd, one file per layer of _native/ (each
# header declared in one place), included here from the ground up: a layer's declarations
# use those of the layers below it.

from libc.stdint cimport int64_t
from libcpp.memory cimport shared_ptr, unique_ptr

from pyarrow.includes.libarrow cimport CBuffer
from pyarrow.includes.libparquet cimport FileReader
from pyarrow.lib cimport Buffer, NativeFile

include "_cython/extern_arrow.pxd"     # libarrow, C ABIs and std not declared by pyarrow
include "_cython/extern_driver.pxd"    # _native/driver/
include "_cython/extern_cuda.pxd"      # _native/cuda/
include "_cython/extern_engine.pxd"    # _native/engine/
include "_cython/extern_columnar.pxd"  # _native/columnar/
include "_cython/extern_compute.pxd"   # _native/compute/
include "_cython/extern_python.pxd"    # _native/python/


# The extension types, one .pxi each (named in the comment), in the order _cuda.pyx includes
# them. Objects bound to a context hold its C++ context as c_context, kept alive by context.


cdef class Context:  # _cython/context.pxi
    cdef object __weakref__  # weak references work, as on pyarrow.cuda's Context
    cdef shared_ptr[CCudaMemoryManager] manager
    cdef CCudaContext* c_context

    cdef _init(self, const shared_ptr[CCudaMemoryManager]& manager)

    @staticmethod
    cdef Context wrap(const shared_ptr[CCudaMemoryManager]& manager)


cdef class CudaBuffer(Buffer):  # _cython/cuda_buffer.pxi
    cdef readonly Context context
    cdef CCudaContext* c_context

    @staticmethod
    cdef CudaBuffer wrap(const shared_ptr[CBuffer]& buffer, Context context)
    cdef CudaBuffer _isolated_copy(self)


cdef class HostBuffer(Buffer):  # _cython/host_buffer.pxi
    @staticmethod
    cdef HostBuffer wrap(const shared_ptr[CBuffer]& buffer)


cdef class IpcMemHandle:  # _cython/ipc.pxi
    cdef object __weakref__
    cdef CUipcMemHandle handle
    cdef readonly int64_t offset
    cdef readonly int64_t size
    cdef object exported  # the exporting buffer, kept alive with the handle

    @staticmethod
    cdef IpcMemHandle _make(CUipcMemHandle handle, int64_t offset, int64_t size, exported)


cdef class Stream:  # _cython/stream.pxi
    cdef readonly Context context
    cdef CCudaContext* c_context
    cdef CUstream handle_
    cdef bint owned
    cdef object source  # a foreign stream object, kept alive while wrapped


cdef class Event:  # _cython/stream.pxi
    cdef readonly Context context
    cdef CCudaContext* c_context
    cdef CUevent handle_
    cdef bint owned


cdef class BufferReader(NativeFile):  # _cython/device_io.pxi
    cdef shared_ptr[CDeviceBufferReader] reader
    cdef readonly CudaBuffer buffer

    cdef _read_bodies(self, CBufferReads reads)


cdef class BufferWriter(NativeFile):  # _cython/device_io.pxi
    cdef shared_ptr[CDeviceBufferWriter] writer
    cdef readonly CudaBuffer buffer


cdef class DeviceStreamReader:  # _cython/c_device.pxi
    cdef shared_ptr[CStreamImporter] importer
    cdef CImportOptions options
    cdef object stream  # the consumer's stream object, kept alive while reading
    cdef bint busy
    cdef readonly object schema


cdef class _DLPackTensor:  # _cython/dlpack.pxi
    cdef DLManagedTensor* managed


cdef class _StopFlag:  # _cython/parquet_chunks.pxi
    cdef atomic_bool flag


cdef class _ColumnChunkReader:  # _cython/parquet_chunks.pxi
    cdef NativeFile source  # kept open while the reader reads it
    cdef unique_ptr[FileReader] reader
    cdef readonly list column_paths
