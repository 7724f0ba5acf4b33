#include "engine/pipeline.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "engine/dma.h"
#include "engine/host_copy.h"
#include "engine/progress.h"

namespace arrow_gpu::engine {
namespace {

using arrow::Status;

constexpr int64_t kDemoteBytes = 16 << 20;          // see Pipeline::Stage
constexpr int64_t kStreamedUploadBytes = 32 << 20;  // see Pipeline::Stage

class Pipeline {
 public:
  Pipeline(const CudaContext& context, Direction direction, Ring& ring, SlotStreams& streams,
           CUstream stream, CUstream after, const std::vector<Part>& parts,
           const std::vector<Chunk>& chunks, int64_t total)
      : context_(context),
        direction_(direction),
        ring_(ring),
        streams_(streams),
        stream_(stream),
        after_(after),
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
    ARROW_RETURN_NOT_OK(OrderAfterCaller());
    if (alongside) ARROW_RETURN_NOT_OK(alongside());
    const size_t n = chunks_.size(), slots = ring_.slots;
    if (direction_ == Direction::kToDevice) {
      for (size_t i = 0; i < n; ++i) {
        if (i >= slots) {
          ARROW_RETURN_NOT_OK(context_.SynchronizeEvent(streams_.Recorded(SlotOf(i))));
        }
        ARROW_RETURN_NOT_OK(Stage(i, chunks_[i].begin, chunks_[i].end));
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

  // Workers stage (or unstage) the tasks of the chunks in order, all of them sharing each
  // chunk, and whichever completes a chunk issues the DMAs that may go then. A download's
  // first DMAs are issued before the workers are woken, as they have nothing to do until the
  // first chunk arrives. The calling thread orders an upload's stream while the workers
  // stage its first chunk, then stages with them until that chunk is done (the DMA engine
  // starts without waiting for the slowest worker to wake), runs `alongside`, then copies
  // with the workers, or reports progress if a callback is set.
  Status RunWorkers(WorkerPool& pool, int threads, const std::vector<Task>& tasks,
                    const Alongside& alongside) {
    const bool upload = direction_ == Direction::kToDevice;
    const bool progress = ProgressOn();
    remaining_ = std::make_unique<std::atomic<int>[]>(chunks_.size());
    size_t first_chunk_tasks = 0;
    for (const Task& task : tasks) {
      remaining_[task.chunk].fetch_add(1);
      if (task.chunk == 0) ++first_chunk_tasks;
    }
    Status status;
    if (!upload) {
      status = OrderAfterCaller();
      if (status.ok()) status = IssueReady();  // the first downloads
    }
    pool.Start(progress ? threads : threads - 1, [this, &tasks] { Work(tasks, tasks.size()); });
    if (upload) {
      status = OrderAfterCaller();
      if (status.ok()) status = IssueReady();  // what the workers staged meanwhile
      if (status.ok()) Work(tasks, first_chunk_tasks);
    }
    if (status.ok() && alongside) status = alongside();
    if (status.ok() && progress) {
      for (size_t i = 0; i < chunks_.size() && status.ok(); ++i) {
        if (!WaitFor(i, kDone)) break;  // failed: error_ says why
        status = ReportProgress(chunks_[i].bytes);
      }
    } else if (status.ok()) {
      Work(tasks, tasks.size());
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

  // Claims the next task, in order, if it comes before `end`.
  bool Claim(size_t end, size_t* u) {
    size_t next = next_task_.load();
    while (next < end) {
      if (next_task_.compare_exchange_weak(next, next + 1)) {
        *u = next;
        return true;
      }
    }
    return false;
  }

  // Stages (or unstages) claimed tasks until those before `end` are all claimed.
  void Work(const std::vector<Task>& tasks, size_t end) {
    const bool upload = direction_ == Direction::kToDevice;
    const size_t slots = ring_.slots;
    size_t u;
    while (!failed_ && Claim(end, &u)) {
      const Task& task = tasks[u];
      size_t i = task.chunk;
      // An upload waits for the slot's previous chunk to have left it, a download for its
      // own chunk to have arrived.
      if (!upload || i >= slots) {
        if (!WaitFor(upload ? i - slots : i, upload ? kIssued : kArrived)) return;
        Status synced = context_.SynchronizeEvent(streams_.Recorded(SlotOf(i)));
        if (!synced.ok()) return Fail(synced);
      }
      if (upload) {
        Status staged = Stage(i, task.begin, task.end);
        if (!staged.ok()) return Fail(staged);  // a file that cannot be read: no DMA of it
      } else {
        UnstageParts(task.begin, task.end, parts_, ring_.slot(SlotOf(i)));
      }
      if (remaining_[i].fetch_sub(1) == 1) {  // the chunk's last task
        Mark(i, upload ? kStaged : kUnstaged);
        Status issued = IssueReady();
        if (!issued.ok()) return Fail(issued);
      }
    }
  }

  // Orders the transfer's stream after the work queued on the caller's: no DMA is issued
  // before.
  Status OrderAfterCaller() {
    Status status = context_.Order(stream_, after_ == nullptr ? LegacyStream() : after_);
    std::lock_guard<std::mutex> issuing(issue_mutex_);
    ordered_ = status.ok();
    return status;
  }

  // Issues, in order, each next chunk that may go: an upload once staged, a download once
  // its slot's previous chunk is unstaged. Any thread may call it; one issues at a time,
  // and none before the stream is ordered.
  Status IssueReady() {
    const bool upload = direction_ == Direction::kToDevice;
    const size_t n = chunks_.size(), slots = ring_.slots;
    std::lock_guard<std::mutex> issuing(issue_mutex_);
    if (!ordered_) return Status::OK();
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
  // modified in its private caches much slower than others (bench/host_load_bench.py), and
  // a chunk's lines leave those caches only once some kDemoteBytes more are staged. An upload
  // of at most kStreamedUploadBytes never gets that far ahead: it is staged with non-temporal
  // stores, which write around the caches. A larger one is staged through the caches, which
  // is faster, and only its last chunks, which nothing follows, are demoted: demoting every
  // chunk slowed staging more than it sped the DMAs.
  // A part read from its file cannot be written around the caches: in a streamed upload,
  // StageParts demotes it as soon as it is read.
  Status Stage(size_t i, size_t begin, size_t end) {
    uint8_t* slot = ring_.slot(SlotOf(i));
    ARROW_RETURN_NOT_OK(StageParts(begin, end, parts_, slot, streamed_));
    if (i < demote_from_) return Status::OK();
    const Part& first = parts_[begin];
    const Part& last = parts_[end - 1];
    Demote(slot + first.slot_offset, last.slot_offset + last.size - first.slot_offset);
    return Status::OK();
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
  SlotStreams& streams_;
  CUstream stream_;
  const CUstream after_;  // the caller's stream: the transfer's waits for its work
  const std::vector<Part>& parts_;
  const std::vector<Chunk>& chunks_;
  std::mutex mutex_;  // guards state_, failed_ (written) and error_
  std::condition_variable changed_;
  std::vector<int> state_;
  std::atomic<bool> failed_{false};
  Status error_;
  std::unique_ptr<std::atomic<int>[]> remaining_;  // tasks of each chunk not yet done
  std::atomic<size_t> next_task_{0};
  std::mutex issue_mutex_;  // guards next_issue_, ordered_ and the order of DMAs on the stream
  size_t next_issue_ = 0;
  bool ordered_ = false;  // the stream waits for after_'s work
  const int first_slot_;      // of chunk 0
  size_t demote_from_;        // the first chunk of an upload's last kDemoteBytes
  bool streamed_ = false;     // an upload staged with non-temporal stores
};

}  // namespace

Status RunPipeline(const CudaContext& context, Direction direction,
                   const std::vector<Piece>& pieces, int64_t total, Lease& lease,
                   const TransferOptions& options, const Alongside& alongside,
                   CUstream after) {
  Ring& ring = *lease.ring;
  const bool upload = direction == Direction::kToDevice;
  // An upload large enough to share with workers (a task is under 2 * kMaxTaskBytes) wakes
  // them now, as waking takes longer than planning. A download wakes them once its first
  // DMAs are issued (see Pipeline::RunWorkers).
  if (upload && lease.pool != nullptr && total >= 2 * kMaxTaskBytes) lease.pool->Wake();
  std::vector<Part> parts;
  std::vector<Chunk> chunks;
  const int64_t first = AlignUp(ring.slot_bytes / kFirstChunkShare, kAlignment);
  ChunkSizes sizes{first, ring.slot_bytes, total};
  if (upload) {
    // A streamed upload's staging is no faster than its DMAs: its last chunk would go out
    // after staging it all. A larger one's staging runs ahead (see ChunkSizes).
    sizes.shrink = total <= kStreamedUploadBytes;
  } else {
    sizes.grow = false;
    sizes.largest_task = kMaxDownloadTaskBytes;
    sizes.host_page = kHugePageBytes;
  }
  Plan(pieces, sizes, &parts, &chunks);

  SlotStreams streams(context, ring);
  ARROW_ASSIGN_OR_RAISE(CUstream stream, streams.Stream());
  Pipeline pipeline(context, direction, ring, streams, stream, after, parts, chunks, total);
  std::vector<Task> tasks = Tasks(parts, chunks);
  int threads = static_cast<int>(std::min<size_t>(options.threads, tasks.size()));
  Status status = lease.pool != nullptr && threads > 1
                      ? pipeline.RunWorkers(*lease.pool, threads, tasks, alongside)
                      : pipeline.RunInline(alongside);
  ring.next_slot = pipeline.EndSlot();
  // Whatever happened, no DMA may still be using the ring when the lease ends.
  Status synced = context.SynchronizeStream(stream);
  return status.ok() ? synced : status;
}

}  // namespace arrow_gpu::engine
