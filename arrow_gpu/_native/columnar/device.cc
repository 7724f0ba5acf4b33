#include "columnar/device.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <arrow/io/memory.h>

#include "columnar/per_device.h"
#include "driver/simulator.h"
#include "engine/copy_engine.h"

namespace arrow_gpu {
namespace {

using arrow::Buffer;
using arrow::DeviceAllocationType;
using arrow::MemoryManager;
using arrow::Result;
using arrow::Status;

PerDevice<CudaDevice>& Devices() {
  static auto* devices = new PerDevice<CudaDevice>();
  return *devices;
}

class CudaStream : public arrow::Device::Stream {
 public:
  CudaStream(std::shared_ptr<CudaContext> context, CUstream stream, release_fn_t release)
      : Stream(stream, std::move(release)), context_(std::move(context)) {}

  Status WaitEvent(const arrow::Device::SyncEvent& event) override {
    // SyncEvent::get_raw is not const in Arrow's API although it does not mutate.
    auto* raw = static_cast<CUevent*>(const_cast<arrow::Device::SyncEvent&>(event).get_raw());
    if (raw == nullptr) return Status::OK();
    return context_->WaitEvent(handle(), *raw);
  }

  Status Synchronize() const override { return context_->SynchronizeStream(handle()); }

 private:
  CUstream handle() const { return static_cast<CUstream>(const_cast<void*>(get_raw())); }
  std::shared_ptr<CudaContext> context_;
};

// sync_event points to a CUevent, as the C Device Data Interface specifies for CUDA.
class CudaSyncEvent : public arrow::Device::SyncEvent {
 public:
  CudaSyncEvent(std::shared_ptr<CudaContext> context, CUevent* event, release_fn_t release)
      : SyncEvent(event, std::move(release)), context_(std::move(context)) {}

  Status Wait() override { return context_->SynchronizeEvent(*event()); }

  Status Record(const arrow::Device::Stream& stream) override {
    return context_->RecordEvent(*event(),
                                 static_cast<CUstream>(const_cast<void*>(stream.get_raw())));
  }

 private:
  CUevent* event() { return static_cast<CUevent*>(get_raw()); }
  std::shared_ptr<CudaContext> context_;
};

Result<std::unique_ptr<Buffer>> NoCopy() { return std::unique_ptr<Buffer>(); }

// The IPC handles this process exported, each known while the memory it names is held by
// the buffer it was exported from (or by any buffer sliced from the same allocation). CUDA
// opens a handle only in another process, and the driver's refusal in the exporter
// (CUDA_ERROR_INVALID_CONTEXT) does not say so: this lets OpenIpc say it instead. Only live
// memory is remembered, so no other allocation can have reused a remembered handle.
class ExportedIpcHandles {
 public:
  void Add(const CUipcMemHandle& handle, const std::shared_ptr<Buffer>& buffer) {
    std::shared_ptr<Buffer> root = buffer;
    while (root->parent() != nullptr) root = root->parent();
    std::lock_guard<std::mutex> lock(mutex_);
    ForgetParentsExports();
    auto& holders = holders_[Key(handle)];
    DropExpired(&holders);
    // Compared by owner, not through lock(): a last reference dropped here would free a
    // buffer under this lock.
    bool known = std::any_of(holders.begin(), holders.end(), [&](const std::weak_ptr<Buffer>& held) {
      return !held.owner_before(root) && !root.owner_before(held);
    });
    if (!known) holders.push_back(root);
    // Handles whose memory is gone are dropped now and then, in time linear in the live ones.
    if (holders_.size() >= sweep_at_) {
      for (auto it = holders_.begin(); it != holders_.end();) {
        DropExpired(&it->second);
        it = it->second.empty() ? holders_.erase(it) : std::next(it);
      }
      sweep_at_ = 2 * std::max<size_t>(holders_.size(), 64);
    }
  }

  bool Contains(const CUipcMemHandle& handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    ForgetParentsExports();
    auto it = holders_.find(Key(handle));
    if (it == holders_.end()) return false;
    DropExpired(&it->second);
    return !it->second.empty();
  }

 private:
  using Holders = std::vector<std::weak_ptr<Buffer>>;

  static std::string Key(const CUipcMemHandle& handle) {
    return std::string(handle.reserved, sizeof(handle.reserved));
  }
  static void DropExpired(Holders* holders) {
    std::erase_if(*holders, [](const std::weak_ptr<Buffer>& held) { return held.expired(); });
  }
  // A forked child did not export what its parent did: it may open those handles.
  void ForgetParentsExports() {
    if (getpid() == pid_) return;
    holders_.clear();
    pid_ = getpid();
  }

  std::mutex mutex_;
  pid_t pid_ = getpid();
  std::map<std::string, Holders> holders_;
  size_t sweep_at_ = 64;
};

ExportedIpcHandles& ExportedHandles() {
  static auto* handles = new ExportedIpcHandles();
  return *handles;
}

const void* HostPointer(const Buffer& buf) {
  return reinterpret_cast<const void*>(buf.address());
}

}  // namespace

// ---------------------------------------------------------------------------------------
// CudaDevice

Result<std::shared_ptr<CudaDevice>> CudaDevice::Primary(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto context, CudaContext::Primary(device_number));
  return Devices().GetOrMake(device_number, [&]() -> Result<std::shared_ptr<CudaDevice>> {
    auto device = std::make_shared<CudaDevice>(device_number);
    device->primary_ = std::make_shared<CudaMemoryManager>(device, context);
    return device;
  });
}

std::string CudaDevice::ToString() const {
  return "CudaDevice(device_number=" + std::to_string(device_number_) + ")";
}

bool CudaDevice::Equals(const arrow::Device& other) const {
  return other.device_type() == DeviceAllocationType::kCUDA &&
         other.device_id() == device_number_;
}

std::shared_ptr<MemoryManager> CudaDevice::default_memory_manager() { return primary_; }

Result<std::shared_ptr<arrow::Device::Stream>> CudaDevice::MakeStream(unsigned int flags) {
  auto context = primary_->cuda_context();
  ARROW_ASSIGN_OR_RAISE(CUstream stream, context->CreateStream(flags));
  return std::make_shared<CudaStream>(context, stream, [context](void* raw) {
    context->DestroyStream(static_cast<CUstream>(raw));
  });
}

Result<std::shared_ptr<arrow::Device::Stream>> CudaDevice::WrapStream(
    void* stream, Stream::release_fn_t release) {
  return std::make_shared<CudaStream>(primary_->cuda_context(), static_cast<CUstream>(stream),
                                      release ? std::move(release) : [](void*) {});
}

// ---------------------------------------------------------------------------------------
// CudaMemoryManager

Result<std::shared_ptr<CudaMemoryManager>> CudaMemoryManager::Primary(int device_number) {
  ARROW_ASSIGN_OR_RAISE(auto device, CudaDevice::Primary(device_number));
  return device->primary_;
}

Result<std::shared_ptr<CudaMemoryManager>> CudaMemoryManager::ForContext(
    std::shared_ptr<CudaContext> context) {
  ARROW_ASSIGN_OR_RAISE(auto primary, Primary(context->device_number()));
  // The primary context has one manager, so that its byte count is shared by all users.
  if (primary->cuda_context()->handle() == context->handle()) return primary;
  return std::make_shared<CudaMemoryManager>(primary->device(), std::move(context));
}

Result<std::unique_ptr<Buffer>> CudaMemoryManager::AllocateBuffer(int64_t size) {
  ARROW_ASSIGN_OR_RAISE(Allocation allocation, AllocateDevice(*context_, size));
  auto self = std::static_pointer_cast<CudaMemoryManager>(shared_from_this());
  return std::make_unique<DeviceBuffer>(std::move(allocation), size, std::move(self));
}

Result<std::shared_ptr<DeviceBuffer>> CudaMemoryManager::AllocateIsolatedBuffer(int64_t size) {
  ARROW_ASSIGN_OR_RAISE(Allocation allocation, AllocateIsolated(*context_, size));
  auto self = std::static_pointer_cast<CudaMemoryManager>(shared_from_this());
  return std::make_shared<DeviceBuffer>(std::move(allocation),
                                        IsolatedSize(size), std::move(self));
}

std::shared_ptr<DeviceBuffer> CudaMemoryManager::View(uintptr_t address, int64_t size,
                                                      std::shared_ptr<void> owner) {
  auto self = std::static_pointer_cast<CudaMemoryManager>(shared_from_this());
  if (size > 0 && context_->driver() == SimulatorTable()) {
    // The simulator refuses copies at addresses it does not know: this one is declared
    // device memory for as long as the view (and so its owner) lives.
    SimulatorAdopt(address, static_cast<size_t>(size));
    owner = std::shared_ptr<void>(nullptr, [address, size, owner](void*) {
      SimulatorForget(address, static_cast<size_t>(size));
    });
  }
  return std::make_shared<DeviceBuffer>(address, size, std::move(self),
                                        DeviceBuffer::Origin::kView, std::move(owner));
}

Result<CUipcMemHandle> CudaMemoryManager::ExportIpc(
    const std::shared_ptr<Buffer>& buffer, int64_t* offset,
    std::map<uintptr_t, CUipcMemHandle>* exported) {
  CUipcMemHandle handle;
  if (exported == nullptr) {
    ARROW_ASSIGN_OR_RAISE(handle, context_->ExportIpc(buffer->address(), offset));
  } else {
    uintptr_t base = 0;
    int64_t size = 0;
    ARROW_RETURN_NOT_OK(context_->AllocationRange(buffer->address(), &base, &size));
    auto known = exported->find(base);
    if (known != exported->end()) {
      handle = known->second;
      *offset = static_cast<int64_t>(buffer->address() - base);
    } else {
      ARROW_ASSIGN_OR_RAISE(handle, context_->ExportIpc(buffer->address(), offset));
      exported->emplace(base, handle);
    }
  }
  ExportedHandles().Add(handle, buffer);
  return handle;
}

Result<std::shared_ptr<DeviceBuffer>> CudaMemoryManager::OpenIpc(const CUipcMemHandle& handle,
                                                                 int64_t offset,
                                                                 int64_t size) {
  if (ExportedHandles().Contains(handle)) {
    return Status::Invalid(
        "this IPC handle was exported by this process, and CUDA opens a handle only in "
        "another process; here, use the exported buffer itself (or copy it with "
        "CudaBuffer.copy_from_device)");
  }
  ARROW_ASSIGN_OR_RAISE(uintptr_t base, context_->OpenIpc(handle));
  // The offset and size travel outside the driver's handle: a corrupt or forged pair must
  // not make a buffer that reaches past the exported allocation.
  Status in_range = context_->CheckIpcRange(base, offset, size);
  if (!in_range.ok()) {
    context_->CloseIpc(base);
    return in_range;
  }
  auto self = std::static_pointer_cast<CudaMemoryManager>(shared_from_this());
  return std::make_shared<DeviceBuffer>(base + offset, size, std::move(self),
                                        DeviceBuffer::Origin::kIpc, nullptr, base);
}

Result<std::shared_ptr<arrow::Device::SyncEvent>> CudaMemoryManager::MakeDeviceSyncEvent() {
  auto context = context_;
  ARROW_ASSIGN_OR_RAISE(CUevent event, context->CreateEvent());
  return std::make_shared<CudaSyncEvent>(context, new CUevent(event), [context](void* raw) {
    auto* event = static_cast<CUevent*>(raw);
    context->DestroyEvent(*event);
    delete event;
  });
}

Result<std::shared_ptr<arrow::Device::SyncEvent>> CudaMemoryManager::WrapDeviceSyncEvent(
    void* sync_event, arrow::Device::SyncEvent::release_fn_t release) {
  return std::make_shared<CudaSyncEvent>(context_, static_cast<CUevent*>(sync_event),
                                         release ? std::move(release) : [](void*) {});
}

Result<std::unique_ptr<Buffer>> CudaMemoryManager::CopyNonOwnedFrom(
    const Buffer& buf, const std::shared_ptr<MemoryManager>& from) {
  if (from->is_cpu()) {
    ARROW_ASSIGN_OR_RAISE(auto dest, AllocateBuffer(buf.size()));
    // Pinned sources go direct; the engine asks the driver about any other host memory.
    // Pinned buffers belong to the CPU memory manager (as in Arrow), so ask the buffer.
    auto kind = buf.device_type() == DeviceAllocationType::kCUDA_HOST ? HostMemory::kPinned
                                                                       : HostMemory::kUnknown;
    ARROW_RETURN_NOT_OK(EngineHostToDevice(*context_, dest->address(), HostPointer(buf),
                                           buf.size(), kind));
    return dest;
  }
  if (auto source = std::dynamic_pointer_cast<CudaMemoryManager>(from)) {
    ARROW_ASSIGN_OR_RAISE(auto dest, AllocateBuffer(buf.size()));
    ARROW_RETURN_NOT_OK(context_->CopyDeviceToDevice(dest->address(), buf.address(),
                                                     buf.size(), *source->context_));
    return dest;
  }
  return NoCopy();
}

Result<std::unique_ptr<Buffer>> CudaMemoryManager::CopyNonOwnedTo(
    const Buffer& buf, const std::shared_ptr<MemoryManager>& to) {
  // Copies between two CUDA managers are the destination's CopyNonOwnedFrom.
  if (!to->is_cpu()) return NoCopy();
  ARROW_ASSIGN_OR_RAISE(auto dest, to->AllocateBuffer(buf.size()));
  auto kind = dest->device_type() == DeviceAllocationType::kCUDA_HOST ? HostMemory::kPinned
                                                                      : HostMemory::kUnknown;
  if (kind != HostMemory::kPinned) AdviseHugePages(dest->mutable_data(), buf.size());
  ARROW_RETURN_NOT_OK(EngineDeviceToHost(*context_, dest->mutable_data(), buf.address(),
                                         buf.size(), kind));
  return dest;
}

Result<std::shared_ptr<Buffer>> CudaMemoryManager::CopyBufferFrom(
    const std::shared_ptr<Buffer>& buf, const std::shared_ptr<MemoryManager>& from) {
  ARROW_ASSIGN_OR_RAISE(auto copy, CopyNonOwnedFrom(*buf, from));
  return std::shared_ptr<Buffer>(std::move(copy));
}

Result<std::shared_ptr<Buffer>> CudaMemoryManager::CopyBufferTo(
    const std::shared_ptr<Buffer>& buf, const std::shared_ptr<MemoryManager>& to) {
  ARROW_ASSIGN_OR_RAISE(auto copy, CopyNonOwnedTo(*buf, to));
  return std::shared_ptr<Buffer>(std::move(copy));
}

std::shared_ptr<CudaMemoryManager> CudaManagerOf(const Buffer& buffer) {
  return std::dynamic_pointer_cast<CudaMemoryManager>(buffer.memory_manager());
}

// ---------------------------------------------------------------------------------------
// Buffers

DeviceBuffer::DeviceBuffer(Allocation allocation, int64_t size,
                           std::shared_ptr<CudaMemoryManager> manager)
    : DeviceBuffer(allocation.address, size, std::move(manager), Origin::kAllocated) {
  allocator_ = std::move(allocation.allocator);
}

DeviceBuffer::DeviceBuffer(uintptr_t address, int64_t size,
                           std::shared_ptr<CudaMemoryManager> manager, Origin origin,
                           std::shared_ptr<void> owner, uintptr_t ipc_base)
    : arrow::MutableBuffer(reinterpret_cast<uint8_t*>(address), size, manager),
      context_(manager->cuda_context()),
      origin_(origin),
      owner_(std::move(owner)),
      ipc_base_(ipc_base) {}

DeviceBuffer::~DeviceBuffer() {
  switch (origin_) {
    case Origin::kAllocated:
      FreeDevice(*context_, Allocation{address(), allocator_}, size());
      break;
    case Origin::kIpc:
      context_->CloseIpc(ipc_base_);
      break;
    case Origin::kView:
      break;
  }
}

std::shared_ptr<arrow::Buffer> DeviceBuffer::Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                                   int64_t offset, int64_t length) {
  return Slice(parent, offset, length, CudaManagerOf(*parent));
}

std::shared_ptr<arrow::Buffer> DeviceBuffer::Slice(const std::shared_ptr<arrow::Buffer>& parent,
                                                   int64_t offset, int64_t length,
                                                   std::shared_ptr<CudaMemoryManager> manager) {
  auto slice = std::make_shared<DeviceBuffer>(parent->address() + offset, length,
                                              std::move(manager), Origin::kView);
  slice->parent_ = parent;
  return slice;
}


}  // namespace arrow_gpu
