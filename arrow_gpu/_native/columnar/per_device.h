// Per-device singletons: the Arrow device objects are made once per device number.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <arrow/result.h>

namespace arrow_gpu {

// Per-device singletons, created on first use and kept for the life of the process.
template <typename T>
class PerDevice {
 public:
  template <typename Make>
  arrow::Result<std::shared_ptr<T>> GetOrMake(int device_number, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (items_.size() <= static_cast<size_t>(device_number)) items_.resize(device_number + 1);
    auto& slot = items_[device_number];
    if (slot == nullptr) {
      ARROW_ASSIGN_OR_RAISE(slot, make());
    }
    return slot;
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<T>> items_;
};

}  // namespace arrow_gpu
