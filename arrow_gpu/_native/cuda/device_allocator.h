// The interface every source of device memory implements: the driver's own allocators
// (driver_allocators.h), the cache in front of them (caching_allocator.h), and allocators
// written in Python (python/callback_allocator.h).
#pragma once

#include <cstdint>

#include <arrow/result.h>
#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual const char* name() const = 0;
  // Whether its memory comes from the CUDA driver, so that trimming the cache may let a
  // failed allocation succeed (a user's allocator handles its own shortage, called once).
  virtual bool from_driver() const { return true; }
  // Both are called with `context` current on the calling thread.
  virtual arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) = 0;
  virtual void Free(const CudaContext& context, uintptr_t address, int64_t nbytes) = 0;
};

// The status of a failed driver allocation of `nbytes`: OutOfMemory when the device is full,
// so that callers can tell a shortage from a fault.
arrow::Status AllocationFailure(CUresult rc, const char* function, const CudaContext& context,
                                int64_t nbytes);

}  // namespace arrow_gpu
