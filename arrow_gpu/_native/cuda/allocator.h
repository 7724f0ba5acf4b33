// Where device memory comes from: the one pluggable allocator behind every device allocation
// the backend makes (Context.new_buffer, pyarrow's copy_to, imports that copy).
#pragma once

#include <cstdint>
#include <memory>

#include <arrow/result.h>

#include "cuda/context.h"

namespace arrow_gpu {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual const char* name() const = 0;
  // Whether its memory comes from the CUDA driver, so that trimming the cache may let a
  // failed allocation succeed (a user's allocator handles its own shortage, called once).
  virtual bool from_driver() const { return true; }
  // Both are called with `context` current on the calling thread.
  virtual arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) = 0;
  virtual void Free(const CudaContext& context, uintptr_t address, int64_t nbytes) = 0;
};

// The default: cuMemAlloc'd memory, cached for reuse. Freed blocks go back to a per-device
// cache instead of the driver, so steady-state allocations make no driver call. Blocks of
// up to 1 MiB are carved from 2 MiB driver allocations (IPC handles then carry the
// block's offset in it); larger ones are whole driver allocations. Foreign (non-primary)
// contexts are not cached: their owner may destroy them with the memory.
std::shared_ptr<DeviceAllocator> CachingAllocator();
// cuMemAlloc / cuMemFree for every buffer: memory that CUDA IPC can export, nothing cached.
std::shared_ptr<DeviceAllocator> DriverAllocator();
// The device's default stream-ordered memory pool (cuMemAllocAsync on the default stream):
// fast reuse, but its memory cannot be exported through CUDA IPC.
arrow::Result<std::shared_ptr<DeviceAllocator>> PoolAllocator();
// Allocators written in Python: python/callback_allocator.h.

struct CacheStats {
  int64_t reserved_bytes = 0;      // held from the driver by the cache, in use or not
  int64_t cached_bytes = 0;        // of which unused, waiting for reuse
  int64_t cache_hits = 0;          // allocations served without a driver call
  int64_t driver_allocations = 0;  // cuMemAlloc calls the cache made
  int64_t driver_frees = 0;        // cuMemFree calls the cache made
};

// The caching allocator's figures for `context` (zeros for contexts it does not cache).
CacheStats CachingStats(const CudaContext& context);
// Gives the cache's unused memory of `context` back to the driver; returns the bytes freed.
// Driver allocations with any block still in use stay.
int64_t TrimCache(const CudaContext& context);

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
