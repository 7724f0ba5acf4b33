// The copy engine: every host<->device transfer of the package goes through it.
//
// Small copies are one synchronous driver copy (latency is what matters there). Large copies
// from or to pageable host memory are pipelined: CPU threads copy chunks between the
// pageable memory and a bounded ring of pinned staging slots while the DMA engine moves the
// slots filled before them, so staging and transfer overlap. Pinned memory goes direct.
// Many pieces can be moved as one transfer (EngineTransfer): the Arrow-object transfers
// above it pack all the buffers of arrays, batches and tables that way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

// Of staging slots, and of each buffer packed into one allocation.
constexpr int64_t kAlignment = 64;
inline int64_t AlignUp(int64_t n, int64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

struct TransferOptions {
  // Total pinned staging memory (the ring); 0 turns the pipeline off: direct copies only.
  int64_t staging_bytes = int64_t{64} << 20;
  // Size of one staging slot (the ring holds 2 to 64 of them): the largest chunk, the unit of
  // pipelining. A transfer's chunks grow to it and shrink again before the end; the DMA
  // engine moves 8 MiB copies close to its peak, smaller ones slower.
  int64_t chunk_bytes = int64_t{8} << 20;
  // CPU threads copying between pageable memory and the ring (the caller's thread included).
  int threads = 0;  // 0: chosen from the machine's cores
  // Copies smaller than this are one synchronous driver copy.
  int64_t small_copy_bytes = int64_t{1} << 20;
};

TransferOptions GetTransferOptions();
// Validates and installs new options; the staging ring is re-made on its next use.
arrow::Status SetTransferOptions(const TransferOptions& options);
// Frees the staging ring now (it is made again when needed); while a transfer uses it (this
// may be called from its progress callback), that transfer frees it when it ends.
void ReleaseStaging();
// Pinned bytes the staging ring holds now.
int64_t StagingBytesHeld();

// Where host memory is known to be (kUnknown: asked of the driver for large copies).
enum class HostMemory { kUnknown, kPageable, kPinned };

// Every copy below is synchronous: complete when it returns. `after`, if given, is a stream
// of the context's device whose work queued so far the copy follows, on the GPU (the host
// does not wait for the rest of the stream): a producer of the bytes read, or a reader of the
// bytes overwritten.
arrow::Status EngineHostToDevice(const CudaContext& context, uintptr_t dst, const void* src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown,
                                 CUstream after = nullptr);
arrow::Status EngineDeviceToHost(const CudaContext& context, void* dst, uintptr_t src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown,
                                 CUstream after = nullptr);

enum class Direction { kToDevice, kToHost };

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

// Copies every piece (all host<->device in `direction`, all in `context`): through the
// staging ring when that pays (a large copy, or several pieces to pack into one DMA), else
// one synchronous driver copy each. `alongside`, if given, runs on the calling thread
// during the copy (before it, where the copy is not pipelined); done when this returns.
arrow::Status EngineTransfer(const CudaContext& context, Direction direction,
                             const std::vector<Piece>& pieces,
                             const Alongside& alongside = nullptr, CUstream after = nullptr);

}  // namespace arrow_gpu
