// Pinned host memory as an arrow::MemoryPool. A decoder (Parquet's, IPC's, a CSV reader's)
// that allocates from it leaves buffers that the DMA engine reads as they are: their copies
// to the device need no staging through the copy engine's ring and no CPU copy.
#pragma once

#include <cstdint>

#include <arrow/memory_pool.h>
#include <arrow/result.h>

namespace arrow_gpu {

struct PinnedPoolStats {
  int64_t reserved_bytes = 0;      // pinned memory held from the driver, in use or not
  int64_t cached_bytes = 0;        // of which in free blocks, waiting for reuse
  int64_t driver_allocations = 0;  // cuMemHostAlloc calls the pool made
  int64_t driver_frees = 0;        // cuMemFreeHost calls the pool made
  int64_t pageable_allocations = 0;  // allocations served by the system pool (none pinned)
  int64_t cache_limit = 0;  // the most kept in free blocks (kNoPinnedCacheLimit: no bound)
};

constexpr int64_t kNoPinnedCacheLimit = INT64_MAX;

// The pinned pool that allocates through `device_number`'s primary context (its memory is
// portable: every context's copies read it directly). Made on first use and never
// destroyed: buffers may outlive everything else. Freed blocks are kept for reuse, since
// pinning costs the driver a walk over every page, up to a bound (a quarter of the host's
// physical memory unless set): past it the largest free blocks go back to the driver.
// Where pinned memory runs out (after the unused blocks were given back), allocations come
// from the system pool.
arrow::Result<arrow::MemoryPool*> PinnedPool(int device_number);
// Whether PinnedPool made `pool`.
bool IsPinnedPool(arrow::MemoryPool* pool);
// The figures of a pool PinnedPool made; zeros for any other pool.
PinnedPoolStats PinnedPoolStatsOf(arrow::MemoryPool* pool);
// Gives the pinned memory that no buffer of `pool` uses back to the driver; returns its
// bytes (0 for a pool PinnedPool did not make).
int64_t ReleasePinnedPool(arrow::MemoryPool* pool);
// Bounds what `pool` keeps in free blocks at `limit` bytes (kNoPinnedCacheLimit: no bound),
// giving back at once what lies past it; returns those bytes (0 for another pool).
int64_t SetPinnedPoolCacheLimit(arrow::MemoryPool* pool, int64_t limit);

}  // namespace arrow_gpu
