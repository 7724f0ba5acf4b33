#include "cuda/driver_allocators.h"

#include "driver/driver.h"

namespace arrow_gpu {

namespace {

class DriverMemory final : public DeviceAllocator {
 public:
  const char* name() const override { return "device"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    CUdeviceptr address = 0;
    CUresult rc = context.driver()->MemAlloc(&address, static_cast<size_t>(nbytes));
    if (rc != CUDA_SUCCESS) return AllocationFailure(rc, "cuMemAlloc", context, nbytes);
    return static_cast<uintptr_t>(address);
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t) override {
    context.driver()->MemFree(address);
  }
};

class PoolMemory final : public DeviceAllocator {
 public:
  const char* name() const override { return "pool"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    CUdeviceptr address = 0;
    // The legacy default stream orders the allocation before every later use of the
    // buffer through this package, whose copies run on that stream.
    CUresult rc = context.driver()->MemAllocAsync(&address, static_cast<size_t>(nbytes),
                                                  nullptr);
    if (rc != CUDA_SUCCESS) return AllocationFailure(rc, "cuMemAllocAsync", context, nbytes);
    return static_cast<uintptr_t>(address);
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t) override {
    context.driver()->MemFreeAsync(address, nullptr);
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> DriverAllocator() {
  static auto* allocator = new std::shared_ptr<DeviceAllocator>(std::make_shared<DriverMemory>());
  return *allocator;
}

arrow::Result<std::shared_ptr<DeviceAllocator>> PoolAllocator() {
  ARROW_ASSIGN_OR_RAISE(auto driver, Driver());
  if (driver->MemAllocAsync == nullptr || driver->MemFreeAsync == nullptr) {
    return arrow::Status::NotImplemented(
        "this CUDA driver has no stream-ordered memory pool (needs CUDA 11.2 or newer)");
  }
  static auto* allocator = new std::shared_ptr<DeviceAllocator>(std::make_shared<PoolMemory>());
  return *allocator;
}

}  // namespace arrow_gpu
