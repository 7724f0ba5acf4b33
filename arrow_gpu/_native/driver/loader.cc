// Loads the driver table in use, once: the real driver's, bound from libcuda.so.1, or the
// simulator's (simulator.h); and names driver errors.
#include "driver/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "driver/simulator.h"
#include "driver/symbols.h"

namespace arrow_gpu {
namespace {

constexpr const char* kWaysOut =
    "Install the NVIDIA driver on a machine with a GPU, or set ARROW_GPU_SIMULATOR=1 to run "
    "on the host simulator: it is read once, at a process's first use of a device (not at "
    "import), so set it in the environment, or in os.environ before that use.";

arrow::Result<DriverTable> LoadCudaDriver() {
  // ARROW_GPU_DRIVER_LIBRARY names another driver library (a non-standard install).
  const char* chosen = std::getenv("ARROW_GPU_DRIVER_LIBRARY");
  const bool default_path = chosen == nullptr || *chosen == '\0';
  const char* path = default_path ? "libcuda.so.1" : chosen;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return arrow::Status::IOError("No CUDA driver could be loaded (", why ? why : path, ")",
                                  default_path ? "" : " from ARROW_GPU_DRIVER_LIBRARY", ". ",
                                  kWaysOut);
  }
  DriverTable t{};
  t.name = "cuda";
  std::string missing;  // names carry the ABI version suffix (_v2) where the driver has one
  BindSymbol(library, "cuInit", &t.Init, &missing);
  BindSymbol(library, "cuGetErrorName", &t.GetErrorName, &missing);
  BindSymbol(library, "cuGetErrorString", &t.GetErrorString, &missing);
  BindSymbol(library, "cuDeviceGetCount", &t.DeviceGetCount, &missing);
  BindSymbol(library, "cuDeviceGet", &t.DeviceGet, &missing);
  BindSymbol(library, "cuDeviceGetName", &t.DeviceGetName, &missing);
  BindSymbol(library, "cuDeviceTotalMem_v2", &t.DeviceTotalMem, &missing);
  BindSymbol(library, "cuDeviceCanAccessPeer", &t.DeviceCanAccessPeer, &missing);
  BindSymbol(library, "cuDevicePrimaryCtxRetain", &t.DevicePrimaryCtxRetain, &missing);
  BindSymbol(library, "cuCtxPushCurrent_v2", &t.CtxPushCurrent, &missing);
  BindSymbol(library, "cuCtxPopCurrent_v2", &t.CtxPopCurrent, &missing);
  BindSymbol(library, "cuCtxGetCurrent", &t.CtxGetCurrent, &missing);
  BindSymbol(library, "cuCtxSetCurrent", &t.CtxSetCurrent, &missing);
  BindSymbol(library, "cuCtxGetDevice", &t.CtxGetDevice, &missing);
  BindSymbol(library, "cuCtxSynchronize", &t.CtxSynchronize, &missing);
  BindSymbol(library, "cuCtxEnablePeerAccess", &t.CtxEnablePeerAccess, &missing);
  BindSymbol(library, "cuMemAlloc_v2", &t.MemAlloc, &missing);
  BindSymbol(library, "cuMemFree_v2", &t.MemFree, &missing);
  BindSymbol(library, "cuMemHostAlloc", &t.MemHostAlloc, &missing);
  BindSymbol(library, "cuMemFreeHost", &t.MemFreeHost, &missing);
  BindSymbol(library, "cuMemGetInfo_v2", &t.MemGetInfo, &missing);
  BindSymbol(library, "cuMemGetAddressRange_v2", &t.MemGetAddressRange, &missing);
  BindSymbol(library, "cuPointerGetAttribute", &t.PointerGetAttribute, &missing);
  BindSymbol(library, "cuMemcpyHtoD_v2", &t.MemcpyHtoD, &missing);
  BindSymbol(library, "cuMemcpyDtoH_v2", &t.MemcpyDtoH, &missing);
  BindSymbol(library, "cuMemcpyDtoD_v2", &t.MemcpyDtoD, &missing);
  BindSymbol(library, "cuMemcpyPeer", &t.MemcpyPeer, &missing);
  BindSymbol(library, "cuMemcpyHtoDAsync_v2", &t.MemcpyHtoDAsync, &missing);
  BindSymbol(library, "cuMemcpyDtoHAsync_v2", &t.MemcpyDtoHAsync, &missing);
  BindSymbol(library, "cuMemcpyDtoDAsync_v2", &t.MemcpyDtoDAsync, &missing);
  BindSymbol(library, "cuMemsetD8_v2", &t.MemsetD8, &missing);
  BindSymbol(library, "cuIpcGetMemHandle", &t.IpcGetMemHandle, &missing);
  BindSymbol(library, "cuIpcOpenMemHandle_v2", &t.IpcOpenMemHandle, &missing);
  BindSymbol(library, "cuIpcCloseMemHandle", &t.IpcCloseMemHandle, &missing);
  BindSymbol(library, "cuStreamCreate", &t.StreamCreate, &missing);
  BindSymbol(library, "cuStreamDestroy_v2", &t.StreamDestroy, &missing);
  BindSymbol(library, "cuStreamSynchronize", &t.StreamSynchronize, &missing);
  BindSymbol(library, "cuStreamWaitEvent", &t.StreamWaitEvent, &missing);
  BindSymbol(library, "cuEventCreate", &t.EventCreate, &missing);
  BindSymbol(library, "cuEventDestroy_v2", &t.EventDestroy, &missing);
  BindSymbol(library, "cuEventRecord", &t.EventRecord, &missing);
  BindSymbol(library, "cuEventSynchronize", &t.EventSynchronize, &missing);
  BindSymbol(library, "cuEventQuery", &t.EventQuery, &missing);
  BindSymbol(library, "cuModuleLoadData", &t.ModuleLoadData, &missing);
  BindSymbol(library, "cuModuleGetFunction", &t.ModuleGetFunction, &missing);
  BindSymbol(library, "cuModuleUnload", &t.ModuleUnload, &missing);
  BindSymbol(library, "cuLaunchKernel", &t.LaunchKernel, &missing);
  BindSymbol(library, "cuDeviceGetAttribute", &t.DeviceGetAttribute, &missing);
  const char* named_by = default_path ? "" : " (named by ARROW_GPU_DRIVER_LIBRARY)";
  if (t.Init == nullptr) {  // every CUDA driver has had cuInit: this is another library
    return arrow::Status::IOError(path, named_by, " is not a CUDA driver library: it has no ",
                                  "cuInit. Name the NVIDIA driver's libcuda.so.1, or unset ",
                                  "ARROW_GPU_DRIVER_LIBRARY to load the one on the loader's ",
                                  "path. ", kWaysOut);
  }
  if (!missing.empty()) {
    return arrow::Status::IOError("The CUDA driver in ", path, named_by, " is too old: it lacks ",
                                  missing, ". Update the NVIDIA driver.");
  }
  std::string optional;  // entry points the core can do without
  BindSymbol(library, "cuMemAllocAsync", &t.MemAllocAsync, &optional);
  BindSymbol(library, "cuMemFreeAsync", &t.MemFreeAsync, &optional);
  BindSymbol(library, "cuDriverGetVersion", &t.DriverGetVersion, &optional);
  BindSymbol(library, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
             &t.OccupancyMaxActiveBlocksPerMultiprocessor, &optional);
  return t;
}

arrow::Status FormatError(const DriverTable* table, CUresult result, const char* function) {
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "unknown error";
  if (table != nullptr) {
    table->GetErrorName(result, &name);
    table->GetErrorString(result, &text);
  }
  return arrow::Status::IOError("Cuda error ", result, " in function '", function, "': [",
                                name, "] ", text);
}

// The process that initialised the driver; 0 before that. CUDA state does not survive
// fork() (nor does the simulator's, by the same contract), so a child must not use it.
std::atomic<pid_t> initialized_in{0};
// Set in a child forked after cuInit: checked on every driver call, where getpid() would be
// a system call each time.
std::atomic<bool> forked_after_init{false};

arrow::Result<const DriverTable*> LoadOnce() {
  const DriverTable* table = nullptr;
  ARROW_ASSIGN_OR_RAISE(bool simulate, UsingSimulator());
  if (simulate) {
    ARROW_RETURN_NOT_OK(SimulatorOptionsFromEnvironment());  // the simulator reads them later
    table = SimulatorTable();
  } else {
    static DriverTable cuda;
    ARROW_ASSIGN_OR_RAISE(cuda, LoadCudaDriver());
    table = &cuda;
  }
  CUresult rc = table->Init(0);
  if (rc != CUDA_SUCCESS) {
    arrow::Status failed = FormatError(table, rc, "cuInit");
    return failed.WithMessage(failed.message(), ". ", kWaysOut);
  }
  initialized_in = getpid();
  pthread_atfork(nullptr, nullptr, [] { forked_after_init.store(true); });
  return table;
}

}  // namespace

arrow::Result<const DriverTable*> Driver() {
  // The outcome, success or failure, is fixed at first use, as the driver's is.
  static const arrow::Result<const DriverTable*> table = LoadOnce();
  if (table.ok()) ARROW_RETURN_NOT_OK(CheckNotForked());
  return table;
}

arrow::Status CheckNotForked() {
  if (!forked_after_init.load(std::memory_order_relaxed)) return arrow::Status::OK();
  pid_t parent = initialized_in.load(std::memory_order_relaxed);
  return arrow::Status::IOError(
      "CUDA cannot be used in this process: it was forked from process ", parent,
      ", which had already initialised the CUDA driver, and CUDA does not survive fork(). "
      "Start worker processes with multiprocessing's 'spawn' or 'forkserver' method, or "
      "use arrow_gpu only after forking.");
}

arrow::Status CudaStatus(CUresult result, const char* function) {
  if (result == CUDA_SUCCESS) return arrow::Status::OK();
  auto table = Driver();
  return FormatError(table.ok() ? *table : nullptr, result, function);
}

}  // namespace arrow_gpu
