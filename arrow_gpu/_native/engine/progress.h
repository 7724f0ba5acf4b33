// Transfer progress: one process-wide hook told how many bytes each transfer has moved.
// The layer above installs it (python/ calls a Python callable); the engine knows only this.
#pragma once

#include <cstdint>
#include <functional>

#include <arrow/status.h>

namespace arrow_gpu {

// Called as hook(moved, 0) with the bytes moved since its last call, and as hook(0, expected)
// when a transfer starts with the bytes it will move, on the thread that started the
// transfer (never on a worker). An error it returns cancels the transfer.
using ProgressHook = std::function<arrow::Status(int64_t moved, int64_t expected)>;

// Installs `hook` (nullptr: none) for the transfers that report from now on.
void SetProgressHook(ProgressHook hook);

// Whether a hook is installed (cheap: checked on every transfer).
bool ProgressOn();

// Tells the hook, if any, that `nbytes` more have moved.
arrow::Status ReportProgress(int64_t nbytes);

// Tells the hook, if any, that a transfer starting now will move `nbytes`.
arrow::Status ExpectProgress(int64_t nbytes);

}  // namespace arrow_gpu
