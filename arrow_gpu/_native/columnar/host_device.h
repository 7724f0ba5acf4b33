// Pinned (page-locked) host memory as an Arrow device: kCUDA_HOST buffers, which are CPU
// memory to Arrow, of one device's primary context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <arrow/buffer.h>
#include <arrow/device.h>

#include "cuda/context.h"

namespace arrow_gpu {

class CudaHostMemoryManager;

// Page-locked host memory: CPU memory (the CPU device and memory manager), device_type
// kCUDA_HOST.
class PinnedHostBuffer : public arrow::MutableBuffer {
 public:
  PinnedHostBuffer(uint8_t* data, int64_t size,
                   std::shared_ptr<CudaHostMemoryManager> manager);
  ~PinnedHostBuffer() override;

 private:
  std::shared_ptr<CudaContext> context_;
};

// Pinned host memory of one device's primary context. CPU-accessible, so every CPU code
// path in Arrow reads and writes it directly.
class CudaHostDevice : public arrow::Device {
 public:
  static arrow::Result<std::shared_ptr<CudaHostDevice>> Primary(int device_number);

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
  static arrow::Result<std::shared_ptr<CudaHostMemoryManager>> Primary(int device_number);

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

}  // namespace arrow_gpu
