// Packing a byte per value (a boolean CUDA array, a null mask) into an Arrow bitmap, on the
// device.
#pragma once

#include <cstdint>

#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

// Writes ceil(count / 8) bytes at device address `bitmap`: bit i (least significant bit
// first) is set where byte i at device address `flags` is nonzero, or, with `invert`, where
// it is zero (a null mask becomes a validity bitmap). Bits past `count` in the last byte
// are zero. Queued on `stream` of `context`'s device.
arrow::Status PackBits(const CudaContext& context, uintptr_t bitmap, uintptr_t flags,
                       int64_t count, bool invert, CUstream stream);

}  // namespace arrow_gpu
