// Kernels compiled at run time (see driver/nvrtc.h): loading their PTX into a context and
// launching them. Which kernels, and their caching, are the caller's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "cuda/context.h"

namespace arrow_gpu {

// Whether the driver runs kernels: the CUDA driver does, and the simulator runs their host
// twins (driver/kernel_twins.h).
bool KernelsSupported(const CudaContext& context);

// The compute capability of `context`'s device as major * 10 + minor (90 for sm_90).
arrow::Result<int> ComputeCapability(const CudaContext& context);
// How many multiprocessors the device has, to size grids.
arrow::Result<int> MultiprocessorCount(const CudaContext& context);
// How many blocks of `threads` threads of `function` the device runs at once (all its
// multiprocessors); 0 where the driver cannot tell (the simulator).
arrow::Result<int64_t> ResidentBlocks(const CudaContext& context, CUfunction function,
                                      int threads);

// A module of `image` (a CUBIN, or PTX the driver compiles) loaded into `context` (a primary
// one: modules live as long as the process, as primary contexts do).
arrow::Result<CUmodule> LoadModule(const CudaContext& context, const std::string& image);
arrow::Result<CUfunction> ModuleFunction(const CudaContext& context, CUmodule module,
                                         const std::string& name);

// Launches `function` on a one-dimensional grid, queued on `stream`. Every kernel parameter
// is 64 bits wide (a pointer or a 64-bit integer), given in order in `args`.
arrow::Status Launch(const CudaContext& context, CUfunction function, int64_t blocks,
                     int threads, const std::vector<uint64_t>& args, CUstream stream);

}  // namespace arrow_gpu
