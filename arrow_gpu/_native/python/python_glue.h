// What the C++ core needs from the Python interpreter it runs in.
#pragma once

#include <Python.h>

#include <string>

namespace arrow_gpu {

// False once the interpreter is finalizing: callbacks and reference drops must be skipped
// then (the process is ending), since taking the GIL would crash.
bool InterpreterAlive();

// The text of the pending Python exception, which is cleared. Needs the GIL.
std::string TakePythonError();

// repr(object), or a placeholder if repr itself fails (its error is cleared). Needs the GIL.
std::string ReprOf(PyObject* object);

// Sets a pending Python exception aside for the lifetime of the scope, when this thread
// holds the GIL: a producer's release callback written in Python (ctypes) fails if called
// with an exception set, and C++ drops imported data wherever Python frees it.
class PythonErrorSetAside {
 public:
  PythonErrorSetAside();
  ~PythonErrorSetAside();
  PythonErrorSetAside(const PythonErrorSetAside&) = delete;
  PythonErrorSetAside& operator=(const PythonErrorSetAside&) = delete;

 private:
  bool held_ = false;
  PyObject *type_ = nullptr, *value_ = nullptr, *traceback_ = nullptr;
};

}  // namespace arrow_gpu
