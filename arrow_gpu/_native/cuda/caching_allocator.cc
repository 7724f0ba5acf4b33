#include "cuda/caching_allocator.h"

#include <pthread.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/driver_allocators.h"
#include "cuda/size_classes.h"

namespace arrow_gpu {
namespace {

constexpr int64_t kSegmentBytes = int64_t{2} << 20;  // driver allocation small blocks share
constexpr int64_t kSmallMax = int64_t{1} << 20;      // largest size carved from a segment
constexpr int64_t kGranule = 512;

// One driver allocation: either carved into blocks of one small class, or one whole block.
struct Segment {
  uintptr_t base;
  int64_t size;
  int64_t block_bytes;  // the class of its blocks; 0 when the segment is one block
  int64_t carved = 0;   // bytes carved into blocks so far (blocks are carved on demand)
  int64_t in_use = 0;   // its blocks held by buffers now
};

struct Block {
  uintptr_t address;
  Segment* segment;
  // Recorded on the legacy default stream at free: work queued there or on a blocking stream
  // (ordered with it: the package's copies given no stream, most libraries' defaults) may
  // still use the block when its buffer dies; a later user on a non-blocking stream would not
  // be ordered after that work, so a block is handed out again only once this passed.
  CUevent freed = nullptr;
  uint64_t free_number = 0;  // frees are numbered: their events pass in that order

  int64_t bytes() const { return segment->block_bytes ? segment->block_bytes : segment->size; }
};

// While the legacy default stream is held up (it waits for every blocking stream of every
// library: a CuPy stream's long kernel holds it), the events of the newest frees have not
// passed, and waiting for them would wait for the other libraries' work. The cache takes
// new memory from the driver instead, up to this much until the stream moves on again, and
// waits beyond it (or when the driver has no more).
constexpr int64_t kHeldUpBytes = int64_t{1} << 30;

enum class Found { kBlock, kHeldUp, kNone };

// The cache of one device's primary context. Every member is guarded by `mutex`; the
// driver calls that Allocate and Free make run with the primary context current.
struct DevicePool {
  std::mutex mutex;
  std::unordered_map<uintptr_t, std::unique_ptr<Segment>> segments;  // by base
  std::unordered_map<int64_t, Segment*> carving;      // by class: the segment carved now
  std::unordered_map<int64_t, std::deque<Block>> small_free;  // by class, in order of free
  std::multimap<int64_t, Block> whole_free;           // by segment size
  std::unordered_map<uintptr_t, Block> in_use;        // by address
  std::vector<CUevent> spare_events;
  int64_t in_use_bytes = 0;
  uint64_t frees = 0;          // the number of the latest free
  uint64_t passed = 0;         // every free up to this number has passed
  int64_t held_up_bytes = 0;   // taken from the driver since the legacy stream last moved on
  CacheStats stats;

  // Whether the block's free has passed on the device (if so, its event goes back).
  bool Passed(const CudaContext& context, Block& block) {
    if (block.freed == nullptr) return true;
    if (block.free_number > passed) {
      if (context.driver()->EventQuery(block.freed) != CUDA_SUCCESS) return false;
      MovedOn(block.free_number);
    }
    spare_events.push_back(block.freed);
    block.freed = nullptr;
    return true;
  }

  // Waits until the block's free has passed.
  void Reclaim(const CudaContext& context, Block& block) {
    if (!Passed(context, block)) {
      context.driver()->EventSynchronize(block.freed);
      MovedOn(block.free_number);
      Passed(context, block);
    }
  }

  // The free numbered `number` has passed, and so has every one before it.
  void MovedOn(uint64_t number) {
    passed = std::max(passed, number);
    held_up_bytes = 0;
  }

  // Takes a cached block for `nbytes` out of the cache into `out`: one whose free has
  // passed, else (with `wait`) the oldest that fits, once its free has passed. kHeldUp:
  // blocks fit, but none has passed.
  Found TakeCached(const CudaContext& context, int64_t nbytes, bool wait, Block* out) {
    if (nbytes <= kSmallMax) {
      auto found = small_free.find(SizeClass(nbytes, kGranule));
      if (found != small_free.end() && !found->second.empty()) {
        return TakeOfClass(context, found->second, wait, out);
      }
    }
    // Large blocks (and small ones made whole where no segment could be carved) are reused
    // for requests they fit without wasting more than a fifth.
    int64_t rounded = nbytes <= kSmallMax ? nbytes : RoundUp(nbytes, kSegmentBytes);
    auto first = whole_free.lower_bound(nbytes);
    auto end = whole_free.upper_bound(rounded + rounded / 4);
    if (first == end) return Found::kNone;
    for (auto fit = first; fit != end; ++fit) {
      if (Passed(context, fit->second)) {
        *out = fit->second;
        whole_free.erase(fit);
        return Found::kBlock;
      }
    }
    if (!wait) return Found::kHeldUp;
    Reclaim(context, first->second);
    *out = first->second;
    whole_free.erase(first);
    return Found::kBlock;
  }

  // Of a small class's free blocks (in the order of their frees, which is the order their
  // events pass in): the newest, the warmest in the caches, if it has passed; else the
  // oldest, the likeliest to have.
  Found TakeOfClass(const CudaContext& context, std::deque<Block>& free, bool wait,
                    Block* out) {
    if (Passed(context, free.back())) {
      *out = free.back();
      free.pop_back();
      return Found::kBlock;
    }
    if (!Passed(context, free.front())) {
      if (!wait) return Found::kHeldUp;
      Reclaim(context, free.front());
    }
    *out = free.front();
    free.pop_front();
    return Found::kBlock;
  }

  uintptr_t HandOut(Block block) {
    ++block.segment->in_use;
    in_use_bytes += block.bytes();
    in_use.emplace(block.address, block);
    return block.address;
  }

  arrow::Result<Segment*> NewSegment(const CudaContext& context, int64_t size,
                                     int64_t block_bytes) {
    CUdeviceptr base = 0;
    CUresult rc = context.driver()->MemAlloc(&base, static_cast<size_t>(size));
    if (rc != CUDA_SUCCESS) return AllocationFailure(rc, "cuMemAlloc", context, size);
    ++stats.driver_allocations;
    stats.reserved_bytes += size;
    auto segment = std::make_unique<Segment>(Segment{base, size, block_bytes});
    Segment* raw = segment.get();
    segments.emplace(raw->base, std::move(segment));
    return raw;
  }

  void ReleaseSegment(const CudaContext& context, Segment* segment) {
    context.driver()->MemFree(segment->base);
    ++stats.driver_frees;
    stats.reserved_bytes -= segment->size;
    segments.erase(segment->base);
  }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) {
    Block block{};
    Found cached = TakeCached(context, nbytes, /*wait=*/held_up_bytes + nbytes > kHeldUpBytes,
                              &block);
    if (cached == Found::kBlock) {
      ++stats.cache_hits;
      return HandOut(block);
    }
    auto fresh = NewBlock(context, nbytes);
    if (!fresh.ok() && cached == Found::kHeldUp && fresh.status().IsOutOfMemory() &&
        TakeCached(context, nbytes, /*wait=*/true, &block) == Found::kBlock) {
      ++stats.cache_hits;
      return HandOut(block);
    }
    ARROW_ASSIGN_OR_RAISE(block, std::move(fresh));
    if (cached == Found::kHeldUp) held_up_bytes += block.bytes();
    return HandOut(block);
  }

  // A block of new memory: carved from a segment of its class, or a driver allocation.
  arrow::Result<Block> NewBlock(const CudaContext& context, int64_t nbytes) {
    if (nbytes <= kSmallMax) {
      // 512-byte steps up to 4 KiB, then four per power of two: 40 classes cover every small size.
      int64_t block_bytes = SizeClass(nbytes, kGranule);
      Segment*& carving_now = carving[block_bytes];
      if (carving_now == nullptr || carving_now->carved + block_bytes > carving_now->size) {
        auto segment = NewSegment(context, kSegmentBytes, block_bytes);
        // Short of a whole segment, the block may still fit on its own (below).
        carving_now = segment.ok() ? *segment : nullptr;
      }
      if (carving_now != nullptr) {
        Block block{carving_now->base + static_cast<uintptr_t>(carving_now->carved),
                    carving_now};
        carving_now->carved += block_bytes;
        return block;
      }
    }
    // Large blocks are whole driver allocations in 2 MiB steps (the driver's own granularity).
    int64_t rounded = nbytes <= kSmallMax ? nbytes : RoundUp(nbytes, kSegmentBytes);
    auto segment = NewSegment(context, rounded, 0);
    if (!segment.ok() && rounded > nbytes && segment.status().IsOutOfMemory()) {
      segment = NewSegment(context, nbytes, 0);  // short of memory: no rounding
    }
    ARROW_ASSIGN_OR_RAISE(Segment * whole, std::move(segment));
    return Block{whole->base, whole};
  }

  // False for an address this cache did not hand out.
  bool Free(const CudaContext& context, uintptr_t address) {
    auto found = in_use.find(address);
    if (found == in_use.end()) return false;
    Block block = found->second;
    in_use.erase(found);
    --block.segment->in_use;
    in_use_bytes -= block.bytes();
    if (spare_events.empty()) {
      CUevent event = nullptr;
      if (context.driver()->EventCreate(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        spare_events.push_back(event);
      }
    }
    if (!spare_events.empty() &&
        context.driver()->EventRecord(spare_events.back(), nullptr) == CUDA_SUCCESS) {
      block.freed = spare_events.back();
      block.free_number = ++frees;
      spare_events.pop_back();
    } else {
      context.driver()->CtxSynchronize();  // no event to wait on later: wait now
    }
    if (block.segment->block_bytes != 0) {
      small_free[block.segment->block_bytes].push_back(block);
    } else {
      whole_free.emplace(block.segment->size, block);
    }
    return true;
  }

  int64_t Trim(const CudaContext& context) {
    int64_t before = stats.reserved_bytes;
    for (auto& [size, block] : whole_free) {
      Reclaim(context, block);
      ReleaseSegment(context, block.segment);
    }
    whole_free.clear();
    for (auto& [block_bytes, free] : small_free) {
      auto idle = std::stable_partition(free.begin(), free.end(),
                                 [](const Block& block) { return block.segment->in_use > 0; });
      for (auto it = idle; it != free.end(); ++it) Reclaim(context, *it);
      free.erase(idle, free.end());
    }
    std::vector<Segment*> idle;
    for (auto& [base, segment] : segments) {
      if (segment->block_bytes != 0 && segment->in_use == 0) idle.push_back(segment.get());
    }
    for (Segment* segment : idle) {
      auto carving_now = carving.find(segment->block_bytes);
      if (carving_now != carving.end() && carving_now->second == segment) {
        carving.erase(carving_now);
      }
      ReleaseSegment(context, segment);
    }
    for (CUevent event : spare_events) context.driver()->EventDestroy(event);
    spare_events.clear();
    return before - stats.reserved_bytes;
  }
};

struct Pools {
  std::mutex mutex;
  std::vector<std::unique_ptr<DevicePool>> by_device;
};

Pools& GetPools() {
  static auto* pools = [] {
    // A child forked while another thread held a lock would wait on it forever.
    pthread_atfork(nullptr, nullptr, [] {
      Pools& inherited = GetPools();
      new (&inherited.mutex) std::mutex();
      for (auto& pool : inherited.by_device) {
        if (pool != nullptr) new (&pool->mutex) std::mutex();
      }
    });
    return new Pools();  // never destroyed: buffers may die at interpreter exit
  }();
  return *pools;
}

// The cache of `context`, or nullptr for a context that is not cached.
DevicePool* PoolOf(const CudaContext& context, bool create) {
  if (!context.primary()) return nullptr;
  Pools& pools = GetPools();
  std::lock_guard<std::mutex> lock(pools.mutex);
  auto index = static_cast<size_t>(context.device_number());
  if (pools.by_device.size() <= index) {
    if (!create) return nullptr;
    pools.by_device.resize(index + 1);
  }
  auto& pool = pools.by_device[index];
  if (pool == nullptr && create) pool = std::make_unique<DevicePool>();
  return pool.get();
}

class CachingMemory final : public DeviceAllocator {
 public:
  const char* name() const override { return "caching"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    DevicePool* pool = PoolOf(context, /*create=*/true);
    if (pool == nullptr) return DriverAllocator()->Allocate(context, nbytes);
    std::lock_guard<std::mutex> lock(pool->mutex);
    return pool->Allocate(context, nbytes);
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t nbytes) override {
    if (DevicePool* pool = PoolOf(context, /*create=*/false)) {
      std::lock_guard<std::mutex> lock(pool->mutex);
      if (pool->Free(context, address)) return;
    }
    DriverAllocator()->Free(context, address, nbytes);
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> CachingAllocator() {
  static auto* allocator =
      new std::shared_ptr<DeviceAllocator>(std::make_shared<CachingMemory>());
  return *allocator;
}

CacheStats CachingStats(const CudaContext& context) {
  DevicePool* pool = PoolOf(context, /*create=*/false);
  if (pool == nullptr) return CacheStats{};
  std::lock_guard<std::mutex> lock(pool->mutex);
  CacheStats stats = pool->stats;
  stats.cached_bytes = stats.reserved_bytes - pool->in_use_bytes;
  return stats;
}

int64_t TrimCache(const CudaContext& context) {
  DevicePool* pool = PoolOf(context, /*create=*/false);
  if (pool == nullptr) return 0;
  ScopedContext scope(context);
  if (!scope.status().ok()) return 0;
  std::lock_guard<std::mutex> lock(pool->mutex);
  return pool->Trim(context);
}

}  // namespace arrow_gpu
