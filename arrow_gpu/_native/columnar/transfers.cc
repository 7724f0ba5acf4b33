#include "columnar/transfers.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/array/util.h>
#include <arrow/chunked_array.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/type_traits.h>
#include <arrow/util/bit_util.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/checked_cast.h>

#include "cuda/pinned_pool.h"
#include "engine/copy_engine.h"

namespace arrow_gpu {
namespace {

using arrow::Datum;
using arrow::Result;
using arrow::Status;
using ArrayDataVector = std::vector<std::shared_ptr<arrow::ArrayData>>;
using BufferVector = std::vector<std::shared_ptr<arrow::Buffer>>;

// The arrays of `data`, in order (a table's chunks column by column).
Result<ArrayDataVector> ArraysOf(const Datum& data) {
  ArrayDataVector arrays;
  auto add_chunks = [&arrays](const arrow::ChunkedArray& column) {
    for (const auto& chunk : column.chunks()) arrays.push_back(chunk->data());
  };
  switch (data.kind()) {
    case Datum::ARRAY:
      arrays.push_back(data.array());
      break;
    case Datum::CHUNKED_ARRAY:
      add_chunks(*data.chunked_array());
      break;
    case Datum::RECORD_BATCH:
      arrays = data.record_batch()->column_data();
      break;
    case Datum::TABLE:
      for (const auto& column : data.table()->columns()) add_chunks(*column);
      break;
    default:
      return Status::TypeError("expected an Array, ChunkedArray, RecordBatch or Table, got ",
                               data.ToString());
  }
  return arrays;
}

// The whole device allocation a device buffer is part of (slices have parents).
void RegionOf(const arrow::Buffer& buffer, uintptr_t* begin, uintptr_t* end) {
  const arrow::Buffer* root = &buffer;
  while (root->parent() != nullptr) root = root->parent().get();
  *begin = root->address();
  *end = root->address() + static_cast<uintptr_t>(root->size());
  if (buffer.address() < *begin || buffer.address() + buffer.size() > *end) {
    *begin = buffer.address();  // a parent that does not contain it: only the buffer itself
    *end = buffer.address() + static_cast<uintptr_t>(buffer.size());
  }
}

// A dictionary that several arrays share (the chunks of one column, sliced from one array)
// moves once, and their copies share its copy, as the originals share it. (Not for batches
// read from a file: a reader's total, known up front, counts each batch's dictionary.)
using SeenDictionaries = std::unordered_map<const arrow::ArrayData*,
                                            std::shared_ptr<arrow::ArrayData>>;

void CollectBuffers(const arrow::ArrayData& data, bool count_nulls, BufferVector* out,
                    SeenDictionaries* seen) {
  if (count_nulls) data.GetNullCount();  // on the host, so no one counts on the device later
  for (const auto& buffer : data.buffers) {
    if (buffer != nullptr) out->push_back(buffer);
  }
  for (const auto& child : data.child_data) CollectBuffers(*child, count_nulls, out, seen);
  if (data.dictionary != nullptr &&
      (seen == nullptr || seen->try_emplace(data.dictionary.get()).second)) {
    CollectBuffers(*data.dictionary, count_nulls, out, seen);
  }
}

// The buffers of `arrays` (children and dictionaries included); each shared dictionary's
// once if `share_dictionaries`.
BufferVector BuffersOf(const ArrayDataVector& arrays, bool count_nulls,
                       bool share_dictionaries) {
  BufferVector buffers;
  SeenDictionaries seen;
  for (const auto& array : arrays) {
    CollectBuffers(*array, count_nulls, &buffers, share_dictionaries ? &seen : nullptr);
  }
  return buffers;
}

std::shared_ptr<arrow::ArrayData> Rebuild(const arrow::ArrayData& data,
                                          const BufferVector& copies, size_t* next,
                                          SeenDictionaries* rebuilt) {
  BufferVector buffers;
  buffers.reserve(data.buffers.size());
  for (const auto& buffer : data.buffers) {
    buffers.push_back(buffer != nullptr ? copies[(*next)++] : nullptr);
  }
  ArrayDataVector children;
  children.reserve(data.child_data.size());
  for (const auto& child : data.child_data) {
    children.push_back(Rebuild(*child, copies, next, rebuilt));
  }
  auto copy = arrow::ArrayData::Make(data.type, data.length, std::move(buffers),
                                     std::move(children), data.null_count.load(), data.offset);
  if (data.dictionary != nullptr && rebuilt == nullptr) {
    copy->dictionary = Rebuild(*data.dictionary, copies, next, rebuilt);
  } else if (data.dictionary != nullptr) {
    auto& dictionary = (*rebuilt)[data.dictionary.get()];
    if (dictionary == nullptr) dictionary = Rebuild(*data.dictionary, copies, next, rebuilt);
    copy->dictionary = dictionary;
  }
  return copy;
}

// Copies of `arrays` over `copies` of their buffers (in BuffersOf's order), in the shape
// of `data` (whose arrays they are, in ArraysOf's order).
Datum Assemble(const Datum& data, const ArrayDataVector& arrays, bool share_dictionaries,
               const BufferVector& copies,
               arrow::DeviceAllocationType device_type) {
  ArrayDataVector rebuilt;
  rebuilt.reserve(arrays.size());
  size_t next_buffer = 0;
  SeenDictionaries dictionaries;
  for (const auto& array : arrays) {
    rebuilt.push_back(Rebuild(*array, copies, &next_buffer,
                              share_dictionaries ? &dictionaries : nullptr));
  }
  auto next = rebuilt.begin();
  auto chunked = [&next](const arrow::ChunkedArray& source) {
    arrow::ArrayVector moved;
    moved.reserve(source.num_chunks());
    for (int i = 0; i < source.num_chunks(); ++i) {
      moved.push_back(arrow::MakeArray(std::move(*next++)));
    }
    return std::make_shared<arrow::ChunkedArray>(std::move(moved), source.type());
  };
  switch (data.kind()) {
    case Datum::ARRAY:
      return Datum(std::move(rebuilt.front()));
    case Datum::CHUNKED_ARRAY:
      return Datum(chunked(*data.chunked_array()));
    case Datum::RECORD_BATCH: {
      const auto& batch = data.record_batch();
      return Datum(arrow::RecordBatch::Make(batch->schema(), batch->num_rows(),
                                            std::move(rebuilt), device_type));
    }
    default: {  // a table: ArraysOf accepts nothing else
      const auto& table = data.table();
      std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
      columns.reserve(table->num_columns());
      for (const auto& column : table->columns()) columns.push_back(chunked(*column));
      return Datum(arrow::Table::Make(table->schema(), std::move(columns), table->num_rows()));
    }
  }
}

// The bytes a fixed-width array without children holds and covers, by arithmetic: libarrow's
// Whether a union in `data` (children and dictionaries included) has no type ids buffer.
bool HasUnionWithoutTypeIds(const arrow::ArrayData& data) {
  const arrow::Type::type id = data.type->id();
  if ((id == arrow::Type::SPARSE_UNION || id == arrow::Type::DENSE_UNION) &&
      (data.buffers.size() < 2 || data.buffers[1] == nullptr)) {
    return true;
  }
  for (const auto& child : data.child_data) {
    if (child != nullptr && HasUnionWithoutTypeIds(*child)) return true;
  }
  return data.dictionary != nullptr && HasUnionWithoutTypeIds(*data.dictionary);
}

// TotalBufferSize and ReferencedBufferSize build a hash set and range arrays for every
// column, and a dynamic_cast of the type costs a string compare; both dominate wide tables.
bool FixedWidthSizes(const arrow::ArrayData& data, int64_t* total, int64_t* referenced) {
  const arrow::Type::type id = data.type->id();
  if (!arrow::is_fixed_width(id) || id == arrow::Type::DICTIONARY ||
      data.buffers.size() != 2 || !data.child_data.empty()) {
    return false;
  }
  const auto& type = arrow::internal::checked_cast<const arrow::FixedWidthType&>(*data.type);
  *referenced = arrow::bit_util::BytesForBits(data.length * type.bit_width());
  *total = data.buffers[1] != nullptr ? data.buffers[1]->size() : 0;
  if (data.buffers[0] != nullptr) {
    *referenced += arrow::bit_util::BytesForBits(data.length);
    *total += data.buffers[0]->size();
  }
  return true;
}

// The same for strings and binaries (validity, offsets, bytes), from their first and last
// offsets; false where the offsets do not fit their buffers (libarrow then judges). libarrow's
// ReferencedBufferSize reads the validity bitmap too: 20-30 us per upload of 5 million
// strings, whose bitmap a large transfer has evicted from the CPU caches.
bool BinarySizes(const arrow::ArrayData& data, int64_t* total, int64_t* referenced) {
  const arrow::Type::type id = data.type->id();
  const bool large = id == arrow::Type::LARGE_STRING || id == arrow::Type::LARGE_BINARY;
  if ((!large && id != arrow::Type::STRING && id != arrow::Type::BINARY) ||
      data.buffers.size() != 3 || data.buffers[1] == nullptr) {
    return false;
  }
  const int64_t width = large ? 8 : 4;
  const arrow::Buffer& offsets = *data.buffers[1];
  if (offsets.size() < (data.offset + data.length + 1) * width) return false;
  auto offset_at = [&](int64_t i) -> int64_t {
    return large ? offsets.data_as<int64_t>()[i] : offsets.data_as<int32_t>()[i];
  };
  const int64_t first = offset_at(data.offset), last = offset_at(data.offset + data.length);
  const int64_t bytes = data.buffers[2] != nullptr ? data.buffers[2]->size() : 0;
  if (first < 0 || last < first || last > bytes) return false;
  *referenced = (data.length + 1) * width + (last - first);
  *total = offsets.size() + bytes;
  if (data.buffers[0] != nullptr) {
    *referenced += arrow::bit_util::BytesForBits(data.length);
    *total += data.buffers[0]->size();
  }
  return true;
}

// A host array whose buffers reach well beyond the values it covers (a slice, or a chunk
// cut from a larger array) is first compacted on the host, so that only the bytes it covers
// move and occupy device memory. A small overhang is cheaper to move than to compact.
std::shared_ptr<arrow::ArrayData> Compacted(const std::shared_ptr<arrow::ArrayData>& data) {
  if (data == nullptr) return data;
  int64_t total, referenced;
  if (!FixedWidthSizes(*data, &total, &referenced) &&
      !BinarySizes(*data, &total, &referenced)) {
    // libarrow's ReferencedBufferSize reads a union's type ids unchecked; an empty union
    // (IPC reads one, even nested, with no buffers) would crash it.
    if (HasUnionWithoutTypeIds(*data)) return data;
    total = arrow::util::TotalBufferSize(*data);
    auto counted = arrow::util::ReferencedBufferSize(*data);
    if (!counted.ok()) return data;
    referenced = *counted;
  }
  if (total - referenced <= referenced / 8 + 4096) return data;
  auto compact = arrow::Concatenate({arrow::MakeArray(data)});
  return compact.ok() ? (*compact)->data() : data;  // a layout Concatenate lacks: as it is
}

// Whether some buffer of `data` (children and dictionaries included) is in host memory
// (`cpu`), or outside it.
bool HasBuffer(const arrow::ArrayData& data, bool cpu) {
  for (const auto& buffer : data.buffers) {
    if (buffer != nullptr && buffer->is_cpu() == cpu) return true;
  }
  for (const auto& child : data.child_data) {
    if (HasBuffer(*child, cpu)) return true;
  }
  return data.dictionary != nullptr && HasBuffer(*data.dictionary, cpu);
}

// Calls `visit` with each top-level ArrayData of `data` in order, until it returns true.
template <typename Visit>
void VisitArrays(const Datum& data, Visit&& visit) {
  auto chunks = [&visit](const arrow::ChunkedArray& column) {
    for (const auto& chunk : column.chunks()) {
      if (visit(*chunk->data())) return true;
    }
    return false;
  };
  switch (data.kind()) {
    case Datum::ARRAY:
      visit(*data.array());
      break;
    case Datum::CHUNKED_ARRAY:
      chunks(*data.chunked_array());
      break;
    case Datum::RECORD_BATCH:
      for (const auto& column : data.record_batch()->column_data()) {
        if (visit(*column)) break;
      }
      break;
    case Datum::TABLE:
      for (const auto& column : data.table()->columns()) {
        if (chunks(*column)) break;
      }
      break;
    default:
      break;
  }
}

bool HasBuffer(const Datum& data, bool cpu) {
  bool found = false;
  VisitArrays(data, [&](const arrow::ArrayData& array) {
    found = HasBuffer(array, cpu);
    return found;
  });
  return found;
}

bool OnSameDevice(const arrow::Buffer& a, const arrow::Buffer& b) {
  return a.memory_manager() == b.memory_manager() ||
         (a.device_type() == b.device_type() &&
          a.memory_manager()->device()->device_id() == b.memory_manager()->device()->device_id());
}

void AddPlaces(const arrow::ArrayData& data, BufferPlaces* places) {
  for (const auto& buffer : data.buffers) {
    if (buffer == nullptr) continue;
    if (buffer->is_cpu()) {
      places->host = true;
    } else if (places->device == nullptr) {
      places->device = buffer;
    } else if (places->elsewhere == nullptr && !OnSameDevice(*buffer, *places->device)) {
      places->elsewhere = buffer;
    }
  }
  for (const auto& child : data.child_data) AddPlaces(*child, places);
  if (data.dictionary != nullptr) AddPlaces(*data.dictionary, places);
}

}  // namespace

Result<Datum> ToDevice(const Datum& data, const std::shared_ptr<CudaMemoryManager>& manager,
                       const MappedFile& mapped, CUstream stream) {
  ARROW_ASSIGN_OR_RAISE(ArrayDataVector arrays, ArraysOf(data));
  // Arrays of a mapped file move as they are: sizing what one covers reads its offsets
  // through the mapping (a fault per page, and SIGBUS if the file was truncated since).
  if (mapped.fd < 0) {
    for (auto& array : arrays) array = Compacted(array);
  }
  const bool share_dictionaries = mapped.fd < 0;
  BufferVector buffers = BuffersOf(arrays, /*count_nulls=*/true, share_dictionaries);
  std::vector<int64_t> offsets;
  offsets.reserve(buffers.size());
  int64_t total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i]->is_cpu()) {
      return Status::TypeError("buffer ", i, " is not in host memory (",
                               buffers[i]->device()->ToString(), ")");
    }
    total = AlignUp(total, kAlignment);
    offsets.push_back(total);
    total += buffers[i]->size();
  }
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> block, manager->AllocateBuffer(total));
  // The engine owns the whole block, so one DMA may span (and zero) the alignment gaps.
  uintptr_t begin = block->address(), end = begin + static_cast<uintptr_t>(total);
  std::vector<Piece> pieces;
  pieces.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    int64_t size = buffers[i]->size();
    if (size == 0) continue;
    Piece piece{const_cast<uint8_t*>(buffers[i]->data()),
                begin + static_cast<uintptr_t>(offsets[i]), size, begin, end};
    uintptr_t host = buffers[i]->address();
    if (mapped.fd >= 0 && host >= mapped.begin && host < mapped.end &&
        static_cast<uintptr_t>(size) <= mapped.end - host) {
      piece.host = nullptr;  // read from the file instead
      piece.file = {mapped.fd, mapped.offset + static_cast<int64_t>(host - mapped.begin)};
    }
    pieces.push_back(piece);
  }
  // The result is assembled while the bytes move (valid once the transfer returns).
  Datum result;
  ARROW_RETURN_NOT_OK(Transfer(*manager->cuda_context(), Direction::kToDevice, pieces, [&] {
    BufferVector copies;
    copies.reserve(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      copies.push_back(DeviceBuffer::Slice(block, offsets[i], buffers[i]->size(), manager));
    }
    result = Assemble(data, arrays, share_dictionaries, copies,
                      arrow::DeviceAllocationType::kCUDA);
    return Status::OK();
  }, stream));
  return result;
}

Result<std::vector<std::shared_ptr<arrow::RecordBatch>>> ReadToDevice(
    arrow::RecordBatchReader& reader, const std::shared_ptr<CudaMemoryManager>& manager,
    const std::atomic<bool>& stop) {
  std::vector<std::shared_ptr<arrow::RecordBatch>> copies;
  while (!stop.load(std::memory_order_relaxed)) {
    ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::RecordBatch> batch, reader.Next());
    if (batch == nullptr) return copies;
    ARROW_ASSIGN_OR_RAISE(Datum copy, ToDevice(Datum(std::move(batch)), manager));
    copies.push_back(copy.record_batch());
  }
  return copies;
}

Result<Datum> ToHost(const Datum& data, CUstream stream, arrow::MemoryPool* pool) {
  ARROW_ASSIGN_OR_RAISE(ArrayDataVector arrays, ArraysOf(data));
  BufferVector buffers = BuffersOf(arrays, /*count_nulls=*/false, /*share_dictionaries=*/true);
  std::vector<int64_t> offsets;
  std::vector<std::shared_ptr<CudaMemoryManager>> managers;
  offsets.reserve(buffers.size());
  managers.reserve(buffers.size());
  int64_t total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    auto manager = CudaManagerOf(*buffers[i]);
    // Host buffers inside device data (IPC readers make empty ones on the CPU) stay as
    // they are.
    if (manager == nullptr && !buffers[i]->is_cpu()) {
      return Status::TypeError("buffer ", i, " is neither host memory nor CUDA device ",
                               "memory of arrow_gpu");
    }
    managers.push_back(std::move(manager));
    total = AlignUp(total, kAlignment);
    offsets.push_back(total);
    total += buffers[i]->size();
  }
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> block,
                        arrow::AllocateBuffer(total, kAlignment, pool));
  if (!IsPinnedPool(pool != nullptr ? pool : arrow::default_memory_pool())) {
    AdviseHugePages(block->mutable_data(), total);
  }
  // One transfer per context the buffers come from, in order of appearance.
  std::vector<const CudaContext*> order;
  std::unordered_map<const CudaContext*, std::vector<Piece>> pieces;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& buffer = buffers[i];
    if (buffer->size() == 0 || managers[i] == nullptr) continue;
    const CudaContext* context = managers[i]->cuda_context().get();
    auto [it, fresh] = pieces.try_emplace(context);
    if (fresh) order.push_back(context);
    uintptr_t region_begin, region_end;
    RegionOf(*buffer, &region_begin, &region_end);
    it->second.push_back({block->mutable_data() + offsets[i], buffer->address(),
                          buffer->size(), region_begin, region_end});
  }
  Datum result;
  Alongside assemble = [&] {
    BufferVector copies;
    copies.reserve(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      copies.push_back(managers[i] == nullptr
                           ? buffers[i]
                           : arrow::SliceBuffer(block, offsets[i], buffers[i]->size()));
    }
    result = Assemble(data, arrays, /*share_dictionaries=*/true, copies,
                      arrow::DeviceAllocationType::kCPU);
    return Status::OK();
  };
  if (order.empty()) {
    ARROW_RETURN_NOT_OK(assemble());
    return result;
  }
  // The result is assembled during the first transfer, which also follows `stream` (a
  // stream of the first device).
  for (size_t k = 0; k < order.size(); ++k) {
    ARROW_RETURN_NOT_OK(Transfer(*order[k], Direction::kToHost, pieces[order[k]],
                                 k == 0 ? assemble : nullptr, k == 0 ? stream : nullptr));
  }
  return result;
}

bool OnDevice(const Datum& data) { return HasBuffer(data, /*cpu=*/false); }

BufferPlaces PlacesOf(const Datum& data) {
  BufferPlaces places;
  VisitArrays(data, [&places](const arrow::ArrayData& array) {
    AddPlaces(array, &places);
    return false;
  });
  return places;
}

}  // namespace arrow_gpu
