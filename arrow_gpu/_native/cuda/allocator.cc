#include "cuda/allocator.h"

#include <mutex>

#include "cuda/caching_allocator.h"
#include "cuda/driver_allocators.h"

namespace arrow_gpu {
namespace {

std::mutex current_mutex;
std::shared_ptr<DeviceAllocator>& CurrentSlot() {
  static auto* current = new std::shared_ptr<DeviceAllocator>(CachingAllocator());
  return *current;
}

}  // namespace

std::shared_ptr<DeviceAllocator> CurrentAllocator() {
  std::lock_guard<std::mutex> lock(current_mutex);
  return CurrentSlot();
}

void SetCurrentAllocator(std::shared_ptr<DeviceAllocator> allocator) {
  std::lock_guard<std::mutex> lock(current_mutex);
  CurrentSlot() = std::move(allocator);
}

arrow::Result<Allocation> AllocateDevice(CudaContext& context, int64_t nbytes) {
  if (nbytes < 0) return arrow::Status::Invalid("cannot allocate a negative size: ", nbytes);
  if (nbytes == 0) {
    ARROW_ASSIGN_OR_RAISE(uintptr_t address, context.EmptyAllocation());
    return Allocation{address, nullptr};
  }
  Allocation allocation{0, CurrentAllocator()};
  ARROW_GPU_ENTER(context);
  arrow::Result<uintptr_t> address = allocation.allocator->Allocate(context, nbytes);
  // Memory the cache holds unused is the first thing to give up before failing.
  if (address.status().IsOutOfMemory() && allocation.allocator->from_driver() &&
      TrimCache(context) > 0) {
    address = allocation.allocator->Allocate(context, nbytes);
  }
  ARROW_ASSIGN_OR_RAISE(allocation.address, std::move(address));
  context.CountAllocation(nbytes);
  return allocation;
}

arrow::Result<Allocation> AllocateIsolated(CudaContext& context, int64_t nbytes) {
  if (nbytes <= 0) return arrow::Status::Invalid("an isolated allocation needs bytes, got ", nbytes);
  const int64_t rounded = IsolatedSize(nbytes);
  Allocation allocation{0, DriverAllocator()};
  ARROW_GPU_ENTER(context);
  arrow::Result<uintptr_t> address = allocation.allocator->Allocate(context, rounded);
  if (address.status().IsOutOfMemory() && TrimCache(context) > 0) {
    address = allocation.allocator->Allocate(context, rounded);
  }
  ARROW_ASSIGN_OR_RAISE(allocation.address, std::move(address));
  // cuMemAlloc does not clear memory: the padding may hold this process's freed data.
  arrow::Status cleared = CudaStatus(
      context.driver()->MemsetD8(allocation.address + nbytes, 0, rounded - nbytes),
      "cuMemsetD8");
  if (!cleared.ok()) {
    allocation.allocator->Free(context, allocation.address, rounded);
    return cleared;
  }
  context.CountAllocation(rounded);
  return allocation;
}

void FreeDevice(CudaContext& context, const Allocation& allocation, int64_t nbytes) {
  if (allocation.allocator == nullptr) return;  // the shared empty allocation
  ScopedContext scope(context);
  // At interpreter exit the driver may already be shutting down; nothing is left to do then.
  if (scope.status().ok()) allocation.allocator->Free(context, allocation.address, nbytes);
  context.CountFree(nbytes);
}

}  // namespace arrow_gpu
