// Small adapters between the C++ core and Cython, for what Cython cannot spell.
#pragma once

#include <memory>

#include "columnar/device.h"

namespace arrow_gpu {

inline arrow::Result<std::shared_ptr<arrow::Buffer>> AllocateShared(arrow::MemoryManager* manager,
                                                                    int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, manager->AllocateBuffer(nbytes));
  return std::shared_ptr<arrow::Buffer>(std::move(buffer));
}

template <typename T>
std::shared_ptr<arrow::MemoryManager> AsMemoryManager(const std::shared_ptr<T>& manager) {
  return manager;
}

template <typename T>
std::shared_ptr<arrow::Buffer> AsBuffer(const std::shared_ptr<T>& buffer) {
  return buffer;
}

inline uintptr_t ContextHandle(const CudaContext& context) {
  return reinterpret_cast<uintptr_t>(context.handle());
}

}  // namespace arrow_gpu
