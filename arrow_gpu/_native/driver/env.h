// Settings read from environment variables, validated: a bad value is an ArrowInvalid that
// names the variable and the forms it accepts. Unset or empty means the default.
#pragma once

#include <cstdint>
#include <vector>

#include <arrow/result.h>

namespace arrow_gpu {

// Whether the simulator stands in for the driver. ARROW_GPU_SIMULATOR: 1/true/yes/on or
// 0/false/no/off, any case.
arrow::Result<bool> UsingSimulator();

struct SimulatorOptions {
  int devices = 2;                         // ARROW_GPU_SIMULATOR_DEVICES: 0 to kMaxDevices
  uint64_t memory_per_device = uint64_t{4} << 30;  // ARROW_GPU_SIMULATOR_MEMORY: bytes or 4G, 512M...
  // ARROW_GPU_SIMULATOR_PINNED_MEMORY: pinned host memory for the whole process, as above.
  uint64_t pinned_memory = uint64_t{64} << 30;
  // The simulated devices this process sees, in its order (ordinal i is device visible[i]):
  // CUDA_VISIBLE_DEVICES read as the driver reads it (indices; the list ends at the first
  // entry that names no device, or one already listed); every device when it is unset.
  std::vector<int> visible;
  static constexpr int kMaxDevices = 64;
};

// Read once; the same result (or error) every time.
arrow::Result<SimulatorOptions> SimulatorOptionsFromEnvironment();

}  // namespace arrow_gpu
