#include "python/callback_allocator.h"

#include <string>

#include "python/python_glue.h"

namespace arrow_gpu {
namespace {

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
  bool from_driver() const override { return false; }

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

}  // namespace

std::shared_ptr<DeviceAllocator> CallbackAllocator(PyObject* allocate, PyObject* free) {
  return std::make_shared<CallbackMemory>(allocate, free);
}

}  // namespace arrow_gpu
