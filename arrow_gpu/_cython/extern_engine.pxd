# The native core's engine layer (_native/engine/) as Cython sees it: the copy engine's
# options and copies, and its planner, staging ring and pipeline (for their tests). Included
# by _cuda.pxd.

from libc.stdint cimport int64_t, uint8_t, uintptr_t
from libcpp cimport bool as c_bool
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CStatus


cdef extern from "engine/transfer.h" namespace "arrow_gpu" nogil:
    const int64_t kAlignment  # of staging slots and of the planner's chunks
    enum CHostMemory "arrow_gpu::HostMemory":
        HOST_MEMORY_UNKNOWN "arrow_gpu::HostMemory::kUnknown"

    enum CDirection "arrow_gpu::Direction":
        TO_DEVICE "arrow_gpu::Direction::kToDevice"
        TO_HOST "arrow_gpu::Direction::kToHost"

    cdef cppclass CPiece "arrow_gpu::Piece":
        uint8_t* host
        uintptr_t device
        int64_t size
        uintptr_t region_begin
        uintptr_t region_end

    cdef cppclass CAlongside "arrow_gpu::Alongside":
        pass


cdef extern from "engine/transfer_options.h" namespace "arrow_gpu" nogil:
    cdef cppclass CTransferOptions "arrow_gpu::TransferOptions":
        int64_t staging_bytes
        int64_t chunk_bytes
        int threads
        int64_t small_copy_bytes

    CTransferOptions GetTransferOptions()
    CTransferOptions EffectiveTransferOptions()
    CStatus SetTransferOptions(const CTransferOptions& options)
    int SetThreadCopyThreads(int threads)


cdef extern from "engine/staging_ring.h" namespace "arrow_gpu" nogil:
    void ReleaseStaging()
    int64_t StagingBytesHeld()

    cdef cppclass CRing "arrow_gpu::engine::Ring":
        int64_t slot_bytes
        int slots

    cdef cppclass CLease "arrow_gpu::engine::Lease":
        CRing* ring

    CLease AcquireLease "arrow_gpu::engine::Lease::Acquire"(const CCudaContext& context,
                                                            const CTransferOptions& options)


cdef extern from "engine/planner.h" namespace "arrow_gpu::engine" nogil:
    const int64_t kMaxTaskBytes  # an upload's largest task
    cdef cppclass CPart "arrow_gpu::engine::Part":
        uint8_t* host
        uintptr_t device
        int64_t size
        int64_t slot_offset
        c_bool joins

    cdef cppclass CChunk "arrow_gpu::engine::Chunk":
        size_t begin
        size_t end
        int64_t bytes
        int64_t task_bytes

    cdef cppclass CTask "arrow_gpu::engine::Task":
        size_t chunk
        size_t begin
        size_t end

    cdef cppclass CChunkSizes "arrow_gpu::engine::ChunkSizes":
        int64_t smallest
        int64_t largest
        int64_t total
        int64_t largest_task
        int64_t host_page
        bint grow
        bint shrink

    void PlanTransfer "arrow_gpu::engine::Plan"(const vector[CPiece]& pieces,
                                                const CChunkSizes& sizes, vector[CPart]* parts,
                                                vector[CChunk]* chunks)
    vector[CTask] PlanTasks "arrow_gpu::engine::Tasks"(const vector[CPart]& parts,
                                                       const vector[CChunk]& chunks)


cdef extern from "engine/pipeline.h" namespace "arrow_gpu::engine" nogil:
    CStatus RunPipeline(const CCudaContext& context, CDirection direction,
                        const vector[CPiece]& pieces, int64_t total, CLease& lease,
                        const CTransferOptions& options, const CAlongside& alongside,
                        CUstream after)


cdef extern from "engine/copy_engine.h" namespace "arrow_gpu" nogil:
    CStatus EngineHostToDevice(const CCudaContext& context, uintptr_t dst, const void* src,
                               int64_t nbytes, CHostMemory kind, CUstream stream)
    CStatus EngineDeviceToHost(const CCudaContext& context, void* dst, uintptr_t src,
                               int64_t nbytes, CHostMemory kind, CUstream stream)
    void AdviseHugePages(void* data, int64_t nbytes)
