#include "engine/read_back.h"

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/copy_engine.h"
#include "engine/dma.h"

namespace arrow_gpu {
namespace {

constexpr int kSlots = 16;  // reads back at once, from as many threads

// The slots, made on first use and never freed: a read may run on any thread at any time
// until the process ends. Portable pinned memory, so any context's copies write it.
struct Slots {
  std::mutex mutex;
  bool tried = false;
  std::vector<uint8_t*> free;
};

Slots& TheSlots() {
  static Slots* slots = new Slots;
  return *slots;
}

// A free slot, or nullptr where none is (all in use, or no pinned memory to be had).
uint8_t* TakeSlot(const CudaContext& context) {
  Slots& slots = TheSlots();
  std::lock_guard<std::mutex> lock(slots.mutex);
  // A foreign context's owner may destroy it, and its pinned memory with it.
  if (!slots.tried && context.primary()) {
    slots.tried = true;
    auto made = context.AllocateHost(kSlots * kReadBackSlotBytes);
    if (made.ok()) {
      for (int i = 0; i < kSlots; ++i) slots.free.push_back(*made + i * kReadBackSlotBytes);
    }
  }
  if (slots.free.empty()) return nullptr;
  uint8_t* slot = slots.free.back();
  slots.free.pop_back();
  return slot;
}

void GiveSlot(uint8_t* slot) {
  Slots& slots = TheSlots();
  std::lock_guard<std::mutex> lock(slots.mutex);
  slots.free.push_back(slot);
}

}  // namespace

arrow::Status ReadBack(const CudaContext& context, void* dst, uintptr_t src, int64_t nbytes,
                       CUstream stream) {
  uint8_t* slot = nbytes > 0 && nbytes <= kReadBackSlotBytes ? TakeSlot(context) : nullptr;
  if (slot == nullptr) {
    return EngineDeviceToHost(context, dst, src, nbytes, HostMemory::kUnknown, stream);
  }
  const uintptr_t end = src + static_cast<uintptr_t>(nbytes);
  arrow::Status status =
      engine::DirectCopy(context, Direction::kToHost, Piece{slot, src, nbytes, src, end}, stream);
  if (status.ok()) std::memcpy(dst, slot, static_cast<size_t>(nbytes));
  GiveSlot(slot);
  return status;
}

QueuedRead::QueuedRead(QueuedRead&& other) noexcept { *this = std::move(other); }

QueuedRead& QueuedRead::operator=(QueuedRead&& other) noexcept {
  if (this != &other) {
    Release();
    context_ = other.context_;
    src_ = other.src_;
    nbytes_ = other.nbytes_;
    stream_ = other.stream_;
    slot_ = std::exchange(other.slot_, nullptr);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

QueuedRead::~QueuedRead() { Release(); }

void QueuedRead::Release() {
  if (event_ != nullptr) {
    ARROW_UNUSED(context_->SynchronizeEvent(event_));
    context_->DestroyEvent(event_);
    event_ = nullptr;
  }
  if (slot_ != nullptr) GiveSlot(std::exchange(slot_, nullptr));
}

arrow::Result<QueuedRead> QueuedRead::Queue(const CudaContext& context, uintptr_t src,
                                            int64_t nbytes, CUstream stream) {
  QueuedRead read;
  read.context_ = &context;
  read.src_ = src;
  read.nbytes_ = nbytes;
  read.stream_ = stream;
  if (nbytes <= 0 || nbytes > kReadBackSlotBytes) return read;
  uint8_t* slot = TakeSlot(context);
  if (slot == nullptr) return read;
  read.slot_ = slot;
  ARROW_ASSIGN_OR_RAISE(read.event_, context.CreateEvent());
  const CUstream queue = stream == nullptr ? LegacyStream() : stream;
  ARROW_RETURN_NOT_OK(context.CopyDeviceToHostAsync(slot, src, nbytes, queue));
  arrow::Status recorded = context.RecordEvent(read.event_, queue);
  if (!recorded.ok()) {
    // No event to tell when the copy is done: the slot is free once the stream is.
    ARROW_UNUSED(context.SynchronizeStream(queue));
    return recorded;
  }
  return read;
}

arrow::Status QueuedRead::Wait(void* dst) {
  if (slot_ == nullptr) return ReadBack(*context_, dst, src_, nbytes_, stream_);
  arrow::Status status = context_->SynchronizeEvent(event_);
  if (status.ok()) std::memcpy(dst, slot_, static_cast<size_t>(nbytes_));
  Release();
  return status;
}

}  // namespace arrow_gpu
