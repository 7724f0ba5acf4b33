#include "columnar/c_device.h"

#include <cstring>
#include <utility>
#include <vector>

#include <arrow/array.h>
#include <arrow/c/bridge.h>
#include <arrow/table.h>

#include "columnar/c_device_checks.h"
#include "columnar/device.h"
#include "columnar/host_device.h"
#include "columnar/null_counts.h"
#include "columnar/release.h"

namespace arrow_gpu {
namespace {

using arrow::ArrayData;
using arrow::DeviceAllocationType;
using arrow::Result;
using arrow::Status;

// The release of an imported array, wrapped so that the producer's callback runs through
// the release guard (see columnar/release.h).
struct GuardedArray {
  void (*release)(ArrowArray*);
  void* private_data;
};

void ReleaseGuardedArray(ArrowArray* array) {
  auto* guarded = static_cast<GuardedArray*>(array->private_data);
  array->release = guarded->release;
  array->private_data = guarded->private_data;
  delete guarded;
  ReleaseProducerOnce(array);
}

void GuardRelease(ArrowArray* array) {
  array->private_data = new GuardedArray{array->release, array->private_data};
  array->release = ReleaseGuardedArray;
}

// Honours the producer's event, then clears it: pyarrow must not wait on it again, and it
// stays the producer's (freed by its release).
Status WaitForProducer(ArrowDeviceArray* array, const ImportOptions& options, bool on_host) {
  void* sync_event = array->sync_event;
  array->sync_event = nullptr;
  if (sync_event == nullptr || !IsCuda(array->device_type)) return Status::OK();
  ARROW_ASSIGN_OR_RAISE(auto context, CudaContext::Primary(static_cast<int>(array->device_id)));
  CUevent event = *static_cast<CUevent*>(sync_event);
  if (options.has_stream) ARROW_RETURN_NOT_OK(context->WaitEvent(options.stream, event));
  if (!options.has_stream || on_host) ARROW_RETURN_NOT_OK(context->SynchronizeEvent(event));
  return Status::OK();
}

Result<std::shared_ptr<arrow::MemoryManager>> MapDevice(ArrowDeviceType type, int64_t id) {
  switch (type) {
    case ARROW_DEVICE_CPU:
      return arrow::default_cpu_memory_manager();
    case ARROW_DEVICE_CUDA: {
      ARROW_ASSIGN_OR_RAISE(auto manager, CudaMemoryManager::Primary(static_cast<int>(id)));
      return std::static_pointer_cast<arrow::MemoryManager>(manager);
    }
    case ARROW_DEVICE_CUDA_HOST: {
      ARROW_ASSIGN_OR_RAISE(auto manager, CudaHostMemoryManager::Primary(static_cast<int>(id)));
      return std::static_pointer_cast<arrow::MemoryManager>(manager);
    }
    default:
      return Status::NotImplemented("no memory manager for device type ", type);
  }
}

// Releases what libarrow has not moved out (it moves an array out even when it fails).
struct ReleaseOnExit {
  ArrowSchema* schema;
  ArrowDeviceArray* array;
  ~ReleaseOnExit() {
    if (schema != nullptr) ReleaseOnce(schema);
    ReleaseOnce(&array->array);
  }
};

// Checks the array against `type`, imports it and makes it ready as asked. The array is
// released on every path.
Result<std::shared_ptr<arrow::Array>> ImportTyped(const std::shared_ptr<arrow::DataType>& type,
                                                  ArrowDeviceArray* array,
                                                  const ImportOptions& options) {
  ReleaseOnExit cleanup{nullptr, array};
  ARROW_RETURN_NOT_OK(CheckDevice(*array, options));
  ArrayFacts facts;
  ARROW_RETURN_NOT_OK(CheckArray(*type, &array->array, NodePath{"array"}, &facts));
  ARROW_RETURN_NOT_OK(CheckHostReadable(*array));
  ARROW_RETURN_NOT_OK(
      WaitForProducer(array, options, facts.offsets_on_host || facts.unknown_null_count));
  GuardRelease(&array->array);
  ARROW_ASSIGN_OR_RAISE(auto imported, arrow::ImportDeviceArray(array, type, MapDevice));
  ARROW_RETURN_NOT_OK(ResolveNullCounts(imported->data()));
  return imported;
}

// The field of an untrusted schema, which is released on every path.
Result<std::shared_ptr<arrow::Field>> ImportCheckedField(ArrowSchema* schema,
                                                         ArrowDeviceArray* array) {
  Status checked = CheckSchema(schema, NodePath{"schema"}, 0);
  if (!checked.ok()) {
    ReleaseOnce(schema);
    ReleaseOnce(&array->array);
    return checked;
  }
  auto field = arrow::ImportField(schema);
  if (!field.ok()) ReleaseOnce(&array->array);
  return field;
}

// A record batch of an imported struct array, which must have no top-level nulls, on the
// device the producer declared, its buffers' too: Arrow labels a batch by its buffers, and
// one without any (no columns, or only null-typed ones) as CPU data.
Result<std::shared_ptr<arrow::RecordBatch>> BatchOf(const std::shared_ptr<arrow::Array>& array,
                                                    const arrow::Field& field,
                                                    ArrowDeviceType declared) {
  if (array->null_count() != 0) {
    // A record batch has no validity of its own: pushing it into the columns would combine
    // device bitmaps on the host.
    return Status::Invalid("cannot make a record batch of a struct array with ",
                           array->null_count(), " top-level nulls; import it as an array");
  }
  // Without nulls the struct's bitmap says nothing, so the columns are its children as they
  // are (Arrow's FromStructArray would AND the bitmap into theirs on the host, reading device
  // memory), cut to the struct's window.
  const ArrayData& data = *array->data();
  std::vector<std::shared_ptr<ArrayData>> columns;
  columns.reserve(data.child_data.size());
  for (const auto& child : data.child_data) {
    columns.push_back(data.offset == 0 && child->length == data.length
                          ? child
                          : child->Slice(data.offset, data.length));
    // A sliced column's null count is still to count: now, through the driver, before any
    // pyarrow code counts device bits on the host.
    ARROW_RETURN_NOT_OK(ResolveNullCounts(columns.back()));
  }
  auto schema = arrow::schema(data.type->fields(), field.metadata());
  return arrow::RecordBatch::Make(std::move(schema), data.length, std::move(columns),
                                  static_cast<arrow::DeviceAllocationType>(declared));
}

Status StreamError(int code, const char* what, ArrowDeviceArrayStream* stream) {
  const char* message = stream->get_last_error ? stream->get_last_error(stream) : nullptr;
  return Status::IOError(what, " failed: ",
                         message != nullptr ? message : std::strerror(code));
}

}  // namespace

Result<std::shared_ptr<arrow::Array>> ImportArray(ArrowSchema* schema, ArrowDeviceArray* array,
                                                  const ImportOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto field, ImportCheckedField(schema, array));
  return ImportTyped(field->type(), array, options);
}

Result<std::shared_ptr<arrow::RecordBatch>> ImportBatch(ArrowSchema* schema,
                                                        ArrowDeviceArray* array,
                                                        const ImportOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto field, ImportCheckedField(schema, array));
  if (field->type()->id() != arrow::Type::STRUCT) {
    ReleaseOnce(&array->array);
    return Status::Invalid("a record batch needs a struct ('+s') schema, got ",
                           field->type()->ToString());
  }
  ArrowDeviceType declared = array->device_type;  // read before the import moves the array
  ARROW_ASSIGN_OR_RAISE(auto imported, ImportTyped(field->type(), array, options));
  return BatchOf(imported, *field, declared);
}

Result<std::shared_ptr<StreamImporter>> StreamImporter::Open(ArrowDeviceArrayStream* stream) {
  std::shared_ptr<StreamImporter> self(new StreamImporter());
  self->stream_ = *stream;  // moved: ours to release from now on
  stream->release = nullptr;
  ArrowDeviceArrayStream& own = self->stream_;
  if (own.get_schema == nullptr || own.get_next == nullptr) {
    return Status::Invalid("ArrowDeviceArrayStream has a NULL get_schema or get_next callback");
  }
  if (own.device_type != ARROW_DEVICE_CPU && !IsCuda(own.device_type)) {
    return Status::Invalid("unsupported stream device_type ", own.device_type,
                           ": arrow_gpu imports CPU (1), CUDA (2) and CUDA_HOST (3) memory");
  }
  ArrowSchema schema{};
  int code = own.get_schema(&own, &schema);
  if (code != 0) {
    ReleaseOnce(&schema);
    return self->Failure(code, "get_schema");
  }
  Status checked = CheckSchema(&schema, NodePath{"stream schema"}, 0);
  if (!checked.ok()) {
    ReleaseOnce(&schema);
    return checked;
  }
  ARROW_ASSIGN_OR_RAISE(self->schema_, arrow::ImportSchema(&schema));
  self->type_ = arrow::struct_(self->schema_->fields());
  self->field_ = arrow::field("", self->type_, /*nullable=*/false, self->schema_->metadata());
  return self;
}

StreamImporter::~StreamImporter() { Release(); }

void StreamImporter::Release() { ReleaseProducerOnce(&stream_); }

Status StreamImporter::Failure(int code, const char* what) {
  Status status = StreamError(code, what, &stream_);
  Release();
  return status;
}

Result<std::shared_ptr<arrow::RecordBatch>> StreamImporter::Next(const ImportOptions& options) {
  if (stream_.release == nullptr) return nullptr;
  ArrowDeviceArray array{};
  int code = stream_.get_next(&stream_, &array);
  if (code != 0) {
    ReleaseOnce(&array.array);
    return Failure(code, "get_next");
  }
  if (array.array.release == nullptr) {
    Release();
    return nullptr;
  }
  if (array.device_type != stream_.device_type) {
    ReleaseOnce(&array.array);
    return Status::Invalid("stream of device_type ", stream_.device_type,
                           " produced an array on device_type ", array.device_type);
  }
  ARROW_ASSIGN_OR_RAISE(auto imported, ImportTyped(type_, &array, options));
  return BatchOf(imported, *field_, array.device_type);
}

}  // namespace arrow_gpu
