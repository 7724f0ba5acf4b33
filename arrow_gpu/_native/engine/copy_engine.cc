#include "engine/copy_engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <memory>

#include "engine/dma.h"
#include "engine/host_copy.h"
#include "engine/pipeline.h"
#include "engine/planner.h"
#include "engine/progress.h"
#include "engine/staging_ring.h"
#include "engine/transfer_options.h"

namespace arrow_gpu {
namespace {

using arrow::Status;
using namespace engine;

bool IsPinned(const CudaContext& context, const void* address) {
  return context.MemoryType(reinterpret_cast<uintptr_t>(address)) == CU_MEMORYTYPE_HOST;
}

// Pinned host memory (the pinned pool's, HostBuffers, memory another library registered) is
// read or written by the DMA engine directly: staging it would only add a CPU copy.
bool AllPinned(const CudaContext& context, const std::vector<Piece>& pieces) {
  for (const Piece& piece : pieces) {
    if (piece.FromFile() || !IsPinned(context, piece.host)) return false;
  }
  return true;
}

Status EngineCopy(const CudaContext& context, Direction direction, uint8_t* host,
                  uintptr_t device, int64_t nbytes, HostMemory kind, CUstream stream) {
  if (nbytes < 0) return Status::Invalid("cannot copy a negative number of bytes: ", nbytes);
  if (nbytes == 0) return Status::OK();
  Piece piece{host, device, nbytes, device, device + static_cast<uintptr_t>(nbytes)};
  TransferOptions options = GetTransferOptions();
  bool direct = options.staging_bytes == 0 || nbytes < options.small_copy_bytes ||
                kind == HostMemory::kPinned ||
                (kind == HostMemory::kUnknown && IsPinned(context, host));
  if (direct) {
    ARROW_RETURN_NOT_OK(ExpectProgress(nbytes));
    ARROW_RETURN_NOT_OK(DirectCopy(context, direction, piece, stream));
    return ReportProgress(nbytes);
  }
  return Transfer(context, direction, {piece}, nullptr, stream);
}

// Moves `pieces` (`total` bytes) packed in ordinary host memory, at most `most` bytes (and
// one copy per run of joined pieces, on `stream`) at a time.
Status PackedCopy(const CudaContext& context, Direction direction,
                  const std::vector<Piece>& pieces, int64_t total, int64_t most,
                  CUstream stream) {
  std::vector<Part> parts;
  std::vector<Chunk> chunks;
  int64_t room = std::min(total + static_cast<int64_t>(pieces.size()) * (kAlignment + kMaxGap),
                          most);
  Plan(pieces, ChunkSizes{room, room, total}, &parts, &chunks);
  std::unique_ptr<uint8_t[]> packed(new uint8_t[room]);
  for (const Chunk& chunk : chunks) {
    if (direction == Direction::kToDevice) {
      ARROW_RETURN_NOT_OK(StageParts(chunk.begin, chunk.end, parts, packed.get()));
    }
    ARROW_RETURN_NOT_OK(CopyChunk(context, direction, chunk, parts, packed.get(), stream));
    if (stream != nullptr) ARROW_RETURN_NOT_OK(context.SynchronizeStream(stream));
    if (direction == Direction::kToHost) {
      UnstageParts(chunk.begin, chunk.end, parts, packed.get());
    }
    ARROW_RETURN_NOT_OK(ReportProgress(chunk.bytes));
  }
  return Status::OK();
}

}  // namespace

Status EngineHostToDevice(const CudaContext& context, uintptr_t dst, const void* src,
                          int64_t nbytes, HostMemory kind, CUstream stream) {
  return EngineCopy(context, Direction::kToDevice,
                    static_cast<uint8_t*>(const_cast<void*>(src)), dst, nbytes, kind, stream);
}

Status Transfer(const CudaContext& context, Direction direction,
                const std::vector<Piece>& pieces, const Alongside& alongside, CUstream stream) {
  int64_t total = 0;
  bool from_file = false;
  for (const Piece& piece : pieces) {
    total += piece.size;
    from_file = from_file || piece.FromFile();
  }
  if (from_file && direction != Direction::kToDevice) {
    return Status::Invalid("only uploads can read their bytes from a file");
  }
  ARROW_RETURN_NOT_OK(ExpectProgress(total));
  TransferOptions options = EffectiveTransferOptions();
  if (total > 0 && options.staging_bytes > 0 && total >= options.small_copy_bytes &&
      !AllPinned(context, pieces)) {
    Lease lease = Lease::Acquire(context, options);
    if (lease.ring != nullptr) {
      return RunPipeline(context, direction, pieces, total, lease, options, alongside, stream);
    }
  }
  if (alongside) ARROW_RETURN_NOT_OK(alongside());
  // Small: packed, for one synchronous copy (per run of joined pieces); latency is what
  // counts, and the pinned ring would cost its allocation on the first call and its lock on
  // every call. A file's pieces, which no driver copy can read, are packed too.
  const bool small_pieces = options.staging_bytes > 0 && total < options.small_copy_bytes &&
                            pieces.size() > 1;
  if (total > 0 && (small_pieces || from_file)) {
    return PackedCopy(context, direction, pieces, total, options.chunk_bytes, stream);
  }
  // Pinned pieces, or pageable ones while another transfer has the ring: a driver copy each.
  for (const Piece& piece : pieces) {
    if (piece.size > 0) ARROW_RETURN_NOT_OK(DirectCopy(context, direction, piece, stream));
  }
  return ReportProgress(total);
}

Status EngineDeviceToHost(const CudaContext& context, void* dst, uintptr_t src, int64_t nbytes,
                          HostMemory kind, CUstream stream) {
  return EngineCopy(context, Direction::kToHost, static_cast<uint8_t*>(dst), src, nbytes, kind,
                    stream);
}

void AdviseHugePages(void* data, int64_t nbytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const auto address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (address + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (address + static_cast<uintptr_t>(nbytes)) & ~(kHugePage - 1);
  if (nbytes > 0 && end > begin) {
    ARROW_UNUSED(madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE));
  }
#endif
}

}  // namespace arrow_gpu
