#include "device_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <arrow/util/config.h>

#include "copy_engine.h"


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

// Reads of flatbuffer fields with every offset checked against the bytes at hand.
class FlatBuffer {
 public:
  explicit FlatBuffer(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}

  // The root table's position, or -1.
  int64_t Root() const { return Follow(0); }
  // The position of field `index` of the table at `table`, or -1 if absent or out of range.
  int64_t Field(int64_t table, int index) const {
    int32_t back;
    if (!Get(table, &back)) return -1;
    int64_t vtable = table - back;
    uint16_t vtable_size, offset;
    if (!Get(vtable, &vtable_size) || 4 + 2 * index >= vtable_size) return -1;
    if (!Get(vtable + 4 + 2 * index, &offset) || offset == 0) return -1;
    return table + offset;
  }
  // The position of the table a field refers to, or -1.
  int64_t Follow(int64_t position) const {
    uint32_t offset;
    return position >= 0 && Get(position, &offset) ? position + offset : -1;
  }
  template <typename T>
  bool Get(int64_t position, T* out) const {
    if (position < 0 || position + static_cast<int64_t>(sizeof(T)) >
                            static_cast<int64_t>(bytes_.size())) {
      return false;
    }
    std::memcpy(out, bytes_.data() + position, sizeof(T));
    return true;
  }

 private:
  const std::vector<uint8_t>& bytes_;
};

// Whether the bytes at `data` begin with an Arrow IPC stream (or file) whose schema says
// its data is big-endian. Message framing and field numbers are those of Arrow's
// Message.fbs and Schema.fbs.
Result<bool> StartsWithBigEndianSchema(const CudaContext& context, uintptr_t data,
                                       int64_t size) {
  constexpr int64_t kMaxMetadata = 16 << 20;
  // One small copy covers the framing and, nearly always, the whole schema message.
  std::vector<uint8_t> bytes(static_cast<size_t>(std::min<int64_t>(size, 4096)));
  if (bytes.size() < 8) return false;
  ARROW_RETURN_NOT_OK(EngineDeviceToHost(context, bytes.data(), data, bytes.size()));
  int64_t start = std::memcmp(bytes.data(), "ARROW1", 6) == 0 ? 8 : 0;  // the file format
  int32_t prefix[2] = {0, 0};
  if (static_cast<int64_t>(bytes.size()) < start + 8) return false;
  std::memcpy(prefix, bytes.data() + start, 8);
  // The legacy framing has no continuation marker (0xFFFFFFFF) before the length.
  int64_t length = prefix[0] == -1 ? prefix[1] : prefix[0];
  int64_t metadata = start + (prefix[0] == -1 ? 8 : 4);
  if (length <= 0 || length > kMaxMetadata || metadata + length > size) return false;
  if (metadata + length > static_cast<int64_t>(bytes.size())) {
    bytes.resize(static_cast<size_t>(metadata + length));
    ARROW_RETURN_NOT_OK(EngineDeviceToHost(context, bytes.data(), data, bytes.size()));
  }
  bytes.erase(bytes.begin(), bytes.begin() + metadata);
  bytes.resize(static_cast<size_t>(length));
  FlatBuffer message(bytes);
  int64_t root = message.Root();
  uint8_t header_type = 0;
  if (!message.Get(message.Field(root, 1), &header_type) || header_type != 1) return false;
  int64_t schema = message.Follow(message.Field(root, 2));
  int16_t endianness = 0;  // absent: Little, the default
  message.Get(message.Field(schema, 0), &endianness);
  return endianness == 1;
}

// Reads copy to the host; buffer-returning reads are zero-copy device slices. Safe to use
// from several threads (one lock guards the position).
class DeviceBufferReader : public arrow::io::RandomAccessFile {
 public:
  DeviceBufferReader(std::shared_ptr<Buffer> buffer, std::shared_ptr<CudaContext> context)
      : buffer_(std::move(buffer)), context_(std::move(context)), size_(buffer_->size()) {}

  Status Close() override {
    std::lock_guard<std::mutex> lock(mutex_);
    buffer_.reset();  // release the device memory now, not when Python collects the file
    return Status::OK();
  }

  bool closed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return buffer_ == nullptr;
  }

  bool supports_zero_copy() const override { return true; }

  Result<int64_t> Tell() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (buffer_ == nullptr) return ClosedError();
    return position_;
  }

  Result<int64_t> GetSize() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (buffer_ == nullptr) return ClosedError();
    return size_;
  }

  Status Seek(int64_t position) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (buffer_ == nullptr) return ClosedError();
    if (position < 0 || position > size_) {
      return Status::IOError("seek position ", position, " is out of bounds for a device ",
                             "buffer of ", size_, " bytes");
    }
    position_ = position;
    return Status::OK();
  }

  Result<int64_t> Read(int64_t nbytes, void* out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ARROW_ASSIGN_OR_RAISE(int64_t n, CopyAt(position_, nbytes, out));
    position_ += n;
    return n;
  }

  Result<std::shared_ptr<Buffer>> Read(int64_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ARROW_ASSIGN_OR_RAISE(auto slice, SliceAt(position_, nbytes));
    position_ += slice->size();
    return slice;
  }

  Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return CopyAt(position, nbytes, out);
  }

  Result<std::shared_ptr<Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return SliceAt(position, nbytes);
  }

#if ARROW_VERSION_MAJOR >= 26
  // Arrow 26 added variants that may refuse short reads; route them through the above.
  Result<int64_t> ReadAt(int64_t position, int64_t nbytes, bool allow_short_read,
                         void* out) override {
    ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position, nbytes, out));
    ARROW_RETURN_NOT_OK(CheckShort(n, nbytes, allow_short_read));
    return n;
  }

  Result<std::shared_ptr<Buffer>> ReadAt(int64_t position, int64_t nbytes,
                                         bool allow_short_read) override {
    ARROW_ASSIGN_OR_RAISE(auto slice, ReadAt(position, nbytes));
    ARROW_RETURN_NOT_OK(CheckShort(slice->size(), nbytes, allow_short_read));
    return slice;
  }
#endif

 private:
  static Status CheckShort(int64_t got, int64_t wanted, bool allow_short_read) {
    if (allow_short_read || got == wanted) return Status::OK();
    return Status::IOError("device buffer too short: wanted ", wanted, " bytes, got ", got);
  }

  // The number of bytes readable at `position`, at most `nbytes` (caller holds the lock).
  Result<int64_t> Available(int64_t position, int64_t nbytes) const {
    if (buffer_ == nullptr) return ClosedError();
    if (nbytes < 0) return Status::Invalid("cannot read a negative number of bytes");
    if (position < 0 || position > size_) {
      return Status::IOError("read position ", position, " is out of bounds for a device ",
                             "buffer of ", size_, " bytes");
    }
    return std::min(nbytes, size_ - position);
  }

  Result<int64_t> CopyAt(int64_t position, int64_t nbytes, void* out) const {
    ARROW_ASSIGN_OR_RAISE(int64_t n, Available(position, nbytes));
    if (n > 0) {
      ARROW_RETURN_NOT_OK(
          EngineDeviceToHost(*context_, out, buffer_->address() + position, n));
    }
    return n;
  }

  Result<std::shared_ptr<Buffer>> SliceAt(int64_t position, int64_t nbytes) {
    ARROW_ASSIGN_OR_RAISE(int64_t n, Available(position, nbytes));
    ARROW_RETURN_NOT_OK(CheckEndianness());
    return arrow::SliceBuffer(buffer_, position, n);
  }

  // pyarrow's IPC readers byte-swap big-endian data on the host (all CUDA hosts are
  // little-endian), which would read device memory there: device slices of such a stream
  // are refused (caller holds the lock). Copying reads still work.
  Status CheckEndianness() {
    if (!endianness_checked_) {
      ARROW_ASSIGN_OR_RAISE(big_endian_,
                            StartsWithBigEndianSchema(*context_, buffer_->address(), size_));
      endianness_checked_ = true;
    }
    if (big_endian_) {
      return Status::NotImplemented(
          "this device buffer holds an Arrow IPC stream of big-endian data, which pyarrow "
          "would byte-swap on the host, where device memory cannot be read: copy the buffer "
          "to the host first (cuda_buffer.copy_to_host()) and read it with pyarrow there");
    }
    return Status::OK();
  }

  mutable std::mutex mutex_;
  std::shared_ptr<Buffer> buffer_;  // null once closed
  std::shared_ptr<CudaContext> context_;
  int64_t size_;
  int64_t position_ = 0;
  bool endianness_checked_ = false;
  bool big_endian_ = false;
};

}  // namespace

Result<std::shared_ptr<arrow::io::RandomAccessFile>> MakeDeviceBufferReader(
    std::shared_ptr<Buffer> buffer) {
  ARROW_ASSIGN_OR_RAISE(auto context, ContextOf(buffer));
  return std::make_shared<DeviceBufferReader>(std::move(buffer), std::move(context));
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
  ARROW_ASSIGN_OR_RAISE(auto host, CudaHostMemoryManager::Get(context_->device_number()));
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
