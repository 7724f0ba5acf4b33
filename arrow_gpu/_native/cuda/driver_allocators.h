// Device memory straight from the driver: cuMemAlloc, or the stream-ordered pool.
#pragma once

#include <memory>

#include <arrow/result.h>

#include "cuda/device_allocator.h"

namespace arrow_gpu {

// cuMemAlloc / cuMemFree for every buffer: memory that CUDA IPC can export, nothing cached.
std::shared_ptr<DeviceAllocator> DriverAllocator();
// The device's default stream-ordered memory pool (cuMemAllocAsync on the default stream):
// fast reuse, but its memory cannot be exported through CUDA IPC.
arrow::Result<std::shared_ptr<DeviceAllocator>> PoolAllocator();

}  // namespace arrow_gpu
