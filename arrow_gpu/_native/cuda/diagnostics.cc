#include "cuda/diagnostics.h"

#include "driver/driver.h"

namespace arrow_gpu {

arrow::Result<int> DriverCudaVersion() {
  ARROW_ASSIGN_OR_RAISE(const DriverTable* driver, Driver());
  int version = 0;
  if (driver->DriverGetVersion != nullptr) ARROW_GPU_CU(driver, DriverGetVersion, &version);
  return version;
}

arrow::Result<DeviceDescription> DescribeDevice(int ordinal) {
  ARROW_ASSIGN_OR_RAISE(const DriverTable* driver, Driver());
  int count = 0;
  ARROW_GPU_CU(driver, DeviceGetCount, &count);
  CUdevice device = 0;
  ARROW_GPU_CU(driver, DeviceGet, &device, ordinal);
  DeviceDescription description;
  char name[256] = {};
  ARROW_GPU_CU(driver, DeviceGetName, name, static_cast<int>(sizeof(name)), device);
  description.name = name;
  size_t total = 0;
  ARROW_GPU_CU(driver, DeviceTotalMem, &total, device);
  description.total_memory = static_cast<int64_t>(total);
  for (int other = 0; other < count; ++other) {
    if (other == ordinal) continue;
    CUdevice peer = 0;
    int can_access = 0;
    ARROW_GPU_CU(driver, DeviceGet, &peer, other);
    ARROW_GPU_CU(driver, DeviceCanAccessPeer, &can_access, device, peer);
    if (can_access) description.peers.push_back(other);
  }
  return description;
}

}  // namespace arrow_gpu
