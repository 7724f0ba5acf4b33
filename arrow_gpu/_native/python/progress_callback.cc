#include "python/progress_callback.h"

#include <memory>
#include <utility>

#include <arrow/python/common.h>

#include "engine/progress.h"
#include "python/python_glue.h"

namespace arrow_gpu {
namespace {

// Calls `callback(moved, expected)` with the GIL taken (the transfer's thread may hold it
// already).
arrow::Status CallProgress(PyObject* callback, int64_t moved, int64_t expected) {
  if (!Py_IsInitialized()) return arrow::Status::OK();
  arrow::Status status;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* result = PyObject_CallFunction(callback, "LL", static_cast<long long>(moved),
                                           static_cast<long long>(expected));
  if (result == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
      status = arrow::Status::Cancelled("transfer cancelled: the progress callback raised ",
                                        TakePythonError());
    } else {
      // KeyboardInterrupt (Ctrl-C is delivered inside the callback) and SystemExit are no
      // failure of the callback: the caller gets them back as they are.
      status = arrow::py::ConvertPyError(arrow::StatusCode::Cancelled);
    }
  }
  Py_XDECREF(result);
  PyGILState_Release(gil);
  return status;
}

}  // namespace

void SetProgressCallback(PyObject* callback) {
  if (callback == Py_None) {
    SetProgressHook(nullptr);
    return;
  }
  // The hook may be dropped by a transfer's thread: the reference goes with the GIL taken.
  std::shared_ptr<void> held = HoldPyObject(callback);
  SetProgressHook([held = std::move(held)](int64_t moved, int64_t expected) {
    return CallProgress(static_cast<PyObject*>(held.get()), moved, expected);
  });
}

}  // namespace arrow_gpu
