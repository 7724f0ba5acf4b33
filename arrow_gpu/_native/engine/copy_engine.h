// The copy engine: every host<->device transfer of the package goes through it.
//
// Small copies are one synchronous driver copy (latency is what matters there). Large copies
// from or to pageable host memory are pipelined: CPU threads copy chunks between the
// pageable memory and a bounded ring of pinned staging slots while the DMA engine moves the
// slots filled before them, so staging and transfer overlap. Pinned memory goes direct.
// Many pieces can be moved as one transfer (Transfer): the Arrow-object transfers above it
// pack all the buffers of arrays, batches and tables that way.
#pragma once

#include <cstdint>
#include <vector>

#include <arrow/status.h>

#include "cuda/context.h"
#include "engine/transfer.h"

namespace arrow_gpu {

// Every copy below is synchronous: complete when it returns. It follows the work queued so
// far on `stream` (a stream of the context's device: a producer of the bytes read, or a
// reader of the bytes overwritten; nullptr: the legacy default stream, which waits for every
// blocking stream) and no other: small copies run on it, large ones on the staging ring's
// non-blocking stream, ordered after it.
arrow::Status EngineHostToDevice(const CudaContext& context, uintptr_t dst, const void* src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown,
                                 CUstream stream = nullptr);
arrow::Status EngineDeviceToHost(const CudaContext& context, void* dst, uintptr_t src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown,
                                 CUstream stream = nullptr);

// Asks for transparent huge pages on the whole 2 MiB pages of [data, data + nbytes), memory
// allocated for a download that nothing has written yet: pools that do not ask themselves
// (pyarrow's system and jemalloc pools) get 4 KiB pages where huge pages are in madvise mode,
// and a fault every 4 KiB halved one-shot downloads (bench/RESULTS.md). Advice only: a
// refusal is ignored. Not for pinned memory, which is touched already.
void AdviseHugePages(void* data, int64_t nbytes);

// Copies every piece (all host<->device in `direction`, all in `context`): through the
// staging ring when that pays (a large copy, or several pieces to pack into one DMA), else
// one synchronous driver copy each. Pieces read from a file (uploads only) always pass
// through staging, or through ordinary host memory when the ring is busy or off; a file
// that cannot be read fails the transfer (IOError). `alongside`, if given, runs on the
// calling thread during the copy (before it, where the copy is not pipelined); done when
// this returns.
arrow::Status Transfer(const CudaContext& context, Direction direction,
                       const std::vector<Piece>& pieces, const Alongside& alongside = nullptr,
                       CUstream stream = nullptr);

}  // namespace arrow_gpu
