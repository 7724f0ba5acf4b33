#include "python_glue.h"

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
  std::string text = "unknown error";
  if (value != nullptr) {
    if (PyObject* repr = PyObject_Repr(value)) {
      if (const char* utf8 = PyUnicode_AsUTF8(repr)) text = utf8;
      Py_DECREF(repr);
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

}  // namespace arrow_gpu
