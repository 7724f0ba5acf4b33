// What a transfer is: a direction and pieces, each a host range and a device range of the
// same size. The engine moves them; the layers above say which pieces.
#pragma once

#include <cstdint>
#include <functional>

#include <arrow/status.h>

namespace arrow_gpu {

// Of staging slots, and of each buffer packed into one allocation.
constexpr int64_t kAlignment = 64;
inline int64_t AlignUp(int64_t n, int64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

enum class Direction { kToDevice, kToHost };

// Where host memory is known to be (kUnknown: asked of the driver for large copies).
enum class HostMemory { kUnknown, kPageable, kPinned };

// A contiguous host range and device range of the same size. The region is the device
// memory around it that the engine may also touch (read, or for uploads into memory it owns,
// zero-fill): gaps inside one region can be spanned by one DMA.
struct Piece {
  uint8_t* host;
  uintptr_t device;
  int64_t size;
  uintptr_t region_begin;
  uintptr_t region_end;
};

// Work for the calling thread while a transfer's bytes move (building the objects that will
// hold them); an error it returns cancels the transfer.
using Alongside = std::function<arrow::Status()>;

}  // namespace arrow_gpu
