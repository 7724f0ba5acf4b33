# What the declarations of the native core need of libarrow, Arrow's C ABIs and the C++
# standard library that pyarrow's .pxd files do not declare. Included by _cuda.pxd, first.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t
from libcpp cimport bool as c_bool
from libcpp.memory cimport shared_ptr

from pyarrow.includes.common cimport CStatus
from pyarrow.includes.libarrow cimport (CIpcWriteOptions, CMemoryManager, CMemoryPool,
                                        COutputStream, CRecordBatch)


cdef extern from "arrow/ipc/api.h" namespace "arrow::ipc" nogil:
    # The overload that writes into a stream; pyarrow declares only the allocating one.
    CStatus SerializeRecordBatchTo "arrow::ipc::SerializeRecordBatch"(
        const CRecordBatch& batch, const CIpcWriteOptions& options, COutputStream* out)


cdef extern from "arrow/device.h" nogil:
    shared_ptr[CMemoryManager] CPUMemoryManagerOf "arrow::CPUDevice::memory_manager"(
        CMemoryPool* pool)


cdef extern from "<atomic>" namespace "std" nogil:
    cdef cppclass atomic_bool:
        void store(c_bool value)
        c_bool load()


cdef extern from "arrow/c/abi.h":
    cdef struct ArrowDeviceArrayStream:
        int32_t device_type
        void (*release)(ArrowDeviceArrayStream*) noexcept nogil


cdef extern from "arrow/c/dlpack_abi.h":
    ctypedef enum DLDeviceType:
        kDLCUDA
    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id
    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept
