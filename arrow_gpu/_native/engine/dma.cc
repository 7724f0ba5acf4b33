#include "engine/dma.h"

namespace arrow_gpu::engine {

using arrow::Status;

Status DirectCopy(const CudaContext& context, Direction direction, const Piece& piece,
                  CUstream stream) {
  if (stream != nullptr) {
    if (direction == Direction::kToDevice) {
      ARROW_RETURN_NOT_OK(context.CopyHostToDeviceAsync(piece.device, piece.host, piece.size,
                                                        stream));
    } else {
      ARROW_RETURN_NOT_OK(context.CopyDeviceToHostAsync(piece.host, piece.device, piece.size,
                                                        stream));
    }
    return context.SynchronizeStream(stream);
  }
  ARROW_GPU_ENTER(context);
  const DriverTable* driver = context.driver();
  if (direction == Direction::kToDevice) {
    ARROW_GPU_CU(driver, MemcpyHtoD, piece.device, piece.host, static_cast<size_t>(piece.size));
    // From pageable memory the driver returns once it has staged the bytes, before its DMA
    // ends, and work on a non-blocking stream is not ordered after the legacy stream's copy:
    // the bytes are on the device when this returns only once that stream is waited for.
    return context.SynchronizeStream(LegacyStream());
  } else {
    ARROW_GPU_CU(driver, MemcpyDtoH, piece.host, piece.device, static_cast<size_t>(piece.size));
  }
  return Status::OK();
}

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
          DirectCopy(context, direction, Piece{staged, first.device, length, 0, 0}, nullptr));
    } else if (direction == Direction::kToDevice) {
      ARROW_RETURN_NOT_OK(context.CopyHostToDeviceAsync(first.device, staged, length, stream));
    } else {
      ARROW_RETURN_NOT_OK(context.CopyDeviceToHostAsync(staged, first.device, length, stream));
    }
    k = j;
  }
  return Status::OK();
}

}  // namespace arrow_gpu::engine
