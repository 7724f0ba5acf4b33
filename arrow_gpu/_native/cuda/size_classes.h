// The size classes both caches of this layer hand blocks out in (device memory in
// caching_allocator.cc, pinned host memory in pinned_pool.cc): a freed block serves the next
// request of about its size, and no block is more than a quarter padding.
#pragma once

#include <cstdint>

namespace arrow_gpu {

inline int64_t RoundUp(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

// `granule`-byte steps up to 4 KiB, then four steps per power of two.
inline int64_t SizeClass(int64_t nbytes, int64_t granule) {
  if (nbytes <= 4096) return RoundUp(nbytes, granule);
  int64_t power = int64_t{1} << (63 - __builtin_clzll(static_cast<uint64_t>(nbytes - 1)));
  return RoundUp(nbytes, power / 4);
}

}  // namespace arrow_gpu
