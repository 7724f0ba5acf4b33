// Arrow files over device memory: reading and writing CUDA buffers as NativeFiles.
#pragma once

#include <memory>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/result.h>

namespace arrow_gpu {

// A reader whose Read copies to the host and whose ReadAt/Read(nbytes) buffers are
// zero-copy device slices, so Arrow IPC readers keep bodies on the device.
arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> MakeDeviceBufferReader(
    std::shared_ptr<arrow::Buffer> buffer);

// A writer into a fixed-size device buffer.
arrow::Result<std::shared_ptr<arrow::io::OutputStream>> MakeDeviceBufferWriter(
    std::shared_ptr<arrow::Buffer> buffer);

}  // namespace arrow_gpu
