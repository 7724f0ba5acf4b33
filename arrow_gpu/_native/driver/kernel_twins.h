// Host twins of the device kernels (arrow_gpu/_compute/*.cu, and bit packing's PTX):
// for each kernel, a function that does on host memory what the kernel's whole grid does on
// the device. The simulator (simulator.h), whose device memory is host memory, runs a twin
// where a GPU runs the kernel, so the code that plans launches is the same on both; a GPU
// test holds each twin and its kernel equal.
//
// Where a kernel's result depends on its grid (the tile scans, and the batched copies whose
// tables say which blocks work on which range), the twin works block by block as the grid
// would. A twin refuses (CUDA_ERROR_INVALID_VALUE) a launch shape its kernel leaves
// undefined: block sizes other than the ones the kernel's shared memory and warp votes
// assume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <arrow/status.h>

#include "driver/driver.h"

namespace arrow_gpu {

struct KernelTwin {
  const char* name;  // the kernel's
  int params;        // how many it takes
  // A launch of a one-dimensional grid; `params` as cuLaunchKernel takes them: a pointer to
  // each parameter's value, in order.
  CUresult (*launch)(unsigned blocks, unsigned threads, void** params);
};

// The twin of the kernel named `name`, or nullptr when there is none.
const KernelTwin* FindKernelTwin(const char* name);

// Whether `function` is one of the twins FindKernelTwin hands out.
bool IsKernelTwin(const void* function);

// Runs the twin of `name` at once on host memory, `args` each a 64-bit parameter; needs no
// driver. KeyError for an unknown name, Invalid for a launch the twin refuses.
arrow::Status RunKernelTwin(const std::string& name, int64_t blocks, int threads,
                            const std::vector<uint64_t>& args);

}  // namespace arrow_gpu
