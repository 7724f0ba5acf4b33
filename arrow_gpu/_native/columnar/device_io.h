// Arrow files over device memory: reading and writing CUDA buffers as NativeFiles.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/result.h>
#include <arrow/util/config.h>

#include "columnar/device.h"
#include "columnar/ipc_vetting.h"

namespace arrow_gpu {

// What the buffer-returning reads (Read(nbytes), ReadAt) of a DeviceBufferReader hand out.
enum class BufferReads {
  // Zero-copy device slices, whatever the range: for files over one message body, whose
  // reader has judged that body already.
  kDeviceSlices,
  // For Arrow IPC streams and files: device slices of the message bodies libarrow decodes
  // in place, so bodies stay on the device; host copies of everything else (metadata,
  // footers), which libarrow reads on the host; NotImplemented for bodies that libarrow
  // would decompress or byte-swap on the host.
  kIpcRefusingHostDecoding,
  // The same, but bodies libarrow decodes on the host come as host copies.
  kIpcDecodingOnHost,
};

// A seekable file over device memory. Copying reads copy to the host; buffer reads are as
// `reads` says. Safe to use from several threads (one lock guards the position).
class DeviceBufferReader : public arrow::io::RandomAccessFile {
 public:
  static arrow::Result<std::shared_ptr<DeviceBufferReader>> Make(
      std::shared_ptr<arrow::Buffer> buffer, BufferReads reads);

  arrow::Status Close() override;
  bool closed() const override;
  bool supports_zero_copy() const override { return true; }
  arrow::Result<int64_t> Tell() const override;
  arrow::Result<int64_t> GetSize() override;
  arrow::Status Seek(int64_t position) override;
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override;
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position,
                                                       int64_t nbytes) override;
#if ARROW_VERSION_MAJOR >= 26
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, bool allow_short_read,
                                void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes,
                                                       bool allow_short_read) override;
#endif

  // The next bytes as a zero-copy device slice, whatever they hold (for callers that
  // decode nothing on the host, unlike libarrow's readers).
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadSlice(int64_t nbytes);

 private:
  DeviceBufferReader(std::shared_ptr<arrow::Buffer> buffer,
                     std::shared_ptr<CudaContext> context, BufferReads reads);
  arrow::Result<int64_t> Available(int64_t position, int64_t nbytes) const;
  arrow::Result<int64_t> CopyAt(int64_t position, int64_t nbytes, void* out);
  arrow::Result<std::shared_ptr<arrow::Buffer>> BufferAt(int64_t position, int64_t nbytes);
  arrow::Result<std::shared_ptr<arrow::Buffer>> HostCopyAt(int64_t position, int64_t nbytes);

  mutable std::mutex mutex_;
  std::shared_ptr<arrow::Buffer> buffer_;  // null once closed
  std::shared_ptr<CudaContext> context_;
  int64_t size_;
  int64_t position_ = 0;
  BufferReads reads_;
  IpcBodyVetting vetting_;
};

// A reader of kDeviceSlices (device memory managers hand these out for message bodies).
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

// For Cython, which cannot spell the upcasts.
inline std::shared_ptr<arrow::io::OutputStream> AsOutputStream(
    const std::shared_ptr<DeviceBufferWriter>& writer) {
  return writer;
}
inline std::shared_ptr<arrow::io::RandomAccessFile> AsRandomAccessFile(
    const std::shared_ptr<DeviceBufferReader>& reader) {
  return reader;
}

}  // namespace arrow_gpu
