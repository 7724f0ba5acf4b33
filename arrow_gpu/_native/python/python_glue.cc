#include "python/python_glue.h"

namespace arrow_gpu {

bool InterpreterAlive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

std::string TakePythonError() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  // Exceptions raised from C (KeyboardInterrupt from a signal) may carry no value yet.
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string text = value != nullptr ? ReprOf(value) : "unknown error";
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

std::shared_ptr<void> HoldPyObject(PyObject* object) {
  Py_INCREF(object);
  return std::shared_ptr<void>(object, [](void* held) {
    // Past interpreter shutdown there is no GIL to take; the process is ending anyway.
    if (!InterpreterAlive()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(held));
    PyGILState_Release(state);
  });
}

std::string ReprOf(PyObject* object) {
  std::string text = "<unprintable object>";
  if (PyObject* repr = PyObject_Repr(object)) {
    if (const char* utf8 = PyUnicode_AsUTF8(repr)) text = utf8;
    Py_DECREF(repr);
  }
  PyErr_Clear();
  return text;
}

}  // namespace arrow_gpu
