// The copy engine's worker threads: a fixed set that runs one job at a time (the staging
// ring's lease serialises jobs), woken through one atomic word.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "engine/transfer_options.h"

namespace arrow_gpu::engine {

// Workers sleep on one atomic word (a futex), not a condition variable: woken together, they
// would each re-take its mutex in turn, and the last of them would start long after the
// wake-up.
class WorkerPool {
 public:
  explicit WorkerPool(int size);
  ~WorkerPool();
  int size() const { return static_cast<int>(threads_.size()); }

  // Wakes the workers ahead of a job that follows shortly (Start): they poll for it for a
  // while, so that their wake-up overlaps what the caller does meanwhile.
  void Wake() { Publish(0); }

  // Runs job() on `count` workers; Wait() returns once each has returned.
  void Start(int count, std::function<void()> job);
  void Wait();

 private:
  // The word workers sleep on: a generation number above, the job's worker count in the
  // low bits, so that a worker reads both at once (one still waking from an earlier job it
  // had no part in may see the next job's word, never half of it).
  static constexpr int kCountBits = 8;
  static_assert(kMaxThreads < (1 << kCountBits));

  void Publish(int count);
  static int Count(uint32_t word) { return static_cast<int>(word & ((1u << kCountBits) - 1)); }
  // The word once it differs from `seen`, or `seen` after a short poll.
  uint32_t Poll(uint32_t seen);
  void Loop(int index);

  std::vector<std::thread> threads_;
  std::function<void()> job_;
  std::atomic<uint32_t> word_{0};
  std::atomic<int> running_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace arrow_gpu::engine
