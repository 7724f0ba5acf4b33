// A device allocator written in Python: the hook through which users plug in RMM, CuPy's
// pool or their own (the allocator interface itself lives in cuda/allocator.h).
#pragma once

#include <Python.h>

#include <memory>

#include "cuda/device_allocator.h"

namespace arrow_gpu {

// Python callables: allocate(nbytes, device_number) -> address, and
// free(address, nbytes, device_number), e.g. over RMM or CuPy's pool. Both are called with
// the GIL taken for the call.
std::shared_ptr<DeviceAllocator> CallbackAllocator(PyObject* allocate, PyObject* free);

}  // namespace arrow_gpu
