#include "cuda/device_allocator.h"

namespace arrow_gpu {

arrow::Status AllocationFailure(CUresult rc, const char* function, const CudaContext& context,
                                int64_t nbytes) {
  arrow::Status cuda = CudaStatus(rc, function);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    return arrow::Status::OutOfMemory("CUDA device ", context.device_number(),
                                      " could not allocate ", nbytes, " bytes: ",
                                      cuda.message());
  }
  return cuda;
}

}  // namespace arrow_gpu
