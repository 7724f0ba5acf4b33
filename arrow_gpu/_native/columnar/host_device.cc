#include "columnar/host_device.h"

#include <cstring>
#include <string>

#include <arrow/io/memory.h>

#include "columnar/device.h"
#include "columnar/per_device.h"
#include "engine/copy_engine.h"

namespace arrow_gpu {
namespace {

using arrow::Buffer;
using arrow::DeviceAllocationType;
using arrow::MemoryManager;
using arrow::Result;

PerDevice<CudaHostDevice>& HostDevices() {
  static auto* devices = new PerDevice<CudaHostDevice>();
  return *devices;
}

}  // namespace

PinnedHostBuffer::PinnedHostBuffer(uint8_t* data, int64_t size,
                                   std::shared_ptr<CudaHostMemoryManager> manager)
    : arrow::MutableBuffer(data, size), context_(manager->cuda_context()) {
  // As in Arrow's CUDA module: CPU memory (device and memory manager are the CPU's) whose
  // device type says it is pinned.
  device_type_ = arrow::DeviceAllocationType::kCUDA_HOST;
}

PinnedHostBuffer::~PinnedHostBuffer() { context_->FreeHost(mutable_data()); }

Result<std::shared_ptr<CudaHostDevice>> CudaHostDevice::Primary(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto context, CudaContext::Primary(device_number));
  return HostDevices().GetOrMake(
      device_number, [&]() -> Result<std::shared_ptr<CudaHostDevice>> {
        auto device = std::make_shared<CudaHostDevice>(device_number);
        device->manager_ = std::make_shared<CudaHostMemoryManager>(device, context);
        return device;
      });
}

std::string CudaHostDevice::ToString() const {
  return "CudaHostDevice(device_number=" + std::to_string(device_number_) + ")";
}

bool CudaHostDevice::Equals(const arrow::Device& other) const {
  return other.device_type() == DeviceAllocationType::kCUDA_HOST &&
         other.device_id() == device_number_;
}

std::shared_ptr<MemoryManager> CudaHostDevice::default_memory_manager() { return manager_; }

Result<std::shared_ptr<CudaHostMemoryManager>> CudaHostMemoryManager::Primary(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto device, CudaHostDevice::Primary(device_number));
  return std::static_pointer_cast<CudaHostMemoryManager>(device->default_memory_manager());
}

Result<std::unique_ptr<Buffer>> CudaHostMemoryManager::AllocateBuffer(int64_t size) {
  ARROW_ASSIGN_OR_RAISE(uint8_t* data, context_->AllocateHost(size));
  auto self = std::static_pointer_cast<CudaHostMemoryManager>(shared_from_this());
  return std::make_unique<PinnedHostBuffer>(data, size, std::move(self));
}

Result<std::shared_ptr<arrow::io::RandomAccessFile>> CudaHostMemoryManager::GetBufferReader(
    std::shared_ptr<Buffer> buf) {
  return std::make_shared<arrow::io::BufferReader>(std::move(buf));
}

Result<std::shared_ptr<arrow::io::OutputStream>> CudaHostMemoryManager::GetBufferWriter(
    std::shared_ptr<Buffer> buf) {
  return std::make_shared<arrow::io::FixedSizeBufferWriter>(std::move(buf));
}

Result<std::unique_ptr<Buffer>> CudaHostMemoryManager::CopyNonOwnedFrom(
    const Buffer& buf, const std::shared_ptr<MemoryManager>& from) {
  if (from->is_cpu()) {
    ARROW_ASSIGN_OR_RAISE(auto dest, AllocateBuffer(buf.size()));
    if (buf.size() > 0) std::memcpy(dest->mutable_data(), buf.data(), buf.size());
    return dest;
  }
  if (auto source = std::dynamic_pointer_cast<CudaMemoryManager>(from)) {
    ARROW_ASSIGN_OR_RAISE(auto dest, AllocateBuffer(buf.size()));
    ARROW_RETURN_NOT_OK(EngineDeviceToHost(*source->cuda_context(), dest->mutable_data(),
                                           buf.address(), buf.size()));
    return dest;
  }
  return std::unique_ptr<Buffer>();  // no copy this way: Arrow asks the other side
}

Result<std::shared_ptr<Buffer>> CudaHostMemoryManager::CopyBufferFrom(
    const std::shared_ptr<Buffer>& buf, const std::shared_ptr<MemoryManager>& from) {
  ARROW_ASSIGN_OR_RAISE(auto copy, CopyNonOwnedFrom(*buf, from));
  return std::shared_ptr<Buffer>(std::move(copy));
}

}  // namespace arrow_gpu
