// Reads of a few bytes of device memory that the host must learn before it goes on: the
// counters a compute plan reads back to size its results.
#pragma once

#include <cstdint>

#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

// The most bytes a read back takes through pinned memory (ReadBack).
constexpr int64_t kReadBackSlotBytes = 4096;

// Copies `nbytes` of device memory at `src` to `dst` once the work queued on `stream`
// (nullptr: the legacy default stream) is done, and waits for it. Reads of at most
// kReadBackSlotBytes go through a slot of pinned memory that the process keeps for them
// (made through the first primary context that reads): such a copy is queued behind the
// stream's work and runs as soon as it ends, where one into pageable memory is staged by
// the driver once the host has seen the stream finish. Larger reads, and reads while every
// slot is in use, go through the copy engine (EngineDeviceToHost).
arrow::Status ReadBack(const CudaContext& context, void* dst, uintptr_t src, int64_t nbytes,
                       CUstream stream);

// A read back queued on a stream behind the work queued so far, which the host collects
// later (Wait) while the stream goes on with work queued after it: a plan that must learn a
// size keeps the device busy with the work it queued before it waits. A read of at most
// kReadBackSlotBytes goes through a pinned slot and an event; a larger one, or one while
// every slot is in use, is read by Wait (ReadBack), behind all the stream's work then.
class QueuedRead {
 public:
  QueuedRead() = default;
  QueuedRead(QueuedRead&& other) noexcept;
  QueuedRead& operator=(QueuedRead&& other) noexcept;
  QueuedRead(const QueuedRead&) = delete;
  QueuedRead& operator=(const QueuedRead&) = delete;
  // Waits for a copy still in flight: its slot is handed to the next read after it.
  ~QueuedRead();

  static arrow::Result<QueuedRead> Queue(const CudaContext& context, uintptr_t src,
                                         int64_t nbytes, CUstream stream);
  // The `nbytes` read into `dst`, once the work queued before the read is done. Once only.
  arrow::Status Wait(void* dst);

 private:
  void Release();

  const CudaContext* context_ = nullptr;
  uintptr_t src_ = 0;
  int64_t nbytes_ = 0;
  CUstream stream_ = nullptr;
  uint8_t* slot_ = nullptr;
  CUevent event_ = nullptr;
};

}  // namespace arrow_gpu
