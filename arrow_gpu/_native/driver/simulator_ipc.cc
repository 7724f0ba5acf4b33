// The simulator's CUDA IPC: device memory shared with another process of this host.
//
// Device memory is private pages until it is exported; exporting moves them, in place, into
// a memfd, and the handle names that memfd by the exporter's pid, its fd number and its
// inode. The importing process opens it through /proc/<pid>/fd and maps the same pages.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "driver/simulator_state.h"

namespace arrow_gpu::sim {
namespace {

// What a simulated CUipcMemHandle carries (it fits the driver's 64 bytes).
struct IpcPayload {
  char magic[8];
  int64_t pid;
  int64_t fd;
  uint64_t inode;  // tells the exported memfd from whatever later reuses its fd number
  uint64_t size;
  uint64_t mapped;
  int64_t device;
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcMemHandle), "the payload must fit a handle");
constexpr char kIpcMagic[8] = {'A', 'G', 'S', 'I', 'M', 'I', 'P', 'C'};

// Moves an allocation's pages into a memfd, in place: the same address, the same bytes,
// now shared memory that another process can map. The caller holds the state's mutex.
CUresult MakeShareable(uintptr_t base, Allocation* allocation) {
  if (allocation->fd >= 0) return CUDA_SUCCESS;
  int fd = memfd_create("arrow_gpu-simulated-device-memory", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto length = static_cast<off_t>(allocation->mapped);
  void* shared = MAP_FAILED;
  if (ftruncate(fd, length) == 0) {
    shared = mmap(nullptr, allocation->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (shared == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memcpy(shared, reinterpret_cast<void*>(base), allocation->size);
  // Replaces the private pages at `base` with the shared ones (the old ones are dropped).
  void* moved = mremap(shared, allocation->mapped, allocation->mapped,
                       MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(base));
  if (moved == MAP_FAILED) {
    munmap(shared, allocation->mapped);
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  allocation->fd = fd;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult IpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr address) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.allocations.find(address);
  if (it == state.allocations.end() || it->second.device < 0 || it->second.imported ||
      it->second.pooled) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult rc = MakeShareable(address, &it->second)) return rc;
  struct stat info;
  if (fstat(it->second.fd, &info) != 0) return CUDA_ERROR_INVALID_VALUE;
  IpcPayload payload{};
  std::memcpy(payload.magic, kIpcMagic, sizeof(kIpcMagic));
  payload.pid = getpid();
  payload.fd = it->second.fd;
  payload.inode = info.st_ino;
  payload.size = it->second.size;
  payload.mapped = it->second.mapped;
  payload.device = state.physical[it->second.device];  // processes may number it otherwise
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle, &payload, sizeof(payload));
  return CUDA_SUCCESS;
}

CUresult IpcOpenMemHandle(CUdeviceptr* out, CUipcMemHandle handle, unsigned) {
  if (!HasCurrentContext()) return CUDA_ERROR_INVALID_CONTEXT;
  IpcPayload payload;
  std::memcpy(&payload, &handle, sizeof(payload));
  auto& state = State();
  if (std::memcmp(payload.magic, kIpcMagic, sizeof(kIpcMagic)) != 0 || payload.size == 0 ||
      payload.mapped < payload.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto seen = std::find(state.physical.begin(), state.physical.end(), payload.device);
  if (seen == state.physical.end()) return CUDA_ERROR_INVALID_DEVICE;  // not visible here
  // As the driver does, refuse a handle in the process that exported it.
  if (payload.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  std::string path = "/proc/" + std::to_string(payload.pid) + "/fd/" + std::to_string(payload.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;  // the exporter has exited or freed it
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_ino != payload.inode ||
      static_cast<uint64_t>(info.st_size) != payload.mapped) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  void* memory = mmap(nullptr, payload.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation allocation{payload.size, static_cast<int>(seen - state.physical.begin())};
  allocation.mapped = payload.mapped;
  allocation.imported = true;
  std::lock_guard<std::mutex> lock(state.mutex);
  state.allocations[reinterpret_cast<uintptr_t>(memory)] = allocation;
  *out = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult IpcCloseMemHandle(CUdeviceptr address) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.allocations.find(address);
  if (it == state.allocations.end() || !it->second.imported) return CUDA_ERROR_INVALID_VALUE;
  Unmap(address, it->second);
  state.allocations.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace arrow_gpu::sim
