// Releasing the C structs of the C Data Interfaces: exactly once, and for structs a
// producer made, through a guard that the layer above may install (a producer written in
// Python, with ctypes, fails if its release runs while a Python exception is pending, and
// C++ drops imported data wherever Python frees it).
#pragma once

namespace arrow_gpu {

// Calls a struct's release once, and marks it released even if the producer's callback did
// not (a second call would free twice).
template <typename Struct>
void ReleaseOnce(Struct* c_struct) {
  if (c_struct->release == nullptr) return;
  auto release = c_struct->release;
  release(c_struct);
  c_struct->release = nullptr;
}

// Runs call(data); installed once, before any struct is imported.
using ReleaseGuard = void (*)(void (*call)(void*), void* data);
void SetReleaseGuard(ReleaseGuard guard);

// Runs call(data) through the installed guard, if any.
void RunGuarded(void (*call)(void*), void* data);

// ReleaseOnce of a struct a producer made, through the guard.
template <typename Struct>
void ReleaseProducerOnce(Struct* c_struct) {
  RunGuarded([](void* data) { ReleaseOnce(static_cast<Struct*>(data)); }, c_struct);
}

}  // namespace arrow_gpu
