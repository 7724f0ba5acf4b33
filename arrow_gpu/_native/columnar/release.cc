#include "columnar/release.h"

#include <atomic>

namespace arrow_gpu {
namespace {

// Constant-initialised: set before any dynamic initialiser could read it.
std::atomic<ReleaseGuard> guard{nullptr};

}  // namespace

void SetReleaseGuard(ReleaseGuard installed) { guard.store(installed); }

void RunGuarded(void (*call)(void*), void* data) {
  ReleaseGuard installed = guard.load(std::memory_order_relaxed);
  if (installed != nullptr) {
    installed(call, data);
  } else {
    call(data);
  }
}

}  // namespace arrow_gpu
