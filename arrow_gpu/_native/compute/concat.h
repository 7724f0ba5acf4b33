// Device arrays of flat types concatenated, planned and launched natively: every column's
// parts in one plan whose copies launch once per kind (byte ranges, bitmap pieces, rebased
// offsets) from one uploaded table (compute/range_tables.h, copy_plan.py's layout too). The
// host waits on the caller's stream only where a size must be known (where each binary
// part's items start and end, read while it plans the other columns) and once at the end.
// Nested types are the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/array/data.h>
#include <arrow/result.h>

#include "columnar/device.h"
#include "compute/select.h"

namespace arrow_gpu {

// The parts of one column, one after another.
using ConcatParts = std::vector<std::shared_ptr<arrow::ArrayData>>;

// Each column's parts (all of one type that SelectSupports, on `manager`'s device) end to
// end, in new device memory of `manager`, with exact null counts; complete on return. A
// column of one part is that part unless `copy_one`. Before any launch, NotImplemented where
// a column's parts differ in type or (dictionaries) in dictionary, or a dictionary column has
// no part; concatenated strings past 32-bit offsets are a CapacityError.
arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ConcatColumns(
    const std::shared_ptr<CudaMemoryManager>& manager, const SelectKernels& kernels,
    CUstream stream, const std::vector<ConcatParts>& columns, bool copy_one);

// The bytes of each device range (`src`, `nbytes`) one after another, once the work queued
// on `stream` so far is done: one launch, one copy back.
arrow::Result<std::vector<uint8_t>> ReadRanges(const std::shared_ptr<CudaMemoryManager>& manager,
                                               const SelectKernels& kernels, CUstream stream,
                                               const std::vector<uint64_t>& src,
                                               const std::vector<int64_t>& nbytes);

}  // namespace arrow_gpu
