// Entry points of a library opened at run time (the CUDA driver, NVRTC), bound by name.
#pragma once

#include <dlfcn.h>

#include <string>

namespace arrow_gpu {

// Binds `symbol` of `library` to `slot`; a symbol the library lacks is added to `missing`
// (comma-separated), so that one error can name every absent entry point.
template <typename Fn>
bool BindSymbol(void* library, const char* symbol, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*slot == nullptr) missing->append(missing->empty() ? "" : ", ").append(symbol);
  return *slot != nullptr;
}

}  // namespace arrow_gpu
