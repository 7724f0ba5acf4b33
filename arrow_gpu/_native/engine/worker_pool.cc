#include "engine/worker_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace arrow_gpu::engine {
namespace {

// How long woken workers poll for the job that follows (see WorkerPool::Wake).
constexpr std::chrono::microseconds kPollTime{200};

// A spin-wait hint: the core yields to its sibling hyperthread and saves power meanwhile.
inline void Pause() {
#if defined(__SSE2__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

WorkerPool::WorkerPool(int size) {
  for (int i = 0; i < size; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

WorkerPool::~WorkerPool() {
  stop_ = true;
  Publish(0);
  for (auto& thread : threads_) thread.join();
}

void WorkerPool::Start(int count, std::function<void()> job) {
  job_ = std::move(job);
  count = std::min(count, size());
  running_.store(count, std::memory_order_relaxed);
  Publish(count);
}

void WorkerPool::Wait() {
  for (int left; (left = running_.load(std::memory_order_acquire)) != 0;) {
    running_.wait(left, std::memory_order_acquire);
  }
  job_ = nullptr;
}

void WorkerPool::Publish(int count) {
  uint32_t generation = (word_.load(std::memory_order_relaxed) >> kCountBits) + 1;
  word_.store(generation << kCountBits | static_cast<uint32_t>(count),
              std::memory_order_release);
  word_.notify_all();
}

uint32_t WorkerPool::Poll(uint32_t seen) {
  auto deadline = std::chrono::steady_clock::now() + kPollTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      uint32_t word = word_.load(std::memory_order_acquire);
      if (word != seen) return word;
      Pause();
    }
    if (std::chrono::steady_clock::now() > deadline) return seen;
  }
}

void WorkerPool::Loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    word_.wait(seen, std::memory_order_acquire);
    seen = word_.load(std::memory_order_acquire);
    if (stop_) return;
    if (Count(seen) == 0) seen = Poll(seen);
    if (stop_) return;
    // job_ stays put while a worker with a part in it runs: Wait() comes first.
    if (index >= Count(seen)) continue;
    job_();
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_all();
  }
}

}  // namespace arrow_gpu::engine
