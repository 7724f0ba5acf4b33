// Reads of a few bytes of device memory that the host must learn before it goes on: the
// counters a compute plan reads back to size its results.
#pragma once

#include <cstdint>

#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

// The most bytes a read back takes through pinned memory (ReadBack).
constexpr int64_t kReadBackSlotBytes = 4096;

// Copies `nbytes` of device memory at `src` to `dst` once the work queued on `stream`
// (nullptr: the legacy default stream) is done, and waits for it. Reads of at most
// kReadBackSlotBytes go through a slot of pinned memory that the process keeps for them
// (made through the first primary context that reads): such a copy is queued behind the
// stream's work and runs as soon as it ends, where one into pageable memory is staged by
// the driver once the host has seen the stream finish. Larger reads, and reads while every
// slot is in use, go through the copy engine (EngineDeviceToHost).
arrow::Status ReadBack(const CudaContext& context, void* dst, uintptr_t src, int64_t nbytes,
                       CUstream stream);

}  // namespace arrow_gpu
