// The staging ring: pinned host slots that pageable data passes through on its way to or
// from the device, with the stream and events that order their DMAs, and the lease that
// gives one transfer at a time the ring and the worker pool.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <arrow/result.h>

#include "cuda/context.h"
#include "engine/transfer_options.h"
#include "engine/worker_pool.h"

namespace arrow_gpu {

// Frees the staging ring now (it is made again when needed); while a transfer uses it (this
// may be called from its progress callback), that transfer frees it when it ends.
void ReleaseStaging();
// Pinned bytes the staging ring holds now.
int64_t StagingBytesHeld();

namespace engine {

// Pinned slots (one allocation, portable to every context), with a stream and per-slot
// events in the owner's context (the primary context of the device that made it).
struct Ring {
  std::shared_ptr<CudaContext> owner;
  uint8_t* memory = nullptr;
  int64_t slot_bytes = 0;
  int slots = 0;
  CUstream stream = nullptr;
  std::vector<CUevent> events;
  // Where the next transfer starts: the slot used least recently. The slots a transfer used
  // last are still in the CPU caches of the threads that unstaged them, and the DMA engine
  // writes cached lines slowly, so a download that started in them would be slower.
  int next_slot = 0;

  ~Ring();
  int64_t bytes() const { return slot_bytes * slots; }
  uint8_t* slot(int index) const { return memory + slot_bytes * index; }
};

// Exclusive use of the ring and the pool, or nothing when another transfer has them (or
// pinned memory ran out): the caller then copies directly, never waits. Waiting could
// deadlock: a transfer holding the ring takes the GIL to report progress.
struct Lease {
  std::unique_lock<std::mutex> lock;
  Ring* ring = nullptr;
  WorkerPool* pool = nullptr;  // none when the options say one thread

  Lease() = default;
  Lease(Lease&&) = default;
  Lease& operator=(Lease&& other) noexcept;  // ends this lease, takes other's
  ~Lease();

  static Lease Acquire(const CudaContext& context, const TransferOptions& options);
};

// The stream and per-slot events of one transfer in `context`: the ring's own for its
// owner context, made for this transfer (and destroyed after it) for any other.
class SlotStreams {
 public:
  SlotStreams(const CudaContext& context, Ring& ring);
  ~SlotStreams();

  // Non-blocking: each transfer orders it after its caller's stream (or the legacy default
  // stream) alone, so that a transfer given a stream does not wait for every blocking one.
  arrow::Result<CUstream> Stream();
  // Made on first use by the coordinating thread only; workers read it after that.
  arrow::Result<CUevent> Event(int slot);
  CUevent Recorded(int slot) const { return cached_ ? ring_.events[slot] : events_[slot]; }

 private:
  const CudaContext& context_;
  Ring& ring_;
  bool cached_;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

}  // namespace engine
}  // namespace arrow_gpu
