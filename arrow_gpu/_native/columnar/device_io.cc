#include "columnar/device_io.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <arrow/buffer.h>

#include "columnar/host_device.h"
#include "engine/copy_engine.h"


namespace arrow_gpu {
namespace {

using arrow::Buffer;
using arrow::Result;
using arrow::Status;

Result<std::shared_ptr<CudaContext>> ContextOf(const std::shared_ptr<Buffer>& buffer) {
  if (buffer == nullptr) return Status::Invalid("buffer must not be null");
  auto manager = CudaManagerOf(*buffer);
  if (manager == nullptr) return Status::TypeError("buffer is not backed by a CudaBuffer");
  return manager->cuda_context();
}

Status ClosedError() { return Status::IOError("operation on a closed device file"); }

}  // namespace

DeviceBufferReader::DeviceBufferReader(std::shared_ptr<Buffer> buffer,
                                       std::shared_ptr<CudaContext> context,
                                       BufferReads reads)
    : buffer_(std::move(buffer)),
      context_(std::move(context)),
      size_(buffer_->size()),
      reads_(reads),
      vetting_(size_) {}

Result<std::shared_ptr<DeviceBufferReader>> DeviceBufferReader::Make(
    std::shared_ptr<Buffer> buffer, BufferReads reads) {
  ARROW_ASSIGN_OR_RAISE(auto context, ContextOf(buffer));
  return std::shared_ptr<DeviceBufferReader>(
      new DeviceBufferReader(std::move(buffer), std::move(context), reads));
}

Status DeviceBufferReader::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  buffer_.reset();  // release the device memory now, not when Python collects the file
  return Status::OK();
}

bool DeviceBufferReader::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buffer_ == nullptr;
}

Result<int64_t> DeviceBufferReader::Tell() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  return position_;
}

Result<int64_t> DeviceBufferReader::GetSize() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  return size_;
}

Status DeviceBufferReader::Seek(int64_t position) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  if (position < 0 || position > size_) {
    return Status::IOError("seek position ", position, " is out of bounds for a device ",
                           "buffer of ", size_, " bytes");
  }
  position_ = position;
  return Status::OK();
}

Result<int64_t> DeviceBufferReader::Read(int64_t nbytes, void* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_ASSIGN_OR_RAISE(int64_t n, CopyAt(position_, nbytes, out));
  position_ += n;
  return n;
}

Result<std::shared_ptr<Buffer>> DeviceBufferReader::Read(int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_ASSIGN_OR_RAISE(auto buffer, BufferAt(position_, nbytes));
  position_ += buffer->size();
  return buffer;
}

Result<int64_t> DeviceBufferReader::ReadAt(int64_t position, int64_t nbytes, void* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  return CopyAt(position, nbytes, out);
}

Result<std::shared_ptr<Buffer>> DeviceBufferReader::ReadAt(int64_t position,
                                                           int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  return BufferAt(position, nbytes);
}

#if ARROW_VERSION_MAJOR >= 26
// Arrow 26 added variants that may refuse short reads; route them through the above.
namespace {
Status CheckShort(int64_t got, int64_t wanted, bool allow_short_read) {
  if (allow_short_read || got == wanted) return Status::OK();
  return Status::IOError("device buffer too short: wanted ", wanted, " bytes, got ", got);
}
}  // namespace

Result<int64_t> DeviceBufferReader::ReadAt(int64_t position, int64_t nbytes,
                                           bool allow_short_read, void* out) {
  ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position, nbytes, out));
  ARROW_RETURN_NOT_OK(CheckShort(n, nbytes, allow_short_read));
  return n;
}

Result<std::shared_ptr<Buffer>> DeviceBufferReader::ReadAt(int64_t position, int64_t nbytes,
                                                           bool allow_short_read) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position, nbytes));
  ARROW_RETURN_NOT_OK(CheckShort(buffer->size(), nbytes, allow_short_read));
  return buffer;
}
#endif

Result<std::shared_ptr<Buffer>> DeviceBufferReader::ReadSlice(int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_ASSIGN_OR_RAISE(int64_t n, Available(position_, nbytes));
  auto slice = arrow::SliceBuffer(buffer_, position_, n);
  position_ += n;
  return slice;
}

// The number of bytes readable at `position`, at most `nbytes` (caller holds the lock).
Result<int64_t> DeviceBufferReader::Available(int64_t position, int64_t nbytes) const {
  if (buffer_ == nullptr) return ClosedError();
  if (nbytes < 0) return Status::Invalid("cannot read a negative number of bytes");
  if (position < 0 || position > size_) {
    return Status::IOError("read position ", position, " is out of bounds for a device ",
                           "buffer of ", size_, " bytes");
  }
  return std::min(nbytes, size_ - position);
}

Result<int64_t> DeviceBufferReader::CopyAt(int64_t position, int64_t nbytes, void* out) {
  ARROW_ASSIGN_OR_RAISE(int64_t n, Available(position, nbytes));
  if (n > 0) {
    ARROW_RETURN_NOT_OK(
        EngineDeviceToHost(*context_, out, buffer_->address() + position, n));
  }
  vetting_.SawCopy(position, static_cast<const uint8_t*>(out), n);
  return n;
}

Result<std::shared_ptr<Buffer>> DeviceBufferReader::HostCopyAt(int64_t position,
                                                               int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<Buffer> copy, arrow::AllocateBuffer(nbytes));
  if (nbytes > 0) {
    ARROW_RETURN_NOT_OK(EngineDeviceToHost(*context_, copy->mutable_data(),
                                           buffer_->address() + position, nbytes));
  }
  return copy;
}

Result<std::shared_ptr<Buffer>> DeviceBufferReader::BufferAt(int64_t position,
                                                             int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(int64_t n, Available(position, nbytes));
  if (reads_ == BufferReads::kDeviceSlices) return arrow::SliceBuffer(buffer_, position, n);
  std::string why;
  IpcBodyVetting::Body body = vetting_.Classify(position, n, &why);
  if (body == IpcBodyVetting::Body::kOther && n > 8 && !vetting_.IsStreamMetadata(position, n)) {
    // A file's message is read whole: its metadata judges the body that follows it.
    uint8_t head[8];
    ARROW_RETURN_NOT_OK(EngineDeviceToHost(*context_, head, buffer_->address() + position, 8));
    int64_t metadata = IpcBodyVetting::FramedMetadataLength(head, n);
    if (metadata > 0 && metadata < n) {
      ARROW_ASSIGN_OR_RAISE(auto copy, HostCopyAt(position, metadata));
      vetting_.SawHostCopy(position, copy->data(), metadata);
      body = vetting_.Classify(position + metadata, n - metadata, &why);
    }
  }
  switch (body) {
    case IpcBodyVetting::Body::kOnDevice:
      return arrow::SliceBuffer(buffer_, position, n);
    case IpcBodyVetting::Body::kDecodedOnHost:
      if (reads_ == BufferReads::kIpcDecodingOnHost) return HostCopyAt(position, n);
      return Status::NotImplemented(
          why, ", where device memory cannot be read: copy the buffer to the host first "
          "(cuda_buffer.copy_to_host()) and read it with pyarrow there (then "
          "arrow_gpu.to_device moves the result); arrow_gpu.io.read_record_batch does this "
          "for one record batch message");
    case IpcBodyVetting::Body::kOther:
      break;
  }
  ARROW_ASSIGN_OR_RAISE(auto copy, HostCopyAt(position, n));
  vetting_.SawHostCopy(position, copy->data(), copy->size());
  return copy;
}

Result<std::shared_ptr<arrow::io::RandomAccessFile>> MakeDeviceBufferReader(
    std::shared_ptr<Buffer> buffer) {
  ARROW_ASSIGN_OR_RAISE(auto reader,
                        DeviceBufferReader::Make(std::move(buffer), BufferReads::kDeviceSlices));
  return AsRandomAccessFile(reader);
}

// ---------------------------------------------------------------------------------------
// DeviceBufferWriter

DeviceBufferWriter::DeviceBufferWriter(std::shared_ptr<Buffer> buffer,
                                       std::shared_ptr<CudaContext> context)
    : buffer_(std::move(buffer)), context_(std::move(context)), size_(buffer_->size()) {}

Result<std::shared_ptr<DeviceBufferWriter>> DeviceBufferWriter::Make(
    std::shared_ptr<Buffer> buffer) {
  ARROW_ASSIGN_OR_RAISE(auto context, ContextOf(buffer));
  if (!buffer->is_mutable()) return Status::Invalid("the device buffer is read-only");
  return std::shared_ptr<DeviceBufferWriter>(
      new DeviceBufferWriter(std::move(buffer), std::move(context)));
}

Status DeviceBufferWriter::CheckWritable(int64_t position, int64_t nbytes) const {
  if (buffer_ == nullptr) return ClosedError();
  if (nbytes < 0) return Status::Invalid("cannot write a negative number of bytes");
  if (position < 0 || position > size_) {
    return Status::IOError("write position ", position, " is out of bounds for a device ",
                           "buffer of ", size_, " bytes");
  }
  if (nbytes > size_ - position) {
    return Status::IOError("writing ", nbytes, " bytes at position ", position,
                           " would go past the end of a device buffer of ", size_, " bytes");
  }
  return Status::OK();
}

Status DeviceBufferWriter::FlushLocked() {
  if (staged_ == 0) return Status::OK();
  ARROW_RETURN_NOT_OK(EngineHostToDevice(*context_, buffer_->address() + position_ - staged_,
                                         staging_->data(), staged_));
  staged_ = 0;
  return Status::OK();
}

Status DeviceBufferWriter::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return Status::OK();
  Status flushed = FlushLocked();
  buffer_.reset();
  staging_.reset();
  staged_ = 0;
  return flushed;
}

bool DeviceBufferWriter::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buffer_ == nullptr;
}

Result<int64_t> DeviceBufferWriter::Tell() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  return position_;
}

Status DeviceBufferWriter::Seek(int64_t position) {
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_RETURN_NOT_OK(CheckWritable(position, 0));
  ARROW_RETURN_NOT_OK(FlushLocked());
  position_ = position;
  return Status::OK();
}

Status DeviceBufferWriter::Write(const void* data, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  return WriteLocked(data, nbytes);
}

Status DeviceBufferWriter::WriteLocked(const void* data, int64_t nbytes) {
  ARROW_RETURN_NOT_OK(CheckWritable(position_, nbytes));
  if (nbytes == 0) return Status::OK();
  // A write that would fill the staging buffer goes straight to the device, after what is
  // staged (as in Arrow: num_bytes_buffered stays below buffer_size).
  if (staging_ != nullptr && staged_ + nbytes < staging_->size()) {
    std::memcpy(staging_->mutable_data() + staged_, data, nbytes);
    staged_ += nbytes;
  } else {
    ARROW_RETURN_NOT_OK(FlushLocked());
    ARROW_RETURN_NOT_OK(
        EngineHostToDevice(*context_, buffer_->address() + position_, data, nbytes));
  }
  position_ += nbytes;
  return Status::OK();
}

Status DeviceBufferWriter::Write(const std::shared_ptr<Buffer>& data) {
  if (data->is_cpu()) return Write(data->data(), data->size());
  // Device data (e.g. the body buffers of a device record batch) never visits the host.
  auto source = CudaManagerOf(*data);
  if (source == nullptr) {
    return Status::TypeError("cannot write memory of device ", data->device()->ToString(),
                             " to a CUDA buffer");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_RETURN_NOT_OK(CheckWritable(position_, data->size()));
  if (data->size() == 0) return Status::OK();
  ARROW_RETURN_NOT_OK(FlushLocked());
  ARROW_RETURN_NOT_OK(context_->CopyDeviceToDevice(buffer_->address() + position_,
                                                   data->address(), data->size(),
                                                   *source->cuda_context()));
  position_ += data->size();
  return Status::OK();
}

Status DeviceBufferWriter::WriteAt(int64_t position, const void* data, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ARROW_RETURN_NOT_OK(CheckWritable(position, nbytes));
  ARROW_RETURN_NOT_OK(FlushLocked());
  position_ = position;
  return WriteLocked(data, nbytes);
}

Status DeviceBufferWriter::Flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  return FlushLocked();
}

Status DeviceBufferWriter::SetBufferSize(int64_t buffer_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer_ == nullptr) return ClosedError();
  if (buffer_size < 0) return Status::Invalid("buffer_size must be non-negative");
  ARROW_RETURN_NOT_OK(FlushLocked());
  if (buffer_size == 0) {
    staging_.reset();
    return Status::OK();
  }
  ARROW_ASSIGN_OR_RAISE(auto host, CudaHostMemoryManager::Primary(context_->device_number()));
  ARROW_ASSIGN_OR_RAISE(staging_, host->AllocateBuffer(buffer_size));
  return Status::OK();
}

int64_t DeviceBufferWriter::buffer_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return staging_ == nullptr ? 0 : staging_->size();
}

int64_t DeviceBufferWriter::num_bytes_buffered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return staged_;
}

Result<std::shared_ptr<arrow::io::OutputStream>> MakeDeviceBufferWriter(
    std::shared_ptr<Buffer> buffer) {
  ARROW_ASSIGN_OR_RAISE(auto writer, DeviceBufferWriter::Make(std::move(buffer)));
  return AsOutputStream(writer);
}

// The device memory manager's files are defined here, with the files, so that the device
// layer below needs nothing of them.
Result<std::shared_ptr<arrow::io::RandomAccessFile>> CudaMemoryManager::GetBufferReader(
    std::shared_ptr<Buffer> buf) {
  return MakeDeviceBufferReader(std::move(buf));
}

Result<std::shared_ptr<arrow::io::OutputStream>> CudaMemoryManager::GetBufferWriter(
    std::shared_ptr<Buffer> buf) {
  return MakeDeviceBufferWriter(std::move(buf));
}

}  // namespace arrow_gpu
