# The native core's compute layer (_native/compute/) as Cython sees it: device compute
# planned and launched natively. Included by _cuda.pxd.

from libc.stdint cimport int64_t, uint64_t
from libcpp cimport bool as c_bool
from libcpp.memory cimport shared_ptr
from libcpp.vector cimport vector

from pyarrow.includes.common cimport CResult, CStatus
from pyarrow.includes.libarrow cimport CArrayData, CDataType


cdef extern from "compute/select.h" namespace "arrow_gpu" nogil:
    cdef cppclass CSelectKernels "arrow_gpu::SelectKernels":
        CUfunction fill_bytes
        CUfunction indices
        CUfunction gather
        CUfunction gather_bits
        CUfunction mask_ranks
        CUfunction scan
        CUfunction compact
        CUfunction compact_bits
        CUfunction compact_ranges
        CUfunction range_sizes
        CUfunction gather_ranges
        CUfunction copy_ranges
        CUfunction copy_bit_ranges
        CUfunction rebase_ranges
        CUfunction popcount
        int64_t max_blocks
        int64_t range_blocks

    enum CRowSelectorKind "arrow_gpu::RowSelector::Kind":
        ROWS_BY_INDICES "arrow_gpu::RowSelector::Kind::kIndices"
        ROWS_BY_MASK "arrow_gpu::RowSelector::Kind::kMask"

    cdef cppclass CRowSelector "arrow_gpu::RowSelector":
        CRowSelectorKind kind
        shared_ptr[CArrayData] data
        c_bool emit_null
        int64_t bound

    cdef cppclass CSelected "arrow_gpu::Selected":
        int64_t rows
        vector[shared_ptr[CArrayData]] columns

    CStatus SizeRangeGrid(const CCudaContext& context, CSelectKernels* kernels)
    c_bool SelectSupports(const CDataType& type)
    CResult[CSelected] SelectRows(const shared_ptr[CCudaMemoryManager]& manager,
                                  const CSelectKernels& kernels, CUstream stream,
                                  const vector[shared_ptr[CArrayData]]& columns,
                                  const CRowSelector& selector)

    cdef cppclass CGatherRows "arrow_gpu::GatherRows":
        int64_t length
        c_bool may_have_nulls
        c_bool by_mask
        uint64_t mask_values
        uint64_t mask_valid
        int64_t mask_offset
        int64_t mask_length
        int64_t mode
        uint64_t ranks
        uint64_t positions

    cdef cppclass CPendingGather "arrow_gpu::PendingGather":
        pass

    cdef cppclass CGathers "arrow_gpu::Gathers":
        CGathers(shared_ptr[CCudaMemoryManager] manager, const CSelectKernels& kernels,
                 CUstream stream)
        CResult[CPendingGather] Queue(const CArrayData& column, CGatherRows* rows,
                                      uint64_t valid_count, uint64_t bytes_count)
        CResult[shared_ptr[CArrayData]] Complete(CPendingGather pending, int64_t rows,
                                                 int64_t valid_bits, int64_t bytes)
        CResult[CGatherRows] Rows(const CRowSelector& selector)
        CResult[uint64_t] Positions(CGatherRows* rows)
        CResult[int64_t] Scan(uint64_t src, int src_width, int64_t n, uint64_t out,
                              int out_width)
        CResult[int64_t] CountSetBits(uint64_t bits, int64_t offset, int64_t n)


cdef extern from "compute/concat.h" namespace "arrow_gpu" nogil:
    CResult[vector[shared_ptr[CArrayData]]] ConcatColumns(
        const shared_ptr[CCudaMemoryManager]& manager, const CSelectKernels& kernels,
        CUstream stream, const vector[vector[shared_ptr[CArrayData]]]& columns,
        c_bool copy_one)
    CResult[vector[uint8_t]] ReadRanges(
        const shared_ptr[CCudaMemoryManager]& manager, const CSelectKernels& kernels,
        CUstream stream, const vector[uint64_t]& src, const vector[int64_t]& nbytes)


cdef extern from "compute/range_tables.h" namespace "arrow_gpu" nogil:
    cdef struct CCopyRow "arrow_gpu::CopyRow":
        pass
    cdef struct CBitRow "arrow_gpu::BitRow":
        pass
    cdef struct CRebaseRow "arrow_gpu::RebaseRow":
        pass
    int64_t kCopyBlockBytes
    int64_t kBitBlockWords
    int64_t kRebaseBlockItems
    int64_t LayCopyBlocks(CCopyRow* rows, int64_t count)
    int64_t LayBitBlocks(CBitRow* rows, int64_t count)
    int64_t LayRebaseBlocks(CRebaseRow* rows, int64_t count)
