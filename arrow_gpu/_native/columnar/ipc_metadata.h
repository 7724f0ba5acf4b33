// Arrow IPC metadata read from its flatbuffers: the package's one reader of Message.fbs,
// Schema.fbs and File.fbs fields (field numbers are those of Arrow's format files), every
// offset checked against the bytes at hand, so that untrusted metadata reads as absent
// fields rather than out of bounds.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace arrow_gpu {

class FlatBuffer {
 public:
  FlatBuffer(const uint8_t* data, int64_t size) : data_(data), size_(size) {}

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
  // The position of the table or vector a field refers to, or -1.
  int64_t Follow(int64_t position) const {
    uint32_t offset;
    return position >= 0 && Get(position, &offset) ? position + offset : -1;
  }
  template <typename T>
  bool Get(int64_t position, T* out) const {
    if (position < 0 || position + static_cast<int64_t>(sizeof(T)) > size_) return false;
    std::memcpy(out, data_ + position, sizeof(T));
    return true;
  }

 private:
  const uint8_t* data_;
  int64_t size_;
};

// Message.header_type values (MessageHeader in Message.fbs).
constexpr uint8_t kSchemaMessage = 1;
constexpr uint8_t kDictionaryBatchMessage = 2;
constexpr uint8_t kRecordBatchMessage = 3;

// Message.header_type, and where Message.header's table is (-1 if absent).
struct MessageHeader {
  uint8_t type = 0;
  int64_t table = -1;
};
MessageHeader ReadMessageHeader(const FlatBuffer& message);

// The RecordBatch table of a record batch message, or of a dictionary batch's values
// (DictionaryBatch.data); -1 for other messages.
int64_t RecordBatchTable(const FlatBuffer& message, const MessageHeader& header);

// Whether a dictionary batch message's values extend the dictionary read before them
// (DictionaryBatch.isDelta) rather than replace it; false for other messages.
bool IsDeltaDictionary(const FlatBuffer& message, const MessageHeader& header);

// Whether the Schema table at `schema` says its data is big-endian.
bool SaysBigEndian(const FlatBuffer& buffer, int64_t schema);

// What a RecordBatch message's metadata says of its body.
struct RecordBatchLayout {
  std::vector<std::pair<int64_t, int64_t>> nodes;    // FieldNode: length, null count
  std::vector<std::pair<int64_t, int64_t>> buffers;  // Buffer: offset, length in the body
  bool compressed = false;                           // RecordBatch.compression is set
  bool delta = false;  // a dictionary batch that extends its dictionary (IsDeltaDictionary)
};

// The layout of the record batch a message's metadata (its flatbuffer, without framing)
// describes, a dictionary batch's values included; empty for another kind of message or
// metadata that cannot be read.
RecordBatchLayout ReadRecordBatchLayout(const uint8_t* metadata, int64_t size);

// A Block of File.fbs: where one message lies in an IPC file.
struct FileBlock {
  int64_t offset = 0;
  int32_t metadata_length = 0;  // the message's prefix and flatbuffer, padded
  int64_t body_length = 0;
};

// The blocks an IPC file's footer (its flatbuffer) lists, its dictionaries' then its record
// batches'; false if the footer cannot be read.
bool ReadFooterBlocks(const uint8_t* footer, int64_t size, std::vector<FileBlock>* blocks);

}  // namespace arrow_gpu
