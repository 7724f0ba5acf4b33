// What `python -m arrow_gpu` reports about the driver and the devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <arrow/result.h>

namespace arrow_gpu {

struct DeviceDescription {
  std::string name;
  int64_t total_memory = 0;
  std::vector<int> peers;  // devices whose memory this one can access directly
};

// The driver's CUDA version as major * 1000 + minor * 10; 0 when the driver cannot say
// (the simulator).
arrow::Result<int> DriverCudaVersion();

arrow::Result<DeviceDescription> DescribeDevice(int ordinal);

}  // namespace arrow_gpu
