// Rows of device arrays selected by a boolean mask or integer indices, planned and launched
// natively: the whole selection of a batch's flat columns (fixed-width values, bitmaps,
// binary and string ranges, dictionary indices) in one call, with the host waiting on the
// caller's stream only where a size must be known (the rows a mask selects; the bytes of the
// selected strings and every null count, read together). Nested types are the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/array/data.h>
#include <arrow/result.h>
#include <arrow/type.h>

#include "columnar/device.h"
#include "cuda/kernels.h"

namespace arrow_gpu {

// The kernels (of arrow_gpu/_compute/kernels.cu) a selection launches, resolved once per
// loaded module, and the most blocks a launch gets.
struct SelectKernels {
  CUfunction fill_bytes = nullptr;
  CUfunction indices = nullptr;
  CUfunction gather = nullptr;
  CUfunction gather_bits = nullptr;
  CUfunction mask_counts = nullptr;
  CUfunction scan_reduce = nullptr;
  CUfunction scan_apply = nullptr;
  CUfunction compact = nullptr;
  CUfunction compact_bits = nullptr;
  CUfunction range_sizes = nullptr;
  CUfunction gather_ranges = nullptr;
  int64_t max_blocks = 1;
};

// What picks the rows: integer indices of any width and sign (null: a null row), or a
// boolean mask whose null slots are dropped or emitted as null rows.
struct RowSelector {
  enum class Kind { kIndices, kMask };
  Kind kind = Kind::kIndices;
  std::shared_ptr<arrow::ArrayData> data;
  bool emit_null = false;  // kMask
  int64_t bound = 0;       // kIndices: the rows of the data, which every index must be below
};

// Whether SelectRows gathers arrays of `type`.
bool SelectSupports(const arrow::DataType& type);

struct Selected {
  int64_t rows = 0;
  std::vector<std::shared_ptr<arrow::ArrayData>> columns;
};

// Each of `columns` (all of supported types, on `manager`'s device) at the rows `selector`
// picks, in new device memory of `manager`, with exact null counts; complete on return.
// Launches queue on `stream`; the host waits on that stream only. An index out of range is
// an IndexError, selected strings past 32-bit offsets a CapacityError.
arrow::Result<Selected> SelectRows(const std::shared_ptr<CudaMemoryManager>& manager,
                                   const SelectKernels& kernels, CUstream stream,
                                   const std::vector<std::shared_ptr<arrow::ArrayData>>& columns,
                                   const RowSelector& selector);

}  // namespace arrow_gpu
