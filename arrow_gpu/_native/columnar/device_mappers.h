// The device mappers through which pyarrow finds arrow_gpu's devices by device type.
#pragma once

#include <arrow/result.h>

namespace arrow_gpu {

// Registers device mappers for kCUDA and kCUDA_HOST with Arrow. Returns false (and
// registers nothing) when another CUDA backend, such as Arrow's own, already has kCUDA.
arrow::Result<bool> RegisterDeviceMappers();

}  // namespace arrow_gpu
