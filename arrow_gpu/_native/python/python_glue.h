// What the C++ core needs from the Python interpreter it runs in.
#pragma once

#include <Python.h>

#include <memory>
#include <string>

namespace arrow_gpu {

// False once the interpreter is finalizing: callbacks and reference drops must be skipped
// then (the process is ending), since taking the GIL would crash.
bool InterpreterAlive();

// The text of the pending Python exception, which is cleared. Needs the GIL.
std::string TakePythonError();

// repr(object), or a placeholder if repr itself fails (its error is cleared). Needs the GIL.
std::string ReprOf(PyObject* object);

// A reference to a Python object, dropped with the GIL taken, for C++ objects that keep
// one alive (buffers viewing memory a Numba or CuPy array owns, a `base`, callbacks).
std::shared_ptr<void> HoldPyObject(PyObject* object);

}  // namespace arrow_gpu
