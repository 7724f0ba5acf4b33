// The default source of device memory: driver allocations cached for reuse.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/device_allocator.h"

namespace arrow_gpu {

// The default: cuMemAlloc'd memory, cached for reuse. Freed blocks go back to a per-device
// cache instead of the driver, so steady-state allocations make no driver call. Blocks of
// up to 1 MiB are carved from 2 MiB driver allocations (IPC handles then carry the
// block's offset in it); larger ones are whole driver allocations. Foreign (non-primary)
// contexts are not cached: their owner may destroy them with the memory.
std::shared_ptr<DeviceAllocator> CachingAllocator();

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

}  // namespace arrow_gpu
