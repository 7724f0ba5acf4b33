// CUDA as an Arrow device: arrow::Device and arrow::MemoryManager for device memory (kCUDA)
// and pinned host memory (kCUDA_HOST), their streams and sync events, and the device
// mappers through which pyarrow finds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <arrow/device.h>

#include "buffer.h"
#include "context.h"

namespace arrow_gpu {

class CudaDevice : public arrow::Device {
 public:
  // One instance per device number, alive for the whole process.
  static arrow::Result<std::shared_ptr<CudaDevice>> Get(int device_number);

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
  // A non-owning view of device memory in this context; `owner` is kept alive with it.
  std::shared_ptr<DeviceBuffer> View(uintptr_t address, int64_t size,
                                     std::shared_ptr<void> owner);
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

// Pinned host memory of one device's primary context. CPU-accessible, so every CPU code
// path in Arrow reads and writes it directly.
class CudaHostDevice : public arrow::Device {
 public:
  static arrow::Result<std::shared_ptr<CudaHostDevice>> Get(int device_number);

  explicit CudaHostDevice(int device_number)
      : arrow::Device(/*is_cpu=*/true), device_number_(device_number) {}

  const char* type_name() const override { return "arrow_gpu::cuda_host"; }
  std::string ToString() const override;
  bool Equals(const arrow::Device& other) const override;
  int64_t device_id() const override { return device_number_; }
  arrow::DeviceAllocationType device_type() const override {
    return arrow::DeviceAllocationType::kCUDA_HOST;
  }
  std::shared_ptr<arrow::MemoryManager> default_memory_manager() override;

 private:
  int device_number_;
  std::shared_ptr<CudaHostMemoryManager> manager_;
};

class CudaHostMemoryManager : public arrow::MemoryManager {
 public:
  static arrow::Result<std::shared_ptr<CudaHostMemoryManager>> Get(int device_number);

  CudaHostMemoryManager(std::shared_ptr<arrow::Device> device,
                        std::shared_ptr<CudaContext> context)
      : arrow::MemoryManager(std::move(device)), context_(std::move(context)) {}

  const std::shared_ptr<CudaContext>& cuda_context() const { return context_; }

  arrow::Result<std::unique_ptr<arrow::Buffer>> AllocateBuffer(int64_t size) override;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> GetBufferReader(
      std::shared_ptr<arrow::Buffer> buf) override;
  arrow::Result<std::shared_ptr<arrow::io::OutputStream>> GetBufferWriter(
      std::shared_ptr<arrow::Buffer> buf) override;

 protected:
  arrow::Result<std::shared_ptr<arrow::Buffer>> CopyBufferFrom(
      const std::shared_ptr<arrow::Buffer>& buf,
      const std::shared_ptr<arrow::MemoryManager>& from) override;
  arrow::Result<std::unique_ptr<arrow::Buffer>> CopyNonOwnedFrom(
      const arrow::Buffer& buf, const std::shared_ptr<arrow::MemoryManager>& from) override;

 private:
  std::shared_ptr<CudaContext> context_;
};

// The CUDA memory manager behind an Arrow buffer, or nullptr if it is not device memory of
// this package.
std::shared_ptr<CudaMemoryManager> CudaManagerOf(const arrow::Buffer& buffer);

// Registers device mappers for kCUDA and kCUDA_HOST with Arrow. Returns false (and
// registers nothing) when another CUDA backend, such as Arrow's own, already has kCUDA.
arrow::Result<bool> RegisterDeviceMappers();

}  // namespace arrow_gpu
