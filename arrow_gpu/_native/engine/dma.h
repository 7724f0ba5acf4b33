// The DMAs: the driver copies the engine issues, synchronous or ordered on a stream.
#pragma once

#include <vector>

#include <arrow/status.h>

#include "cuda/context.h"
#include "engine/planner.h"

namespace arrow_gpu::engine {

// One synchronous driver copy: it returns once the host memory may be reused.
arrow::Status DirectCopy(const CudaContext& context, Direction direction, const Piece& piece);

// The chunk's DMAs between the staging memory at `base` and the device, one per run of
// joined parts: ordered on `stream`, or synchronous without one.
arrow::Status CopyChunk(const CudaContext& context, Direction direction, const Chunk& chunk,
                        const std::vector<Part>& parts, uint8_t* base, CUstream stream);

}  // namespace arrow_gpu::engine
