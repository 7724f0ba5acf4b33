#include "cuda/pinned_pool.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/context.h"
#include "cuda/size_classes.h"

namespace arrow_gpu {
namespace {

using arrow::Status;

constexpr int64_t kPinnedSmallMax = int64_t{256} << 10;  // the largest class carved from a segment
constexpr int64_t kPinnedGranule = 256;  // the smallest class, and the carved blocks' alignment
constexpr int64_t kPage = 4096;    // the alignment of the driver's allocations

// 256-byte steps up to 4 KiB, then four per power of two (decoders allocate the same sizes
// batch after batch).
int64_t ClassOf(int64_t nbytes) { return SizeClass(nbytes, kPinnedGranule); }

// The pinned allocation that blocks of a small class are carved from: room for 16 of them,
// within 64 KiB to 2 MiB, so that the few blocks of a rare class pin little memory.
int64_t SegmentBytes(int64_t block_bytes) {
  return std::clamp(block_bytes * 16, int64_t{64} << 10, int64_t{2} << 20);
}

// The default bound of a pool's free blocks: a quarter of the host's physical memory, which
// pinned pages take from every other process (they cannot be swapped out).
int64_t DefaultCacheLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : kNoPinnedCacheLimit;
}

// Arrow's pools hand out this one area for every empty allocation.
alignas(kPage) uint8_t zero_size_area[1];

// One pinned allocation: carved into blocks of one small class, or one whole block.
struct PinnedSegment {
  uint8_t* base;
  int64_t size;
  int64_t block_bytes;  // the class of its blocks; 0 when the segment is one block
  int64_t carved = 0;   // bytes carved into blocks so far (carved on demand)
  int64_t in_use = 0;   // its blocks held now
};

class PinnedMemoryPool final : public arrow::MemoryPool {
 public:
  explicit PinnedMemoryPool(std::shared_ptr<CudaContext> context)
      : context_(std::move(context)) {
    stats_.cache_limit = DefaultCacheLimit();
  }

  Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override {
    if (size < 0) return Status::Invalid("cannot allocate a negative size: ", size);
    if (alignment > kPage) {
      return Status::Invalid("the pinned pool aligns to at most ", kPage, " bytes, not ",
                             alignment);
    }
    if (size == 0) {
      *out = zero_size_area;
      return Status::OK();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ARROW_RETURN_NOT_OK(AllocateLocked(size, alignment, out));
    Count(size, 1);
    return Status::OK();
  }

  Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
                    uint8_t** ptr) override {
    if (new_size < 0) return Status::Invalid("cannot allocate a negative size: ", new_size);
    if (old_size > 0 && new_size > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pageable_.count(*ptr) == 0 && Fits(*ptr, old_size, new_size, alignment)) {
        Count(new_size - old_size, 0);
        return Status::OK();
      }
    }
    uint8_t* moved = nullptr;
    ARROW_RETURN_NOT_OK(Allocate(new_size, alignment, &moved));
    if (old_size > 0) {
      std::memcpy(moved, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
      Free(*ptr, old_size, alignment);
    }
    *ptr = moved;
    return Status::OK();
  }

  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override {
    if (size == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    Count(-size, 0);
    if (pageable_.erase(buffer) > 0) {
      arrow::system_memory_pool()->Free(buffer, size, alignment);
      return;
    }
    PinnedSegment* segment = SegmentOf(buffer);
    --segment->in_use;
    if (segment->block_bytes != 0) {
      small_free_[segment->block_bytes].push_back(buffer);
    } else {
      whole_free_.emplace(segment->size, buffer);
    }
    stats_.cached_bytes += BlockOf(*segment);
    TrimLocked(stats_.cache_limit);
  }

  void ReleaseUnused() override { Release(); }

  // Gives the pinned memory that no buffer uses back to the driver; returns its bytes.
  int64_t Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    return TrimLocked(0);
  }

  int64_t SetCacheLimit(int64_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.cache_limit = limit;
    return TrimLocked(limit);
  }

  int64_t bytes_allocated() const override { return bytes_allocated_.load(); }
  int64_t max_memory() const override { return max_memory_.load(); }
  int64_t total_bytes_allocated() const override { return total_bytes_allocated_.load(); }
  int64_t num_allocations() const override { return num_allocations_.load(); }
  std::string backend_name() const override { return "arrow_gpu_pinned"; }

  PinnedPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void ResetLockAfterFork() { new (&mutex_) std::mutex(); }

 private:
  static bool Small(int64_t size, int64_t alignment) {
    return ClassOf(size) <= kPinnedSmallMax && alignment <= kPinnedGranule;
  }

  // The bytes of one of `segment`'s blocks.
  static int64_t BlockOf(const PinnedSegment& segment) {
    return segment.block_bytes != 0 ? segment.block_bytes : segment.size;
  }

  static int64_t BlockBytes(int64_t size, int64_t alignment) {
    return Small(size, alignment) ? ClassOf(size) : RoundUp(ClassOf(size), kPage);
  }

  // Whether `block` (of `old_size`) can hold `new_size` bytes as a block of its own
  // allocation would, wasting no more of it. Called with the mutex held.
  bool Fits(uint8_t* block, int64_t old_size, int64_t new_size, int64_t alignment) {
    if (Small(old_size, alignment) || Small(new_size, alignment)) {
      return Small(old_size, alignment) && Small(new_size, alignment) &&
             ClassOf(old_size) == ClassOf(new_size);
    }
    int64_t block_bytes = SegmentOf(block)->size, wanted = BlockBytes(new_size, alignment);
    return wanted <= block_bytes && block_bytes <= wanted + wanted / 4;
  }

  void Count(int64_t bytes, int64_t allocations) {
    int64_t now = bytes_allocated_.fetch_add(bytes) + bytes;
    if (bytes > 0) total_bytes_allocated_.fetch_add(bytes);
    num_allocations_.fetch_add(allocations);
    int64_t peak = max_memory_.load();
    while (now > peak && !max_memory_.compare_exchange_weak(peak, now)) {
    }
  }

  PinnedSegment* SegmentOf(const uint8_t* address) {
    auto after = segments_.upper_bound(reinterpret_cast<uintptr_t>(address));
    return std::prev(after)->second.get();
  }

  Status AllocateLocked(int64_t size, int64_t alignment, uint8_t** out) {
    const bool small = Small(size, alignment);
    const int64_t block_bytes = BlockBytes(size, alignment);
    if (small) {
      auto& free = small_free_[block_bytes];
      if (!free.empty()) {
        *out = free.back();
        free.pop_back();
        ++SegmentOf(*out)->in_use;
        stats_.cached_bytes -= block_bytes;
        return Status::OK();
      }
    } else {
      // The smallest free block that fits, unless it wastes more than a fifth of itself.
      auto fit = whole_free_.lower_bound(block_bytes);
      if (fit != whole_free_.end() && fit->first <= block_bytes + block_bytes / 4) {
        *out = fit->second;
        stats_.cached_bytes -= fit->first;
        whole_free_.erase(fit);
        ++SegmentOf(*out)->in_use;
        return Status::OK();
      }
    }
    if (small) {
      PinnedSegment*& carving = carving_[block_bytes];
      if (carving == nullptr || carving->carved + block_bytes > carving->size) {
        carving = NewSegment(SegmentBytes(block_bytes), block_bytes);
      }
      if (carving != nullptr) {
        *out = carving->base + carving->carved;
        carving->carved += block_bytes;
        ++carving->in_use;
        return Status::OK();
      }
    } else if (PinnedSegment* whole = NewSegment(block_bytes, 0)) {
      *out = whole->base;
      ++whole->in_use;
      return Status::OK();
    }
    // No pinned memory left: ordinary memory, which the copy engine stages.
    ARROW_RETURN_NOT_OK(arrow::system_memory_pool()->Allocate(size, alignment, out));
    pageable_.insert(*out);
    ++stats_.pageable_allocations;
    return Status::OK();
  }

  // A new pinned allocation (after giving back the unused ones, if the driver refused),
  // or nullptr where there is none.
  PinnedSegment* NewSegment(int64_t size, int64_t block_bytes) {
    auto memory = context_->AllocateHost(size);
    if (!memory.ok()) {
      TrimLocked(0);
      memory = context_->AllocateHost(size);
      if (!memory.ok()) return nullptr;
    }
    ++stats_.driver_allocations;
    stats_.reserved_bytes += size;
    auto segment = std::make_unique<PinnedSegment>(PinnedSegment{*memory, size, block_bytes});
    PinnedSegment* raw = segment.get();
    segments_.emplace(reinterpret_cast<uintptr_t>(raw->base), std::move(segment));
    return raw;
  }

  void ReleaseSegment(PinnedSegment* segment) {
    context_->FreeHost(segment->base);
    ++stats_.driver_frees;
    stats_.reserved_bytes -= segment->size;
    segments_.erase(reinterpret_cast<uintptr_t>(segment->base));
  }

  // Gives free blocks back to the driver until at most `keep` bytes of them are left: whole
  // blocks first, the largest first, then segments of small blocks none of which is in use
  // (a small block whose segment still serves a buffer stays). Returns the bytes given back.
  int64_t TrimLocked(int64_t keep) {
    const int64_t before = stats_.reserved_bytes;
    while (stats_.cached_bytes > keep && !whole_free_.empty()) {
      auto largest = std::prev(whole_free_.end());
      stats_.cached_bytes -= largest->first;
      ReleaseSegment(SegmentOf(largest->second));
      whole_free_.erase(largest);
    }
    if (stats_.cached_bytes <= keep) return before - stats_.reserved_bytes;
    std::vector<PinnedSegment*> idle;
    for (auto& [base, segment] : segments_) {
      if (segment->block_bytes != 0 && segment->in_use == 0) idle.push_back(segment.get());
    }
    for (PinnedSegment* segment : idle) {
      if (stats_.cached_bytes <= keep) break;
      std::erase_if(small_free_[segment->block_bytes],
                    [this, segment](uint8_t* block) { return SegmentOf(block) == segment; });
      stats_.cached_bytes -= segment->carved;  // every block carved from it is free
      auto carving = carving_.find(segment->block_bytes);
      if (carving != carving_.end() && carving->second == segment) carving_.erase(carving);
      ReleaseSegment(segment);
    }
    return before - stats_.reserved_bytes;
  }

  std::shared_ptr<CudaContext> context_;
  std::mutex mutex_;  // guards every member below but the counters
  std::map<uintptr_t, std::unique_ptr<PinnedSegment>> segments_;  // by base address
  std::unordered_map<int64_t, PinnedSegment*> carving_;           // by class: carved now
  std::unordered_map<int64_t, std::vector<uint8_t*>> small_free_;  // by class
  std::multimap<int64_t, uint8_t*> whole_free_;  // by segment size
  std::unordered_set<uint8_t*> pageable_;  // allocations of the system pool
  PinnedPoolStats stats_;
  std::atomic<int64_t> bytes_allocated_{0}, max_memory_{0}, total_bytes_allocated_{0},
      num_allocations_{0};
};

struct PinnedPools {
  std::mutex mutex;
  std::vector<PinnedMemoryPool*> by_device;  // never destroyed: buffers may outlive them
};

PinnedPools& GetPinnedPools() {
  static auto* pools = [] {
    // A child forked while another thread held a lock would wait on it forever.
    pthread_atfork(nullptr, nullptr, [] {
      PinnedPools& inherited = GetPinnedPools();
      new (&inherited.mutex) std::mutex();
      for (PinnedMemoryPool* pool : inherited.by_device) {
        if (pool != nullptr) pool->ResetLockAfterFork();
      }
    });
    return new PinnedPools();
  }();
  return *pools;
}

}  // namespace

arrow::Result<arrow::MemoryPool*> PinnedPool(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto context, CudaContext::Primary(device_number));
  PinnedPools& pools = GetPinnedPools();
  std::lock_guard<std::mutex> lock(pools.mutex);
  auto index = static_cast<size_t>(device_number);
  if (pools.by_device.size() <= index) pools.by_device.resize(index + 1, nullptr);
  if (pools.by_device[index] == nullptr) {
    pools.by_device[index] = new PinnedMemoryPool(std::move(context));
  }
  return pools.by_device[index];
}

bool IsPinnedPool(arrow::MemoryPool* pool) {
  return dynamic_cast<PinnedMemoryPool*>(pool) != nullptr;
}

PinnedPoolStats PinnedPoolStatsOf(arrow::MemoryPool* pool) {
  auto* pinned = dynamic_cast<PinnedMemoryPool*>(pool);
  return pinned == nullptr ? PinnedPoolStats{} : pinned->stats();
}

int64_t ReleasePinnedPool(arrow::MemoryPool* pool) {
  auto* pinned = dynamic_cast<PinnedMemoryPool*>(pool);
  return pinned == nullptr ? 0 : pinned->Release();
}

int64_t SetPinnedPoolCacheLimit(arrow::MemoryPool* pool, int64_t limit) {
  auto* pinned = dynamic_cast<PinnedMemoryPool*>(pool);
  return pinned == nullptr ? 0 : pinned->SetCacheLimit(limit);
}

}  // namespace arrow_gpu
