#include "columnar/handoff.h"

#include <limits>
#include <map>
#include <utility>

#include <arrow/array/data.h>
#include <arrow/ipc/message.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/util/bit_util.h>

namespace arrow_gpu {
namespace {

using arrow::Buffer;
using arrow::Status;

// The segment of `buffer`, exported where the driver allows it; `exported` holds the
// handles of the allocations exported so far.
HandoffSegment Exported(int64_t body_offset, const std::shared_ptr<Buffer>& buffer,
                        std::map<uintptr_t, CUipcMemHandle>* exported) {
  HandoffSegment segment;
  segment.body_offset = body_offset;
  segment.source = buffer;
  auto manager = CudaManagerOf(*buffer);
  if (manager == nullptr) return segment;  // host memory, pinned or not
  auto handle = manager->ExportIpc(buffer, &segment.allocation_offset, exported);
  uintptr_t base = 0;
  if (!handle.ok() || !manager->cuda_context()
                           ->AllocationRange(buffer->address(), &base,
                                             &segment.allocation_size)
                           .ok()) {
    return segment;
  }
  segment.handle = *handle;
  segment.exportable = true;
  return segment;
}

// Keeps the messages an IPC stream writer makes instead of writing them.
class MessageCollector : public arrow::ipc::internal::IpcPayloadWriter {
 public:
  explicit MessageCollector(std::vector<HandoffMessage>* messages) : messages_(messages) {}

  Status WritePayload(const arrow::ipc::IpcPayload& payload) override {
    HandoffMessage message;
    message.metadata = payload.metadata;
    message.body_length = payload.body_length;
    // The writer puts each body buffer at the next multiple of 8 (its offsets in the
    // metadata say so too); the total must come out as the writer's.
    int64_t offset = 0;
    for (const auto& buffer : payload.body_buffers) {
      const int64_t size = buffer == nullptr ? 0 : buffer->size();
      if (size > 0) message.segments.push_back(Exported(offset, buffer, &exported_));
      offset += arrow::bit_util::RoundUpToMultipleOf8(size);
    }
    if (offset != payload.body_length) {
      return Status::NotImplemented("an IPC message body of ", payload.body_length,
                                    " bytes whose buffers take ", offset,
                                    ": a layout hand-offs do not know");
    }
    messages_->push_back(std::move(message));
    return Status::OK();
  }

  Status Close() override { return Status::OK(); }

 private:
  std::vector<HandoffMessage>* messages_;
  std::map<uintptr_t, CUipcMemHandle> exported_;  // by allocation base: one ask each
};

// Gives the messages back with the bodies the reader reads them with.
class HandoffMessages : public arrow::ipc::MessageReader {
 public:
  HandoffMessages(const std::vector<HandoffMessage>& messages,
                  std::vector<std::shared_ptr<Buffer>> bodies)
      : messages_(messages), bodies_(std::move(bodies)) {}

  arrow::Result<std::unique_ptr<arrow::ipc::Message>> ReadNextMessage() override {
    if (next_ == messages_.size()) return std::unique_ptr<arrow::ipc::Message>();
    const size_t index = next_++;
    return arrow::ipc::Message::Open(messages_[index].metadata, bodies_[index]);
  }

 private:
  const std::vector<HandoffMessage>& messages_;
  std::vector<std::shared_ptr<Buffer>> bodies_;
  size_t next_ = 0;
};

Status CheckSegments(const HandoffMessage& message) {
  if (message.metadata == nullptr || message.body_length < 0) {
    return Status::Invalid("a hand-off message without metadata or of negative length");
  }
  for (const auto& segment : message.segments) {
    if (segment.source == nullptr || segment.body_offset < 0 ||
        segment.body_offset > message.body_length ||
        segment.source->size() > message.body_length - segment.body_offset) {
      return Status::Invalid("a hand-off segment does not fit in its message body of ",
                             message.body_length, " bytes; the payload is corrupt");
    }
  }
  return Status::OK();
}

// Stands for a message body that stays in its segments: never read, only sliced by the
// reader; slices of it are then moved onto the segments (see Remapped).
constexpr uintptr_t kPlaceholderAddress = uintptr_t{1} << 62;

using Placeholders = std::map<const Buffer*, const HandoffMessage*>;

// `buffer` as a view of the segment it was read from, if it was read from a placeholder.
arrow::Result<std::shared_ptr<Buffer>> Remapped(const std::shared_ptr<Buffer>& buffer,
                                                const Placeholders& placeholders,
                                                const std::shared_ptr<CudaMemoryManager>& manager) {
  if (buffer == nullptr) return buffer;
  const Buffer* root = buffer.get();
  while (root->parent() != nullptr) root = root->parent().get();
  auto found = placeholders.find(root);
  if (found == placeholders.end()) return buffer;  // made by the reader (empty buffers)
  const int64_t position = static_cast<int64_t>(buffer->address() - root->address());
  if (buffer->size() == 0) {
    return std::make_shared<DeviceBuffer>(uintptr_t{0}, 0, manager, DeviceBuffer::Origin::kView);
  }
  for (const auto& segment : found->second->segments) {
    const int64_t start = position - segment.body_offset;
    if (start >= 0 && start <= segment.source->size() &&
        buffer->size() <= segment.source->size() - start) {
      return DeviceBuffer::Slice(segment.source, start, buffer->size());
    }
  }
  return Status::Invalid("a buffer of the handed-off data lies outside the bytes the payload "
                         "names; the payload is corrupt");
}

arrow::Result<std::shared_ptr<arrow::ArrayData>> RemappedData(
    const std::shared_ptr<arrow::ArrayData>& data, const Placeholders& placeholders,
    const std::shared_ptr<CudaMemoryManager>& manager) {
  auto out = data->Copy();
  for (auto& buffer : out->buffers) {
    ARROW_ASSIGN_OR_RAISE(buffer, Remapped(buffer, placeholders, manager));
  }
  for (auto& child : out->child_data) {
    ARROW_ASSIGN_OR_RAISE(child, RemappedData(child, placeholders, manager));
  }
  if (out->dictionary != nullptr) {
    ARROW_ASSIGN_OR_RAISE(out->dictionary, RemappedData(out->dictionary, placeholders, manager));
  }
  return out;
}

}  // namespace

arrow::Result<std::vector<HandoffMessage>> DescribeHandoff(
    const std::shared_ptr<arrow::Schema>& schema,
    const std::vector<std::shared_ptr<arrow::RecordBatch>>& batches) {
  std::vector<HandoffMessage> messages;
  ARROW_ASSIGN_OR_RAISE(
      auto writer, arrow::ipc::internal::OpenRecordBatchWriter(
                       std::make_unique<MessageCollector>(&messages), schema));
  for (const auto& batch : batches) ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*batch));
  ARROW_RETURN_NOT_OK(writer->Close());
  return messages;
}

arrow::Result<std::vector<std::shared_ptr<arrow::RecordBatch>>> ReadHandoff(
    const std::vector<HandoffMessage>& messages,
    const std::shared_ptr<CudaMemoryManager>& manager, bool copy,
    std::shared_ptr<arrow::Schema>* schema) {
  int64_t total = 0;
  for (const auto& message : messages) {
    ARROW_RETURN_NOT_OK(CheckSegments(message));
    if (message.body_length > std::numeric_limits<int64_t>::max() - total) {
      return Status::Invalid("hand-off message bodies too large; the payload is corrupt");
    }
    total += message.body_length;
  }
  std::vector<std::shared_ptr<Buffer>> bodies;
  Placeholders placeholders;
  if (copy) {
    ARROW_ASSIGN_OR_RAISE(std::shared_ptr<Buffer> all, manager->AllocateBuffer(total));
    const auto& context = *manager->cuda_context();
    int64_t start = 0;
    for (const auto& message : messages) {
      for (const auto& segment : message.segments) {
        auto source = CudaManagerOf(*segment.source);
        if (source == nullptr) return Status::Invalid("a hand-off segment not on a device");
        ARROW_RETURN_NOT_OK(context.CopyDeviceToDevice(
            all->address() + start + segment.body_offset, segment.source->address(),
            segment.source->size(), *source->cuda_context()));
      }
      bodies.push_back(DeviceBuffer::Slice(all, start, message.body_length, manager));
      start += message.body_length;
    }
    // The copies ran on the legacy default stream: done once it is (the sender's buffers
    // may go), without waiting for this process's non-blocking streams too.
    ARROW_RETURN_NOT_OK(context.SynchronizeStream(LegacyStream()));
  } else {
    for (const auto& message : messages) {
      auto body = std::make_shared<DeviceBuffer>(kPlaceholderAddress, message.body_length,
                                                 manager, DeviceBuffer::Origin::kView);
      placeholders[body.get()] = &message;
      bodies.push_back(std::move(body));
    }
  }
  // Arrow swaps the bytes of data of the other endianness on the host, where these bodies
  // are not: such data (never sent by DescribeHandoff) is refused instead.
  auto options = arrow::ipc::IpcReadOptions::Defaults();
  options.ensure_native_endian = false;
  ARROW_ASSIGN_OR_RAISE(auto reader,
                        arrow::ipc::RecordBatchStreamReader::Open(
                            std::make_unique<HandoffMessages>(messages, bodies), options));
  if (!reader->schema()->is_native_endian()) {
    return Status::Invalid("a hand-off of data of the other endianness; the payload is corrupt");
  }
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  while (true) {
    ARROW_ASSIGN_OR_RAISE(auto batch, reader->Next());
    if (batch == nullptr) break;
    std::vector<std::shared_ptr<arrow::ArrayData>> columns;
    for (const auto& column : batch->column_data()) {
      ARROW_ASSIGN_OR_RAISE(columns.emplace_back(), RemappedData(column, placeholders, manager));
    }
    // Arrow's IPC reader labels batches CPU; pyarrow's guards trust the label.
    batches.push_back(arrow::RecordBatch::Make(batch->schema(), batch->num_rows(),
                                               std::move(columns),
                                               arrow::DeviceAllocationType::kCUDA));
  }
  *schema = reader->schema();
  return batches;
}

}  // namespace arrow_gpu
