#include "columnar/c_device.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ostream>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/array.h>
#include <arrow/type_traits.h>
#include <arrow/c/bridge.h>
#include <arrow/extension_type.h>
#include <arrow/table.h>
#include <arrow/util/bitmap_ops.h>

#include "columnar/device.h"
#include "columnar/release.h"

namespace arrow_gpu {
namespace {

using arrow::ArrayData;
using arrow::DeviceAllocationType;
using arrow::Result;
using arrow::Status;

std::atomic<int64_t> live_exports{0};

// No real schema nests this deep or this wide; a hostile one would make the checks below
// (and libarrow's importer) walk for minutes or exhaust memory before failing.
constexpr int kMaxDepth = 200;
constexpr int64_t kMaxChildren = int64_t{1} << 20;
// Nor does a view array have this many variadic data buffers; a hostile count would make
// libarrow's importer allocate for each of them.
constexpr int64_t kMaxVariadicBuffers = int64_t{1} << 20;

bool IsCuda(int64_t device_type) {
  return device_type == ARROW_DEVICE_CUDA || device_type == ARROW_DEVICE_CUDA_HOST;
}

// ---------------------------------------------------------------------------------------
// Where data lives

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

// ---------------------------------------------------------------------------------------
// Requested schemas

// The physical type of a schema: formats of it, its children and dictionary.
// Where a node sits in an untrusted struct tree ("array.children[2].dictionary"), spelled
// out only when an error names it: the checks run on every import and must not allocate.
struct NodePath {
  const char* step;
  int64_t index = -1;  // a child's index
  const NodePath* parent = nullptr;

  NodePath Child(int64_t i) const { return {".children", i, this}; }
  NodePath Dictionary() const { return {".dictionary", -1, this}; }
};

std::ostream& operator<<(std::ostream& os, const NodePath& path) {
  if (path.parent != nullptr) os << *path.parent;
  os << path.step;
  if (path.index >= 0) os << "[" << path.index << "]";
  return os;
}

Status CheckSchema(const ArrowSchema* schema, const NodePath& path, int depth);

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

// ---------------------------------------------------------------------------------------
// Checks of untrusted structs: everything libarrow's importer would follow without looking

Status CheckSchema(const ArrowSchema* schema, const NodePath& path, int depth) {
  if (depth > kMaxDepth) return Status::Invalid(path, ": nested deeper than ", kMaxDepth);
  if (schema->release == nullptr) return Status::Invalid(path, " is released");
  if (schema->format == nullptr) return Status::Invalid(path, " has a NULL format string");
  if (schema->n_children < 0 || schema->n_children > kMaxChildren) {
    return Status::Invalid(path, " has an invalid n_children (", schema->n_children, ")");
  }
  if (schema->n_children > 0 && schema->children == nullptr) {
    return Status::Invalid(path, " has ", schema->n_children,
                           " children but a NULL children pointer");
  }
  for (int64_t i = 0; i < schema->n_children; ++i) {
    const NodePath child = path.Child(i);
    if (schema->children[i] == nullptr) return Status::Invalid(child, " is NULL");
    ARROW_RETURN_NOT_OK(CheckSchema(schema->children[i], child, depth + 1));
  }
  if (schema->dictionary != nullptr) {
    ARROW_RETURN_NOT_OK(CheckSchema(schema->dictionary, path.Dictionary(), depth + 1));
  }
  return Status::OK();
}

// Checks n_buffers against what the C Data Interface gives an array of `type`, before anything
// walks `buffers`: a count larger than the producer's pointer array reads past it. Types
// without a validity bitmap (null, unions, run-end encoded) export no slot for it; a view
// array has its validity, its views, any number of variadic data buffers, then their sizes.
Status CheckBufferCount(const arrow::DataType& type, const ArrowArray* array,
                        const NodePath& path) {
  const int64_t n_buffers = array->n_buffers;
  const auto layout = type.layout();
  const int64_t fixed = static_cast<int64_t>(layout.buffers.size()) -
                        (arrow::internal::may_have_validity_bitmap(type.id()) ? 0 : 1);
  if (layout.variadic_spec.has_value()) {
    if (n_buffers < fixed + 1 || n_buffers > fixed + 1 + kMaxVariadicBuffers) {
      return Status::Invalid(path, ": invalid n_buffers (", n_buffers, ") for type ",
                             type.ToString(), ": expected ", fixed,
                             " + the number of variadic data buffers (at most ",
                             kMaxVariadicBuffers, ") + 1 for their sizes");
    }
  } else if (n_buffers != fixed) {
    return Status::Invalid(path, ": invalid n_buffers (", n_buffers, ") for type ",
                           type.ToString(), ": expected ", fixed);
  }
  if (n_buffers > 0 && array->buffers == nullptr) {
    return Status::Invalid(path, ": ", n_buffers, " buffers but a NULL buffers pointer");
  }
  return Status::OK();
}

struct ArrayFacts {
  bool offsets_on_host = false;   // libarrow's importer reads a last offset on the host
  bool unknown_null_count = false;
};

// Checks `array` against the type libarrow imported from its schema.
Status CheckArray(const arrow::DataType& declared, const ArrowArray* array,
                  const NodePath& path, ArrayFacts* facts) {
  const arrow::DataType& type = declared.id() == arrow::Type::EXTENSION
      ? *static_cast<const arrow::ExtensionType&>(declared).storage_type()
      : declared;
  if (array->release == nullptr) return Status::Invalid(path, " is released");
  if (array->length < 0 || array->offset < 0) {
    return Status::Invalid(path, ": negative length (", array->length, ") or offset (",
                           array->offset, ")");
  }
  // Sizes derived from offset + length (times a value width) must not overflow: no device
  // holds 2**48 slots, and a larger claim is a corrupt struct.
  constexpr int64_t kMaxExtent = int64_t{1} << 48;
  if (array->length > kMaxExtent || array->offset > kMaxExtent - array->length) {
    return Status::Invalid(path, ": offset (", array->offset, ") + length (", array->length,
                           ") exceeds 2**48 slots");
  }
  if (array->null_count < -1 || array->null_count > array->length) {
    return Status::Invalid(path, ": invalid null_count ", array->null_count, " for length ",
                           array->length);
  }
  const int64_t fields = type.id() == arrow::Type::DICTIONARY ? 0 : type.num_fields();
  if (array->n_children != fields) {
    return Status::Invalid(path, ": the array has ", array->n_children,
                           " children, its type ", type.ToString(), " needs ", fields);
  }
  if (array->n_children > 0 && array->children == nullptr) {
    return Status::Invalid(path, ": NULL children pointer");
  }
  ARROW_RETURN_NOT_OK(CheckBufferCount(type, array, path));
  const bool has_validity = arrow::internal::may_have_validity_bitmap(type.id());
  if (has_validity && array->n_buffers > 0 && array->buffers[0] == nullptr &&
      array->null_count > 0) {
    return Status::Invalid(path, ": ", array->null_count, " nulls but no validity bitmap");
  }
  facts->unknown_null_count |= array->null_count == -1;
  switch (type.id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::MAP:
      facts->offsets_on_host = true;
      break;
    case arrow::Type::STRING_VIEW:
    case arrow::Type::BINARY_VIEW:
      // Past validity, views and the sizes, each variadic data buffer has its size read on
      // the host from the last buffer, even in an empty array.
      if (array->n_buffers > 3 && array->buffers[array->n_buffers - 1] == nullptr) {
        return Status::Invalid(path, ": the variadic buffer sizes (last buffer) are missing");
      }
      break;
    default:
      break;
  }
  const int64_t extent = array->offset + array->length;
  int64_t minimum = 0;  // the slots each child needs
  if (type.id() == arrow::Type::STRUCT || type.id() == arrow::Type::SPARSE_UNION) {
    minimum = extent;
  } else if (type.id() == arrow::Type::FIXED_SIZE_LIST) {
    const int64_t list_size = static_cast<const arrow::FixedSizeListType&>(type).list_size();
    if (list_size > 0 && extent > (int64_t{1} << 48) / list_size) {
      return Status::Invalid(path, ": ", extent, " lists of ", list_size,
                             " values exceed 2**48 slots");
    }
    minimum = extent * list_size;
  }
  for (int64_t i = 0; i < array->n_children; ++i) {
    const NodePath child = path.Child(i);
    if (array->children[i] == nullptr) return Status::Invalid(child, " is NULL");
    if (array->children[i]->release != nullptr && array->children[i]->length < minimum) {
      return Status::Invalid(child, " has ", array->children[i]->length, " slots, needs ",
                             minimum);
    }
    ARROW_RETURN_NOT_OK(
        CheckArray(*type.field(static_cast<int>(i))->type(), array->children[i], child, facts));
  }
  if (type.id() == arrow::Type::DICTIONARY) {
    if (array->dictionary == nullptr) return Status::Invalid(path, ": the dictionary is NULL");
    return CheckArray(*static_cast<const arrow::DictionaryType&>(type).value_type(),
                      array->dictionary, path.Dictionary(), facts);
  }
  if (array->dictionary != nullptr) {
    return Status::Invalid(path, ": a dictionary for a ", type.ToString(), " array");
  }
  return Status::OK();
}

Status CheckDevice(const ArrowDeviceArray& array, const ImportOptions& options) {
  const int64_t type = array.device_type;
  if (type != ARROW_DEVICE_CPU && !IsCuda(type)) {
    return Status::Invalid("unsupported device_type ", type,
                           ": arrow_gpu imports CPU (1), CUDA (2) and CUDA_HOST (3) memory; "
                           "copy the data into one of them");
  }
  if (type == ARROW_DEVICE_CPU && array.device_id != -1) {
    return Status::Invalid("a CPU array must have device_id -1, got ", array.device_id);
  }
  if (IsCuda(type)) {
    ARROW_ASSIGN_OR_RAISE(int count, CudaContext::DeviceCount());
    if (array.device_id < 0 || array.device_id >= count) {
      return Status::Invalid("device_id ", array.device_id, " is not a visible CUDA device (",
                             count, " present)");
    }
  }
  if (options.check_device &&
      (type != options.device_type || array.device_id != options.device_id)) {
    return Status::Invalid("array is on device (type ", type, ", id ", array.device_id,
                           "); expected (type ", options.device_type, ", id ",
                           options.device_id, ")");
  }
  return Status::OK();
}

// A CPU or CUDA_HOST array is read on the host (by libarrow's importer for offsets, and by
// every consumer after it), so a buffer the driver knows as device memory is a mislabelled
// array that would fault there.
Status CheckHostReadable(const ArrowArray* array, const CudaContext& context,
                         const NodePath& path) {
  for (int64_t i = 0; i < array->n_buffers; ++i) {
    const auto address = reinterpret_cast<uintptr_t>(array->buffers[i]);
    if (address != 0 && context.MemoryType(address) == CU_MEMORYTYPE_DEVICE) {
      return Status::Invalid(path, ".buffers[", i, "] is CUDA device memory but the array ",
                             "says it is in host memory; export it with device_type CUDA (2)");
    }
  }
  for (int64_t i = 0; i < array->n_children; ++i) {
    ARROW_RETURN_NOT_OK(CheckHostReadable(array->children[i], context, path.Child(i)));
  }
  if (array->dictionary == nullptr) return Status::OK();
  return CheckHostReadable(array->dictionary, context, path.Dictionary());
}

Status CheckHostReadable(const ArrowDeviceArray& array) {
  if (IsCuda(array.device_type) && array.device_type != ARROW_DEVICE_CUDA_HOST) {
    return Status::OK();
  }
  const int device = array.device_type == ARROW_DEVICE_CUDA_HOST
      ? static_cast<int>(array.device_id) : 0;
  // Without a driver or device (host data on a machine without CUDA) no address is device
  // memory.
  auto context = CudaContext::Primary(device);
  if (!context.ok()) return Status::OK();
  return CheckHostReadable(&array.array, **context, NodePath{"array"});
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
      ARROW_ASSIGN_OR_RAISE(auto manager, CudaHostMemoryManager::Get(static_cast<int>(id)));
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

// A record batch of an imported struct array, which must have no top-level nulls.
Result<std::shared_ptr<arrow::RecordBatch>> BatchOf(const std::shared_ptr<arrow::Array>& array,
                                                    const arrow::Field& field) {
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
  return arrow::RecordBatch::Make(std::move(schema), data.length, std::move(columns));
}

Status StreamError(int code, const char* what, ArrowDeviceArrayStream* stream) {
  const char* message = stream->get_last_error ? stream->get_last_error(stream) : nullptr;
  return Status::IOError(what, " failed: ",
                         message != nullptr ? message : std::strerror(code));
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

// ---------------------------------------------------------------------------------------

Status ResolveNullCounts(const std::shared_ptr<ArrayData>& data) {
  if (data->null_count.load() == arrow::kUnknownNullCount) {
    const auto& validity = data->buffers.empty() ? nullptr : data->buffers[0];
    if (validity != nullptr && !validity->is_cpu() && data->length > 0) {
      const int64_t first = data->offset / 8;
      const int64_t end = (data->offset + data->length + 7) / 8;
      std::vector<uint8_t> bits(end - first);
      ARROW_RETURN_NOT_OK(
          arrow::MemoryManager::CopyBufferSliceToCPU(validity, first, end - first, bits.data()));
      data->null_count.store(
          data->length - arrow::internal::CountSetBits(bits.data(), data->offset % 8, data->length));
    } else {
      data->GetNullCount();  // host memory, or no bitmap at all: no device read
    }
  }
  for (const auto& child : data->child_data) ARROW_RETURN_NOT_OK(ResolveNullCounts(child));
  if (data->dictionary) ARROW_RETURN_NOT_OK(ResolveNullCounts(data->dictionary));
  return Status::OK();
}

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
  return ExportPrepared(ColumnData(*batch), stream, out, Location{},
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
  ARROW_ASSIGN_OR_RAISE(auto imported, ImportTyped(field->type(), array, options));
  return BatchOf(imported, *field);
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
  return BatchOf(imported, *field_);
}

int64_t LiveExports() { return live_exports.load(); }

}  // namespace arrow_gpu
