#include "columnar/c_device.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/array.h>
#include <arrow/c/bridge.h>
#include <arrow/table.h>

#include "columnar/c_device_checks.h"
#include "columnar/device.h"
#include "columnar/null_counts.h"
#include "columnar/release.h"

namespace arrow_gpu {
namespace {

using arrow::ArrayData;
using arrow::DeviceAllocationType;
using arrow::Result;
using arrow::Status;

std::atomic<int64_t> live_exports{0};

struct Location {
  DeviceAllocationType type = DeviceAllocationType::kCPU;
  int64_t id = -1;
  bool any = false;  // whether any buffer was seen
};

Status Locate(const ArrayData& data, Location* where) {
  for (const auto& buffer : data.buffers) {
    if (buffer == nullptr) continue;
    DeviceAllocationType type = buffer->device_type();
    int64_t id = type == DeviceAllocationType::kCPU ? -1 : buffer->device()->device_id();
    if (where->any && (type != where->type || id != where->id)) {
      return Status::Invalid("data spans several devices (", static_cast<int>(where->type),
                             ", ", where->id, ") and (", static_cast<int>(type), ", ", id,
                             "); copy it to one first");
    }
    *where = {type, id, true};
  }
  for (const auto& child : data.child_data) ARROW_RETURN_NOT_OK(Locate(*child, where));
  if (data.dictionary) ARROW_RETURN_NOT_OK(Locate(*data.dictionary, where));
  return Status::OK();
}

// An event recorded on `stream` after the producer's work, for CUDA and pinned data.
Result<std::shared_ptr<arrow::Device::SyncEvent>> RecordedEvent(const Location& where,
                                                                CUstream stream) {
  if (!IsCuda(static_cast<int64_t>(where.type))) return nullptr;
  ARROW_ASSIGN_OR_RAISE(auto manager, CudaMemoryManager::Primary(static_cast<int>(where.id)));
  ARROW_ASSIGN_OR_RAISE(auto event, manager->MakeDeviceSyncEvent());
  ARROW_RETURN_NOT_OK(
      manager->cuda_context()->RecordEvent(*static_cast<CUevent*>(event->get_raw()), stream));
  return event;
}

Status ReadyForHost(CUstream stream, const Location& where) {
  // Null counts are read from the bitmaps: the producer's work on them must be done.
  if (stream == nullptr || !IsCuda(static_cast<int64_t>(where.type))) return Status::OK();
  ARROW_ASSIGN_OR_RAISE(auto context, CudaContext::Primary(static_cast<int>(where.id)));
  return context->SynchronizeStream(stream);
}

bool HasUnknownNullCount(const ArrayData& data) {
  if (data.null_count.load() == arrow::kUnknownNullCount) return true;
  for (const auto& child : data.child_data) {
    if (HasUnknownNullCount(*child)) return true;
  }
  return data.dictionary != nullptr && HasUnknownNullCount(*data.dictionary);
}

// The top-level release of an exported array, wrapped to count live exports.
struct CountedArray {
  void (*release)(ArrowArray*);
  void* private_data;
};

void ReleaseCountedArray(ArrowArray* array) {
  auto* counted = static_cast<CountedArray*>(array->private_data);
  array->release = counted->release;
  array->private_data = counted->private_data;
  delete counted;
  ReleaseOnce(array);
  live_exports.fetch_sub(1);
}

void CountExport(ArrowDeviceArray* out) {
  auto* counted = new CountedArray{out->array.release, out->array.private_data};
  out->array.release = ReleaseCountedArray;
  out->array.private_data = counted;
  live_exports.fetch_add(1);
}

// Device data with the event and null counts a consumer needs, handed to libarrow's
// exporter by `export_fn`. A batch without any buffer takes `fallback` as its device.
template <typename ExportFn>
Status ExportPrepared(const std::vector<std::shared_ptr<ArrayData>>& nodes, CUstream stream,
                      ArrowDeviceArray* out, const Location& fallback, ExportFn&& export_fn) {
  Location where;
  for (const auto& node : nodes) ARROW_RETURN_NOT_OK(Locate(*node, &where));
  bool unknown = false;
  for (const auto& node : nodes) unknown = unknown || HasUnknownNullCount(*node);
  if (unknown) {
    ARROW_RETURN_NOT_OK(ReadyForHost(stream, where));
    for (const auto& node : nodes) ARROW_RETURN_NOT_OK(ResolveNullCounts(node));
  }
  const Location& device = where.any ? where : fallback;
  ARROW_ASSIGN_OR_RAISE(auto event, RecordedEvent(device, stream));
  ARROW_RETURN_NOT_OK(export_fn(std::move(event)));
  if (!where.any) {
    out->device_type = static_cast<ArrowDeviceType>(device.type);
    out->device_id = device.id;
  }
  std::memset(out->reserved, 0, sizeof(out->reserved));
  CountExport(out);
  return Status::OK();
}

// Empty arrays, at any depth, at offset 0: libarrow's importer sizes view buffers by length
// alone and then rejects the non-zero offset libarrow's exporter kept. No parent can reach into
// an empty child, so its offset carries nothing.
std::shared_ptr<ArrayData> WithoutEmptyOffsets(const std::shared_ptr<ArrayData>& data) {
  std::shared_ptr<ArrayData> copy;  // made on the first change
  auto edited = [&]() -> ArrayData& {
    if (!copy) copy = data->Copy();
    return *copy;
  };
  if (data->length == 0 && data->offset != 0) {
    edited().offset = 0;
    edited().null_count = 0;
  }
  for (size_t i = 0; i < data->child_data.size(); ++i) {
    auto child = WithoutEmptyOffsets(data->child_data[i]);
    if (child != data->child_data[i]) edited().child_data[i] = std::move(child);
  }
  if (data->dictionary) {
    auto dictionary = WithoutEmptyOffsets(data->dictionary);
    if (dictionary != data->dictionary) edited().dictionary = std::move(dictionary);
  }
  return copy ? copy : data;
}

std::shared_ptr<arrow::Array> WithoutEmptyOffsets(const std::shared_ptr<arrow::Array>& array) {
  auto data = WithoutEmptyOffsets(array->data());
  return data == array->data() ? array : arrow::MakeArray(data);
}

std::shared_ptr<arrow::RecordBatch> WithoutEmptyOffsets(
    const std::shared_ptr<arrow::RecordBatch>& batch) {
  arrow::ArrayVector columns;
  bool changed = false;
  for (const auto& column : batch->columns()) {
    columns.push_back(WithoutEmptyOffsets(column));
    changed |= columns.back() != column;
  }
  return changed ? arrow::RecordBatch::Make(batch->schema(), batch->num_rows(), std::move(columns))
                 : batch;
}

std::vector<std::shared_ptr<ArrayData>> ColumnData(const arrow::RecordBatch& batch) {
  std::vector<std::shared_ptr<ArrayData>> nodes;
  for (int i = 0; i < batch.num_columns(); ++i) nodes.push_back(batch.column_data(i));
  return nodes;
}

bool SameLayout(const ArrowSchema* a, const ArrowSchema* b) {
  if (std::string_view(a->format) != std::string_view(b->format) ||
      a->n_children != b->n_children || (a->dictionary == nullptr) != (b->dictionary == nullptr)) {
    return false;
  }
  for (int64_t i = 0; i < a->n_children; ++i) {
    if (!SameLayout(a->children[i], b->children[i])) return false;
  }
  return a->dictionary == nullptr || SameLayout(a->dictionary, b->dictionary);
}

// The physical type of a schema: formats of it, its children and dictionary.
std::string Formats(const ArrowSchema* schema) {
  std::string text = schema->format;
  if (schema->n_children > 0) {
    text += "<";
    for (int64_t i = 0; i < schema->n_children; ++i) {
      text += (i ? ", " : "") + Formats(schema->children[i]);
    }
    text += ">";
  }
  if (schema->dictionary != nullptr) text += "{" + Formats(schema->dictionary) + "}";
  return text;
}

// The device type of a table's buffers (CUDA when it has none).
Result<DeviceAllocationType> StreamDeviceType(const arrow::Table& data) {
  std::vector<DeviceAllocationType> types;
  for (const auto& column : data.columns()) {
    for (const auto& chunk : column->chunks()) {
      Location where;
      ARROW_RETURN_NOT_OK(Locate(*chunk->data(), &where));
      if (!where.any) continue;
      if (!types.empty() && types.front() != where.type) {
        return Status::Invalid("data spans several device types (",
                               static_cast<int>(types.front()), " and ",
                               static_cast<int>(where.type), ")");
      }
      types.push_back(where.type);
    }
  }
  return types.empty() ? DeviceAllocationType::kCUDA : types.front();
}

// ---------------------------------------------------------------------------------------
// The producer side of a device stream

class ExportedStream {
 public:
  ExportedStream(std::shared_ptr<arrow::RecordBatchReader> reader,
                 std::shared_ptr<arrow::Schema> schema, CUstream stream,
                 DeviceAllocationType device_type)
      : reader_(std::move(reader)), schema_(std::move(schema)), stream_(stream),
        device_type_(device_type) {
    live_exports.fetch_add(1);
  }
  ~ExportedStream() { live_exports.fetch_sub(1); }

  static void Fill(std::unique_ptr<ExportedStream> self, ArrowDeviceArrayStream* out) {
    out->device_type = static_cast<ArrowDeviceType>(self->device_type_);
    out->get_schema = GetSchema;
    out->get_next = GetNext;
    out->get_last_error = GetLastError;
    out->release = Release;
    out->private_data = self.release();
  }

 private:
  static ExportedStream* Of(ArrowDeviceArrayStream* stream) {
    return static_cast<ExportedStream*>(stream->private_data);
  }

  int Report(const Status& status) {
    if (status.ok()) return 0;
    last_error_ = status.ToString();
    return EIO;
  }

  static int GetSchema(ArrowDeviceArrayStream* stream, ArrowSchema* out) {
    ExportedStream* self = Of(stream);
    if (self == nullptr) return EINVAL;  // called after release: a consumer bug
    return self->Report(arrow::ExportSchema(*self->schema_, out));
  }

  static int GetNext(ArrowDeviceArrayStream* stream, ArrowDeviceArray* out) {
    ExportedStream* self = Of(stream);
    if (self == nullptr) return EINVAL;
    return self->Report(self->Next(out));
  }

  Status Next(ArrowDeviceArray* out) {
    std::memset(out, 0, sizeof(*out));  // released: ends the stream
    std::shared_ptr<arrow::RecordBatch> batch;
    ARROW_RETURN_NOT_OK(reader_->ReadNext(&batch));
    if (batch == nullptr) return Status::OK();
    batch = WithoutEmptyOffsets(batch);
    ARROW_RETURN_NOT_OK(ExportPrepared(
        ColumnData(*batch), stream_, out, Location{device_type_, 0, true},
        [&](std::shared_ptr<arrow::Device::SyncEvent> event) {
          return arrow::ExportDeviceRecordBatch(*batch, std::move(event), out);
        }));
    if (out->device_type != static_cast<ArrowDeviceType>(device_type_)) {
      const auto found = out->device_type;
      ReleaseOnce(&out->array);
      return Status::Invalid("a batch on device_type ", found, " in a stream of ",
                             static_cast<int>(device_type_));
    }
    return Status::OK();
  }

  static const char* GetLastError(ArrowDeviceArrayStream* stream) {
    ExportedStream* self = Of(stream);
    return self == nullptr || self->last_error_.empty() ? nullptr : self->last_error_.c_str();
  }

  static void Release(ArrowDeviceArrayStream* stream) {
    delete Of(stream);
    stream->private_data = nullptr;
    stream->release = nullptr;
  }

  std::shared_ptr<arrow::RecordBatchReader> reader_;
  std::shared_ptr<arrow::Schema> schema_;
  CUstream stream_;
  DeviceAllocationType device_type_;
  std::string last_error_;
};

}  // namespace

Status ExportArray(const std::shared_ptr<arrow::Array>& source, CUstream stream,
                   ArrowDeviceArray* out, ArrowSchema* out_schema) {
  auto array = WithoutEmptyOffsets(source);
  return ExportPrepared({array->data()}, stream, out, Location{},
                        [&](std::shared_ptr<arrow::Device::SyncEvent> event) {
                          return arrow::ExportDeviceArray(*array, std::move(event), out,
                                                          out_schema);
                        });
}

Status ExportBatch(const std::shared_ptr<arrow::RecordBatch>& source, CUstream stream,
                   ArrowDeviceArray* out, ArrowSchema* out_schema) {
  auto batch = WithoutEmptyOffsets(source);
  // Without buffers (no columns, or null ones) only the batch's label says where it is.
  const DeviceAllocationType label = batch->device_type();
  const Location labelled{label, label == DeviceAllocationType::kCPU ? -1 : 0, true};
  return ExportPrepared(ColumnData(*batch), stream, out, labelled,
                        [&](std::shared_ptr<arrow::Device::SyncEvent> event) {
                          return arrow::ExportDeviceRecordBatch(*batch, std::move(event), out,
                                                                out_schema);
                        });
}

Status ExportStream(std::shared_ptr<arrow::RecordBatchReader> reader,
                    std::shared_ptr<arrow::Schema> schema, CUstream stream,
                    ArrowDeviceArrayStream* out) {
  if (schema == nullptr) schema = reader->schema();
  ExportedStream::Fill(std::make_unique<ExportedStream>(std::move(reader), std::move(schema),
                                                        stream, DeviceAllocationType::kCUDA),
                       out);
  return Status::OK();
}

Status ExportTableStream(std::shared_ptr<arrow::Table> table,
                         std::shared_ptr<arrow::Schema> schema, CUstream stream,
                         ArrowDeviceArrayStream* out) {
  ARROW_ASSIGN_OR_RAISE(DeviceAllocationType device_type, StreamDeviceType(*table));
  if (schema == nullptr) schema = table->schema();
  auto reader = std::make_shared<arrow::TableBatchReader>(std::move(table));
  ExportedStream::Fill(std::make_unique<ExportedStream>(std::move(reader), std::move(schema),
                                                        stream, device_type),
                       out);
  return Status::OK();
}

Status ApplyRequestedSchema(ArrowSchema* exported, ArrowSchema* requested) {
  Status status = CheckSchema(requested, NodePath{"requested_schema"}, 0);
  if (status.ok() && !SameLayout(exported, requested)) {
    status = Status::TypeError(
        "cannot honour requested_schema: arrow_gpu exports data as it is (", Formats(exported),
        "), never casting on the device; requested ", Formats(requested));
  }
  ReleaseOnce(exported);
  if (!status.ok()) {
    ReleaseOnce(requested);
    return status;
  }
  // Same physical layout: only names, nullability or metadata differ; use the request.
  *exported = *requested;
  requested->release = nullptr;
  return Status::OK();
}

int64_t LiveExports() { return live_exports.load(); }

}  // namespace arrow_gpu
