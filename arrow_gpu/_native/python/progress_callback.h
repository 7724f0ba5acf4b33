// Transfer progress reported to a Python callable: the Python side of the copy engine's
// progress hook (engine/progress.h).
#pragma once

#include <Python.h>

namespace arrow_gpu {

// A Python callable called as callback(moved, 0) as transfers progress (bytes moved since
// the last call) and as callback(0, expected) as each starts (the bytes it will move), from
// the thread that started the transfer; None to stop. An exception it raises cancels the
// transfer. Needs the GIL.
void SetProgressCallback(PyObject* callback);

}  // namespace arrow_gpu
