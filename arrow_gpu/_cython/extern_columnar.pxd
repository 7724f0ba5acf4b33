# The native core's columnar layer (_native/columnar/) as Cython sees it: Arrow's Device
# and MemoryManager for CUDA, whole-object transfers, device files, IPC, hand-off and the C
# Device Data Interface. Included by _cuda.pxd.

from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t
from libcpp cimport bool as c_bool
from libcpp.memory cimport shared_ptr
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus
from pyarrow.includes.libarrow cimport (ArrowDeviceArray, ArrowSchema, CArray, CArrayData,
                                        CBuffer, CDatum, CMemoryManager, CMemoryPool,
                                        COutputStream, CRandomAccessFile, CRecordBatch,
                                        CRecordBatchReader, CSchema, CTable)


cdef extern from "columnar/bridge.h" namespace "arrow_gpu" nogil:
    CResult[shared_ptr[CBuffer]] AllocateShared(CMemoryManager* manager, int64_t nbytes)
    shared_ptr[CMemoryManager] AsMemoryManager[T](const shared_ptr[T]& manager)
    shared_ptr[CBuffer] AsBuffer[T](const shared_ptr[T]& buffer)
    uintptr_t ContextHandle(const CCudaContext& context)


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


cdef extern from "columnar/host_device.h" namespace "arrow_gpu" nogil:
    cdef cppclass CCudaHostMemoryManager "arrow_gpu::CudaHostMemoryManager"(CMemoryManager):
        @staticmethod
        CResult[shared_ptr[CCudaHostMemoryManager]] Primary(int device_number)


cdef extern from "columnar/device_mappers.h" namespace "arrow_gpu" nogil:
    CResult[c_bool] RegisterDeviceMappers()


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

    cdef struct CFileBlock "arrow_gpu::FileBlock":
        int64_t offset
        int32_t metadata_length
        int64_t body_length

    c_bool ReadFooterBlocks(const uint8_t* footer, int64_t size, vector[CFileBlock]* blocks)


cdef extern from "columnar/transfers.h" namespace "arrow_gpu" nogil:
    cdef struct CMappedFile "arrow_gpu::MappedFile":
        uintptr_t begin
        uintptr_t end
        int fd
        int64_t offset

    CResult[CDatum] ToDevice(const CDatum& data, const shared_ptr[CCudaMemoryManager]& manager,
                             const CMappedFile& mapped, CUstream stream)
    CResult[vector[shared_ptr[CRecordBatch]]] ReadToDevice(
        CRecordBatchReader& reader, const shared_ptr[CCudaMemoryManager]& manager,
        const atomic_bool& stop)
    CResult[CDatum] ToHost(const CDatum& data, CUstream stream, CMemoryPool* pool)
    c_bool OnDevice(const CDatum& data)

    cdef cppclass CBufferPlaces "arrow_gpu::BufferPlaces":
        c_bool host
        shared_ptr[CBuffer] device
        shared_ptr[CBuffer] elsewhere

    CBufferPlaces PlacesOf(const CDatum& data)


cdef extern from "columnar/null_counts.h" namespace "arrow_gpu" nogil:
    CStatus ResolveNullCounts(const shared_ptr[CArrayData]& data)


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
