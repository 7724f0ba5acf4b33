#include "engine/read_back.h"

#include <cstring>
#include <mutex>
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

}  // namespace arrow_gpu
