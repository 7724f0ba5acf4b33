// NVRTC, CUDA's run-time compiler, loaded at run time as the driver is: CUDA C source in,
// a module image for one GPU architecture out. Neither building nor importing arrow_gpu needs it; only
// the first kernel of a process does.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

namespace arrow_gpu {

// NVRTC's version as major * 1000 + minor * 10 (the driver's spelling, e.g. 12080). The
// library is looked for in `directories` first (e.g. the nvidia-cuda-nvrtc wheel's), then
// where the dynamic loader looks; the first call that finds it fixes it for the process.
// Fails with a message naming the wheel when no NVRTC can be loaded.
arrow::Result<int> NvrtcVersion(const std::vector<std::string>& directories);

// A header handed to NVRTC with the source: the name it is included by, and its text.
using NvrtcHeader = std::pair<std::string, std::string>;

// The module image of `source` for compute capability `arch` (e.g. 90 for sm_90) with the
// given extra options: a CUBIN where NVRTC knows `arch` (from CUDA 11.1), else PTX of the
// newest architecture before it that NVRTC knows; the driver loads either. Its quoted
// includes find `headers` first (NVRTC reads no file for them). A compile error carries
// NVRTC's log. Programs compile concurrently on several threads.
arrow::Result<std::string> CompileKernels(const std::vector<std::string>& directories,
                                          const std::string& source, const std::string& name,
                                          const std::vector<NvrtcHeader>& headers, int arch,
                                          const std::vector<std::string>& options);

}  // namespace arrow_gpu
