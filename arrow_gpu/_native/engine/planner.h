// The planner: how a transfer's pieces are cut and packed into staging.
//
// The vocabulary of the engine: a transfer is a list of pieces (engine/transfer.h). The
// planner cuts them into parts and packs the parts into chunks, one staging slot's worth
// each, which the pipeline moves one DMA round at a time. A task is a run of consecutive
// parts of one chunk that one worker stages (or unstages) at a time, so that all threads
// share each chunk and its DMA starts after a task's copy, not a whole chunk's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/transfer.h"

namespace arrow_gpu::engine {

constexpr int64_t kMaxGap = 256;          // device gaps a single DMA may span (see Plan)
constexpr int64_t kFirstChunkShare = 32;  // the first chunks are 1/32 of a slot (ChunkSizes)
constexpr int64_t kMaxTaskBytes = 256 << 10;  // an upload's largest task (see ChunkSizes)
// The transparent huge page that a download's destination faults in at once, and that its
// parts and full chunks are cut at (see ChunkSizes::host_page): a task that began inside one
// page and ended inside the next had two workers take the fault of that page in turn.
constexpr int64_t kHugePageBytes = 2 << 20;
// A download's largest task, one huge page. Its worker takes the page faults of memory the
// process never touched, and every thread writing into a page waits for its fault: tasks of
// 256 KiB had eight workers waiting on each page in turn (the figures are in
// bench/RESULTS.md).
constexpr int64_t kMaxDownloadTaskBytes = kHugePageBytes;

// A piece's share of one chunk (from host memory, or from the piece's file: see Piece).
struct Part {
  uint8_t* host;
  uintptr_t device;
  int64_t size;
  int64_t slot_offset;
  bool joins;  // same DMA as the previous part: the slot mirrors the device gap between them
  FileRange file = {};

  bool FromFile() const { return file.fd >= 0; }
};

struct Chunk {
  size_t begin, end;   // parts
  int64_t bytes;       // payload
  int64_t task_bytes;  // bytes one worker stages (or unstages) at a time
};

struct Task {
  size_t chunk;
  size_t begin, end;  // parts
};

// How much staging each chunk of a transfer may fill: the whole slot where nothing waits on
// a chunk's size, since the DMA engine moves large copies faster. An upload's chunks grow:
// small ones first, doubling, so that its first DMA starts after little staging. A
// download's shrink: halving before the end, so that what is left after its last DMA
// (unstaging its last chunk) is short. Neither needs the other's ramp: a download's first
// DMA starts at once whatever its size, and an upload's last chunk is staged while the DMAs
// before it run. A ramp costs small DMAs, which the engine moves slower.
struct ChunkSizes {
  int64_t smallest, largest, total;
  bool grow = true, shrink = true;  // the ramps at the start and at the end
  int64_t largest_task = kMaxTaskBytes;
  // A download's: where the host range moved is cut into pages of this size (0: not cut),
  // no part spans two of them, and a chunk whose tasks are whole pages ends where a page
  // ends rather than inside one, so that each page of fresh memory faults in one task.
  int64_t host_page = 0;

  int64_t For(int64_t planned) const;
  // Staging that one worker copies at a time: a quarter of the chunk at most, so that
  // several threads share even the smallest chunk, and largest_task at most.
  int64_t TaskBytesFor(int64_t chunk) const;
};

// Splits pieces into parts no larger than their chunk's task size (so that workers can
// share a chunk), packed into chunks of staging sized by `sizes`.
void Plan(const std::vector<Piece>& pieces, const ChunkSizes& sizes, std::vector<Part>* parts,
          std::vector<Chunk>* chunks);

// Groups the parts of each chunk into tasks of about the chunk's task size.
std::vector<Task> Tasks(const std::vector<Part>& parts, const std::vector<Chunk>& chunks);

}  // namespace arrow_gpu::engine
