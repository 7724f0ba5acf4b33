// CUDA as an Arrow device: arrow::Device, arrow::MemoryManager and arrow::Buffer for device
// memory (kCUDA), with their streams and sync events. Pinned host memory (kCUDA_HOST) is in
// host_device.h, the device mappers through which pyarrow finds both in device_mappers.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <arrow/buffer.h>
#include <arrow/device.h>

#include "cuda/allocator.h"

namespace arrow_gpu {

class CudaMemoryManager;

// Device memory as an arrow::Buffer: device_type kCUDA, is_cpu false.
class DeviceBuffer : public arrow::MutableBuffer {
 public:
  enum class Origin { kAllocated, kView, kIpc };

  // Memory from AllocateDevice, returned to its allocator when the buffer dies.
  DeviceBuffer(Allocation allocation, int64_t size, std::shared_ptr<CudaMemoryManager> manager);
  DeviceBuffer(uintptr_t address, int64_t size, std::shared_ptr<CudaMemoryManager> manager,
               Origin origin, std::shared_ptr<void> owner = nullptr, uintptr_t ipc_base = 0);
  ~DeviceBuffer() override;

  // A zero-copy slice of device memory that, unlike arrow::SliceMutableBuffer's, keeps the
  // parent's memory manager (so it still reads as device memory) and the parent alive.
  static std::shared_ptr<arrow::Buffer> Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                              int64_t offset, int64_t length);
  // The same, for a parent known to be of `manager` (no type check of its memory manager).
  static std::shared_ptr<arrow::Buffer> Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                              int64_t offset, int64_t length,
                                              std::shared_ptr<CudaMemoryManager> manager);

 private:
  std::shared_ptr<CudaContext> context_;
  Origin origin_;
  std::shared_ptr<DeviceAllocator> allocator_;
  std::shared_ptr<void> owner_;  // keeps a viewed allocation's owner alive
  uintptr_t ipc_base_;
};

class CudaDevice : public arrow::Device {
 public:
  // One instance per device number (over its primary context), alive for the whole process.
  static arrow::Result<std::shared_ptr<CudaDevice>> Primary(int device_number);

  explicit CudaDevice(int device_number) : device_number_(device_number) {}

  const char* type_name() const override { return "arrow::cuda"; }
  std::string ToString() const override;
  bool Equals(const arrow::Device& other) const override;
  int64_t device_id() const override { return device_number_; }
  arrow::DeviceAllocationType device_type() const override {
    return arrow::DeviceAllocationType::kCUDA;
  }
  std::shared_ptr<arrow::MemoryManager> default_memory_manager() override;

  arrow::Result<std::shared_ptr<Stream>> MakeStream() override { return MakeStream(0); }
  arrow::Result<std::shared_ptr<Stream>> MakeStream(unsigned int flags) override;
  arrow::Result<std::shared_ptr<Stream>> WrapStream(void* stream,
                                                    Stream::release_fn_t release) override;

 private:
  friend class CudaMemoryManager;
  int device_number_;
  std::shared_ptr<CudaMemoryManager> primary_;  // the default memory manager
};

class CudaMemoryManager : public arrow::MemoryManager {
 public:
  // The memory manager of a device's primary context (the one pyarrow's mapper returns).
  static arrow::Result<std::shared_ptr<CudaMemoryManager>> Primary(int device_number);
  // A memory manager over another context of the same device.
  static arrow::Result<std::shared_ptr<CudaMemoryManager>> ForContext(
      std::shared_ptr<CudaContext> context);

  CudaMemoryManager(std::shared_ptr<arrow::Device> device,
                    std::shared_ptr<CudaContext> context)
      : arrow::MemoryManager(std::move(device)), context_(std::move(context)) {}

  const std::shared_ptr<CudaContext>& cuda_context() const { return context_; }

  arrow::Result<std::unique_ptr<arrow::Buffer>> AllocateBuffer(int64_t size) override;
  // Memory of a driver allocation of its own (see AllocateIsolated), for exports that must
  // show the opener nothing but their bytes; the buffer spans the whole allocation.
  arrow::Result<std::shared_ptr<DeviceBuffer>> AllocateIsolatedBuffer(int64_t size);
  // A non-owning view of device memory in this context; `owner` is kept alive with it.
  std::shared_ptr<DeviceBuffer> View(uintptr_t address, int64_t size,
                                     std::shared_ptr<void> owner);
  // An IPC handle to the allocation `buffer` lives in, and where `buffer` starts in it.
  // With `exported` (handles by allocation base, of buffers exported together), the driver
  // is asked once per allocation: each ask costs tens of microseconds.
  arrow::Result<CUipcMemHandle> ExportIpc(
      const std::shared_ptr<arrow::Buffer>& buffer, int64_t* offset,
      std::map<uintptr_t, CUipcMemHandle>* exported = nullptr);
  // Opens a handle another process exported; one this process exported is refused.
  arrow::Result<std::shared_ptr<DeviceBuffer>> OpenIpc(const CUipcMemHandle& handle,
                                                       int64_t offset, int64_t size);

  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> GetBufferReader(
      std::shared_ptr<arrow::Buffer> buf) override;
  arrow::Result<std::shared_ptr<arrow::io::OutputStream>> GetBufferWriter(
      std::shared_ptr<arrow::Buffer> buf) override;

  arrow::Result<std::shared_ptr<arrow::Device::SyncEvent>> MakeDeviceSyncEvent() override;
  arrow::Result<std::shared_ptr<arrow::Device::SyncEvent>> WrapDeviceSyncEvent(
      void* sync_event, arrow::Device::SyncEvent::release_fn_t release) override;

 protected:
  arrow::Result<std::shared_ptr<arrow::Buffer>> CopyBufferFrom(
      const std::shared_ptr<arrow::Buffer>& buf,
      const std::shared_ptr<arrow::MemoryManager>& from) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> CopyBufferTo(
      const std::shared_ptr<arrow::Buffer>& buf,
      const std::shared_ptr<arrow::MemoryManager>& to) override;
  arrow::Result<std::unique_ptr<arrow::Buffer>> CopyNonOwnedFrom(
      const arrow::Buffer& buf, const std::shared_ptr<arrow::MemoryManager>& from) override;
  arrow::Result<std::unique_ptr<arrow::Buffer>> CopyNonOwnedTo(
      const arrow::Buffer& buf, const std::shared_ptr<arrow::MemoryManager>& to) override;

 private:
  std::shared_ptr<CudaContext> context_;
};

// The CUDA memory manager behind an Arrow buffer, or nullptr if it is not device memory of
// this package.
std::shared_ptr<CudaMemoryManager> CudaManagerOf(const arrow::Buffer& buffer);

}  // namespace arrow_gpu
