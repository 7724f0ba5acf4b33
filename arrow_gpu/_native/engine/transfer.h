// What a transfer is: a direction and pieces, each a host range (or, for an upload, a range
// of an open file) and a device range of the same size. The engine moves them; the layers
// above say which pieces.
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

// Bytes of an open file, from `offset`. An upload reads them with pread straight into
// staging: the kernel copies from its page cache, where copying from a fresh mapping of the
// file would first fault in each of its pages in this process.
struct FileRange {
  int fd = -1;  // none
  int64_t offset = 0;

  FileRange Skip(int64_t n) const { return {fd, offset + n}; }
};

// A contiguous host range and device range of the same size. The region is the device
// memory around it that the engine may also touch (read, or for uploads into memory it owns,
// zero-fill): gaps inside one region can be spanned by one DMA. An upload's piece may come
// from a file instead of host memory: `file` says where, and `host` is nullptr.
struct Piece {
  uint8_t* host;
  uintptr_t device;
  int64_t size;
  uintptr_t region_begin;
  uintptr_t region_end;
  FileRange file = {};

  bool FromFile() const { return file.fd >= 0; }
};

// Work for the calling thread while a transfer's bytes move (building the objects that will
// hold them); an error it returns cancels the transfer.
using Alongside = std::function<arrow::Status()>;

}  // namespace arrow_gpu
