// The host simulator: a DriverTable whose "device memory" is host memory.
//
// It keeps the driver's contracts that the core and its users rely on: per-device contexts
// and a per-thread context stack, allocation bookkeeping (so double frees, out-of-range
// copies and IPC are refused with the driver's own error codes), a per-device memory limit,
// and in-order streams whose events complete at once.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "driver.h"
#include "env.h"

namespace arrow_gpu {
namespace {

constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217;
constexpr size_t kAlignment = 256;  // cuMemAlloc's guarantee, which Arrow code may assume

struct SimContext {
  int device;
};

struct Allocation {
  size_t size;
  int device;  // -1 for pinned host memory
};

struct SimState {
  int num_devices;
  size_t memory_per_device;
  std::vector<SimContext> contexts;
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // keyed by base address
  std::vector<size_t> used;                      // bytes in use per device
  std::set<std::pair<int, int>> peer_access;

  SimState() {
    // Validated by Driver() before this table can be used; the defaults are a fallback only.
    const SimulatorOptions options = SimulatorOptionsFromEnvironment().ValueOr({});
    num_devices = options.devices;
    memory_per_device = options.memory_per_device;
    contexts.resize(num_devices);
    used.assign(num_devices, 0);
    for (int i = 0; i < num_devices; ++i) contexts[i].device = i;
  }

  // The allocation holding `address`, or nullptr for memory the simulator did not hand out.
  const Allocation* Find(uintptr_t address, uintptr_t* base) {
    auto it = allocations.upper_bound(address);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (address >= it->first + std::max<size_t>(it->second.size, 1)) return nullptr;
    *base = it->first;
    return &it->second;
  }
};

SimState& State() {
  static SimState* state = new SimState();  // never destroyed: buffers may die at exit
  return *state;
}

thread_local std::vector<CUcontext> context_stack;

CUcontext AsHandle(SimContext* context) { return reinterpret_cast<CUcontext>(context); }

SimContext* FromHandle(CUcontext handle) {
  auto& state = State();
  for (auto& context : state.contexts) {
    if (AsHandle(&context) == handle) return &context;
  }
  return nullptr;
}

// A copy may touch memory the simulator did not allocate (foreign host memory standing in
// for device memory), but never run past the end of one of its own allocations.
CUresult CheckRange(uintptr_t address, size_t nbytes) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t base = 0;
  const Allocation* allocation = state.Find(address, &base);
  if (allocation == nullptr) return CUDA_SUCCESS;
  return address + nbytes <= base + allocation->size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult Init(unsigned) { return CUDA_SUCCESS; }

CUresult GetErrorName(CUresult error, const char** out) {
  static const std::map<CUresult, const char*> names = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"},
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
      {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
      {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
      {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
      {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
      {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
      {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
      {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
  };
  auto it = names.find(error);
  if (it == names.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult GetErrorString(CUresult error, const char** out) {
  static const std::map<CUresult, const char*> texts = {
      {CUDA_SUCCESS, "no error"},
      {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
      {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
      {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
      {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
      {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
      {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
      {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"},
      {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
      {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
      {CUDA_ERROR_NOT_READY, "device not ready"},
      {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"},
      {CUDA_ERROR_NOT_SUPPORTED, "operation not supported (by the arrow_gpu simulator)"},
  };
  auto it = texts.find(error);
  if (it == texts.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult DeviceGetCount(int* count) {
  *count = State().num_devices;
  return CUDA_SUCCESS;
}

CUresult DeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= State().num_devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult DeviceGetName(char* name, int len, CUdevice device) {
  if (device < 0 || device >= State().num_devices) return CUDA_ERROR_INVALID_DEVICE;
  std::string text = "arrow_gpu simulated device " + std::to_string(device);
  std::strncpy(name, text.c_str(), len);
  if (len > 0) name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult DeviceTotalMem(size_t* bytes, CUdevice device) {
  if (device < 0 || device >= State().num_devices) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = State().memory_per_device;
  return CUDA_SUCCESS;
}

CUresult DeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  int n = State().num_devices;
  if (device < 0 || device >= n || peer < 0 || peer >= n) return CUDA_ERROR_INVALID_DEVICE;
  *can = device != peer;
  return CUDA_SUCCESS;
}

CUresult DevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (device < 0 || device >= State().num_devices) return CUDA_ERROR_INVALID_DEVICE;
  *context = AsHandle(&State().contexts[device]);
  return CUDA_SUCCESS;
}

CUresult CtxPushCurrent(CUcontext context) {
  if (FromHandle(context) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  context_stack.push_back(context);
  return CUDA_SUCCESS;
}

CUresult CtxPopCurrent(CUcontext* context) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (context != nullptr) *context = context_stack.back();
  context_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CtxGetCurrent(CUcontext* context) {
  *context = context_stack.empty() ? nullptr : context_stack.back();
  return CUDA_SUCCESS;
}

CUresult CurrentDevice(int* device) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *device = FromHandle(context_stack.back())->device;
  return CUDA_SUCCESS;
}

CUresult CtxGetDevice(CUdevice* device) { return CurrentDevice(device); }

CUresult CtxSynchronize() { return context_stack.empty() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS; }

CUresult CtxEnablePeerAccess(CUcontext peer, unsigned) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  SimContext* other = FromHandle(peer);
  if (other == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (other->device == device) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  bool added = state.peer_access.emplace(device, other->device).second;
  return added ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

// Host memory standing in for device (device >= 0) or pinned host (device == -1) memory.
CUresult Allocate(void** out, size_t nbytes, int device) {
  if (nbytes == 0) return CUDA_ERROR_INVALID_VALUE;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (device >= 0 && state.used[device] + nbytes > state.memory_per_device) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* memory = std::aligned_alloc(kAlignment, rounded);
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  state.allocations[reinterpret_cast<uintptr_t>(memory)] = Allocation{nbytes, device};
  if (device >= 0) state.used[device] += nbytes;
  *out = memory;
  return CUDA_SUCCESS;
}

CUresult Release(uintptr_t address, bool host) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.allocations.find(address);
  if (it == state.allocations.end() || (it->second.device < 0) != host) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!host) state.used[it->second.device] -= it->second.size;
  state.allocations.erase(it);
  std::free(reinterpret_cast<void*>(address));
  return CUDA_SUCCESS;
}

CUresult MemAlloc(CUdeviceptr* out, size_t nbytes) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  void* memory = nullptr;
  if (CUresult rc = Allocate(&memory, nbytes, device)) return rc;
  *out = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult MemFree(CUdeviceptr address) { return Release(address, /*host=*/false); }

CUresult MemHostAlloc(void** out, size_t nbytes, unsigned) { return Allocate(out, nbytes, -1); }

CUresult MemFreeHost(void* address) {
  return Release(reinterpret_cast<uintptr_t>(address), /*host=*/true);
}

CUresult MemGetInfo(size_t* free, size_t* total) {
  int device = 0;
  if (CUresult rc = CurrentDevice(&device)) return rc;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  *total = state.memory_per_device;
  *free = state.memory_per_device - state.used[device];
  return CUDA_SUCCESS;
}

CUresult MemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr address) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t start = 0;
  const Allocation* allocation = state.Find(address, &start);
  if (allocation == nullptr || allocation->device < 0) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = start;
  if (size != nullptr) *size = allocation->size;
  return CUDA_SUCCESS;
}

CUresult PointerGetAttribute(void* data, int attribute, CUdeviceptr address) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t start = 0;
  const Allocation* allocation = state.Find(address, &start);
  if (allocation == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) =
          allocation->device < 0 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:  // one address space: the address itself
      *static_cast<CUdeviceptr*>(data) = address;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = allocation->device < 0 ? 0 : allocation->device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) =
          AsHandle(&state.contexts[allocation->device < 0 ? 0 : allocation->device]);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult Copy(uintptr_t dst, uintptr_t src, size_t nbytes) {
  if (nbytes == 0) return CUDA_SUCCESS;
  if (CUresult rc = CheckRange(dst, nbytes)) return rc;
  if (CUresult rc = CheckRange(src, nbytes)) return rc;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), nbytes);
  return CUDA_SUCCESS;
}

CUresult MemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(dst, reinterpret_cast<uintptr_t>(src), n);
}
CUresult MemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  return Copy(reinterpret_cast<uintptr_t>(dst), src, n);
}
CUresult MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) { return Copy(dst, src, n); }
CUresult MemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return Copy(dst, src, n);
}
CUresult MemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream) {
  return MemcpyHtoD(dst, src, n);
}
CUresult MemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream) {
  return MemcpyDtoH(dst, src, n);
}

CUresult MemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  if (CUresult rc = CheckRange(dst, n)) return rc;
  std::memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}

// Host memory cannot be mapped into another process the way device memory can.
CUresult IpcGetMemHandle(CUipcMemHandle*, CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult IpcOpenMemHandle(CUdeviceptr*, CUipcMemHandle, unsigned) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult IpcCloseMemHandle(CUdeviceptr) { return CUDA_ERROR_NOT_SUPPORTED; }

// Streams and events carry no state: work runs in order, at once.
struct SimStream {};
struct SimEvent {};

CUresult StreamCreate(CUstream* stream, unsigned) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = reinterpret_cast<CUstream>(new SimStream());
  return CUDA_SUCCESS;
}
CUresult StreamDestroy(CUstream stream) {
  delete reinterpret_cast<SimStream*>(stream);
  return CUDA_SUCCESS;
}
CUresult StreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult StreamWaitEvent(CUstream, CUevent event, unsigned) {
  return event == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
CUresult EventCreate(CUevent* event, unsigned) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *event = reinterpret_cast<CUevent>(new SimEvent());
  return CUDA_SUCCESS;
}
CUresult EventDestroy(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<SimEvent*>(event);
  return CUDA_SUCCESS;
}
CUresult EventRecord(CUevent event, CUstream) {
  return event == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
CUresult EventSynchronize(CUevent event) {
  return event == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
CUresult EventQuery(CUevent event) {
  return event == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// The stream-ordered pool is plain allocation here: streams complete at once.
CUresult MemAllocAsync(CUdeviceptr* out, size_t nbytes, CUstream) { return MemAlloc(out, nbytes); }
CUresult MemFreeAsync(CUdeviceptr address, CUstream) { return MemFree(address); }

}  // namespace

const DriverTable* SimulatorTable() {
  static const DriverTable table = {
      "simulator",        Init,
      GetErrorName,       GetErrorString,
      DeviceGetCount,     DeviceGet,
      DeviceGetName,      DeviceTotalMem,
      DeviceCanAccessPeer, DevicePrimaryCtxRetain,
      CtxPushCurrent,     CtxPopCurrent,
      CtxGetCurrent,      CtxGetDevice,
      CtxSynchronize,     CtxEnablePeerAccess,
      MemAlloc,           MemFree,
      MemHostAlloc,       MemFreeHost,
      MemGetInfo,         MemGetAddressRange,
      PointerGetAttribute, MemcpyHtoD,
      MemcpyDtoH,         MemcpyDtoD,
      MemcpyPeer,         MemcpyHtoDAsync,
      MemcpyDtoHAsync,    MemsetD8,
      IpcGetMemHandle,    IpcOpenMemHandle,
      IpcCloseMemHandle,  StreamCreate,
      StreamDestroy,      StreamSynchronize,
      StreamWaitEvent,    EventCreate,
      EventDestroy,       EventRecord,
      EventSynchronize,   EventQuery,
      MemAllocAsync,      MemFreeAsync,
  };
  return &table;
}

}  // namespace arrow_gpu
