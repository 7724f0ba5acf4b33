// The simulator's modules and launches: the kernels' host twins (kernel_twins.h) stand in
// for what a GPU compiles from the package's source, and each launch runs its twin at once.
#include <map>
#include <mutex>

#include "driver/kernel_twins.h"
#include "driver/simulator_state.h"

namespace arrow_gpu::sim {
namespace {

struct SimModule {};  // every module holds every twin, whatever its image (which is not read)

std::mutex launches_mutex;
std::map<const KernelTwin*, int64_t> launches;  // by kernel (twins are static)

}  // namespace

CUresult ModuleLoadData(CUmodule* module, const void*) {
  if (!HasCurrentContext()) return CUDA_ERROR_INVALID_CONTEXT;
  *module = reinterpret_cast<CUmodule>(new SimModule());
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.modules.insert(*module);
  return CUDA_SUCCESS;
}
CUresult ModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  {
    auto& state = State();
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.modules.count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  const KernelTwin* twin = FindKernelTwin(name);
  if (twin == nullptr) return CUDA_ERROR_NOT_FOUND;
  *function = reinterpret_cast<CUfunction>(const_cast<KernelTwin*>(twin));
  return CUDA_SUCCESS;
}
CUresult ModuleUnload(CUmodule module) {
  return DestroyHandle<SimModule>(&SimState::modules, module);
}

// The twin runs before the launch returns: the stream's earlier work is done, and its later
// work comes after. Grids and blocks are one-dimensional, as every launch of the package's.
CUresult LaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                      unsigned block_x, unsigned block_y, unsigned block_z, unsigned,
                      CUstream stream, void** params, void** extra) {
  if (!HasCurrentContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!IsKernelTwin(function)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult rc = UseStream(stream)) return rc;
  if (grid_x == 0 || block_x == 0 || block_x > 1024 || params == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (grid_y != 1 || grid_z != 1 || block_y != 1 || block_z != 1 || extra != nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const auto* twin = reinterpret_cast<const KernelTwin*>(function);
  {
    std::lock_guard<std::mutex> lock(launches_mutex);
    ++launches[twin];
  }
  return twin->launch(grid_x, block_x, params);
}

// What the kernels ask of the device: compute capability 9.0 (the twins are the kernels of
// any architecture) and 4 multiprocessors, so that grids are capped at 128 blocks and
// grid-stride loops go round on inputs of some 32,000 rows or more.
CUresult DeviceGetAttribute(int* value, int attribute, CUdevice device) {
  if (device < 0 || device >= State().num_devices) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 4; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace arrow_gpu::sim

namespace arrow_gpu {

int64_t SimulatorLaunches(const std::string& name) {
  const KernelTwin* twin = FindKernelTwin(name.c_str());
  std::lock_guard<std::mutex> lock(sim::launches_mutex);
  auto found = sim::launches.find(twin);
  return twin == nullptr || found == sim::launches.end() ? 0 : found->second;
}

}  // namespace arrow_gpu
