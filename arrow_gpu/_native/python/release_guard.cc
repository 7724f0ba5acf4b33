// The release guard of columnar/release.h for a Python process: a producer's release runs
// with any pending Python exception set aside, and restored after it.
#include <Python.h>

#include "columnar/release.h"
#include "python/python_glue.h"

namespace arrow_gpu {
namespace {

// Sets a pending Python exception aside for the lifetime of the scope, when this thread
// holds the GIL.
class PythonErrorSetAside {
 public:
  PythonErrorSetAside() {
    held_ = InterpreterAlive() && PyGILState_Check();
    if (held_) PyErr_Fetch(&type_, &value_, &traceback_);
  }
  ~PythonErrorSetAside() {
    if (!held_) return;
    // The pending exception wins; a release callback has no way to report one of its own.
    if (type_ != nullptr) {
      PyErr_Restore(type_, value_, traceback_);
    } else {
      PyErr_Clear();
    }
  }
  PythonErrorSetAside(const PythonErrorSetAside&) = delete;
  PythonErrorSetAside& operator=(const PythonErrorSetAside&) = delete;

 private:
  bool held_ = false;
  PyObject *type_ = nullptr, *value_ = nullptr, *traceback_ = nullptr;
};

void ReleaseWithErrorSetAside(void (*call)(void*), void* data) {
  PythonErrorSetAside aside;
  call(data);
}

// Installed as the extension module loads, before Python can import any struct through it.
[[maybe_unused]] const bool installed = (SetReleaseGuard(ReleaseWithErrorSetAside), true);

}  // namespace
}  // namespace arrow_gpu
