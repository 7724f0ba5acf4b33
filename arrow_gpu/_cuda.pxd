# distutils: language = c++
# The C++ core as Cython sees it, and the extension types other Cython modules build on.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libcpp cimport bool as c_bool
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string as c_string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus
from pyarrow.includes.libarrow cimport (ArrowDeviceArray, ArrowSchema, CArray, CArrayData,
                                        CBuffer, CChunkedArray, CDatum, CIpcWriteOptions,
                                        CMemoryManager, CMemoryPool, COutputStream,
                                        CRandomAccessFile, CRecordBatch, CRecordBatchReader,
                                        CSchema, CTable)
from pyarrow.includes.libparquet cimport FileReader
from pyarrow.lib cimport Buffer, NativeFile


cdef extern from "driver/driver.h" namespace "arrow_gpu" nogil:
    cdef struct CUipcMemHandle:
        char reserved[64]
    ctypedef void* CUstream
    ctypedef void* CUevent
    CResult[c_bool] UsingSimulator()


cdef extern from "driver/simulator.h" namespace "arrow_gpu" nogil:
    int64_t SimulatorContextSynchronizations()


cdef extern from "cuda/device_allocator.h" namespace "arrow_gpu" nogil:
    cdef cppclass CDeviceAllocator "arrow_gpu::DeviceAllocator":
        const char* name()


cdef extern from "cuda/caching_allocator.h" namespace "arrow_gpu" nogil:
    cdef struct CCacheStats "arrow_gpu::CacheStats":
        int64_t reserved_bytes
        int64_t cached_bytes
        int64_t cache_hits
        int64_t driver_allocations
        int64_t driver_frees
    shared_ptr[CDeviceAllocator] CachingAllocator()


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


cdef extern from "cuda/pinned_pool.h" namespace "arrow_gpu" nogil:
    cdef struct CPinnedPoolStats "arrow_gpu::PinnedPoolStats":
        int64_t reserved_bytes
        int64_t cached_bytes
        int64_t driver_allocations
        int64_t driver_frees
        int64_t pageable_allocations

    CResult[CMemoryPool*] PinnedPool(int device_number)
    CPinnedPoolStats PinnedPoolStatsOf(CMemoryPool* pool)
    int64_t ReleasePinnedPool(CMemoryPool* pool)


cdef extern from "cuda/caching_allocator.h" namespace "arrow_gpu" nogil:
    CCacheStats CachingStats(const CCudaContext& context)
    int64_t TrimCache(const CCudaContext& context)


cdef extern from "engine/transfer_options.h" namespace "arrow_gpu" nogil:
    cdef cppclass CTransferOptions "arrow_gpu::TransferOptions":
        int64_t staging_bytes
        int64_t chunk_bytes
        int threads
        int64_t small_copy_bytes

    CTransferOptions GetTransferOptions()
    CStatus SetTransferOptions(const CTransferOptions& options)
    int SetThreadCopyThreads(int threads)


cdef extern from "engine/staging_ring.h" namespace "arrow_gpu" nogil:
    void ReleaseStaging()
    int64_t StagingBytesHeld()


cdef extern from "engine/copy_engine.h" namespace "arrow_gpu" nogil:
    enum CHostMemory "arrow_gpu::HostMemory":
        HOST_MEMORY_UNKNOWN "arrow_gpu::HostMemory::kUnknown"
    CStatus EngineHostToDevice(const CCudaContext& context, uintptr_t dst, const void* src,
                               int64_t nbytes, CHostMemory kind, CUstream stream)
    CStatus EngineDeviceToHost(const CCudaContext& context, void* dst, uintptr_t src,
                               int64_t nbytes, CHostMemory kind, CUstream stream)


cdef extern from "python/progress_callback.h" namespace "arrow_gpu":
    void SetProgressCallback(object callback)


cdef extern from "python/callback_allocator.h" namespace "arrow_gpu" nogil:
    shared_ptr[CDeviceAllocator] CallbackAllocator(object allocate, object free) with gil


cdef extern from "columnar/device.h" namespace "arrow_gpu" nogil:
    cdef cppclass CDeviceBuffer "arrow_gpu::DeviceBuffer"(CBuffer):
        @staticmethod
        shared_ptr[CBuffer] Slice(const shared_ptr[CBuffer]& parent, int64_t offset,
                                  int64_t length)

    cdef cppclass CCudaMemoryManager "arrow_gpu::CudaMemoryManager"(CMemoryManager):
        @staticmethod
        CResult[shared_ptr[CCudaMemoryManager]] Primary(int device_number)
        @staticmethod
        CResult[shared_ptr[CCudaMemoryManager]] ForContext(shared_ptr[CCudaContext] context)
        const shared_ptr[CCudaContext]& cuda_context()
        shared_ptr[CDeviceBuffer] View(uintptr_t address, int64_t size, shared_ptr[void] owner)
        CResult[CUipcMemHandle] ExportIpc(const shared_ptr[CBuffer]& buffer, int64_t* offset)
        CResult[shared_ptr[CDeviceBuffer]] OpenIpc(const CUipcMemHandle& handle,
                                                    int64_t offset, int64_t size)
        CResult[shared_ptr[CDeviceBuffer]] AllocateIsolatedBuffer(int64_t size)

    shared_ptr[CCudaMemoryManager] CudaManagerOf(const CBuffer& buffer)


cdef extern from "columnar/handoff.h" namespace "arrow_gpu" nogil:
    cdef cppclass CHandoffSegment "arrow_gpu::HandoffSegment":
        int64_t body_offset
        shared_ptr[CBuffer] source
        c_bool exportable
        CUipcMemHandle handle
        int64_t allocation_offset
        int64_t allocation_size

    cdef cppclass CHandoffMessage "arrow_gpu::HandoffMessage":
        shared_ptr[CBuffer] metadata
        int64_t body_length
        vector[CHandoffSegment] segments

    CResult[vector[CHandoffMessage]] DescribeHandoff(
        const shared_ptr[CSchema]& schema, const vector[shared_ptr[CRecordBatch]]& batches)
    CResult[vector[shared_ptr[CRecordBatch]]] ReadHandoff(
        const vector[CHandoffMessage]& messages,
        const shared_ptr[CCudaMemoryManager]& manager, c_bool copy,
        shared_ptr[CSchema]* schema)


cdef extern from "columnar/host_device.h" namespace "arrow_gpu" nogil:
    cdef cppclass CCudaHostMemoryManager "arrow_gpu::CudaHostMemoryManager"(CMemoryManager):
        @staticmethod
        CResult[shared_ptr[CCudaHostMemoryManager]] Primary(int device_number)


cdef extern from "columnar/device_mappers.h" namespace "arrow_gpu" nogil:
    CResult[c_bool] RegisterDeviceMappers()


cdef extern from "python/python_glue.h" namespace "arrow_gpu":
    shared_ptr[void] HoldPyObject(object owner)


cdef extern from "columnar/bridge.h" namespace "arrow_gpu" nogil:
    CResult[shared_ptr[CBuffer]] AllocateShared(CMemoryManager* manager, int64_t nbytes)
    shared_ptr[CMemoryManager] AsMemoryManager[T](const shared_ptr[T]& manager)
    shared_ptr[CBuffer] AsBuffer[T](const shared_ptr[T]& buffer)
    uintptr_t ContextHandle(const CCudaContext& context)


cdef extern from "arrow/ipc/api.h" namespace "arrow::ipc" nogil:
    # The overload that writes into a stream; pyarrow declares only the allocating one.
    CStatus SerializeRecordBatchTo "arrow::ipc::SerializeRecordBatch"(
        const CRecordBatch& batch, const CIpcWriteOptions& options, COutputStream* out)


cdef extern from "columnar/device_io.h" namespace "arrow_gpu" nogil:
    enum CBufferReads "arrow_gpu::BufferReads":
        IPC_REFUSING_HOST_DECODING "arrow_gpu::BufferReads::kIpcRefusingHostDecoding"
        IPC_DECODING_ON_HOST "arrow_gpu::BufferReads::kIpcDecodingOnHost"

    cdef cppclass CDeviceBufferReader "arrow_gpu::DeviceBufferReader":
        @staticmethod
        CResult[shared_ptr[CDeviceBufferReader]] Make(shared_ptr[CBuffer] buffer,
                                                      CBufferReads reads)
        CResult[shared_ptr[CBuffer]] ReadSlice(int64_t nbytes)


    cdef cppclass CDeviceBufferWriter "arrow_gpu::DeviceBufferWriter":
        @staticmethod
        CResult[shared_ptr[CDeviceBufferWriter]] Make(shared_ptr[CBuffer] buffer)
        CStatus Seek(int64_t position)
        CStatus WriteAt(int64_t position, const void* data, int64_t nbytes)
        CStatus SetBufferSize(int64_t buffer_size)
        int64_t buffer_size()
        int64_t num_bytes_buffered()

    shared_ptr[COutputStream] AsOutputStream(const shared_ptr[CDeviceBufferWriter]& writer)
    shared_ptr[CRandomAccessFile] AsRandomAccessFile(const shared_ptr[CDeviceBufferReader]& reader)


cdef extern from "columnar/ipc_metadata.h" namespace "arrow_gpu" nogil:
    cdef cppclass CRecordBatchLayout "arrow_gpu::RecordBatchLayout":
        vector[pair[int64_t, int64_t]] nodes
        vector[pair[int64_t, int64_t]] buffers
        c_bool compressed
        c_bool delta

    CRecordBatchLayout ReadRecordBatchLayout(const uint8_t* metadata, int64_t size)


cdef extern from "<atomic>" namespace "std" nogil:
    cdef cppclass atomic_bool:
        void store(c_bool value)
        c_bool load()


cdef extern from "columnar/transfers.h" namespace "arrow_gpu" nogil:
    cdef struct CMappedFile "arrow_gpu::MappedFile":
        uintptr_t begin
        uintptr_t end
        int fd
        int64_t offset

    CResult[CDatum] ToDevice(const CDatum& data, const shared_ptr[CCudaMemoryManager]& manager,
                             const CMappedFile& mapped)
    CResult[vector[shared_ptr[CRecordBatch]]] ReadToDevice(
        CRecordBatchReader& reader, const shared_ptr[CCudaMemoryManager]& manager,
        const atomic_bool& stop)
    CResult[CDatum] ToHost(const CDatum& data, CUstream stream, CMemoryPool* pool)
    c_bool OnDevice(const CDatum& data)
    c_bool HasHostBuffer(const CDatum& data)


cdef extern from "arrow/device.h" nogil:
    shared_ptr[CMemoryManager] CPUMemoryManagerOf "arrow::CPUDevice::memory_manager"(
        CMemoryPool* pool)


cdef extern from "cuda/diagnostics.h" namespace "arrow_gpu" nogil:
    cdef cppclass CDeviceDescription "arrow_gpu::DeviceDescription":
        c_string name
        int64_t total_memory
        vector[int] peers

    CResult[int] DriverCudaVersion()
    CResult[CDeviceDescription] DescribeDevice(int ordinal)


cdef extern from "columnar/null_counts.h" namespace "arrow_gpu" nogil:
    CStatus ResolveNullCounts(const shared_ptr[CArrayData]& data)


cdef extern from "cuda/bit_pack.h" namespace "arrow_gpu" nogil:
    CStatus PackBits(const CCudaContext& context, uintptr_t bitmap, uintptr_t flags,
                     int64_t count, c_bool invert, CUstream stream)


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


cdef extern from "columnar/c_device.h" namespace "arrow_gpu" nogil:
    cdef cppclass CImportOptions "arrow_gpu::ImportOptions":
        CUstream stream
        c_bool has_stream
        c_bool check_device
        int32_t device_type
        int64_t device_id

    cdef cppclass CStreamImporter "arrow_gpu::StreamImporter":
        @staticmethod
        CResult[shared_ptr[CStreamImporter]] Open(ArrowDeviceArrayStream* stream)
        const shared_ptr[CSchema]& schema()
        CResult[shared_ptr[CRecordBatch]] Next(const CImportOptions& options)

    CStatus CExportArray "arrow_gpu::ExportArray"(
        const shared_ptr[CArray]& array, CUstream stream, ArrowDeviceArray* out,
        ArrowSchema* out_schema)
    CStatus CExportBatch "arrow_gpu::ExportBatch"(
        const shared_ptr[CRecordBatch]& batch, CUstream stream, ArrowDeviceArray* out,
        ArrowSchema* out_schema)
    CStatus CExportStream "arrow_gpu::ExportStream"(
        shared_ptr[CRecordBatchReader] reader, shared_ptr[CSchema] schema, CUstream stream,
        ArrowDeviceArrayStream* out)
    CStatus CExportTableStream "arrow_gpu::ExportTableStream"(
        shared_ptr[CTable] table, shared_ptr[CSchema] schema, CUstream stream,
        ArrowDeviceArrayStream* out)
    CStatus ApplyRequestedSchema(ArrowSchema* exported, ArrowSchema* requested)
    CResult[shared_ptr[CArray]] CImportArray "arrow_gpu::ImportArray"(
        ArrowSchema* schema, ArrowDeviceArray* array, const CImportOptions& options)
    CResult[shared_ptr[CRecordBatch]] CImportBatch "arrow_gpu::ImportBatch"(
        ArrowSchema* schema, ArrowDeviceArray* array, const CImportOptions& options)
    int64_t LiveExports()


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


cdef extern from "driver/nvrtc.h" namespace "arrow_gpu" nogil:
    CResult[int] NvrtcVersion(const vector[c_string]& directories)
    CResult[c_string] CompileToPtx(const vector[c_string]& directories, const c_string& source,
                                   const c_string& name, int arch,
                                   const vector[c_string]& options)


cdef extern from "driver/kernel_twins.h" namespace "arrow_gpu" nogil:
    CStatus RunKernelTwin(const c_string& name, int64_t blocks, int threads,
                          const vector[uint64_t]& args)


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
