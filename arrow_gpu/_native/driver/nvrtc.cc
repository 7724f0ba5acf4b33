#include "driver/nvrtc.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "driver/symbols.h"

namespace arrow_gpu {
namespace {

using nvrtcResult = int;
struct nvrtcProgramOpaque;
using nvrtcProgram = nvrtcProgramOpaque*;

// The entry points used, bound by name (NVRTC's C API has had these since CUDA 7).
struct NvrtcTable {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int* major, int* minor);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char* source, const char* name,
                               int num_headers, const char* const* headers,
                               const char* const* include_names);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int num_options, const char* const* options);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetPTX)(nvrtcProgram, char*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  // CUDA 11.2+; nullptr before.
  nvrtcResult (*GetNumSupportedArchs)(int*);
  nvrtcResult (*GetSupportedArchs)(int*);
  // CUDA 11.1+; nullptr before (PTX is made instead).
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
};

constexpr const char* kHowToGetIt =
    "arrow_gpu compiles its GPU kernels at run time with NVRTC, which comes with the CUDA "
    "toolkit or, without one, with the nvidia-cuda-nvrtc wheel: pip install "
    "'arrow_gpu[compute]' (or pip install nvidia-cuda-nvrtc matching the driver's CUDA "
    "major). ARROW_GPU_NVRTC_LIBRARY may name the library file.";

// Newest first: a newer NVRTC makes PTX that only a driver at least as new loads, which the
// caller checks; each major keeps its soname.
constexpr const char* kSonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                                    "libnvrtc.so"};

void* OpenLibrary(const std::vector<std::string>& directories, std::string* tried) {
  const char* chosen = std::getenv("ARROW_GPU_NVRTC_LIBRARY");
  if (chosen != nullptr && *chosen != '\0') {
    tried->append(chosen);
    return dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
  }
  std::vector<std::string> candidates;
  for (const std::string& directory : directories) {
    for (const char* soname : kSonames) candidates.push_back(directory + "/" + soname);
  }
  for (const char* soname : kSonames) candidates.emplace_back(soname);
  for (const std::string& candidate : candidates) {
    void* library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) return library;
  }
  tried->append(std::to_string(candidates.size()) + " places");
  return nullptr;
}

arrow::Result<NvrtcTable> Load(const std::vector<std::string>& directories) {
  std::string tried;
  void* library = OpenLibrary(directories, &tried);
  if (library == nullptr) {
    return arrow::Status::IOError("NVRTC could not be loaded (tried ", tried, "). ",
                                  kHowToGetIt);
  }
  NvrtcTable t{};
  std::string missing;
  BindSymbol(library, "nvrtcGetErrorString", &t.GetErrorString, &missing);
  BindSymbol(library, "nvrtcVersion", &t.Version, &missing);
  BindSymbol(library, "nvrtcCreateProgram", &t.CreateProgram, &missing);
  BindSymbol(library, "nvrtcDestroyProgram", &t.DestroyProgram, &missing);
  BindSymbol(library, "nvrtcCompileProgram", &t.CompileProgram, &missing);
  BindSymbol(library, "nvrtcGetPTXSize", &t.GetPTXSize, &missing);
  BindSymbol(library, "nvrtcGetPTX", &t.GetPTX, &missing);
  BindSymbol(library, "nvrtcGetProgramLogSize", &t.GetProgramLogSize, &missing);
  BindSymbol(library, "nvrtcGetProgramLog", &t.GetProgramLog, &missing);
  if (!missing.empty()) {
    return arrow::Status::IOError("The NVRTC library found lacks ", missing, ". ",
                                  kHowToGetIt);
  }
  std::string optional;
  BindSymbol(library, "nvrtcGetNumSupportedArchs", &t.GetNumSupportedArchs, &optional);
  BindSymbol(library, "nvrtcGetSupportedArchs", &t.GetSupportedArchs, &optional);
  BindSymbol(library, "nvrtcGetCUBINSize", &t.GetCUBINSize, &optional);
  BindSymbol(library, "nvrtcGetCUBIN", &t.GetCUBIN, &optional);
  return t;
}

arrow::Result<const NvrtcTable*> Nvrtc(const std::vector<std::string>& directories) {
  // Fixed at the first call that succeeds; a failure is retried (a wheel installed since).
  static std::mutex mutex;
  static NvrtcTable table;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    ARROW_ASSIGN_OR_RAISE(table, Load(directories));
    loaded = true;
  }
  return &table;
}

arrow::Status Check(const NvrtcTable* nvrtc, nvrtcResult result, const char* function) {
  if (result == 0) return arrow::Status::OK();
  return arrow::Status::IOError("NVRTC error ", result, " in function '", function, "': ",
                                nvrtc->GetErrorString(result));
}

// Destroys the program when the compile is done with it, whatever happened.
struct ProgramGuard {
  const NvrtcTable* nvrtc;
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program != nullptr) nvrtc->DestroyProgram(&program);
  }
};

// The architectures NVRTC compiles for (none where it cannot tell: before CUDA 11.2).
std::vector<int> KnownArchs(const NvrtcTable* nvrtc) {
  int count = 0;
  if (nvrtc->GetNumSupportedArchs == nullptr || nvrtc->GetNumSupportedArchs(&count) != 0 ||
      count <= 0) {
    return {};
  }
  std::vector<int> archs(static_cast<size_t>(count));
  if (nvrtc->GetSupportedArchs(archs.data()) != 0) return {};
  return archs;
}

// The newest of `known` that is not newer than `arch` (`arch` where none is known): a GPU
// newer than the NVRTC gets PTX of the newest architecture NVRTC knows, which its driver
// compiles further.
int SupportedArch(const std::vector<int>& known, int arch) {
  int best = 0;
  for (int candidate : known) {
    if (candidate <= arch && candidate > best) best = candidate;
  }
  return best > 0 ? best : arch;
}

// The program's image: its CUBIN (`cubin`), else its PTX.
arrow::Result<std::string> ProgramImage(const NvrtcTable* nvrtc, nvrtcProgram program,
                                        bool cubin) {
  auto size_of = cubin ? nvrtc->GetCUBINSize : nvrtc->GetPTXSize;
  auto copy_of = cubin ? nvrtc->GetCUBIN : nvrtc->GetPTX;
  size_t size = 0;
  ARROW_RETURN_NOT_OK(Check(nvrtc, size_of(program, &size),
                            cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize"));
  std::string image(size, '\0');
  ARROW_RETURN_NOT_OK(Check(nvrtc, copy_of(program, image.data()),
                            cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX"));
  if (!cubin && !image.empty() && image.back() == '\0') image.pop_back();
  return image;
}

}  // namespace

arrow::Result<int> NvrtcVersion(const std::vector<std::string>& directories) {
  ARROW_ASSIGN_OR_RAISE(const NvrtcTable* nvrtc, Nvrtc(directories));
  int major = 0;
  int minor = 0;
  ARROW_RETURN_NOT_OK(Check(nvrtc, nvrtc->Version(&major, &minor), "nvrtcVersion"));
  return major * 1000 + minor * 10;
}

arrow::Result<std::string> CompileKernels(const std::vector<std::string>& directories,
                                          const std::string& source, const std::string& name,
                                          const std::vector<NvrtcHeader>& headers, int arch,
                                          const std::vector<std::string>& options) {
  ARROW_ASSIGN_OR_RAISE(const NvrtcTable* nvrtc, Nvrtc(directories));
  std::vector<const char*> texts, names;
  for (const NvrtcHeader& header : headers) {
    names.push_back(header.first.c_str());
    texts.push_back(header.second.c_str());
  }
  ProgramGuard guard{nvrtc};
  ARROW_RETURN_NOT_OK(Check(nvrtc,
                            nvrtc->CreateProgram(&guard.program, source.c_str(), name.c_str(),
                                                 static_cast<int>(headers.size()),
                                                 texts.data(), names.data()),
                            "nvrtcCreateProgram"));
  // Machine code where NVRTC knows the device's architecture: the driver loads it as it is,
  // where PTX costs its compiler seconds in every process its cache does not serve, and a
  // CUBIN loads on older drivers of NVRTC's CUDA major, which its PTX does not.
  const std::vector<int> known = KnownArchs(nvrtc);
  const bool cubin = nvrtc->GetCUBIN != nullptr &&
                     std::find(known.begin(), known.end(), arch) != known.end();
  arch = SupportedArch(known, arch);
  std::vector<std::string> all = {
      std::string(cubin ? "--gpu-architecture=sm_" : "--gpu-architecture=compute_") +
      std::to_string(arch)};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& option : all) argv.push_back(option.c_str());
  nvrtcResult compiled = nvrtc->CompileProgram(guard.program, static_cast<int>(argv.size()),
                                               argv.data());
  if (compiled != 0) {
    size_t log_size = 0;
    std::string log;
    if (nvrtc->GetProgramLogSize(guard.program, &log_size) == 0 && log_size > 1) {
      log.resize(log_size);
      nvrtc->GetProgramLog(guard.program, log.data());
      log.resize(log_size - 1);  // the terminating NUL
    }
    return Check(nvrtc, compiled, "nvrtcCompileProgram")
        .WithMessage("compiling ", name, " for ", cubin ? "sm_" : "compute_", arch, " failed: ",
                     nvrtc->GetErrorString(compiled), "\n", log);
  }
  return ProgramImage(nvrtc, guard.program, cubin);
}

}  // namespace arrow_gpu
