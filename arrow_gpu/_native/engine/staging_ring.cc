#include "engine/staging_ring.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "engine/transfer.h"

namespace arrow_gpu {
namespace engine {
namespace {

// The ring and the pool, shared by every transfer of the process.
struct Engine {
  std::mutex busy;  // held by the one transfer using the ring and the pool
  std::unique_ptr<Ring> ring;
  std::unique_ptr<WorkerPool> pool;
  std::atomic<int64_t> held{0};
  // Set by ReleaseStaging while a transfer holds the ring: that transfer frees it at its end.
  std::atomic<bool> release_requested{false};

  void DropRing() {
    ring.reset();
    held = 0;
  }
  void Release() {
    DropRing();
    pool.reset();
    release_requested = false;
  }
};

Engine& GetEngine() {
  static auto* engine = [] {
    // A forked child has none of the parent's threads (and no valid pinned memory under a
    // real driver): it starts afresh, leaking what it cannot use.
    pthread_atfork(nullptr, nullptr, [] {
      Engine& inherited = GetEngine();
      new (&inherited.busy) std::mutex();
      (void)inherited.ring.release();
      (void)inherited.pool.release();
      inherited.held = 0;
    });
    return new Engine();  // never destroyed: its threads live to process exit
  }();
  return *engine;
}

void RingGeometry(const TransferOptions& options, int64_t* slot_bytes, int* slots) {
  int64_t slot = options.chunk_bytes / kAlignment * kAlignment;
  *slot_bytes = slot;
  *slots = static_cast<int>(std::min<int64_t>(kMaxSlots, options.staging_bytes / slot));
}

}  // namespace

Ring::~Ring() {
  for (CUevent event : events) {
    if (event != nullptr) owner->DestroyEvent(event);
  }
  if (stream != nullptr) owner->DestroyStream(stream);
  owner->FreeHost(memory);
}

Lease::~Lease() {
  if (!lock.owns_lock()) return;
  auto& engine = GetEngine();
  if (engine.release_requested) engine.Release();
  lock.unlock();
  // A request that came in after the check above found the lock taken: honour it here.
  if (engine.release_requested) ReleaseStaging();
}

Lease& Lease::operator=(Lease&& other) noexcept {
  Lease ended(std::move(*this));
  lock = std::move(other.lock);
  ring = std::exchange(other.ring, nullptr);
  pool = std::exchange(other.pool, nullptr);
  return *this;
}

Lease Lease::Acquire(const CudaContext& context, const TransferOptions& options) {
  Lease lease;
  auto& engine = GetEngine();
  lease.lock = std::unique_lock<std::mutex>(engine.busy, std::try_to_lock);
  if (!lease.lock.owns_lock()) return lease;
  int64_t slot_bytes;
  int slots;
  RingGeometry(options, &slot_bytes, &slots);
  if (engine.ring && (engine.ring->slot_bytes != slot_bytes || engine.ring->slots != slots)) {
    engine.DropRing();
  }
  if (!engine.ring) {
    auto owner = CudaContext::Primary(context.device_number());
    if (!owner.ok()) return lease;
    auto memory = (*owner)->AllocateHost(slot_bytes * slots);
    if (!memory.ok()) return lease;
    engine.ring = std::make_unique<Ring>();
    engine.ring->owner = *owner;
    engine.ring->memory = *memory;
    engine.ring->slot_bytes = slot_bytes;
    engine.ring->slots = slots;
    engine.ring->events.assign(slots, nullptr);
    engine.held = engine.ring->bytes();
  }
  if (options.threads > 1 && (!engine.pool || engine.pool->size() != options.threads)) {
    engine.pool.reset();
    engine.pool = std::make_unique<WorkerPool>(options.threads);
  }
  lease.ring = engine.ring.get();
  lease.pool = options.threads > 1 ? engine.pool.get() : nullptr;
  return lease;
}

SlotStreams::SlotStreams(const CudaContext& context, Ring& ring) : context_(context), ring_(ring) {
  cached_ = context.handle() == ring.owner->handle();
  if (!cached_) events_.assign(ring.slots, nullptr);
}

SlotStreams::~SlotStreams() {
  if (cached_) return;
  for (CUevent event : events_) {
    if (event != nullptr) context_.DestroyEvent(event);
  }
  if (stream_ != nullptr) context_.DestroyStream(stream_);
}

arrow::Result<CUstream> SlotStreams::Stream() {
  CUstream& stream = cached_ ? ring_.stream : stream_;
  if (stream == nullptr) {
    ARROW_ASSIGN_OR_RAISE(stream, context_.CreateStream(CU_STREAM_NON_BLOCKING));
  }
  return stream;
}

arrow::Result<CUevent> SlotStreams::Event(int slot) {
  CUevent& event = cached_ ? ring_.events[slot] : events_[slot];
  if (event == nullptr) {
    ARROW_ASSIGN_OR_RAISE(event, context_.CreateEvent());
  }
  return event;
}

}  // namespace engine

void ReleaseStaging() {
  auto& engine = engine::GetEngine();
  // A transfer may hold the ring while it reports progress, and the progress callback may
  // be what calls this: waiting for that transfer would wait for ourselves. It frees the
  // ring when it ends instead.
  engine.release_requested = true;
  std::unique_lock<std::mutex> lock(engine.busy, std::try_to_lock);
  if (lock.owns_lock()) engine.Release();
}

int64_t StagingBytesHeld() { return engine::GetEngine().held.load(); }

}  // namespace arrow_gpu
