#include "columnar/c_device_checks.h"

#include <arrow/extension_type.h>
#include <arrow/type.h>
#include <arrow/type_traits.h>

#include "cuda/context.h"

namespace arrow_gpu {
namespace {

using arrow::Status;

// No real schema nests this deep or this wide; a hostile one would make the checks below
// (and libarrow's importer) walk for minutes or exhaust memory before failing.
constexpr int kMaxDepth = 200;
constexpr int64_t kMaxChildren = int64_t{1} << 20;
// Nor does a view array have this many variadic data buffers; a hostile count would make
// libarrow's importer allocate for each of them.
constexpr int64_t kMaxVariadicBuffers = int64_t{1} << 20;

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

Status CheckNodesHostReadable(const ArrowArray* array, const CudaContext& context,
                              const NodePath& path) {
  for (int64_t i = 0; i < array->n_buffers; ++i) {
    const auto address = reinterpret_cast<uintptr_t>(array->buffers[i]);
    if (address != 0 && context.MemoryType(address) == CU_MEMORYTYPE_DEVICE) {
      return Status::Invalid(path, ".buffers[", i, "] is CUDA device memory but the array ",
                             "says it is in host memory; export it with device_type CUDA (2)");
    }
  }
  for (int64_t i = 0; i < array->n_children; ++i) {
    ARROW_RETURN_NOT_OK(CheckNodesHostReadable(array->children[i], context, path.Child(i)));
  }
  if (array->dictionary == nullptr) return Status::OK();
  return CheckNodesHostReadable(array->dictionary, context, path.Dictionary());
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const NodePath& path) {
  if (path.parent != nullptr) os << *path.parent;
  os << path.step;
  if (path.index >= 0) os << "[" << path.index << "]";
  return os;
}

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
  return CheckNodesHostReadable(&array.array, **context, NodePath{"array"});
}

}  // namespace arrow_gpu
