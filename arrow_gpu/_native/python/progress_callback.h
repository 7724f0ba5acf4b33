// Transfer progress reported to a Python callable: the Python side of the copy engine's
// progress hook (engine/progress.h).
#pragma once

#include <Python.h>

namespace arrow_gpu {

// A Python callable called as callback(nbytes) as transfers progress (nbytes moved since
// the last call), from the thread that started the transfer; None to stop. An exception it
// raises cancels the transfer. Needs the GIL.
void SetProgressCallback(PyObject* callback);

}  // namespace arrow_gpu
