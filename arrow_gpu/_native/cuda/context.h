// A CUDA context (a device's primary context, or a foreign one) and the driver operations
// within it. Copies that need staging, and allocations, live in the layers above.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "driver/driver.h"

namespace arrow_gpu {

// The driver's handle of the legacy default stream (CU_STREAM_LEGACY).
inline CUstream LegacyStream() { return reinterpret_cast<CUstream>(0x1); }

struct MemoryStats {
  int64_t bytes_allocated;        // held now
  int64_t peak_bytes_allocated;   // most ever held at once
  int64_t live_allocations;       // allocations held now
  int64_t total_allocations;      // allocations ever made
  int64_t total_bytes_allocated;  // bytes ever allocated
};

class CudaContext {
 public:
  // The device's primary context, retained once and shared with Numba, CuPy and PyTorch.
  static arrow::Result<std::shared_ptr<CudaContext>> Primary(int device_number);
  // A context created elsewhere; the caller keeps it alive.
  static arrow::Result<std::shared_ptr<CudaContext>> Foreign(int device_number,
                                                             uintptr_t handle);
  static arrow::Result<int> DeviceCount();

  CudaContext(const DriverTable* driver, int device_number, CUcontext handle,
              bool primary = false)
      : driver_(driver), device_number_(device_number), handle_(handle), primary_(primary) {}

  const DriverTable* driver() const { return driver_; }
  int device_number() const { return device_number_; }
  CUcontext handle() const { return handle_; }
  // Primary contexts live as long as the process; foreign ones may be destroyed by their
  // owner at any time.
  bool primary() const { return primary_; }
  int64_t bytes_allocated() const { return bytes_allocated_.load(); }
  MemoryStats stats() const;

  // Device memory made and given back in this context, counted by the allocator layer.
  void CountAllocation(int64_t nbytes);
  void CountFree(int64_t nbytes);
  // One small allocation that every empty buffer shares, never freed nor counted: Arrow
  // rejects null data pointers even for empty buffers.
  arrow::Result<uintptr_t> EmptyAllocation();

  // Pinned (page-locked) host memory, for fast transfers.
  arrow::Result<uint8_t*> AllocateHost(int64_t nbytes) const;
  void FreeHost(uint8_t* address);

  // Within this context, or from a buffer of another context (a peer copy), queued on
  // `stream` (of this context's device; nullptr: the legacy default stream). A peer copy
  // runs on the legacy default stream, ordered after the stream's work and before its later
  // work, on the GPU.
  arrow::Status CopyDeviceToDevice(uintptr_t dst, uintptr_t src, int64_t nbytes,
                                   const CudaContext& source, CUstream stream = nullptr) const;

  // One driver copy each way, ordered on `stream` and asynchronous to the host for pinned
  // host memory. Every other host<->device copy goes through the copy engine.
  arrow::Status CopyHostToDeviceAsync(uintptr_t dst, const void* src, int64_t nbytes,
                                      CUstream stream) const;
  arrow::Status CopyDeviceToHostAsync(void* dst, uintptr_t src, int64_t nbytes,
                                      CUstream stream) const;

  arrow::Status Synchronize() const;
  // Free and total bytes of device memory.
  arrow::Status MemoryInfo(int64_t* free, int64_t* total) const;

  arrow::Result<CUstream> CreateStream(unsigned flags) const;
  void DestroyStream(CUstream stream) const;
  arrow::Status SynchronizeStream(CUstream stream) const;
  // A stream of the package's own, for work forked from a caller's stream and joined back
  // to it before the call returns: non-blocking (no wait for the legacy default stream),
  // lent to one caller at a time, kept for reuse once given back idle.
  arrow::Result<CUstream> LendStream() const;
  void GiveBackStream(CUstream stream) const;
  // Events of a primary context are kept for reuse once destroyed: every export records one,
  // and creating and destroying it cost as much as the rest of a small export.
  arrow::Result<CUevent> CreateEvent() const;
  void DestroyEvent(CUevent event) const;
  arrow::Status RecordEvent(CUevent event, CUstream stream) const;
  arrow::Status WaitEvent(CUstream stream, CUevent event) const;
  // Makes later work on `waiter` wait, on the GPU, for the work queued on `stream` so far.
  arrow::Status Order(CUstream waiter, CUstream stream) const;
  arrow::Status SynchronizeEvent(CUevent event) const;
  arrow::Result<bool> EventDone(CUevent event) const;

  arrow::Result<uintptr_t> DeviceAddress(uintptr_t address) const;
  // The device the memory at `address` belongs to (addresses are unique across devices).
  arrow::Result<int> DeviceOrdinal(uintptr_t address) const;
  // What the driver knows `address` as: CU_MEMORYTYPE_DEVICE or _HOST (page-locked), 0 for
  // an address it does not know (pageable host memory, garbage).
  unsigned MemoryType(uintptr_t address) const;
  // The driver allocation holding `address`: its base and size. CUDA IPC exports and opens
  // whole driver allocations.
  arrow::Status AllocationRange(uintptr_t address, uintptr_t* base, int64_t* size) const;
  arrow::Result<CUipcMemHandle> ExportIpc(uintptr_t address, int64_t* offset) const;
  arrow::Result<uintptr_t> OpenIpc(const CUipcMemHandle& handle) const;
  // Invalid unless [offset, offset + size) lies within the allocation opened at `base`.
  arrow::Status CheckIpcRange(uintptr_t base, int64_t offset, int64_t size) const;
  void CloseIpc(uintptr_t base) const;

 private:
  const DriverTable* driver_;
  int device_number_;
  CUcontext handle_;
  bool primary_;
  std::atomic<int64_t> bytes_allocated_{0};
  std::atomic<int64_t> peak_bytes_allocated_{0};
  std::atomic<int64_t> live_allocations_{0};
  std::atomic<int64_t> total_allocations_{0};
  std::atomic<int64_t> total_bytes_allocated_{0};
  std::mutex empty_mutex_;
  uintptr_t empty_address_ = 0;
  mutable std::mutex spares_mutex_;  // guards the two below
  mutable std::vector<CUevent> spare_events_;
  mutable std::vector<CUstream> spare_streams_;
};

// Makes a context current on this thread for the lifetime of the scope. A context already
// current stays so without a push; a primary context on a thread with none current is made
// current and left so, as the CUDA runtime does on a thread's first call: either way the
// driver calls that follow cost no context switch.
class ScopedContext {
 public:
  explicit ScopedContext(const CudaContext& context);
  ~ScopedContext();
  const arrow::Status& status() const { return status_; }

 private:
  const DriverTable* driver_;
  arrow::Status status_;
  bool pushed_ = false;
};

}  // namespace arrow_gpu

// Enters `context` for the rest of the enclosing block, returning early if that fails.
#define ARROW_GPU_ENTER(context)              \
  ::arrow_gpu::ScopedContext _scope(context); \
  ARROW_RETURN_NOT_OK(_scope.status())
