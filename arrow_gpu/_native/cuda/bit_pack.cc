#include "cuda/bit_pack.h"

#include <limits>
#include <mutex>
#include <unordered_map>

namespace arrow_gpu {
namespace {

constexpr const char* kKernelName = "arrow_gpu_pack_bits";
constexpr unsigned kThreads = 256;

// One thread per bitmap byte: it reads up to eight flag bytes (fewer in the last one) and
// writes the byte they make. PTX, so that the driver compiles it for whatever GPU it finds
// (ISA 4.0 and sm_50 are the oldest every current driver still takes); no CUDA toolkit is
// needed to build or run. Parameters: bitmap, flags, count (u64), invert (u32, 0 or 1).
constexpr const char kPackBitsPtx[] = R"(
.version 4.0
.target sm_50
.address_size 64

.visible .entry arrow_gpu_pack_bits(
    .param .u64 param_bitmap,
    .param .u64 param_flags,
    .param .u64 param_count,
    .param .u32 param_invert
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [param_bitmap];
    ld.param.u64 %rd2, [param_flags];
    ld.param.u64 %rd3, [param_count];
    ld.param.u32 %r1, [param_invert];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;

    // byte = blockIdx.x * blockDim.x + threadIdx.x, in 64 bits
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mul.wide.u32 %rd4, %r2, %r3;
    cvt.u64.u32 %rd5, %r4;
    add.u64 %rd4, %rd4, %rd5;

    // nothing to do past the last bitmap byte, ceil(count / 8)
    add.u64 %rd6, %rd3, 7;
    shr.u64 %rd6, %rd6, 3;
    setp.ge.u64 %p1, %rd4, %rd6;
    @%p1 bra DONE;

    // this byte's flags: from 8 * byte, at most 8 of them, at least one
    shl.b64 %rd7, %rd4, 3;
    add.u64 %rd8, %rd2, %rd7;
    sub.u64 %rd9, %rd3, %rd7;
    min.u64 %rd9, %rd9, 8;
    cvt.u32.u64 %r5, %rd9;
    mov.u32 %r6, 0;
    mov.u32 %r7, 0;
NEXT_FLAG:
    ld.global.u8 %r8, [%rd8];
    setp.ne.u32 %p2, %r8, 0;
    selp.u32 %r9, 1, 0, %p2;
    xor.b32 %r9, %r9, %r1;
    shl.b32 %r9, %r9, %r7;
    or.b32 %r6, %r6, %r9;
    add.u64 %rd8, %rd8, 1;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p3, %r7, %r5;
    @%p3 bra NEXT_FLAG;

    add.u64 %rd10, %rd1, %rd4;
    st.global.u8 [%rd10], %r6;
DONE:
    ret;
}
)";

// The kernel in a module of its own, loaded into the current context.
struct LoadedKernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

arrow::Result<LoadedKernel> LoadKernel(const DriverTable* driver) {
  LoadedKernel kernel;
  ARROW_GPU_CU(driver, ModuleLoadData, &kernel.module, kPackBitsPtx);
  arrow::Status found = CudaStatus(
      driver->ModuleGetFunction(&kernel.function, kernel.module, kKernelName),
      "cuModuleGetFunction");
  if (!found.ok()) {
    driver->ModuleUnload(kernel.module);
    return found;
  }
  return kernel;
}

// Primary contexts live as long as the process, so their kernel is loaded once and kept.
arrow::Result<CUfunction> PrimaryContextKernel(const CudaContext& context) {
  static std::mutex mutex;
  static auto* loaded = new std::unordered_map<CUcontext, CUfunction>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded->find(context.handle());
  if (it != loaded->end()) return it->second;
  ARROW_ASSIGN_OR_RAISE(LoadedKernel kernel, LoadKernel(context.driver()));
  loaded->emplace(context.handle(), kernel.function);
  return kernel.function;
}

arrow::Status Launch(const DriverTable* driver, CUfunction function, uintptr_t bitmap,
                     uintptr_t flags, int64_t count, bool invert, CUstream stream) {
  const uint64_t bitmap_bytes = (static_cast<uint64_t>(count) + 7) / 8;
  const uint64_t blocks = (bitmap_bytes + kThreads - 1) / kThreads;
  if (blocks > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return arrow::Status::Invalid("cannot pack ", count, " flags in one launch");
  }
  CUdeviceptr bitmap_arg = bitmap;
  CUdeviceptr flags_arg = flags;
  uint64_t count_arg = static_cast<uint64_t>(count);
  uint32_t invert_arg = invert ? 1 : 0;
  void* params[] = {&bitmap_arg, &flags_arg, &count_arg, &invert_arg};
  ARROW_GPU_CU(driver, LaunchKernel, function, static_cast<unsigned>(blocks), 1, 1, kThreads,
               1, 1, 0, stream, params, nullptr);
  return arrow::Status::OK();
}

}  // namespace

arrow::Status PackBits(const CudaContext& context, uintptr_t bitmap, uintptr_t flags,
                       int64_t count, bool invert, CUstream stream) {
  if (count < 0) return arrow::Status::Invalid("cannot pack ", count, " flags");
  if (count == 0) return arrow::Status::OK();
  const DriverTable* driver = context.driver();
  ARROW_GPU_ENTER(context);
  if (context.primary()) {
    ARROW_ASSIGN_OR_RAISE(CUfunction function, PrimaryContextKernel(context));
    return Launch(driver, function, bitmap, flags, count, invert, stream);
  }
  // A foreign context may be destroyed by its owner: its module does not outlive the call.
  ARROW_ASSIGN_OR_RAISE(LoadedKernel kernel, LoadKernel(driver));
  arrow::Status launched = Launch(driver, kernel.function, bitmap, flags, count, invert,
                                  stream);
  if (launched.ok()) launched = context.SynchronizeStream(stream);
  driver->ModuleUnload(kernel.module);
  return launched;
}

}  // namespace arrow_gpu
