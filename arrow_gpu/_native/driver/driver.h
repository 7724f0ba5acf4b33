// The CUDA driver entry points arrow_gpu uses, as one table of function pointers.
//
// The table is filled once (loader.cc), either from the real driver (libcuda.so.1, loaded at
// run time so that neither building nor running needs a CUDA toolkit) or from the host
// simulator (ARROW_GPU_SIMULATOR=1, simulator.h). Nothing else in the package calls the
// driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <arrow/result.h>
#include <arrow/status.h>

#include "driver/env.h"

namespace arrow_gpu {

// ABI-compatible spellings of the driver's types (cuda.h is deliberately not included).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
using CUcontext = CUctx_st*;
struct CUstream_st;
using CUstream = CUstream_st*;
struct CUevent_st;
using CUevent = CUevent_st*;
struct CUmod_st;
using CUmodule = CUmod_st*;
struct CUfunc_st;
using CUfunction = CUfunc_st*;
struct CUipcMemHandle {
  char reserved[64];
};

// The error codes the simulator returns and the core tests for.
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum : unsigned {
  CU_MEMHOSTALLOC_PORTABLE = 0x01,
  CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
  CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_STREAM_NON_BLOCKING = 0x1,
};

enum : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
};

struct DriverTable {
  const char* name;  // "cuda" or "simulator"
  CUresult (*Init)(unsigned flags);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int ordinal);
  CUresult (*DeviceGetName)(char*, int len, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DeviceCanAccessPeer)(int*, CUdevice, CUdevice peer);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxGetDevice)(CUdevice*);
  CUresult (*CtxSynchronize)();
  CUresult (*CtxEnablePeerAccess)(CUcontext peer, unsigned flags);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned flags);
  CUresult (*MemFreeHost)(void*);
  CUresult (*MemGetInfo)(size_t* free, size_t* total);
  CUresult (*MemGetAddressRange)(CUdeviceptr* base, size_t* size, CUdeviceptr);
  CUresult (*PointerGetAttribute)(void* data, int attribute, CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemcpyPeer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*IpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*IpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned flags);
  CUresult (*IpcCloseMemHandle)(CUdeviceptr);
  CUresult (*StreamCreate)(CUstream*, unsigned flags);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned flags);
  CUresult (*EventCreate)(CUevent*, unsigned flags);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventQuery)(CUevent);
  // Stream-ordered allocation (CUDA 11.2+); nullptr when the driver lacks it.
  CUresult (*MemAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
  // The driver's CUDA version (e.g. 12080 for 12.8), for diagnostics; nullptr in the simulator.
  CUresult (*DriverGetVersion)(int*);
  // Kernels: modules of CUBIN or PTX (which the driver compiles at load time), and launches;
  // the simulator's modules hold the kernels' host twins (kernel_twins.h) instead, whatever
  // the image.
  CUresult (*ModuleLoadData)(CUmodule*, const void* image);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char* name);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*LaunchKernel)(CUfunction, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                           unsigned block_x, unsigned block_y, unsigned block_z,
                           unsigned shared_bytes, CUstream, void** params, void** extra);
  // A device attribute (e.g. its compute capability, for the kernels compiled at run time).
  CUresult (*DeviceGetAttribute)(int* value, int attribute, CUdevice);
  // How many blocks of a kernel a multiprocessor runs at once, to size a grid to one wave;
  // nullptr in the simulator, whose twins run any grid alike.
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, CUfunction,
                                                        int block_size,
                                                        size_t dynamic_shared_bytes);
};

// The table in use, loaded (and cuInit called) on first use. Fails with a message naming
// both ways out when there is neither a driver nor the simulator.
arrow::Result<const DriverTable*> Driver();

// OK, or an IOError when this process is a fork of one that initialised the driver.
arrow::Status CheckNotForked();

// OK, or an IOError "Cuda error N in function 'cuXxx': [NAME] text".
arrow::Status CudaStatus(CUresult result, const char* function);

}  // namespace arrow_gpu

// Calls a driver entry point and returns an IOError from the enclosing function on failure.
#define ARROW_GPU_CU(driver, fn, ...) \
  ARROW_RETURN_NOT_OK(::arrow_gpu::CudaStatus((driver)->fn(__VA_ARGS__), "cu" #fn))
