#include "engine/progress.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

namespace arrow_gpu {
namespace {

struct ProgressSlot {
  std::mutex mutex;  // never held while the hook runs: the hook may take the GIL
  std::shared_ptr<const ProgressHook> hook;
  std::atomic<bool> on{false};
};

ProgressSlot& Progress() {
  static auto* slot = new ProgressSlot();
  return *slot;
}

}  // namespace

void SetProgressHook(ProgressHook hook) {
  auto& progress = Progress();
  std::shared_ptr<const ProgressHook> old;
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    old = std::move(progress.hook);
    if (hook) progress.hook = std::make_shared<const ProgressHook>(std::move(hook));
    progress.on = progress.hook != nullptr;
  }
  // `old` goes here, outside the lock: dropping it may take the GIL.
}

bool ProgressOn() { return Progress().on.load(std::memory_order_relaxed); }

namespace {

arrow::Status CallHook(int64_t moved, int64_t expected) {
  auto& progress = Progress();
  std::shared_ptr<const ProgressHook> hook;
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    hook = progress.hook;
  }
  return hook != nullptr ? (*hook)(moved, expected) : arrow::Status::OK();
}

}  // namespace

arrow::Status ReportProgress(int64_t nbytes) {
  if (!ProgressOn() || nbytes == 0) return arrow::Status::OK();
  return CallHook(nbytes, 0);
}

arrow::Status ExpectProgress(int64_t nbytes) {
  if (!ProgressOn() || nbytes == 0) return arrow::Status::OK();
  return CallHook(0, nbytes);
}

}  // namespace arrow_gpu
