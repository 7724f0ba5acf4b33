#include "buffer.h"

#include "device.h"
#include "python_glue.h"

namespace arrow_gpu {

DeviceBuffer::DeviceBuffer(Allocation allocation, int64_t size,
                           std::shared_ptr<CudaMemoryManager> manager)
    : DeviceBuffer(allocation.address, size, std::move(manager), Origin::kAllocated) {
  allocator_ = std::move(allocation.allocator);
}

DeviceBuffer::DeviceBuffer(uintptr_t address, int64_t size,
                           std::shared_ptr<CudaMemoryManager> manager, Origin origin,
                           std::shared_ptr<void> owner, uintptr_t ipc_base)
    : arrow::MutableBuffer(reinterpret_cast<uint8_t*>(address), size, manager),
      context_(manager->cuda_context()),
      origin_(origin),
      owner_(std::move(owner)),
      ipc_base_(ipc_base) {}

DeviceBuffer::~DeviceBuffer() {
  switch (origin_) {
    case Origin::kAllocated:
      context_->Free(Allocation{address(), allocator_}, size());
      break;
    case Origin::kIpc:
      context_->CloseIpc(ipc_base_);
      break;
    case Origin::kView:
      break;
  }
}

std::shared_ptr<arrow::Buffer> DeviceBuffer::Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                                   int64_t offset, int64_t length) {
  auto slice = std::make_shared<DeviceBuffer>(parent->address() + offset, length,
                                              CudaManagerOf(*parent), Origin::kView);
  slice->parent_ = parent;
  return slice;
}

PinnedHostBuffer::PinnedHostBuffer(uint8_t* data, int64_t size,
                                   std::shared_ptr<CudaHostMemoryManager> manager)
    : arrow::MutableBuffer(data, size), context_(manager->cuda_context()) {
  // As in Arrow's CUDA module: CPU memory (device and memory manager are the CPU's) whose
  // device type says it is pinned.
  device_type_ = arrow::DeviceAllocationType::kCUDA_HOST;
}

PinnedHostBuffer::~PinnedHostBuffer() { context_->FreeHost(mutable_data()); }

std::shared_ptr<void> HoldPyObject(PyObject* object) {
  Py_INCREF(object);
  return std::shared_ptr<void>(object, [](void* held) {
    // Past interpreter shutdown there is no GIL to take; the process is ending anyway.
    if (!InterpreterAlive()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(held));
    PyGILState_Release(state);
  });
}

}  // namespace arrow_gpu
