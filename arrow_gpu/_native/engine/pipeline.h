// The pipeline: a large transfer moved through the staging ring, CPU threads staging (or
// unstaging) chunks while the DMA engine moves the chunks before them.
#pragma once

#include <cstdint>
#include <vector>

#include <arrow/status.h>

#include "engine/staging_ring.h"
#include "engine/transfer.h"

namespace arrow_gpu::engine {

// Moves `pieces` (`total` bytes) through the ring and pool that `lease` holds, after the
// work queued on `after` (nullptr: the legacy default stream), running `alongside` on the
// calling thread meanwhile; done (no DMA left on the ring) when it returns.
arrow::Status RunPipeline(const CudaContext& context, Direction direction,
                          const std::vector<Piece>& pieces, int64_t total, Lease& lease,
                          const TransferOptions& options, const Alongside& alongside,
                          CUstream after);

}  // namespace arrow_gpu::engine
