// Transfer progress: one process-wide hook told how many bytes each transfer has moved.
// The layer above installs it (python/ calls a Python callable); the engine knows only this.
#pragma once

#include <cstdint>
#include <functional>

#include <arrow/status.h>

namespace arrow_gpu {

// Called with the bytes moved since its last call, on the thread that started the transfer
// (never on a worker). An error it returns cancels the transfer.
using ProgressHook = std::function<arrow::Status(int64_t nbytes)>;

// Installs `hook` (nullptr: none) for the transfers that report from now on.
void SetProgressHook(ProgressHook hook);

// Whether a hook is installed (cheap: checked on every transfer).
bool ProgressOn();

// Tells the hook, if any, that `nbytes` more have moved.
arrow::Status ReportProgress(int64_t nbytes);

}  // namespace arrow_gpu
