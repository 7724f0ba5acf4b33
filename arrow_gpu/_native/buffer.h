// Arrow buffers over CUDA memory: device memory (owned, viewed, or opened through IPC) and
// pinned host memory.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>

#include <arrow/buffer.h>

#include "context.h"

namespace arrow_gpu {

class CudaMemoryManager;
class CudaHostMemoryManager;

// Device memory as an arrow::Buffer: device_type kCUDA, is_cpu false.
class DeviceBuffer : public arrow::MutableBuffer {
 public:
  enum class Origin { kAllocated, kView, kIpc };

  // Memory from context.Allocate, returned to its allocator when the buffer dies.
  DeviceBuffer(Allocation allocation, int64_t size, std::shared_ptr<CudaMemoryManager> manager);
  DeviceBuffer(uintptr_t address, int64_t size, std::shared_ptr<CudaMemoryManager> manager,
               Origin origin, std::shared_ptr<void> owner = nullptr, uintptr_t ipc_base = 0);
  ~DeviceBuffer() override;

  // A zero-copy slice of device memory that, unlike arrow::SliceMutableBuffer's, keeps the
  // parent's memory manager (so it still reads as device memory) and the parent alive.
  static std::shared_ptr<arrow::Buffer> Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                              int64_t offset, int64_t length);

  Origin origin() const { return origin_; }
  const CudaContext& context() const { return *context_; }

 private:
  std::shared_ptr<CudaContext> context_;
  Origin origin_;
  std::shared_ptr<DeviceAllocator> allocator_;
  std::shared_ptr<void> owner_;  // keeps a viewed allocation's owner alive
  uintptr_t ipc_base_;
};

// Page-locked host memory: CPU memory (the CPU device and memory manager), device_type
// kCUDA_HOST.
class PinnedHostBuffer : public arrow::MutableBuffer {
 public:
  PinnedHostBuffer(uint8_t* data, int64_t size,
                   std::shared_ptr<CudaHostMemoryManager> manager);
  ~PinnedHostBuffer() override;

 private:
  std::shared_ptr<CudaContext> context_;
};

// A reference to a Python object, dropped with the GIL held, for buffers that view memory
// a Python object owns (Numba device arrays, CuPy arrays, a `base`).
std::shared_ptr<void> HoldPyObject(PyObject* object);

}  // namespace arrow_gpu
