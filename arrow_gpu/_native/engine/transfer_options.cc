#include "engine/transfer_options.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "engine/transfer.h"

namespace arrow_gpu {
namespace {

using arrow::Status;

struct OptionsSlot {
  std::mutex mutex;
  TransferOptions options;
};

OptionsSlot& Options() {
  static auto* slot = new OptionsSlot();
  return *slot;
}

int DefaultThreads() {
  // Three quarters of the cores, at most 12: one thread copies pageable memory at a fraction
  // of the bus's rate, and the driver's own threads need cores too (more threads were slower
  // on 16-core hosts). Counted once: the count reads a file, which costs more than a small
  // transfer.
  static const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) * 3 / 4, 1, 12);
  return threads;
}

}  // namespace

TransferOptions GetTransferOptions() {
  auto& slot = Options();
  std::lock_guard<std::mutex> lock(slot.mutex);
  return slot.options;
}

Status SetTransferOptions(const TransferOptions& options) {
  if (options.staging_bytes < 0 || (options.staging_bytes > 0 && options.staging_bytes < 2 * kAlignment)) {
    return Status::Invalid("staging_bytes must be 0 (no staging) or at least ", 2 * kAlignment,
                           ", got ", options.staging_bytes);
  }
  if (options.chunk_bytes < kAlignment) {
    return Status::Invalid("chunk_bytes must be at least ", kAlignment, ", got ",
                           options.chunk_bytes);
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    return Status::Invalid("threads must be between 0 (automatic) and ", kMaxThreads, ", got ",
                           options.threads);
  }
  if (options.small_copy_bytes < 0) {
    return Status::Invalid("small_copy_bytes must be non-negative, got ",
                           options.small_copy_bytes);
  }
  // The ring is 2 to kMaxSlots slots of chunk_bytes: a ring it cannot make is refused, not
  // made smaller or larger than the options say.
  if (options.staging_bytes > 0 && options.chunk_bytes > options.staging_bytes / 2) {
    return Status::Invalid("chunk_bytes (", options.chunk_bytes, ") must be at most half of "
                           "staging_bytes (", options.staging_bytes, "): the staging ring "
                           "pipelines at least two slots of chunk_bytes; pass a smaller "
                           "chunk_bytes or a larger staging_bytes");
  }
  if (options.staging_bytes / kMaxSlots > options.chunk_bytes) {
    return Status::Invalid("staging_bytes (", options.staging_bytes, ") is more than the "
                           "staging ring holds: at most ", kMaxSlots, " slots of chunk_bytes (",
                           options.chunk_bytes, "), ", kMaxSlots * options.chunk_bytes,
                           " bytes; pass a larger chunk_bytes or a smaller staging_bytes");
  }
  auto& slot = Options();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.options = options;
  return Status::OK();
}

namespace {
thread_local int thread_copy_threads = 0;
}  // namespace

TransferOptions EffectiveTransferOptions() {
  TransferOptions options = GetTransferOptions();
  if (thread_copy_threads > 0) options.threads = thread_copy_threads;
  if (options.threads <= 0) options.threads = DefaultThreads();
  return options;
}

int SetThreadCopyThreads(int threads) {
  int previous = thread_copy_threads;
  thread_copy_threads = std::clamp(threads, 0, kMaxThreads);
  return previous;
}

}  // namespace arrow_gpu
