// What the simulator's files share: its bookkeeping of contexts, allocations and handles
// (simulator.cc), which its IPC over memfd (simulator_ipc.cc) and its modules of kernel
// twins (simulator_modules.cc) read and extend.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "driver/driver.h"

namespace arrow_gpu::sim {

constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;  // not in driver.h's subset

struct SimContext {
  int device;
};

struct Allocation {
  size_t size;
  int device;  // -1 for pinned host memory
  size_t mapped = 0;      // device memory: the length of its page mapping
  int fd = -1;            // the memfd behind exported device memory
  bool pooled = false;    // from the stream-ordered pool, which CUDA IPC cannot export
  bool imported = false;  // another process's memory, opened through IPC
};

struct SimState {
  int num_devices;
  std::vector<int> physical;  // by ordinal: the simulated device it is (CUDA_VISIBLE_DEVICES)
  size_t memory_per_device;
  std::vector<SimContext> contexts;
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;  // keyed by base address
  std::vector<size_t> used;                      // bytes in use per device
  size_t pinned_memory;                          // pinned host bytes the process may hold
  size_t pinned_used = 0;
  std::set<std::pair<int, int>> peer_access;
  // Host memory declared device memory through Context.foreign_buffer (Numba's simulated
  // device arrays, CUDA array interface or DLPack objects over host memory): [begin, end).
  std::multiset<std::pair<uintptr_t, uintptr_t>> adopted;
  // The streams and events created and not yet destroyed: as the driver does, every other
  // handle is refused rather than trusted.
  std::set<CUstream> streams;
  std::set<CUevent> events;
  std::set<CUmodule> modules;

  SimState();  // sized by the simulator's options

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

// The one state, made at first use and never destroyed: buffers may die at exit.
SimState& State();

// Destroys a handle made by `new Sim` and recorded in the state's set `handles`; a handle
// not there (never made, or destroyed already) is refused, as the driver refuses it.
template <typename Sim, typename Handle>
CUresult DestroyHandle(std::set<Handle> SimState::*handles, Handle handle) {
  auto& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if ((state.*handles).erase(handle) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Sim*>(handle);
  return CUDA_SUCCESS;
}

// Whether this thread has a current context, which the driver requires of most calls.
bool HasCurrentContext();

// Unmaps or frees an allocation's memory; the caller holds the state's mutex.
void Unmap(uintptr_t address, const Allocation& allocation);

// A default stream (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) or one created and not yet
// destroyed; any other handle is refused.
CUresult CheckStream(CUstream stream);
// CheckStream, counting work on the legacy default stream (NULL or CU_STREAM_LEGACY), which
// waits for every blocking stream (SimulatorLegacyStreamUses).
CUresult UseStream(CUstream stream);

// CUDA IPC between processes (simulator_ipc.cc): exported device memory is moved into a
// memfd, which the importing process opens through /proc/<exporter pid>/fd.
CUresult IpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr address);
CUresult IpcOpenMemHandle(CUdeviceptr* out, CUipcMemHandle handle, unsigned flags);
CUresult IpcCloseMemHandle(CUdeviceptr address);

// Modules and launches (simulator_modules.cc): a module holds every kernel twin, and a launch
// runs its twin at once; the device's attributes are what the kernels ask of it.
CUresult ModuleLoadData(CUmodule* module, const void* image);
CUresult ModuleGetFunction(CUfunction* function, CUmodule module, const char* name);
CUresult ModuleUnload(CUmodule module);
CUresult LaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                      unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared,
                      CUstream stream, void** params, void** extra);
CUresult DeviceGetAttribute(int* value, int attribute, CUdevice device);

}  // namespace arrow_gpu::sim
