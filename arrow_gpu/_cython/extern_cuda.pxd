# The native core's cuda layer (_native/cuda/) as Cython sees it: contexts, streams, events,
# allocators, pinned memory, the devices' facts and kernel launches. Included by _cuda.pxd.

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp cimport bool as c_bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string as c_string
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus
from pyarrow.includes.libarrow cimport CMemoryPool


cdef extern from "cuda/device_allocator.h" namespace "arrow_gpu" nogil:
    cdef cppclass CDeviceAllocator "arrow_gpu::DeviceAllocator":
        const char* name()


cdef extern from "cuda/driver_allocators.h" namespace "arrow_gpu" nogil:
    shared_ptr[CDeviceAllocator] DriverAllocator()
    CResult[shared_ptr[CDeviceAllocator]] PoolAllocator()


cdef extern from "cuda/allocator.h" namespace "arrow_gpu" nogil:
    shared_ptr[CDeviceAllocator] CurrentAllocator()
    void SetCurrentAllocator(shared_ptr[CDeviceAllocator] allocator)


cdef extern from "cuda/context.h" namespace "arrow_gpu" nogil:
    cdef struct CMemoryStats "arrow_gpu::MemoryStats":
        int64_t bytes_allocated
        int64_t peak_bytes_allocated
        int64_t live_allocations
        int64_t total_allocations
        int64_t total_bytes_allocated

    cdef cppclass CCudaContext "arrow_gpu::CudaContext":
        @staticmethod
        CResult[shared_ptr[CCudaContext]] Foreign(int device_number, uintptr_t handle)
        @staticmethod
        CResult[int] DeviceCount()
        int device_number()
        int64_t bytes_allocated()
        CMemoryStats stats()
        CStatus CopyDeviceToDevice(uintptr_t dst, uintptr_t src, int64_t nbytes,
                                   const CCudaContext& source, CUstream stream)
        CStatus CopyHostToDeviceAsync(uintptr_t dst, const void* src, int64_t nbytes,
                                      CUstream stream)
        CStatus Synchronize()
        CStatus MemoryInfo(int64_t* free, int64_t* total)
        CResult[CUstream] CreateStream(unsigned flags)
        void DestroyStream(CUstream stream)
        CStatus SynchronizeStream(CUstream stream)
        CResult[CUevent] CreateEvent()
        void DestroyEvent(CUevent event)
        CStatus RecordEvent(CUevent event, CUstream stream)
        CStatus WaitEvent(CUstream stream, CUevent event)
        CStatus SynchronizeEvent(CUevent event)
        CResult[c_bool] EventDone(CUevent event)
        CResult[uintptr_t] DeviceAddress(uintptr_t address)
        CResult[int] DeviceOrdinal(uintptr_t address)
        CStatus AllocationRange(uintptr_t address, uintptr_t* base, int64_t* size)


cdef extern from "cuda/caching_allocator.h" namespace "arrow_gpu" nogil:
    cdef struct CCacheStats "arrow_gpu::CacheStats":
        int64_t reserved_bytes
        int64_t cached_bytes
        int64_t cache_hits
        int64_t driver_allocations
        int64_t driver_frees
    shared_ptr[CDeviceAllocator] CachingAllocator()
    CCacheStats CachingStats(const CCudaContext& context)
    int64_t TrimCache(const CCudaContext& context)


cdef extern from "cuda/pinned_pool.h" namespace "arrow_gpu" nogil:
    cdef struct CPinnedPoolStats "arrow_gpu::PinnedPoolStats":
        int64_t reserved_bytes
        int64_t cached_bytes
        int64_t driver_allocations
        int64_t driver_frees
        int64_t pageable_allocations
        int64_t cache_limit

    int64_t kNoPinnedCacheLimit
    CResult[CMemoryPool*] PinnedPool(int device_number)
    c_bool IsPinnedPool(CMemoryPool* pool)
    CPinnedPoolStats PinnedPoolStatsOf(CMemoryPool* pool)
    int64_t ReleasePinnedPool(CMemoryPool* pool)
    int64_t SetPinnedPoolCacheLimit(CMemoryPool* pool, int64_t limit)


cdef extern from "cuda/diagnostics.h" namespace "arrow_gpu" nogil:
    cdef cppclass CDeviceDescription "arrow_gpu::DeviceDescription":
        c_string name
        int64_t total_memory
        vector[int] peers

    CResult[int] DriverCudaVersion()
    CResult[CDeviceDescription] DescribeDevice(int ordinal)


cdef extern from "cuda/bit_pack.h" namespace "arrow_gpu" nogil:
    CStatus PackBits(const CCudaContext& context, uintptr_t bitmap, uintptr_t flags,
                     int64_t count, c_bool invert, CUstream stream)


cdef extern from "cuda/kernels.h" namespace "arrow_gpu" nogil:
    ctypedef void* CUmodule
    ctypedef void* CUfunction
    c_bool KernelsSupported(const CCudaContext& context)
    CResult[int] ComputeCapability(const CCudaContext& context)
    CResult[int] MultiprocessorCount(const CCudaContext& context)
    CResult[CUmodule] LoadModule(const CCudaContext& context, const c_string& ptx)
    CResult[CUfunction] ModuleFunction(const CCudaContext& context, CUmodule module,
                                       const c_string& name)
    CStatus Launch(const CCudaContext& context, CUfunction function, int64_t blocks,
                   int threads, const vector[uint64_t]& args, CUstream stream)
