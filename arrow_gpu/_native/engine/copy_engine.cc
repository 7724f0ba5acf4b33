#include "engine/copy_engine.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9))
#include <cpuid.h>
#include <immintrin.h>
#define ARROW_GPU_CLDEMOTE 1
#endif

#include "engine/progress.h"

namespace arrow_gpu {
namespace {

using arrow::Result;
using arrow::Status;

constexpr int64_t kMaxGap = 256;          // device gaps a single DMA may span (see Plan)
constexpr int64_t kFirstChunkShare = 32;  // the first chunks are 1/32 of a slot (ChunkSizes)
// Of the pieces of a chunk that workers stage (or unstage) in parallel: all threads share
// each chunk, so its DMA starts after a unit's copy, not a whole chunk's.
constexpr int64_t kUnitBytes = 256 << 10;
constexpr int64_t kStreamingBytes = 16 << 10;  // see UnstageParts
constexpr int64_t kDemoteBytes = 16 << 20;     // see Pipeline::Stage
constexpr int64_t kStreamedUploadBytes = 32 << 20;  // see Pipeline::Stage
constexpr int kMaxSlots = 64;
constexpr int kMaxThreads = 64;
// How long woken workers poll for the job that follows (see WorkerPool::Wake).
constexpr std::chrono::microseconds kPollTime{200};

// ---------------------------------------------------------------------------------------
// Options

struct OptionsSlot {
  std::mutex mutex;
  TransferOptions options;
};

OptionsSlot& Options() {
  static auto* slot = new OptionsSlot();
  return *slot;
}

int DefaultThreads() {
  // Three quarters of the cores, at most 12: one thread copies pageable memory at about a
  // sixth of the bus's rate, and the driver's own threads need cores too (on 16-core H100
  // hosts, 12 threads moved tables to the device up to 1.4x faster than 16, and back as
  // fast). Counted once: the count reads a file, which costs more than a small transfer.
  static const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) * 3 / 4, 1, 12);
  return threads;
}

TransferOptions Effective() {
  TransferOptions options = GetTransferOptions();
  if (options.threads <= 0) options.threads = DefaultThreads();
  return options;
}

// ---------------------------------------------------------------------------------------
// Worker threads

// A spin-wait hint: the core yields to its sibling hyperthread and saves power meanwhile.
inline void Pause() {
#if defined(__SSE2__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A fixed set of threads that run one job at a time (the ring's lease serialises jobs).
// Workers sleep on one atomic word (a futex), not a condition variable: woken together, they
// would each re-take its mutex in turn. On a 16-core H100 host the last of eleven workers
// then started 75-85 us after the wake-up instead of about 50, and the 134 MiB string
// column's upload (median of ten processes' medians) went from 32 to 45 GB/s this way.
class WorkerPool {
 public:
  explicit WorkerPool(int size) {
    for (int i = 0; i < size; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }
  ~WorkerPool() {
    stop_ = true;
    Publish(0);
    for (auto& thread : threads_) thread.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }

  // Wakes the workers ahead of a job that follows shortly (Start): they poll for it for a
  // while, so that their wake-up overlaps what the caller does meanwhile.
  void Wake() { Publish(0); }

  // Runs job() on `count` workers; Wait() returns once each has returned.
  void Start(int count, std::function<void()> job) {
    job_ = std::move(job);
    count = std::min(count, size());
    running_.store(count, std::memory_order_relaxed);
    Publish(count);
  }
  void Wait() {
    for (int left; (left = running_.load(std::memory_order_acquire)) != 0;) {
      running_.wait(left, std::memory_order_acquire);
    }
    job_ = nullptr;
  }

 private:
  // The word workers sleep on: a generation number above, the job's worker count in the
  // low bits, so that a worker reads both at once (one still waking from an earlier job it
  // had no part in may see the next job's word, never half of it).
  static constexpr int kCountBits = 8;
  static_assert(kMaxThreads < (1 << kCountBits));

  void Publish(int count) {
    uint32_t generation = (word_.load(std::memory_order_relaxed) >> kCountBits) + 1;
    word_.store(generation << kCountBits | static_cast<uint32_t>(count),
                std::memory_order_release);
    word_.notify_all();
  }
  static int Count(uint32_t word) { return static_cast<int>(word & ((1u << kCountBits) - 1)); }

  // The word once it differs from `seen`, or `seen` after kPollTime.
  uint32_t Poll(uint32_t seen) {
    auto deadline = std::chrono::steady_clock::now() + kPollTime;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        uint32_t word = word_.load(std::memory_order_acquire);
        if (word != seen) return word;
        Pause();
      }
      if (std::chrono::steady_clock::now() > deadline) return seen;
    }
  }
  void Loop(int index) {
    uint32_t seen = 0;
    for (;;) {
      word_.wait(seen, std::memory_order_acquire);
      seen = word_.load(std::memory_order_acquire);
      if (stop_) return;
      if (Count(seen) == 0) seen = Poll(seen);
      if (stop_) return;
      // job_ stays put while a worker with a part in it runs: Wait() comes first.
      if (index >= Count(seen)) continue;
      job_();
      if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::function<void()> job_;
  std::atomic<uint32_t> word_{0};
  std::atomic<int> running_{0};
  std::atomic<bool> stop_{false};
};

// ---------------------------------------------------------------------------------------
// The staging ring

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
  // writes cached lines slowly (on an H100 host, a download that started in them moved its
  // first 8 MiB at less than half speed; starting elsewhere made 134 MiB downloads 1-3 %
  // faster).
  int next_slot = 0;

  ~Ring() {
    for (CUevent event : events) {
      if (event != nullptr) owner->DestroyEvent(event);
    }
    if (stream != nullptr) owner->DestroyStream(stream);
    owner->FreeHost(memory);
  }
  int64_t bytes() const { return slot_bytes * slots; }
  uint8_t* slot(int index) const { return memory + slot_bytes * index; }
};

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

// Exclusive use of the ring and the pool, or nothing when another transfer has them (or
// pinned memory ran out): the caller then copies directly, never waits. Waiting could
// deadlock: a transfer holding the ring takes the GIL to report progress.
struct Lease {
  std::unique_lock<std::mutex> lock;
  Ring* ring = nullptr;
  WorkerPool* pool = nullptr;

  Lease() = default;
  Lease(Lease&&) = default;
  ~Lease() {
    if (!lock.owns_lock()) return;
    auto& engine = GetEngine();
    if (engine.release_requested) engine.Release();
    lock.unlock();
    // A request that came in after the check above found the lock taken: honour it here.
    if (engine.release_requested) ReleaseStaging();
  }

  static Lease Acquire(const CudaContext& context, const TransferOptions& options) {
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
};

// The stream and per-slot events of one transfer in `context`: the ring's own for its
// owner context, made for this transfer (and destroyed after it) for any other.
class Streams {
 public:
  Streams(const CudaContext& context, Ring& ring) : context_(context), ring_(ring) {
    cached_ = context.handle() == ring.owner->handle();
    if (!cached_) events_.assign(ring.slots, nullptr);
  }
  ~Streams() {
    if (cached_) return;
    for (CUevent event : events_) {
      if (event != nullptr) context_.DestroyEvent(event);
    }
    if (stream_ != nullptr) context_.DestroyStream(stream_);
  }

  // Blocking (flags 0): ordered after work on the legacy default stream, like cuMemcpy.
  Result<CUstream> Stream() {
    CUstream& stream = cached_ ? ring_.stream : stream_;
    if (stream == nullptr) {
      ARROW_ASSIGN_OR_RAISE(stream, context_.CreateStream(0));
    }
    return stream;
  }
  // Made on first use by the coordinating thread only; workers read it after that.
  Result<CUevent> Event(int slot) {
    CUevent& event = cached_ ? ring_.events[slot] : events_[slot];
    if (event == nullptr) {
      ARROW_ASSIGN_OR_RAISE(event, context_.CreateEvent());
    }
    return event;
  }
  CUevent Recorded(int slot) const { return cached_ ? ring_.events[slot] : events_[slot]; }

 private:
  const CudaContext& context_;
  Ring& ring_;
  bool cached_;
  CUstream stream_ = nullptr;
  std::vector<CUevent> events_;
};

// ---------------------------------------------------------------------------------------
// Planning: pieces -> chunks of staging slots

struct Part {
  uint8_t* host;
  uintptr_t device;
  int64_t size;
  int64_t slot_offset;
  bool joins;  // same DMA as the previous part: the slot mirrors the device gap between them
};

struct Chunk {
  size_t begin, end;  // parts
  int64_t bytes;      // payload
  int64_t unit;       // bytes one worker stages (or unstages) at a time
};

// Consecutive parts of one chunk that one worker stages (or unstages) at a time.
struct Unit {
  size_t chunk;
  size_t begin, end;  // parts
};

// How much staging each chunk of a transfer may fill. Small chunks first, so that the first
// DMA starts after little staging; then doubling to the whole slot, since the DMA engine
// moves large copies faster (bench/host_load_bench.py on an H100: 46-48 GB/s in 1 MiB copies,
// 53-54 GB/s in 8 MiB ones); then halving again, so that what is left to do after the last
// DMA (unstaging a download's last chunk) is short.
struct ChunkSizes {
  int64_t smallest, largest, total;

  int64_t For(int64_t planned) const {
    int64_t size = std::min(planned, (total - planned) / 2);
    return std::clamp(AlignUp(size, kAlignment), smallest, largest);
  }
  // Staging that one worker copies at a time: a quarter of the chunk at most, so that
  // several threads share even the smallest chunk.
  static int64_t UnitFor(int64_t chunk) { return std::clamp(chunk / 4, kAlignment, kUnitBytes); }
};

// Splits pieces into parts no larger than their chunk's unit (so that workers can share a
// chunk), packed into chunks of staging sized by `sizes`.
void Plan(const std::vector<Piece>& pieces, const ChunkSizes& sizes, std::vector<Part>* parts,
          std::vector<Chunk>* chunks) {
  size_t chunk_begin = 0;
  int64_t cursor = 0, payload = 0, planned = 0;
  int64_t limit = sizes.For(0), unit = ChunkSizes::UnitFor(limit);
  uintptr_t region_begin = 0, region_end = 0;
  auto close = [&] {
    if (parts->size() > chunk_begin) {
      chunks->push_back({chunk_begin, parts->size(), payload, unit});
    }
    chunk_begin = parts->size();
    planned += payload;
    cursor = payload = 0;
    limit = sizes.For(planned);
    unit = ChunkSizes::UnitFor(limit);
  };
  for (const Piece& piece : pieces) {
    int64_t done = 0;
    while (done < piece.size) {
      uintptr_t here = piece.device + done;
      int64_t offset = AlignUp(cursor, kAlignment);
      bool joins = false;
      if (parts->size() > chunk_begin && piece.region_begin == region_begin &&
          piece.region_end == region_end && region_end > region_begin) {
        const Part& last = parts->back();
        uintptr_t last_end = last.device + last.size;
        if (here >= last_end && here - last_end <= static_cast<uintptr_t>(kMaxGap)) {
          offset = last.slot_offset + last.size + static_cast<int64_t>(here - last_end);
          joins = true;
        }
      }
      if (offset >= limit) {
        close();
        continue;
      }
      int64_t n = std::min({limit - offset, piece.size - done, unit});
      parts->push_back({piece.host + done, here, n, offset, joins});
      region_begin = piece.region_begin;
      region_end = piece.region_end;
      cursor = offset + n;
      payload += n;
      done += n;
      if (cursor >= limit) close();
    }
  }
  close();
}

// Groups the parts of each chunk into units of about the chunk's unit size.
std::vector<Unit> Units(const std::vector<Part>& parts, const std::vector<Chunk>& chunks) {
  std::vector<Unit> units;
  for (size_t c = 0; c < chunks.size(); ++c) {
    size_t begin = chunks[c].begin;
    int64_t bytes = 0;
    for (size_t k = chunks[c].begin; k < chunks[c].end; ++k) {
      bytes += parts[k].size;
      if (bytes >= chunks[c].unit || k + 1 == chunks[c].end) {
        units.push_back({c, begin, k + 1});
        begin = k + 1;
        bytes = 0;
      }
    }
  }
  return units;
}

// One synchronous driver copy: it returns once the host memory may be reused.
Status DirectCopy(const CudaContext& context, Direction direction, const Piece& piece) {
  ARROW_GPU_ENTER(context);
  const DriverTable* driver = context.driver();
  if (direction == Direction::kToDevice) {
    ARROW_GPU_CU(driver, MemcpyHtoD, piece.device, piece.host, static_cast<size_t>(piece.size));
  } else {
    ARROW_GPU_CU(driver, MemcpyDtoH, piece.host, piece.device, static_cast<size_t>(piece.size));
  }
  return Status::OK();
}

// Copies with non-temporal stores where the CPU has them (memcpy elsewhere), for
// destinations this CPU does not read soon. A download's destination is large: writing
// around the caches spares the read of every destination line before it is overwritten
// (12 threads unstaging into a 1 GiB destination on a 16-core host: 162 GB/s this way,
// 61 GB/s with memcpy). A small upload's staging is read next by the DMA engine (see
// Pipeline::Stage).
void StreamingCopy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, src += 64, dst += 64) {
    const auto* from = reinterpret_cast<const __m128i*>(src);
    auto* to = reinterpret_cast<__m128i*>(dst);
    __m128i a = _mm_loadu_si128(from), b = _mm_loadu_si128(from + 1);
    __m128i c = _mm_loadu_si128(from + 2), d = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, a);
    _mm_stream_si128(to + 1, b);
    _mm_stream_si128(to + 2, c);
    _mm_stream_si128(to + 3, d);
  }
  std::memcpy(dst, src, n);
  _mm_sfence();  // the streamed stores are ordered before whatever this thread does next
#else
  std::memcpy(dst, src, n);
#endif
}

// Pageable -> staging for parts [begin, end), with non-temporal stores if `streaming`; gaps
// that one DMA spans are zeroed (no stale staging bytes leak).
void StageParts(size_t begin, size_t end, const std::vector<Part>& parts, uint8_t* base,
                bool streaming = false) {
  for (size_t k = begin; k < end; ++k) {
    const Part& part = parts[k];
    if (part.joins) {
      const Part& last = parts[k - 1];
      int64_t end = last.slot_offset + last.size;
      std::memset(base + end, 0, static_cast<size_t>(part.slot_offset - end));
    }
    auto size = static_cast<size_t>(part.size);
    if (streaming) {
      StreamingCopy(base + part.slot_offset, part.host, size);
    } else {
      std::memcpy(base + part.slot_offset, part.host, size);
    }
  }
}

// Staging -> pageable; parts of kStreamingBytes and more are streamed (small ones are
// likely read again soon, from the cache).
void UnstageParts(size_t begin, size_t end, const std::vector<Part>& parts,
                  const uint8_t* base) {
  for (size_t k = begin; k < end; ++k) {
    const Part& part = parts[k];
    auto size = static_cast<size_t>(part.size);
    if (part.size >= kStreamingBytes) {
      StreamingCopy(part.host, base + part.slot_offset, size);
    } else {
      std::memcpy(part.host, base + part.slot_offset, size);
    }
  }
}

// Moves the cache lines of [address, address + n) from this core's private caches to the
// shared one, where the CPU has CLDEMOTE (a no-op elsewhere): see Pipeline::Stage.
#if defined(ARROW_GPU_CLDEMOTE)
bool CanDemote() {
  static const bool can = [] {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 25)) != 0;
  }();
  return can;
}
__attribute__((target("cldemote"))) void Demote(const uint8_t* address, int64_t n) {
  if (!CanDemote()) return;
  for (int64_t offset = 0; offset < n; offset += 64) {
    _cldemote(const_cast<uint8_t*>(address) + offset);
  }
}
#else
void Demote(const uint8_t*, int64_t) {}
#endif

// The chunk's DMAs between the staging memory at `base` and the device, one per run of
// joined parts: ordered on `stream`, or synchronous without one.
Status CopyChunk(const CudaContext& context, Direction direction, const Chunk& chunk,
                 const std::vector<Part>& parts, uint8_t* base, CUstream stream) {
  for (size_t k = chunk.begin; k < chunk.end;) {
    size_t j = k + 1;
    while (j < chunk.end && parts[j].joins) ++j;
    const Part& first = parts[k];
    const Part& last = parts[j - 1];
    int64_t length = static_cast<int64_t>(last.device + last.size - first.device);
    uint8_t* staged = base + first.slot_offset;
    if (stream == nullptr) {
      ARROW_RETURN_NOT_OK(
          DirectCopy(context, direction, Piece{staged, first.device, length, 0, 0}));
    } else if (direction == Direction::kToDevice) {
      ARROW_RETURN_NOT_OK(context.CopyHostToDeviceAsync(first.device, staged, length, stream));
    } else {
      ARROW_RETURN_NOT_OK(context.CopyDeviceToHostAsync(staged, first.device, length, stream));
    }
    k = j;
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------
// The pipeline

class Pipeline {
 public:
  Pipeline(const CudaContext& context, Direction direction, Ring& ring, Streams& streams,
           CUstream stream, const std::vector<Part>& parts, const std::vector<Chunk>& chunks,
           int64_t total)
      : context_(context),
        direction_(direction),
        ring_(ring),
        streams_(streams),
        stream_(stream),
        parts_(parts),
        chunks_(chunks),
        state_(chunks.size(), 0),
        first_slot_(ring.next_slot % ring.slots),
        demote_from_(chunks.size()) {
    if (direction == Direction::kToHost) return;
    streamed_ = total <= kStreamedUploadBytes;
    if (streamed_) return;  // nothing is left in the caches to demote
    int64_t tail = 0;
    while (demote_from_ > 0 && tail < kDemoteBytes) tail += chunks[--demote_from_].bytes;
  }

  // The slot after the last one this transfer uses.
  int EndSlot() const { return SlotOf(chunks_.size()); }

  // Everything on the calling thread, `alongside` first: the DMA of one chunk still overlaps
  // staging the next.
  Status RunInline(const Alongside& alongside) {
    if (alongside) ARROW_RETURN_NOT_OK(alongside());
    const size_t n = chunks_.size(), slots = ring_.slots;
    if (direction_ == Direction::kToDevice) {
      for (size_t i = 0; i < n; ++i) {
        if (i >= slots) {
          ARROW_RETURN_NOT_OK(context_.SynchronizeEvent(streams_.Recorded(SlotOf(i))));
        }
        Stage(i, chunks_[i].begin, chunks_[i].end);
        ARROW_RETURN_NOT_OK(Issue(i));
        ARROW_RETURN_NOT_OK(ReportProgress(chunks_[i].bytes));
      }
      return Status::OK();
    }
    size_t issued = 0;
    for (; issued < std::min(n, slots); ++issued) {
      ARROW_RETURN_NOT_OK(Issue(issued));
    }
    for (size_t i = 0; i < n; ++i) {
      ARROW_RETURN_NOT_OK(context_.SynchronizeEvent(streams_.Recorded(SlotOf(i))));
      UnstageParts(chunks_[i].begin, chunks_[i].end, parts_, ring_.slot(SlotOf(i)));
      ARROW_RETURN_NOT_OK(ReportProgress(chunks_[i].bytes));
      if (issued < n) {
        ARROW_RETURN_NOT_OK(Issue(issued));
        ++issued;
      }
    }
    return Status::OK();
  }

  // Workers stage (or unstage) the units of the chunks in order, all of them sharing each
  // chunk, and whichever completes a chunk issues the DMAs that may go then. The calling
  // thread stages an upload's first chunk itself (the DMA engine starts without waiting for
  // workers to wake, which takes 35 us or more on virtual machines), runs `alongside`, then
  // copies with the workers, or reports progress if a callback is set.
  Status RunWorkers(WorkerPool& pool, int threads, const std::vector<Unit>& units,
                    const Alongside& alongside) {
    const bool upload = direction_ == Direction::kToDevice;
    const bool progress = ProgressOn();
    remaining_ = std::make_unique<std::atomic<int>[]>(chunks_.size());
    size_t first_chunk_units = 0;
    for (const Unit& unit : units) {
      remaining_[unit.chunk].fetch_add(1);
      if (unit.chunk == 0) ++first_chunk_units;
    }
    Status status = upload ? Status::OK() : IssueReady();  // the first downloads
    pool.Start(progress ? threads : threads - 1, [this, &units] { Work(units, units.size()); });
    if (upload) Work(units, first_chunk_units);
    if (status.ok() && alongside) status = alongside();
    if (status.ok() && progress) {
      for (size_t i = 0; i < chunks_.size() && status.ok(); ++i) {
        if (!WaitFor(i, kDone)) break;  // failed: error_ says why
        status = ReportProgress(chunks_[i].bytes);
      }
    } else if (status.ok()) {
      Work(units, units.size());
    }
    if (!status.ok()) Fail(status);
    pool.Wait();
    return error_;
  }

 private:
  // A chunk's states. Upload: staged, then issued. Download: issued (arriving), then
  // unstaged. kDone is the last either way.
  static constexpr int kStaged = 1, kIssued = 2;
  static constexpr int kArrived = 1, kUnstaged = 2;
  static constexpr int kDone = 2;

  // Claims the next unit, in order, if it comes before `end`.
  bool Claim(size_t end, size_t* u) {
    size_t next = next_unit_.load();
    while (next < end) {
      if (next_unit_.compare_exchange_weak(next, next + 1)) {
        *u = next;
        return true;
      }
    }
    return false;
  }

  // Stages (or unstages) claimed units until those before `end` are all claimed.
  void Work(const std::vector<Unit>& units, size_t end) {
    const bool upload = direction_ == Direction::kToDevice;
    const size_t slots = ring_.slots;
    size_t u;
    while (!failed_ && Claim(end, &u)) {
      const Unit& unit = units[u];
      size_t i = unit.chunk;
      // An upload waits for the slot's previous chunk to have left it, a download for its
      // own chunk to have arrived.
      if (!upload || i >= slots) {
        if (!WaitFor(upload ? i - slots : i, upload ? kIssued : kArrived)) return;
        Status synced = context_.SynchronizeEvent(streams_.Recorded(SlotOf(i)));
        if (!synced.ok()) return Fail(synced);
      }
      if (upload) {
        Stage(i, unit.begin, unit.end);
      } else {
        UnstageParts(unit.begin, unit.end, parts_, ring_.slot(SlotOf(i)));
      }
      if (remaining_[i].fetch_sub(1) == 1) {  // the chunk's last unit
        Mark(i, upload ? kStaged : kUnstaged);
        Status issued = IssueReady();
        if (!issued.ok()) return Fail(issued);
      }
    }
  }

  // Issues, in order, each next chunk that may go: an upload once staged, a download once
  // its slot's previous chunk is unstaged. Any thread may call it; one issues at a time.
  Status IssueReady() {
    const bool upload = direction_ == Direction::kToDevice;
    const size_t n = chunks_.size(), slots = ring_.slots;
    std::lock_guard<std::mutex> issuing(issue_mutex_);
    for (; next_issue_ < n; ++next_issue_) {
      size_t i = next_issue_;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        bool ready = upload ? state_[i] >= kStaged : i < slots || state_[i - slots] >= kUnstaged;
        if (failed_ || !ready) return Status::OK();
      }
      ARROW_RETURN_NOT_OK(Issue(i));
      Mark(i, upload ? kIssued : kArrived);
    }
    return Status::OK();
  }

  // Waits until chunk i reaches `state`; false if the transfer failed meanwhile.
  bool WaitFor(size_t i, int state) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return failed_ || state_[i] >= state; });
    return !failed_;
  }
  void Mark(size_t i, int state) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_[i] = state;
    }
    changed_.notify_all();
  }
  void Fail(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed_) error_ = status;
      failed_ = true;
    }
    changed_.notify_all();
  }

  int SlotOf(size_t i) const { return static_cast<int>((first_slot_ + i) % ring_.slots); }

  // Stages parts [begin, end) of chunk i. The DMA engine reads lines that a core still holds
  // modified in its private caches at a half to a third of its rate (bench/host_load_bench.py);
  // on an H100 host a chunk's lines had left those caches once some 16 MiB more were staged.
  // An upload of at most kStreamedUploadBytes never gets that far ahead: it is staged with
  // non-temporal stores, which write around the caches (on an H100 host, 4, 16 and 32 MiB
  // tables went to the device 29, 5 and 11 % faster). A larger one is staged through the
  // caches, which is faster, and only its last chunks, which nothing follows, are demoted:
  // demoting the last 16 MiB moved a 134 MiB upload 7 % faster, while demoting every chunk
  // slowed staging more than it sped the DMAs.
  void Stage(size_t i, size_t begin, size_t end) {
    uint8_t* slot = ring_.slot(SlotOf(i));
    StageParts(begin, end, parts_, slot, streamed_);
    if (i < demote_from_) return;
    const Part& first = parts_[begin];
    const Part& last = parts_[end - 1];
    Demote(slot + first.slot_offset, last.slot_offset + last.size - first.slot_offset);
  }

  // The chunk's DMAs (one per run of joined parts), then the slot's event.
  Status Issue(size_t i) {
    const int slot = SlotOf(i);
    ARROW_RETURN_NOT_OK(
        CopyChunk(context_, direction_, chunks_[i], parts_, ring_.slot(slot), stream_));
    ARROW_ASSIGN_OR_RAISE(CUevent event, streams_.Event(slot));
    return context_.RecordEvent(event, stream_);
  }

  const CudaContext& context_;
  Direction direction_;
  Ring& ring_;
  Streams& streams_;
  CUstream stream_;
  const std::vector<Part>& parts_;
  const std::vector<Chunk>& chunks_;
  std::mutex mutex_;  // guards state_, failed_ (written) and error_
  std::condition_variable changed_;
  std::vector<int> state_;
  std::atomic<bool> failed_{false};
  Status error_;
  std::unique_ptr<std::atomic<int>[]> remaining_;  // units of each chunk not yet done
  std::atomic<size_t> next_unit_{0};
  std::mutex issue_mutex_;  // guards next_issue_ and the order of DMAs on the stream
  size_t next_issue_ = 0;
  const int first_slot_;      // of chunk 0
  size_t demote_from_;        // the first chunk of an upload's last kDemoteBytes
  bool streamed_ = false;     // an upload staged with non-temporal stores
};

Status RunPipeline(const CudaContext& context, Direction direction,
                   const std::vector<Piece>& pieces, int64_t total, Lease& lease,
                   const TransferOptions& options, const Alongside& alongside) {
  Ring& ring = *lease.ring;
  // Large enough to share with workers (a unit is under 2 * kUnitBytes): wake them now, as
  // waking takes longer than planning.
  if (lease.pool != nullptr && total >= 2 * kUnitBytes) lease.pool->Wake();
  std::vector<Part> parts;
  std::vector<Chunk> chunks;
  const int64_t first = AlignUp(ring.slot_bytes / kFirstChunkShare, kAlignment);
  Plan(pieces, ChunkSizes{first, ring.slot_bytes, total}, &parts, &chunks);

  Streams streams(context, ring);
  ARROW_ASSIGN_OR_RAISE(CUstream stream, streams.Stream());
  Pipeline pipeline(context, direction, ring, streams, stream, parts, chunks, total);
  std::vector<Unit> units = Units(parts, chunks);
  int threads = static_cast<int>(std::min<size_t>(options.threads, units.size()));
  Status status = lease.pool != nullptr && threads > 1
                      ? pipeline.RunWorkers(*lease.pool, threads, units, alongside)
                      : pipeline.RunInline(alongside);
  ring.next_slot = pipeline.EndSlot();
  // Whatever happened, no DMA may still be using the ring when the lease ends.
  Status synced = context.SynchronizeStream(stream);
  return status.ok() ? synced : status;
}

// Orders the engine's next copies after the work queued on `after` so far, on the GPU: the
// legacy default stream waits for it, and every engine copy comes after that stream's work
// (direct copies run on it, and the ring's stream is a blocking one).
Status Follow(const CudaContext& context, CUstream after) {
  return after == nullptr ? Status::OK() : context.Order(LegacyStream(), after);
}

// Copies every piece: through the ring when that pays (a large copy, or several pieces to
// pack into one DMA), else one synchronous driver copy each.
Status TransferPieces(const CudaContext& context, Direction direction,
                      const std::vector<Piece>& pieces, const Alongside& alongside,
                      CUstream after) {
  ARROW_RETURN_NOT_OK(Follow(context, after));
  int64_t total = 0;
  for (const Piece& piece : pieces) total += piece.size;
  TransferOptions options = Effective();
  if (total > 0 && options.staging_bytes > 0 &&
      (total >= options.small_copy_bytes || pieces.size() > 1)) {
    if (total < options.small_copy_bytes) {
      // Small: packed in ordinary host memory and moved with one synchronous copy (per
      // run of joined pieces); latency is what counts, and the pinned ring would cost its
      // allocation on the first call and its lock on every call.
      if (alongside) ARROW_RETURN_NOT_OK(alongside());
      std::vector<Part> parts;
      std::vector<Chunk> chunks;
      int64_t room = total + static_cast<int64_t>(pieces.size()) * (kAlignment + kMaxGap);
      Plan(pieces, ChunkSizes{room, room, total}, &parts, &chunks);
      std::unique_ptr<uint8_t[]> packed(new uint8_t[room]);
      for (const Chunk& chunk : chunks) {
        if (direction == Direction::kToDevice) {
          StageParts(chunk.begin, chunk.end, parts, packed.get());
        }
        ARROW_RETURN_NOT_OK(CopyChunk(context, direction, chunk, parts, packed.get(), nullptr));
        if (direction == Direction::kToHost) {
          UnstageParts(chunk.begin, chunk.end, parts, packed.get());
        }
      }
      return ReportProgress(total);
    }
    Lease lease = Lease::Acquire(context, options);
    if (lease.ring != nullptr) {
      return RunPipeline(context, direction, pieces, total, lease, options, alongside);
    }
  }
  if (alongside) ARROW_RETURN_NOT_OK(alongside());
  for (const Piece& piece : pieces) {
    if (piece.size > 0) ARROW_RETURN_NOT_OK(DirectCopy(context, direction, piece));
  }
  return ReportProgress(total);
}

bool IsPinned(const CudaContext& context, const void* address) {
  return context.MemoryType(reinterpret_cast<uintptr_t>(address)) == CU_MEMORYTYPE_HOST;
}

Status EngineCopy(const CudaContext& context, Direction direction, uint8_t* host,
                  uintptr_t device, int64_t nbytes, HostMemory kind, CUstream after) {
  if (nbytes < 0) return Status::Invalid("cannot copy a negative number of bytes: ", nbytes);
  if (nbytes == 0) return Status::OK();
  Piece piece{host, device, nbytes, device, device + static_cast<uintptr_t>(nbytes)};
  TransferOptions options = GetTransferOptions();
  bool direct = options.staging_bytes == 0 || nbytes < options.small_copy_bytes ||
                kind == HostMemory::kPinned ||
                (kind == HostMemory::kUnknown && IsPinned(context, host));
  if (direct) {
    ARROW_RETURN_NOT_OK(Follow(context, after));
    ARROW_RETURN_NOT_OK(DirectCopy(context, direction, piece));
    return ReportProgress(nbytes);
  }
  return TransferPieces(context, direction, {piece}, nullptr, after);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Public API

TransferOptions GetTransferOptions() {
  auto& slot = Options();
  std::lock_guard<std::mutex> lock(slot.mutex);
  return slot.options;
}

Status SetTransferOptions(const TransferOptions& options) {
  if (options.staging_bytes < 0 || (options.staging_bytes > 0 && options.staging_bytes < 2 * kAlignment)) {
    return Status::Invalid("staging_bytes must be 0 (no staging) or at least ", 2 * kAlignment,
                           ", got ", options.staging_bytes);
  }
  if (options.chunk_bytes < kAlignment) {
    return Status::Invalid("chunk_bytes must be at least ", kAlignment, ", got ",
                           options.chunk_bytes);
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return Status::Invalid("threads must be between 0 (automatic) and ", kMaxThreads, ", got ",
                           options.threads);
  }
  if (options.small_copy_bytes < 0) {
    return Status::Invalid("small_copy_bytes must be non-negative, got ",
                           options.small_copy_bytes);
  }
  // The ring is 2 to kMaxSlots slots of chunk_bytes: a ring it cannot make is refused, not
  // made smaller or larger than the options say.
  if (options.staging_bytes > 0 && options.chunk_bytes > options.staging_bytes / 2) {
    return Status::Invalid("chunk_bytes (", options.chunk_bytes, ") must be at most half of "
                           "staging_bytes (", options.staging_bytes, "): the staging ring "
                           "pipelines at least two slots of chunk_bytes; pass a smaller "
                           "chunk_bytes or a larger staging_bytes");
  }
  if (options.staging_bytes / kMaxSlots > options.chunk_bytes) {
    return Status::Invalid("staging_bytes (", options.staging_bytes, ") is more than the "
                           "staging ring holds: at most ", kMaxSlots, " slots of chunk_bytes (",
                           options.chunk_bytes, "), ", kMaxSlots * options.chunk_bytes,
                           " bytes; pass a larger chunk_bytes or a smaller staging_bytes");
  }
  auto& slot = Options();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.options = options;
  return Status::OK();
}

void ReleaseStaging() {
  auto& engine = GetEngine();
  // A transfer may hold the ring while it reports progress, and the progress callback may
  // be what calls this: waiting for that transfer would wait for ourselves. It frees the
  // ring when it ends instead.
  engine.release_requested = true;
  std::unique_lock<std::mutex> lock(engine.busy, std::try_to_lock);
  if (lock.owns_lock()) engine.Release();
}

int64_t StagingBytesHeld() { return GetEngine().held.load(); }

Status EngineHostToDevice(const CudaContext& context, uintptr_t dst, const void* src,
                          int64_t nbytes, HostMemory kind, CUstream after) {
  return EngineCopy(context, Direction::kToDevice,
                    static_cast<uint8_t*>(const_cast<void*>(src)), dst, nbytes, kind, after);
}

Status EngineTransfer(const CudaContext& context, Direction direction,
                      const std::vector<Piece>& pieces, const Alongside& alongside,
                      CUstream after) {
  return TransferPieces(context, direction, pieces, alongside, after);
}

Status EngineDeviceToHost(const CudaContext& context, void* dst, uintptr_t src, int64_t nbytes,
                          HostMemory kind, CUstream after) {
  return EngineCopy(context, Direction::kToHost, static_cast<uint8_t*>(dst), src, nbytes, kind,
                    after);
}

}  // namespace arrow_gpu
