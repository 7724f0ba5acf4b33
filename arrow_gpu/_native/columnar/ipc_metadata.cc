#include "columnar/ipc_metadata.h"

namespace arrow_gpu {
namespace {

// A vector of 16-byte structs of two int64 at the field `index` of `table`; false if it
// reaches past the metadata.
bool ReadPairs(const FlatBuffer& buffer, int64_t table, int index,
               std::vector<std::pair<int64_t, int64_t>>* out) {
  int64_t vector = buffer.Follow(buffer.Field(table, index));
  if (vector < 0) return true;  // absent: none
  uint32_t count;
  if (!buffer.Get(vector, &count)) return false;
  // A forged count is refused before it sizes anything.
  int64_t last;
  if (count > 0 && !buffer.Get(vector + 4 + 16 * int64_t{count} - 8, &last)) return false;
  out->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    std::pair<int64_t, int64_t> pair;
    int64_t position = vector + 4 + 16 * int64_t{i};
    if (!buffer.Get(position, &pair.first) || !buffer.Get(position + 8, &pair.second)) {
      return false;
    }
    out->push_back(pair);
  }
  return true;
}

// A vector of Block structs (24 bytes: offset, metaDataLength and its padding, bodyLength) at
// the field `index` of `table`, appended to `out`; false if it reaches past the footer.
bool ReadBlocks(const FlatBuffer& buffer, int64_t table, int index,
                std::vector<FileBlock>* out) {
  constexpr int64_t kBlockSize = 24;
  int64_t vector = buffer.Follow(buffer.Field(table, index));
  if (vector < 0) return true;  // absent: none
  uint32_t count;
  if (!buffer.Get(vector, &count)) return false;
  int64_t last;  // a forged count is refused before it sizes anything
  if (count > 0 && !buffer.Get(vector + 4 + kBlockSize * int64_t{count} - 8, &last)) {
    return false;
  }
  out->reserve(out->size() + count);
  for (uint32_t i = 0; i < count; ++i) {
    int64_t position = vector + 4 + kBlockSize * int64_t{i};
    FileBlock block;
    buffer.Get(position, &block.offset);
    buffer.Get(position + 8, &block.metadata_length);
    buffer.Get(position + 16, &block.body_length);
    out->push_back(block);
  }
  return true;
}

}  // namespace

bool ReadFooterBlocks(const uint8_t* footer, int64_t size, std::vector<FileBlock>* blocks) {
  FlatBuffer buffer(footer, size);
  int64_t root = buffer.Root();
  if (root < 0) return false;
  return ReadBlocks(buffer, root, 2, blocks) &&  // Footer.dictionaries
         ReadBlocks(buffer, root, 3, blocks);     // Footer.recordBatches
}

bool SaysBigEndian(const FlatBuffer& buffer, int64_t schema) {
  int16_t endianness = 0;  // absent: Little, the default
  buffer.Get(buffer.Field(schema, 0), &endianness);
  return endianness != 0;
}

MessageHeader ReadMessageHeader(const FlatBuffer& message) {
  int64_t root = message.Root();
  MessageHeader header;
  message.Get(message.Field(root, 1), &header.type);  // Message.header_type
  header.table = message.Follow(message.Field(root, 2));  // Message.header
  return header;
}

int64_t RecordBatchTable(const FlatBuffer& message, const MessageHeader& header) {
  if (header.table < 0) return -1;
  if (header.type == kRecordBatchMessage) return header.table;
  if (header.type == kDictionaryBatchMessage) {
    return message.Follow(message.Field(header.table, 1));
  }
  return -1;
}

bool IsDeltaDictionary(const FlatBuffer& message, const MessageHeader& header) {
  if (header.type != kDictionaryBatchMessage || header.table < 0) return false;
  uint8_t delta = 0;  // absent: false
  message.Get(message.Field(header.table, 2), &delta);
  return delta != 0;
}

RecordBatchLayout ReadRecordBatchLayout(const uint8_t* metadata, int64_t size) {
  FlatBuffer message(metadata, size);
  MessageHeader header = ReadMessageHeader(message);
  int64_t batch = RecordBatchTable(message, header);
  RecordBatchLayout layout;
  if (batch < 0) return layout;
  if (!ReadPairs(message, batch, 1, &layout.nodes) ||   // RecordBatch.nodes
      !ReadPairs(message, batch, 2, &layout.buffers)) {  // RecordBatch.buffers
    return RecordBatchLayout{};
  }
  layout.compressed = message.Field(batch, 3) >= 0;  // RecordBatch.compression
  layout.delta = IsDeltaDictionary(message, header);
  return layout;
}

}  // namespace arrow_gpu
