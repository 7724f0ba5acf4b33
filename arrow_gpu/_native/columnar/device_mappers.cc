#include "columnar/device_mappers.h"

#include "columnar/device.h"
#include "columnar/host_device.h"

namespace arrow_gpu {

using arrow::DeviceAllocationType;
using arrow::MemoryManager;
using arrow::Result;
using arrow::Status;

Result<bool> RegisterDeviceMappers() {
  Status status = arrow::RegisterDeviceMapper(
      DeviceAllocationType::kCUDA, [](int64_t device_id) -> Result<std::shared_ptr<MemoryManager>> {
        ARROW_ASSIGN_OR_RAISE(auto manager, CudaMemoryManager::Primary(static_cast<int>(device_id)));
        return manager;
      });
  if (status.IsKeyError()) return false;  // another CUDA backend is in charge
  ARROW_RETURN_NOT_OK(status);
  status = arrow::RegisterDeviceMapper(
      DeviceAllocationType::kCUDA_HOST,
      [](int64_t device_id) -> Result<std::shared_ptr<MemoryManager>> {
        ARROW_ASSIGN_OR_RAISE(auto manager, CudaHostMemoryManager::Primary(static_cast<int>(device_id)));
        return manager;
      });
  if (!status.ok() && !status.IsKeyError()) return status;
  return true;
}

}  // namespace arrow_gpu
