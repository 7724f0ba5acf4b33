#include "cuda/kernels.h"

#include <limits>

namespace arrow_gpu {
namespace {

arrow::Status CheckSupported(const CudaContext& context) {
  if (KernelsSupported(context)) return arrow::Status::OK();
  return arrow::Status::NotImplemented("the ", context.driver()->name,
                                       " driver runs no kernels");
}

arrow::Result<int> Attribute(const CudaContext& context, int attribute) {
  ARROW_RETURN_NOT_OK(CheckSupported(context));
  const DriverTable* driver = context.driver();
  CUdevice device = 0;
  ARROW_GPU_CU(driver, DeviceGet, &device, context.device_number());
  int value = 0;
  ARROW_GPU_CU(driver, DeviceGetAttribute, &value, attribute, device);
  return value;
}

}  // namespace

bool KernelsSupported(const CudaContext& context) {
  const DriverTable* driver = context.driver();
  return driver->LaunchKernel != nullptr && driver->DeviceGetAttribute != nullptr;
}

arrow::Result<int> ComputeCapability(const CudaContext& context) {
  ARROW_ASSIGN_OR_RAISE(int major,
                        Attribute(context, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  ARROW_ASSIGN_OR_RAISE(int minor,
                        Attribute(context, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  return major * 10 + minor;
}

arrow::Result<int> MultiprocessorCount(const CudaContext& context) {
  return Attribute(context, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
}

arrow::Result<int64_t> ResidentBlocks(const CudaContext& context, CUfunction function,
                                      int threads) {
  ARROW_RETURN_NOT_OK(CheckSupported(context));
  const DriverTable* driver = context.driver();
  if (driver->OccupancyMaxActiveBlocksPerMultiprocessor == nullptr) return 0;
  ARROW_ASSIGN_OR_RAISE(int multiprocessors, MultiprocessorCount(context));
  ARROW_GPU_ENTER(context);
  int blocks = 0;
  ARROW_GPU_CU(driver, OccupancyMaxActiveBlocksPerMultiprocessor, &blocks, function, threads,
               0);
  return int64_t{blocks} * multiprocessors;
}

arrow::Result<CUmodule> LoadModule(const CudaContext& context, const std::string& image) {
  ARROW_RETURN_NOT_OK(CheckSupported(context));
  if (!context.primary()) {
    return arrow::Status::NotImplemented(
        "kernels run in a device's primary context, and this one is foreign");
  }
  ARROW_GPU_ENTER(context);
  CUmodule module = nullptr;
  ARROW_GPU_CU(context.driver(), ModuleLoadData, &module, image.data());
  return module;
}

arrow::Result<CUfunction> ModuleFunction(const CudaContext& context, CUmodule module,
                                         const std::string& name) {
  ARROW_RETURN_NOT_OK(CheckSupported(context));
  ARROW_GPU_ENTER(context);
  CUfunction function = nullptr;
  ARROW_GPU_CU(context.driver(), ModuleGetFunction, &function, module, name.c_str());
  return function;
}

arrow::Status Launch(const CudaContext& context, CUfunction function, int64_t blocks,
                     int threads, const std::vector<uint64_t>& args, CUstream stream) {
  ARROW_RETURN_NOT_OK(CheckSupported(context));
  if (blocks < 1 || blocks > std::numeric_limits<int32_t>::max() || threads < 1 ||
      threads > 1024) {
    return arrow::Status::Invalid("cannot launch ", blocks, " blocks of ", threads,
                                  " threads");
  }
  ARROW_GPU_ENTER(context);
  std::vector<uint64_t> values(args);  // the driver reads the parameters through pointers
  std::vector<void*> params;
  params.reserve(values.size());
  for (uint64_t& value : values) params.push_back(&value);
  ARROW_GPU_CU(context.driver(), LaunchKernel, function, static_cast<unsigned>(blocks), 1, 1,
               static_cast<unsigned>(threads), 1, 1, 0, stream, params.data(), nullptr);
  return arrow::Status::OK();
}

}  // namespace arrow_gpu
