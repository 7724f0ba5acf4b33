#include "columnar/ipc_vetting.h"

#include <cstring>

#include "columnar/ipc_metadata.h"

namespace arrow_gpu {
namespace {

int32_t Int32At(const uint8_t* data) {
  int32_t value;
  std::memcpy(&value, data, sizeof(value));
  return value;
}

}  // namespace

IpcBodyVetting::Body IpcBodyVetting::Classify(int64_t position, int64_t size,
                                              std::string* why) {
  auto found = bodies_.find(position);
  if (found == bodies_.end() || size > found->second.length) return Body::kOther;
  PendingBody body = std::move(found->second);
  bodies_.erase(found);  // its metadata is read again before it is read again
  if (!body.why.empty()) {
    *why = std::move(body.why);
    return Body::kDecodedOnHost;
  }
  if (big_endian_) {
    *why = "this device buffer holds an Arrow IPC stream of big-endian data, which pyarrow "
           "would byte-swap on the host";
    return Body::kDecodedOnHost;
  }
  return Body::kOnDevice;
}

void IpcBodyVetting::SawCopy(int64_t position, const uint8_t* data, int64_t size) {
  last_copy_end_ = position + size;
  last_copy_tail_ = size >= 4 ? Int32At(data + size - 4) : -1;
}

int64_t IpcBodyVetting::FramedMetadataLength(const uint8_t head[8], int64_t size) {
  // The framing is a continuation marker (-1), then the metadata's length; before Arrow
  // 0.15 the length alone.
  int64_t length = Int32At(head) == -1 && size >= 8 ? 8 + int64_t{Int32At(head + 4)}
                                                    : 4 + int64_t{Int32At(head)};
  return length > 8 && length <= size ? length : -1;
}

void IpcBodyVetting::SawHostCopy(int64_t position, const uint8_t* data, int64_t size) {
  constexpr int64_t kTrailer = 10;  // the footer's int32 length, then "ARROW1"
  int64_t framed = size >= 8 ? FramedMetadataLength(data, size) : -1;
  if (IsStreamMetadata(position, size)) {
    SawMessage(data, size, position + size);  // the body follows it
  } else if (position == footer_start_ && size == footer_length_) {
    SawFooter(data, size);
  } else if (position + size == file_size_ && size >= kTrailer &&
             std::memcmp(data + size - 6, "ARROW1", 6) == 0) {
    int32_t length = Int32At(data + size - kTrailer);
    footer_start_ = file_size_ - kTrailer - length;
    footer_length_ = length;
  } else if (framed > 0) {
    int64_t prefix = Int32At(data) == -1 ? 8 : 4;
    SawMessage(data + prefix, framed - prefix, position + framed);
  }
}

void IpcBodyVetting::SawMessage(const uint8_t* metadata, int64_t size, int64_t body_start) {
  FlatBuffer message(metadata, size);
  MessageHeader header = ReadMessageHeader(message);
  int64_t body_length = 0;
  message.Get(message.Field(message.Root(), 3), &body_length);  // Message.bodyLength
  if (header.table < 0) return;
  if (header.type == kSchemaMessage) {
    big_endian_ = big_endian_ || SaysBigEndian(message, header.table);
    return;
  }
  int64_t batch = RecordBatchTable(message, header);
  if (batch < 0 || body_length < 0) return;  // other bodies come as host copies
  std::string codec;
  int64_t compression = message.Follow(message.Field(batch, 3));
  if (compression >= 0) {
    int8_t number = 0;  // BodyCompression.codec; absent: LZ4_FRAME, the default
    message.Get(message.Field(compression, 0), &number);
    codec = number == 0 ? "lz4" : number == 1 ? "zstd" : "codec " + std::to_string(number);
  } else if (message.Field(batch, 3) >= 0) {
    codec = "an unreadable codec";
  }
  PendingBody body{body_length, ""};
  if (!codec.empty()) {
    body.why = "this Arrow IPC message's body is compressed (" + codec +
               "), and pyarrow would decompress it on the host";
  } else if (IsDeltaDictionary(message, header)) {
    body.why = "this Arrow IPC stream has a delta dictionary batch, whose values pyarrow "
               "would concatenate with the dictionary before them on the host";
  }
  bodies_[body_start] = std::move(body);
}

void IpcBodyVetting::SawFooter(const uint8_t* footer, int64_t size) {
  FlatBuffer buffer(footer, size);
  int64_t schema = buffer.Follow(buffer.Field(buffer.Root(), 1));  // Footer.schema
  if (schema >= 0) big_endian_ = big_endian_ || SaysBigEndian(buffer, schema);
}

}  // namespace arrow_gpu
