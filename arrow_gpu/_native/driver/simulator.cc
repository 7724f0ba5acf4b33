// The host simulator: a DriverTable whose "device memory" is host memory.
//
// It keeps the driver's contracts that the core and its users rely on: per-device contexts
// and a per-thread context stack, allocation bookkeeping (so double frees and out-of-range
// copies are refused with the driver's own error codes), a per-device memory limit,
// in-order streams whose events complete at once (handles it never created are refused), and
// IPC between processes (simulator_ipc.cc: device memory is mapped pages, so that exporting
// can move them into a memfd). Kernels are their host twins (kernel_twins.h), run at once by
// a launch (simulator_modules.cc). What its files share is in simulator_state.h.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "driver/simulator.h"

#include "driver/env.h"
#include "driver/simulator_state.h"

namespace arrow_gpu {
namespace sim {
namespace {

thread_local std::vector<CUcontext> context_stack;

}  // namespace

SimState::SimState() {
  // Validated by Driver() before this table can be used; the defaults are a fallback only.
  const SimulatorOptions options = SimulatorOptionsFromEnvironment().ValueOr({});
  physical = options.visible;
  num_devices = static_cast<int>(physical.size());
  memory_per_device = options.memory_per_device;
  pinned_memory = options.pinned_memory;
  contexts.resize(num_devices);
  used.assign(num_devices, 0);
  for (int i = 0; i < num_devices; ++i) contexts[i].device = i;
}

SimState& State() {
  static SimState* state = new SimState();  // never destroyed: buffers may die at exit
  return *state;
}

bool HasCurrentContext() { return !context_stack.empty(); }

void Unmap(uintptr_t address, const Allocation& allocation) {
  if (allocation.mapped == 0) {
    std::free(reinterpret_cast<void*>(address));
    return;
  }
  munmap(reinterpret_cast<void*>(address), allocation.mapped);
  if (allocation.fd >= 0) close(allocation.fd);
}

CUresult CheckStream(CUstream stream) {
  if (reinterpret_cast<uintptr_t>(stream) <= 2) return CUDA_SUCCESS;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.streams.count(stream) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

std::atomic<int64_t> legacy_stream_uses{0};
std::atomic<bool> legacy_stream_busy{false};

bool IsLegacy(CUstream stream) { return reinterpret_cast<uintptr_t>(stream) <= 1; }

void UseLegacyStream() { ++legacy_stream_uses; }

CUresult UseStream(CUstream stream) {
  if (CUresult rc = CheckStream(stream)) return rc;
  if (IsLegacy(stream)) UseLegacyStream();
  return CUDA_SUCCESS;
}

namespace {

constexpr CUresult CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217;
constexpr size_t kAlignment = 256;  // cuMemAlloc's guarantee, which Arrow code may assume

CUcontext AsHandle(SimContext* context) { return reinterpret_cast<CUcontext>(context); }

SimContext* FromHandle(CUcontext handle) {
  auto& state = State();
  for (auto& context : state.contexts) {
    if (AsHandle(&context) == handle) return &context;
  }
  return nullptr;
}

// The host side of a copy may be any memory, but never run past the end of one of the
// simulator's own allocations.
CUresult CheckRange(uintptr_t address, size_t nbytes) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t base = 0;
  const Allocation* allocation = state.Find(address, &base);
  if (allocation == nullptr) return CUDA_SUCCESS;
  return address + nbytes <= base + allocation->size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The device side of a copy: memory the simulator handed out or was given as a view, as on
// a GPU, where any other address faults. Refusing it here catches a garbage device
// pointer (a corrupt C Device Data Interface struct, say) instead of reading host memory.
CUresult CheckDevice(uintptr_t address, size_t nbytes) {
  if (address + nbytes < address) return CUDA_ERROR_INVALID_VALUE;  // wraps around
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t base = 0;
  if (const Allocation* allocation = state.Find(address, &base)) {
    return address + nbytes <= base + allocation->size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  auto end = state.adopted.upper_bound({address, UINTPTR_MAX});
  for (auto it = state.adopted.begin(); it != end; ++it) {
    if (address + nbytes <= it->second) return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CheckEvent(CUevent event) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.events.count(event) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult Init(unsigned) { return CUDA_SUCCESS; }

// The driver's name and description of each code the simulator returns.
struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrorTexts[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     "operation not supported (by the arrow_gpu simulator)"},
};

const ErrorText* FindErrorText(CUresult error) {
  for (const ErrorText& known : kErrorTexts) {
    if (known.code == error) return &known;
  }
  return nullptr;
}

CUresult GetErrorName(CUresult error, const char** out) {
  const ErrorText* known = FindErrorText(error);
  if (known == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = known->name;
  return CUDA_SUCCESS;
}

CUresult GetErrorString(CUresult error, const char** out) {
  const ErrorText* known = FindErrorText(error);
  if (known == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = known->text;
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
  std::string text = "arrow_gpu simulated device " + std::to_string(State().physical[device]);
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

// The top of the thread's stack replaced (pushed onto an empty one); NULL pops it.
CUresult CtxSetCurrent(CUcontext context) {
  if (context == nullptr) {
    if (!context_stack.empty()) context_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (FromHandle(context) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context_stack.empty()) {
    context_stack.push_back(context);
  } else {
    context_stack.back() = context;
  }
  return CUDA_SUCCESS;
}

CUresult CurrentDevice(int* device) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *device = FromHandle(context_stack.back())->device;
  return CUDA_SUCCESS;
}

CUresult CtxGetDevice(CUdevice* device) { return CurrentDevice(device); }

std::atomic<int64_t> context_synchronizations{0};

CUresult CtxSynchronize() {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  ++context_synchronizations;
  return CUDA_SUCCESS;
}

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

size_t PageRounded(size_t nbytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (nbytes + page - 1) / page * page;
}

// Host memory standing in for device (device >= 0) or pinned host (device == -1) memory.
// Device memory gets pages of its own, so that exporting it can swap them for shared ones.
CUresult Allocate(void** out, size_t nbytes, int device) {
  if (nbytes == 0) return CUDA_ERROR_INVALID_VALUE;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (device >= 0 ? state.used[device] + nbytes > state.memory_per_device
                  : state.pinned_used + nbytes > state.pinned_memory) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation allocation{nbytes, device};
  void* memory = nullptr;
  if (device >= 0) {
    allocation.mapped = PageRounded(nbytes);
    memory = mmap(nullptr, allocation.mapped, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    memory = std::aligned_alloc(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
    if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  state.allocations[reinterpret_cast<uintptr_t>(memory)] = allocation;
  (device >= 0 ? state.used[device] : state.pinned_used) += nbytes;
  *out = memory;
  return CUDA_SUCCESS;
}

CUresult Release(uintptr_t address, bool host) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.allocations.find(address);
  // IPC mappings are closed with cuIpcCloseMemHandle, not freed.
  if (it == state.allocations.end() || (it->second.device < 0) != host ||
      it->second.imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  (host ? state.pinned_used : state.used[it->second.device]) -= it->second.size;
  Unmap(address, it->second);
  state.allocations.erase(it);
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

// `device_dst` / `device_src`: which sides are device memory (checked as a GPU would).
CUresult Copy(uintptr_t dst, uintptr_t src, size_t nbytes, bool device_dst, bool device_src) {
  if (nbytes == 0) return CUDA_SUCCESS;
  if (CUresult rc = device_dst ? CheckDevice(dst, nbytes) : CheckRange(dst, nbytes)) return rc;
  if (CUresult rc = device_src ? CheckDevice(src, nbytes) : CheckRange(src, nbytes)) return rc;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), nbytes);
  return CUDA_SUCCESS;
}

std::atomic<int64_t> device_reads{0};

CUresult ReadDevice(void* dst, CUdeviceptr src, size_t n) {
  ++device_reads;
  return Copy(reinterpret_cast<uintptr_t>(dst), src, n, false, true);
}

// The synchronous copies run on the legacy default stream.
CUresult MemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  UseLegacyStream();
  return Copy(dst, reinterpret_cast<uintptr_t>(src), n, true, false);
}
CUresult MemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  UseLegacyStream();
  return ReadDevice(dst, src, n);
}
CUresult MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  UseLegacyStream();
  return Copy(dst, src, n, true, true);
}
CUresult MemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  UseLegacyStream();
  return Copy(dst, src, n, true, true);
}
CUresult MemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  if (CUresult rc = UseStream(stream)) return rc;
  return Copy(dst, reinterpret_cast<uintptr_t>(src), n, true, false);
}
CUresult MemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (CUresult rc = UseStream(stream)) return rc;
  return ReadDevice(dst, src, n);
}
CUresult MemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (CUresult rc = UseStream(stream)) return rc;
  return Copy(dst, src, n, true, true);
}

CUresult MemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  UseLegacyStream();
  if (n == 0) return CUDA_SUCCESS;
  if (CUresult rc = CheckDevice(dst, n)) return rc;
  std::memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}

// Streams carry no state: work runs in order, at once. Only their handles are kept (in
// SimState), so that one never created, or already destroyed, fails as on a GPU. An event
// remembers whether it was last recorded on the legacy default stream, which may be held
// "busy" (its events not passed) to show who would wait for it.
struct SimStream {};
struct SimEvent {
  std::atomic<bool> on_legacy{false};
};

SimEvent* AsEvent(CUevent event) { return reinterpret_cast<SimEvent*>(event); }

CUresult StreamCreate(CUstream* stream, unsigned) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = reinterpret_cast<CUstream>(new SimStream());
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.streams.insert(*stream);
  return CUDA_SUCCESS;
}
CUresult StreamDestroy(CUstream stream) {
  return DestroyHandle<SimStream>(&SimState::streams, stream);
}
std::atomic<int64_t> stream_synchronizations{0};

CUresult StreamSynchronize(CUstream stream) {
  ++stream_synchronizations;
  return UseStream(stream);
}
std::atomic<int64_t> stream_waits{0};

CUresult StreamWaitEvent(CUstream stream, CUevent event, unsigned) {
  ++stream_waits;
  if (CUresult rc = UseStream(stream)) return rc;
  if (CUresult rc = CheckEvent(event)) return rc;
  if (AsEvent(event)->on_legacy) UseLegacyStream();
  return CUDA_SUCCESS;
}
CUresult EventCreate(CUevent* event, unsigned) {
  if (context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *event = reinterpret_cast<CUevent>(new SimEvent());
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.events.insert(*event);
  return CUDA_SUCCESS;
}
CUresult EventDestroy(CUevent event) {
  return DestroyHandle<SimEvent>(&SimState::events, event);
}
// Recording waits for nothing, on any stream: not a use of the legacy stream.
CUresult EventRecord(CUevent event, CUstream stream) {
  if (CUresult rc = CheckStream(stream)) return rc;
  if (CUresult rc = CheckEvent(event)) return rc;
  AsEvent(event)->on_legacy = IsLegacy(stream);
  return CUDA_SUCCESS;
}
CUresult EventSynchronize(CUevent event) {
  if (CUresult rc = CheckEvent(event)) return rc;
  if (AsEvent(event)->on_legacy) UseLegacyStream();
  return CUDA_SUCCESS;
}
CUresult EventQuery(CUevent event) {
  if (CUresult rc = CheckEvent(event)) return rc;
  return AsEvent(event)->on_legacy && legacy_stream_busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

// The stream-ordered pool is plain allocation here: streams complete at once.
CUresult MemAllocAsync(CUdeviceptr* out, size_t nbytes, CUstream stream) {
  if (CUresult rc = UseStream(stream)) return rc;
  if (CUresult rc = MemAlloc(out, nbytes)) return rc;
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.allocations[*out].pooled = true;
  return CUDA_SUCCESS;
}
CUresult MemFreeAsync(CUdeviceptr address, CUstream stream) {
  if (CUresult rc = UseStream(stream)) return rc;
  return MemFree(address);
}

// Whether every page of [address, address + nbytes) is mapped in this process: msync fails
// with ENOMEM where one is not, without reading any.
bool IsMapped(uintptr_t address, size_t nbytes) {
  if (address + nbytes < address) return false;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = address / page * page;
  return msync(reinterpret_cast<void*>(begin), address + nbytes - begin, MS_ASYNC) == 0;
}

}  // namespace
}  // namespace sim

void SimulatorAdopt(uintptr_t address, size_t nbytes) {
  auto& state = sim::State();
  std::lock_guard<std::mutex> lock(state.mutex);
  // A view of the simulator's own memory stays valid only while that memory lives: once it
  // is freed, copies through the view fault, as they do on a GPU.
  uintptr_t base = 0;
  if (state.Find(address, &base) != nullptr) return;
  // Nor is a view of memory that is not there (a garbage address) device memory: the
  // driver refuses copies through it, where adopting it would fault the process.
  if (!sim::IsMapped(address, nbytes)) return;
  state.adopted.emplace(address, address + nbytes);
}

void SimulatorForget(uintptr_t address, size_t nbytes) {
  auto& state = sim::State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.adopted.find({address, address + nbytes});
  if (it != state.adopted.end()) state.adopted.erase(it);
}

int64_t SimulatorContextSynchronizations() { return sim::context_synchronizations.load(); }
int64_t SimulatorDeviceReads() { return sim::device_reads.load(); }
int64_t SimulatorStreamSynchronizations() { return sim::stream_synchronizations.load(); }
int64_t SimulatorStreamWaits() { return sim::stream_waits.load(); }
int64_t SimulatorLiveStreams() {
  auto& state = sim::State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return static_cast<int64_t>(state.streams.size());
}
int64_t SimulatorLegacyStreamUses() { return sim::legacy_stream_uses.load(); }
void SimulatorHoldLegacyStream(bool busy) { sim::legacy_stream_busy = busy; }

const DriverTable* SimulatorTable() {
  using namespace sim;  // the table lists the simulator's entry points
  static const DriverTable table = {
      "simulator",        Init,
      GetErrorName,       GetErrorString,
      DeviceGetCount,     DeviceGet,
      DeviceGetName,      DeviceTotalMem,
      DeviceCanAccessPeer, DevicePrimaryCtxRetain,
      CtxPushCurrent,     CtxPopCurrent,
      CtxGetCurrent,      CtxSetCurrent,
      CtxGetDevice,
      CtxSynchronize,     CtxEnablePeerAccess,
      MemAlloc,           MemFree,
      MemHostAlloc,       MemFreeHost,
      MemGetInfo,         MemGetAddressRange,
      PointerGetAttribute, MemcpyHtoD,
      MemcpyDtoH,         MemcpyDtoD,
      MemcpyPeer,         MemcpyHtoDAsync,
      MemcpyDtoHAsync,    MemcpyDtoDAsync,
      MemsetD8,
      IpcGetMemHandle,    IpcOpenMemHandle,
      IpcCloseMemHandle,  StreamCreate,
      StreamDestroy,      StreamSynchronize,
      StreamWaitEvent,    EventCreate,
      EventDestroy,       EventRecord,
      EventSynchronize,   EventQuery,
      MemAllocAsync,      MemFreeAsync,
      nullptr,  // DriverGetVersion: the simulator is no CUDA version
      ModuleLoadData,     ModuleGetFunction,
      ModuleUnload,       LaunchKernel,
      DeviceGetAttribute,
      nullptr,  // OccupancyMaxActiveBlocksPerMultiprocessor: twins run any grid alike
  };
  return &table;
}

}  // namespace arrow_gpu
