// Arrow files over device memory: reading and writing CUDA buffers as NativeFiles.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/result.h>

#include "device.h"

namespace arrow_gpu {

// A reader whose Read copies to the host and whose ReadAt/Read(nbytes) buffers are
// zero-copy device slices, so Arrow IPC readers keep bodies on the device.
arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> MakeDeviceBufferReader(
    std::shared_ptr<arrow::Buffer> buffer);

// A writer into a fixed-size device buffer. Writes past the end fail without writing.
// Host data can be staged in a pinned host buffer (SetBufferSize) so that many small
// writes become one large host-to-device copy; device data is copied device-to-device.
class DeviceBufferWriter : public arrow::io::WritableFile {
 public:
  static arrow::Result<std::shared_ptr<DeviceBufferWriter>> Make(
      std::shared_ptr<arrow::Buffer> buffer);

  arrow::Status Close() override;
  bool closed() const override;
  arrow::Result<int64_t> Tell() const override;
  arrow::Status Seek(int64_t position) override;
  arrow::Status Write(const void* data, int64_t nbytes) override;
  arrow::Status Write(const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Status WriteAt(int64_t position, const void* data, int64_t nbytes) override;
  arrow::Status Flush() override;

  // 0 disables staging. Flushes what is staged before resizing.
  arrow::Status SetBufferSize(int64_t buffer_size);
  int64_t buffer_size() const;
  int64_t num_bytes_buffered() const;

 private:
  DeviceBufferWriter(std::shared_ptr<arrow::Buffer> buffer,
                     std::shared_ptr<CudaContext> context);
  arrow::Status CheckWritable(int64_t position, int64_t nbytes) const;
  arrow::Status FlushLocked();
  arrow::Status WriteLocked(const void* data, int64_t nbytes);

  mutable std::mutex mutex_;
  std::shared_ptr<arrow::Buffer> buffer_;  // null once closed
  std::shared_ptr<CudaContext> context_;
  int64_t size_;
  int64_t position_ = 0;  // the logical position, staged bytes included
  std::shared_ptr<arrow::Buffer> staging_;  // pinned host memory, or null
  int64_t staged_ = 0;  // bytes in staging_, to land at position_ - staged_
};

arrow::Result<std::shared_ptr<arrow::io::OutputStream>> MakeDeviceBufferWriter(
    std::shared_ptr<arrow::Buffer> buffer);

// For Cython, which cannot spell the upcast.
inline std::shared_ptr<arrow::io::OutputStream> AsOutputStream(
    const std::shared_ptr<DeviceBufferWriter>& writer) {
  return writer;
}

}  // namespace arrow_gpu
