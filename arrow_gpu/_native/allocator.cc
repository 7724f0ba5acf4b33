#include "allocator.h"

#include <mutex>
#include <string>

#include "context.h"
#include "python_glue.h"

namespace arrow_gpu {
namespace {

arrow::Status AllocationFailure(CUresult rc, const char* function, const CudaContext& context,
                                int64_t nbytes) {
  arrow::Status cuda = CudaStatus(rc, function);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    return arrow::Status::OutOfMemory("CUDA device ", context.device_number(),
                                      " could not allocate ", nbytes, " bytes: ",
                                      cuda.message());
  }
  return cuda;
}

class DriverMemory final : public DeviceAllocator {
 public:
  const char* name() const override { return "device"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    CUdeviceptr address = 0;
    CUresult rc = context.driver()->MemAlloc(&address, static_cast<size_t>(nbytes));
    if (rc != CUDA_SUCCESS) return AllocationFailure(rc, "cuMemAlloc", context, nbytes);
    return static_cast<uintptr_t>(address);
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t) override {
    context.driver()->MemFree(address);
  }
};

class PoolMemory final : public DeviceAllocator {
 public:
  const char* name() const override { return "pool"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    CUdeviceptr address = 0;
    // The legacy default stream orders the allocation before every later use of the
    // buffer through this package, whose copies run on that stream.
    CUresult rc = context.driver()->MemAllocAsync(&address, static_cast<size_t>(nbytes),
                                                  nullptr);
    if (rc != CUDA_SUCCESS) return AllocationFailure(rc, "cuMemAllocAsync", context, nbytes);
    return static_cast<uintptr_t>(address);
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t) override {
    context.driver()->MemFreeAsync(address, nullptr);
  }
};

class CallbackMemory final : public DeviceAllocator {
 public:
  CallbackMemory(PyObject* allocate, PyObject* free) : allocate_(allocate), free_(free) {
    Py_INCREF(allocate_);
    Py_INCREF(free_);
  }
  // Leaked past interpreter exit rather than touching a dead interpreter.
  ~CallbackMemory() override {
    if (!InterpreterAlive()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(allocate_);
    Py_DECREF(free_);
    PyGILState_Release(gil);
  }

  const char* name() const override { return "callback"; }

  arrow::Result<uintptr_t> Allocate(const CudaContext& context, int64_t nbytes) override {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* result = PyObject_CallFunction(allocate_, "Li", static_cast<long long>(nbytes),
                                             context.device_number());
    uintptr_t address = 0;
    std::string error;
    if (result == nullptr) {
      error = TakePythonError();
    } else {
      // Any integer (NumPy's too) that fits a pointer; a float or a negative number is
      // never an address.
      if (PyObject* index = PyNumber_Index(result)) {
        address = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(index));
        Py_DECREF(index);
      }
      if (PyErr_Occurred()) {
        PyErr_Clear();
        error = "it returned " + ReprOf(result) + ", not an address (a positive int)";
      }
      Py_DECREF(result);
    }
    PyGILState_Release(gil);
    if (!error.empty()) {
      return arrow::Status::OutOfMemory("the device allocator failed to allocate ", nbytes,
                                        " bytes: ", error);
    }
    if (address == 0) {
      return arrow::Status::OutOfMemory("the device allocator returned address 0 for ",
                                        nbytes, " bytes");
    }
    return address;
  }

  void Free(const CudaContext& context, uintptr_t address, int64_t nbytes) override {
    if (!InterpreterAlive()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* result = PyObject_CallFunction(free_, "KLi", static_cast<unsigned long long>(address),
                                             static_cast<long long>(nbytes),
                                             context.device_number());
    // A free runs in a destructor: the error can only be reported, not raised.
    if (result == nullptr) PyErr_WriteUnraisable(free_);
    Py_XDECREF(result);
    PyGILState_Release(gil);
  }

 private:
  PyObject* allocate_;
  PyObject* free_;
};

std::mutex current_mutex;
std::shared_ptr<DeviceAllocator>& CurrentSlot() {
  static auto* current = new std::shared_ptr<DeviceAllocator>(DriverAllocator());
  return *current;
}

}  // namespace

std::shared_ptr<DeviceAllocator> DriverAllocator() {
  static auto* allocator = new std::shared_ptr<DeviceAllocator>(std::make_shared<DriverMemory>());
  return *allocator;
}

arrow::Result<std::shared_ptr<DeviceAllocator>> PoolAllocator() {
  ARROW_ASSIGN_OR_RAISE(auto driver, Driver());
  if (driver->MemAllocAsync == nullptr || driver->MemFreeAsync == nullptr) {
    return arrow::Status::NotImplemented(
        "this CUDA driver has no stream-ordered memory pool (needs CUDA 11.2 or newer)");
  }
  static auto* allocator = new std::shared_ptr<DeviceAllocator>(std::make_shared<PoolMemory>());
  return *allocator;
}

std::shared_ptr<DeviceAllocator> CallbackAllocator(PyObject* allocate, PyObject* free) {
  return std::make_shared<CallbackMemory>(allocate, free);
}

std::shared_ptr<DeviceAllocator> CurrentAllocator() {
  std::lock_guard<std::mutex> lock(current_mutex);
  return CurrentSlot();
}

void SetCurrentAllocator(std::shared_ptr<DeviceAllocator> allocator) {
  std::lock_guard<std::mutex> lock(current_mutex);
  CurrentSlot() = std::move(allocator);
}

}  // namespace arrow_gpu
