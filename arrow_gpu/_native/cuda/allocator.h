// Where device memory comes from: the one pluggable allocator behind every device allocation
// the backend makes (Context.new_buffer, pyarrow's copy_to, imports that copy), chosen among
// those of caching_allocator.h (the default), driver_allocators.h and Python's.
#pragma once

#include <cstdint>
#include <memory>

#include <arrow/result.h>

#include "cuda/device_allocator.h"

namespace arrow_gpu {

// The allocator new device buffers come from; buffers keep the one that made them.
std::shared_ptr<DeviceAllocator> CurrentAllocator();
void SetCurrentAllocator(std::shared_ptr<DeviceAllocator> allocator);

// Device memory and the allocator it must be returned to (none for empty buffers).
struct Allocation {
  uintptr_t address = 0;
  std::shared_ptr<DeviceAllocator> allocator;
};

// Device memory of `context` from the current allocator, counted in the context's stats.
// Allocation failures are OutOfMemory, raised only after the caching allocator's unused
// memory was given back to the driver and the allocation retried.
arrow::Result<Allocation> AllocateDevice(CudaContext& context, int64_t nbytes);
// A driver allocation of its own (cuMemAlloc, whatever the current allocator) of
// IsolatedSize(nbytes) bytes, counted as AllocateDevice's are; the bytes past `nbytes` are
// zero. CUDA IPC exports whole driver allocations and the driver may carve smaller ones
// from shared 2 MiB blocks, so exporting this one shows the opener nothing else.
arrow::Result<Allocation> AllocateIsolated(CudaContext& context, int64_t nbytes);
// `nbytes` rounded up to the 2 MiB steps in which the driver never shares an allocation.
inline int64_t IsolatedSize(int64_t nbytes) {
  constexpr int64_t kStep = int64_t{2} << 20;
  return (nbytes + kStep - 1) / kStep * kStep;
}
// Never fails: it runs in destructors.
void FreeDevice(CudaContext& context, const Allocation& allocation, int64_t nbytes);

}  // namespace arrow_gpu
