// The copy engine's tuning knobs: how much pinned staging, how large a chunk, how many
// threads, and from what size a copy is worth pipelining.
#pragma once

#include <cstdint>

#include <arrow/status.h>

namespace arrow_gpu {

struct TransferOptions {
  // Total pinned staging memory (the ring); 0 turns the pipeline off: direct copies only.
  int64_t staging_bytes = int64_t{64} << 20;
  // Size of one staging slot (the ring holds 2 to 64 of them): the largest chunk the
  // pipeline moves. A transfer's chunks grow to it and shrink again before the end; the DMA
  // engine moves 8 MiB copies close to its peak, smaller ones slower.
  int64_t chunk_bytes = int64_t{8} << 20;
  // CPU threads copying between pageable memory and the ring (the caller's thread included).
  int threads = 0;  // 0: chosen from the machine's cores
  // Copies smaller than this are one synchronous driver copy.
  int64_t small_copy_bytes = int64_t{1} << 20;
};

// Bounds of the ring and of the thread count that SetTransferOptions enforces.
constexpr int kMaxSlots = 64;
constexpr int kMaxThreads = 64;

TransferOptions GetTransferOptions();
// Validates and installs new options; the staging ring is re-made on its next use.
arrow::Status SetTransferOptions(const TransferOptions& options);
// The options in force for transfers that the calling thread starts, with `threads`
// resolved (never 0): the thread's own thread count where it set one.
TransferOptions EffectiveTransferOptions();
// Sets the copy threads of the transfers that the calling thread starts (0: the
// process-wide option again); returns the previous setting. A thread that is one of a
// core's worth copying at once (a Parquet decoder) stages its own transfers: copy threads
// woken while every core is busy only delay it.
int SetThreadCopyThreads(int threads);

}  // namespace arrow_gpu
