// Where device memory comes from: the one pluggable allocator behind every device allocation
// the backend makes (Context.new_buffer, pyarrow's copy_to, imports that copy).
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>

#include <arrow/result.h>

namespace arrow_gpu {

class CudaContext;

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual const char* name() const = 0;
  // Both are called with `context` current on the calling thread.
  virtual arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) = 0;
  virtual void Free(const CudaContext& context, uintptr_t address, int64_t nbytes) = 0;
};

// cuMemAlloc / cuMemFree: memory that CUDA IPC can export. The default.
std::shared_ptr<DeviceAllocator> DriverAllocator();
// The device's default stream-ordered memory pool (cuMemAllocAsync on the default stream):
// fast reuse, but its memory cannot be exported through CUDA IPC.
arrow::Result<std::shared_ptr<DeviceAllocator>> PoolAllocator();
// Python callables: allocate(nbytes, device_number) -> address, and
// free(address, nbytes, device_number), e.g. over RMM or CuPy's pool.
std::shared_ptr<DeviceAllocator> CallbackAllocator(PyObject* allocate, PyObject* free);

// The allocator new device buffers come from; buffers keep the one that made them.
std::shared_ptr<DeviceAllocator> CurrentAllocator();
void SetCurrentAllocator(std::shared_ptr<DeviceAllocator> allocator);

}  // namespace arrow_gpu
