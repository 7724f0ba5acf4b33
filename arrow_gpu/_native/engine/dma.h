// The DMAs: the driver copies the engine issues, synchronous or ordered on a stream.
#pragma once

#include <vector>

#include <arrow/status.h>

#include "cuda/context.h"
#include "engine/planner.h"

namespace arrow_gpu::engine {

// One driver copy on `stream` (nullptr: the legacy default stream, whose synchronous copies
// wait for every blocking stream), after the stream's queued work; the bytes are in place
// when it returns.
arrow::Status DirectCopy(const CudaContext& context, Direction direction, const Piece& piece,
                         CUstream stream);

// The chunk's DMAs between the staging memory at `base` and the device, one per run of
// joined parts: ordered on `stream` (the host does not wait), or synchronous without one.
arrow::Status CopyChunk(const CudaContext& context, Direction direction, const Chunk& chunk,
                        const std::vector<Part>& parts, uint8_t* base, CUstream stream);

}  // namespace arrow_gpu::engine
