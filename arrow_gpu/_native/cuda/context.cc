#include "cuda/context.h"

#include <mutex>
#include <vector>

namespace arrow_gpu {

ScopedContext::ScopedContext(const CudaContext& context) : driver_(context.driver()) {
  status_ = CheckNotForked();
  if (!status_.ok()) return;
  CUcontext current = nullptr;
  if (driver_->CtxGetCurrent(&current) == CUDA_SUCCESS) {
    if (current == context.handle()) return;
    if (current == nullptr && context.primary()) {
      status_ = CudaStatus(driver_->CtxSetCurrent(context.handle()), "cuCtxSetCurrent");
      return;
    }
  }
  status_ = CudaStatus(driver_->CtxPushCurrent(context.handle()), "cuCtxPushCurrent");
  pushed_ = status_.ok();
}

ScopedContext::~ScopedContext() {
  if (pushed_) driver_->CtxPopCurrent(nullptr);
}

arrow::Result<int> CudaContext::DeviceCount() {
  ARROW_ASSIGN_OR_RAISE(auto driver, Driver());
  // Fixed once the driver is initialized (it reads CUDA_VISIBLE_DEVICES then), and asked on
  // every export and import: asked of the driver once.
  static std::atomic<int> known{-1};
  int count = known.load(std::memory_order_relaxed);
  if (count >= 0) return count;
  ARROW_GPU_CU(driver, DeviceGetCount, &count);
  known.store(count, std::memory_order_relaxed);
  return count;
}

namespace {

arrow::Result<const DriverTable*> CheckedDriver(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto driver, Driver());
  ARROW_ASSIGN_OR_RAISE(int count, CudaContext::DeviceCount());
  if (count == 0) return arrow::Status::Invalid("no CUDA device is visible to this process");
  if (device_number < 0 || device_number >= count) {
    return arrow::Status::Invalid("device_number argument must be non-negative less than ",
                                  count);
  }
  return driver;
}

}  // namespace

arrow::Result<std::shared_ptr<CudaContext>> CudaContext::Primary(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto driver, CheckedDriver(device_number));
  // Retained once per process and never released: buffers may outlive every Python object,
  // up to interpreter exit.
  static std::mutex mutex;
  static auto* contexts = new std::vector<std::shared_ptr<CudaContext>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts->size() <= static_cast<size_t>(device_number)) {
    contexts->resize(device_number + 1);
  }
  auto& slot = (*contexts)[device_number];
  if (slot == nullptr) {
    CUdevice device = 0;
    CUcontext handle = nullptr;
    ARROW_GPU_CU(driver, DeviceGet, &device, device_number);
    ARROW_GPU_CU(driver, DevicePrimaryCtxRetain, &handle, device);
    slot = std::make_shared<CudaContext>(driver, device_number, handle, /*primary=*/true);
  }
  return slot;
}

arrow::Result<std::shared_ptr<CudaContext>> CudaContext::Foreign(int device_number,
                                                                 uintptr_t handle) {
  ARROW_ASSIGN_OR_RAISE(auto driver, CheckedDriver(device_number));
  auto context = std::make_shared<CudaContext>(driver, device_number,
                                               reinterpret_cast<CUcontext>(handle));
  // Reject a handle that is not a live context of that device before anything uses it.
  ARROW_GPU_ENTER(*context);
  CUdevice device = -1;
  ARROW_GPU_CU(driver, CtxGetDevice, &device);
  if (device != device_number) {
    return arrow::Status::Invalid("context handle belongs to device ", device, ", not ",
                                  device_number);
  }
  return context;
}

void CudaContext::CountAllocation(int64_t nbytes) {
  int64_t held = bytes_allocated_ += nbytes;
  int64_t peak = peak_bytes_allocated_.load();
  while (held > peak && !peak_bytes_allocated_.compare_exchange_weak(peak, held)) {
  }
  ++live_allocations_;
  ++total_allocations_;
  total_bytes_allocated_ += nbytes;
}

void CudaContext::CountFree(int64_t nbytes) {
  bytes_allocated_ -= nbytes;
  --live_allocations_;
}

arrow::Result<uintptr_t> CudaContext::EmptyAllocation() {
  std::lock_guard<std::mutex> lock(empty_mutex_);
  if (empty_address_ == 0) {
    ARROW_GPU_ENTER(*this);
    CUdeviceptr address = 0;
    ARROW_GPU_CU(driver_, MemAlloc, &address, 64);
    empty_address_ = static_cast<uintptr_t>(address);
  }
  return empty_address_;
}

MemoryStats CudaContext::stats() const {
  return MemoryStats{bytes_allocated_.load(), peak_bytes_allocated_.load(),
                     live_allocations_.load(), total_allocations_.load(),
                     total_bytes_allocated_.load()};
}

arrow::Result<uint8_t*> CudaContext::AllocateHost(int64_t nbytes) const {
  if (nbytes < 0) return arrow::Status::Invalid("cannot allocate a negative size: ", nbytes);
  if (nbytes == 0) return nullptr;
  ARROW_GPU_ENTER(*this);
  void* address = nullptr;
  CUresult rc = driver_->MemHostAlloc(&address, static_cast<size_t>(nbytes),
                                      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    return arrow::Status::OutOfMemory("could not allocate ", nbytes,
                                      " bytes of pinned host memory");
  }
  ARROW_RETURN_NOT_OK(CudaStatus(rc, "cuMemHostAlloc"));
  return static_cast<uint8_t*>(address);
}

void CudaContext::FreeHost(uint8_t* address) {
  if (address == nullptr) return;
  ScopedContext scope(*this);
  if (scope.status().ok()) driver_->MemFreeHost(address);
}

arrow::Status CudaContext::CopyDeviceToDevice(uintptr_t dst, uintptr_t src, int64_t nbytes,
                                              const CudaContext& source, CUstream stream) const {
  if (nbytes == 0) return arrow::Status::OK();
  ARROW_GPU_ENTER(*this);
  if (stream != nullptr && source.handle() == handle_) {
    ARROW_GPU_CU(driver_, MemcpyDtoDAsync, dst, src, static_cast<size_t>(nbytes), stream);
    return arrow::Status::OK();
  }
  // Between contexts: the peer copy runs on the legacy default stream, ordered with `stream`.
  if (stream != nullptr) ARROW_RETURN_NOT_OK(Order(LegacyStream(), stream));
  if (source.handle() == handle_) {
    ARROW_GPU_CU(driver_, MemcpyDtoD, dst, src, static_cast<size_t>(nbytes));
  } else {
    ARROW_GPU_CU(driver_, MemcpyPeer, dst, handle_, src, source.handle(),
                 static_cast<size_t>(nbytes));
  }
  if (stream != nullptr) ARROW_RETURN_NOT_OK(Order(stream, LegacyStream()));
  return arrow::Status::OK();
}

arrow::Status CudaContext::CopyHostToDeviceAsync(uintptr_t dst, const void* src,
                                                 int64_t nbytes, CUstream stream) const {
  if (nbytes == 0) return arrow::Status::OK();
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, MemcpyHtoDAsync, dst, src, static_cast<size_t>(nbytes), stream);
  return arrow::Status::OK();
}

arrow::Status CudaContext::CopyDeviceToHostAsync(void* dst, uintptr_t src, int64_t nbytes,
                                                 CUstream stream) const {
  if (nbytes == 0) return arrow::Status::OK();
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, MemcpyDtoHAsync, dst, src, static_cast<size_t>(nbytes), stream);
  return arrow::Status::OK();
}

arrow::Status CudaContext::MemoryInfo(int64_t* free, int64_t* total) const {
  ARROW_GPU_ENTER(*this);
  size_t free_bytes = 0, total_bytes = 0;
  ARROW_GPU_CU(driver_, MemGetInfo, &free_bytes, &total_bytes);
  *free = static_cast<int64_t>(free_bytes);
  *total = static_cast<int64_t>(total_bytes);
  return arrow::Status::OK();
}

arrow::Result<CUstream> CudaContext::CreateStream(unsigned flags) const {
  ARROW_GPU_ENTER(*this);
  CUstream stream = nullptr;
  ARROW_GPU_CU(driver_, StreamCreate, &stream, flags);
  return stream;
}

void CudaContext::DestroyStream(CUstream stream) const {
  ScopedContext scope(*this);
  if (scope.status().ok()) driver_->StreamDestroy(stream);
}

arrow::Status CudaContext::SynchronizeStream(CUstream stream) const {
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, StreamSynchronize, stream);
  return arrow::Status::OK();
}

namespace {

constexpr size_t kMaxSpareEvents = 64;
constexpr size_t kMaxSpareStreams = 8;

// Takes a handle kept for reuse into `*handle`, if `spares` holds one.
template <typename Handle>
bool TakeSpare(std::mutex* mutex, std::vector<Handle>* spares, Handle* handle) {
  std::lock_guard<std::mutex> lock(*mutex);
  if (spares->empty()) return false;
  *handle = spares->back();
  spares->pop_back();
  return true;
}

// Keeps `handle` for reuse, unless `spares` holds `most` already.
template <typename Handle>
bool KeepSpare(std::mutex* mutex, std::vector<Handle>* spares, size_t most, Handle handle) {
  std::lock_guard<std::mutex> lock(*mutex);
  if (spares->size() >= most) return false;
  spares->push_back(handle);
  return true;
}

}  // namespace

arrow::Result<CUstream> CudaContext::LendStream() const {
  CUstream stream = nullptr;
  if (TakeSpare(&spares_mutex_, &spare_streams_, &stream)) return stream;
  return CreateStream(CU_STREAM_NON_BLOCKING);
}

// Foreign contexts may be destroyed by their owner, taking their streams and events with
// them: only a primary context's are kept.
void CudaContext::GiveBackStream(CUstream stream) const {
  if (primary_ && KeepSpare(&spares_mutex_, &spare_streams_, kMaxSpareStreams, stream)) return;
  DestroyStream(stream);
}

arrow::Result<CUevent> CudaContext::CreateEvent() const {
  CUevent event = nullptr;
  if (TakeSpare(&spares_mutex_, &spare_events_, &event)) return event;
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, EventCreate, &event, CU_EVENT_DISABLE_TIMING);
  return event;
}

void CudaContext::DestroyEvent(CUevent event) const {
  if (primary_ && KeepSpare(&spares_mutex_, &spare_events_, kMaxSpareEvents, event)) return;
  ScopedContext scope(*this);
  if (scope.status().ok()) driver_->EventDestroy(event);
}

arrow::Status CudaContext::RecordEvent(CUevent event, CUstream stream) const {
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, EventRecord, event, stream);
  return arrow::Status::OK();
}

arrow::Status CudaContext::WaitEvent(CUstream stream, CUevent event) const {
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, StreamWaitEvent, stream, event, 0);
  return arrow::Status::OK();
}

arrow::Status CudaContext::Order(CUstream waiter, CUstream stream) const {
  ARROW_ASSIGN_OR_RAISE(CUevent event, CreateEvent());
  arrow::Status status = RecordEvent(event, stream);
  // A wait already queued holds on to the event's recorded work, even once it is destroyed.
  if (status.ok()) status = WaitEvent(waiter, event);
  DestroyEvent(event);
  return status;
}

arrow::Status CudaContext::SynchronizeEvent(CUevent event) const {
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, EventSynchronize, event);
  return arrow::Status::OK();
}

arrow::Result<bool> CudaContext::EventDone(CUevent event) const {
  ARROW_GPU_ENTER(*this);
  CUresult rc = driver_->EventQuery(event);
  if (rc == CUDA_ERROR_NOT_READY) return false;
  ARROW_RETURN_NOT_OK(CudaStatus(rc, "cuEventQuery"));
  return true;
}

arrow::Status CudaContext::Synchronize() const {
  ARROW_GPU_ENTER(*this);
  ARROW_GPU_CU(driver_, CtxSynchronize);
  return arrow::Status::OK();
}

arrow::Result<uintptr_t> CudaContext::DeviceAddress(uintptr_t address) const {
  ARROW_GPU_ENTER(*this);
  CUdeviceptr device_address = 0;
  ARROW_GPU_CU(driver_, PointerGetAttribute, &device_address,
               CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address);
  return static_cast<uintptr_t>(device_address);
}

arrow::Result<int> CudaContext::DeviceOrdinal(uintptr_t address) const {
  ARROW_GPU_ENTER(*this);
  int ordinal = 0;
  ARROW_GPU_CU(driver_, PointerGetAttribute, &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
               address);
  return ordinal;
}

unsigned CudaContext::MemoryType(uintptr_t address) const {
  ScopedContext scope(*this);
  if (!scope.status().ok()) return 0;
  unsigned type = 0;
  CUresult rc = driver_->PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address);
  return rc == CUDA_SUCCESS ? type : 0;
}

arrow::Status CudaContext::AllocationRange(uintptr_t address, uintptr_t* base,
                                           int64_t* size) const {
  ARROW_GPU_ENTER(*this);
  CUdeviceptr start = 0;
  size_t length = 0;
  ARROW_GPU_CU(driver_, MemGetAddressRange, &start, &length, address);
  *base = static_cast<uintptr_t>(start);
  *size = static_cast<int64_t>(length);
  return arrow::Status::OK();
}

arrow::Result<CUipcMemHandle> CudaContext::ExportIpc(uintptr_t address,
                                                     int64_t* offset) const {
  ARROW_GPU_ENTER(*this);
  // IPC handles name whole allocations; a slice travels as (allocation, offset).
  CUdeviceptr base = 0;
  ARROW_GPU_CU(driver_, MemGetAddressRange, &base, nullptr, address);
  CUipcMemHandle handle;
  arrow::Status exported = CudaStatus(driver_->IpcGetMemHandle(&handle, base), "cuIpcGetMemHandle");
  if (!exported.ok()) {
    return exported.WithMessage(exported.message(),
                                " (memory from the stream-ordered pool allocator cannot be "
                                "exported; allocate buffers to share with the 'device' "
                                "allocator)");
  }
  *offset = static_cast<int64_t>(address - base);
  return handle;
}

arrow::Result<uintptr_t> CudaContext::OpenIpc(const CUipcMemHandle& handle) const {
  ARROW_GPU_ENTER(*this);
  CUdeviceptr base = 0;
  ARROW_GPU_CU(driver_, IpcOpenMemHandle, &base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  return static_cast<uintptr_t>(base);
}

arrow::Status CudaContext::CheckIpcRange(uintptr_t base, int64_t offset, int64_t size) const {
  uintptr_t start = 0;
  int64_t allocated = 0;
  ARROW_RETURN_NOT_OK(AllocationRange(base, &start, &allocated));
  if (offset < 0 || size < 0 || offset > allocated || size > allocated - offset) {
    return arrow::Status::Invalid("IPC handle range [", offset, ", ", offset, " + ", size,
                                  ") does not fit in the exported allocation of ", allocated,
                                  " bytes; the handle is corrupt");
  }
  return arrow::Status::OK();
}

void CudaContext::CloseIpc(uintptr_t base) const {
  ScopedContext scope(*this);
  if (scope.status().ok()) driver_->IpcCloseMemHandle(base);
}

}  // namespace arrow_gpu
