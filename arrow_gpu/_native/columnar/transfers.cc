#include "columnar/transfers.h"

#include <functional>
#include <optional>
#include <unordered_map>

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/array/util.h>
#include <arrow/util/bit_util.h>
#include <arrow/type_traits.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/checked_cast.h>

#include "engine/copy_engine.h"

namespace arrow_gpu {
namespace {

using arrow::Result;
using arrow::Status;
using ArrayDataVector = std::vector<std::shared_ptr<arrow::ArrayData>>;
using BufferVector = std::vector<std::shared_ptr<arrow::Buffer>>;
// Callbacks that get the copies while their bytes still move (they become valid when the
// transfer returns); an error they return cancels it.
using UseBuffers = std::function<Status(BufferVector)>;
using UseArrays = std::function<Status(ArrayDataVector)>;

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

void CollectBuffers(const arrow::ArrayData& data, bool count_nulls,
                    BufferVector* out) {
  if (count_nulls) data.GetNullCount();  // on the host, so no one counts on the device later
  for (const auto& buffer : data.buffers) {
    if (buffer != nullptr) out->push_back(buffer);
  }
  for (const auto& child : data.child_data) CollectBuffers(*child, count_nulls, out);
  if (data.dictionary != nullptr) CollectBuffers(*data.dictionary, count_nulls, out);
}

std::shared_ptr<arrow::ArrayData> Rebuild(const arrow::ArrayData& data,
                                          const BufferVector& copies, size_t* next) {
  BufferVector buffers;
  buffers.reserve(data.buffers.size());
  for (const auto& buffer : data.buffers) {
    buffers.push_back(buffer != nullptr ? copies[(*next)++] : nullptr);
  }
  ArrayDataVector children;
  children.reserve(data.child_data.size());
  for (const auto& child : data.child_data) children.push_back(Rebuild(*child, copies, next));
  auto copy = arrow::ArrayData::Make(data.type, data.length, std::move(buffers),
                                     std::move(children), data.null_count.load(), data.offset);
  if (data.dictionary != nullptr) copy->dictionary = Rebuild(*data.dictionary, copies, next);
  return copy;
}

// Copies of `arrays` from one coalesced `copy` of all their buffers, handed to `use` while
// the bytes still move (see EngineTransfer's alongside).
template <typename Copy>
Status CopyArrays(const ArrayDataVector& arrays, bool count_nulls, Copy copy,
                  const UseArrays& use) {
  BufferVector buffers;
  for (const auto& array : arrays) {
    if (array == nullptr) return Status::Invalid("null array");
    CollectBuffers(*array, count_nulls, &buffers);
  }
  return copy(buffers, [&](const BufferVector& copies) {
    ArrayDataVector out;
    out.reserve(arrays.size());
    size_t next = 0;
    for (const auto& array : arrays) out.push_back(Rebuild(*array, copies, &next));
    return use(std::move(out));
  });
}

// The result of an operation that hands it to a callback.
template <typename T, typename Operation>
Result<T> Collect(Operation operation) {
  T out;
  ARROW_RETURN_NOT_OK(operation([&](T result) {
    out = std::move(result);
    return Status::OK();
  }));
  return out;
}

Status HostToDevice(const std::shared_ptr<CudaMemoryManager>& manager,
                    const BufferVector& host_buffers, const UseBuffers& use) {
  std::vector<int64_t> offsets;
  offsets.reserve(host_buffers.size());
  int64_t total = 0;
  for (size_t i = 0; i < host_buffers.size(); ++i) {
    const auto& buffer = host_buffers[i];
    if (buffer == nullptr) return Status::Invalid("buffer ", i, " is null");
    if (!buffer->is_cpu()) {
      return Status::TypeError("buffer ", i, " is not in host memory (",
                               buffer->device()->ToString(), ")");
    }
    total = AlignUp(total, kAlignment);
    offsets.push_back(total);
    total += buffer->size();
  }
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> block, manager->AllocateBuffer(total));
  // The engine owns the whole block, so one DMA may span (and zero) the alignment gaps.
  uintptr_t begin = block->address(), end = begin + static_cast<uintptr_t>(total);
  std::vector<Piece> pieces;
  pieces.reserve(host_buffers.size());
  for (size_t i = 0; i < host_buffers.size(); ++i) {
    int64_t size = host_buffers[i]->size();
    if (size == 0) continue;
    pieces.push_back({const_cast<uint8_t*>(host_buffers[i]->data()),
                      begin + static_cast<uintptr_t>(offsets[i]), size, begin, end});
  }
  return EngineTransfer(*manager->cuda_context(), Direction::kToDevice, pieces, [&] {
    BufferVector out;
    out.reserve(host_buffers.size());
    for (size_t i = 0; i < host_buffers.size(); ++i) {
      out.push_back(DeviceBuffer::Slice(block, offsets[i], host_buffers[i]->size(), manager));
    }
    return use(std::move(out));
  });
}

Status DeviceToHost(const BufferVector& device_buffers, const UseBuffers& use, CUstream after) {
  std::vector<int64_t> offsets;
  std::vector<std::shared_ptr<CudaMemoryManager>> managers;
  offsets.reserve(device_buffers.size());
  int64_t total = 0;
  for (size_t i = 0; i < device_buffers.size(); ++i) {
    const auto& buffer = device_buffers[i];
    if (buffer == nullptr) return Status::Invalid("buffer ", i, " is null");
    auto manager = CudaManagerOf(*buffer);
    // Host buffers inside device data (IPC readers make empty ones on the CPU) stay as
    // they are.
    if (manager == nullptr && !buffer->is_cpu()) {
      return Status::TypeError("buffer ", i, " is neither host memory nor CUDA device ",
                               "memory of arrow_gpu");
    }
    managers.push_back(std::move(manager));
    total = AlignUp(total, kAlignment);
    offsets.push_back(total);
    total += buffer->size();
  }
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> block,
                        arrow::AllocateBuffer(total, kAlignment));
  // One pipelined transfer per context the buffers come from, in order of appearance.
  std::vector<const CudaContext*> order;
  std::unordered_map<const CudaContext*, std::vector<Piece>> pieces;
  for (size_t i = 0; i < device_buffers.size(); ++i) {
    const auto& buffer = device_buffers[i];
    if (buffer->size() == 0 || managers[i] == nullptr) continue;
    const CudaContext* context = managers[i]->cuda_context().get();
    auto [it, fresh] = pieces.try_emplace(context);
    if (fresh) order.push_back(context);
    uintptr_t begin, end;
    RegionOf(*buffer, &begin, &end);
    it->second.push_back({block->mutable_data() + offsets[i], buffer->address(),
                          buffer->size(), begin, end});
  }
  Alongside slices = [&] {
    BufferVector out;
    out.reserve(device_buffers.size());
    for (size_t i = 0; i < device_buffers.size(); ++i) {
      out.push_back(managers[i] == nullptr
                        ? device_buffers[i]
                        : arrow::SliceBuffer(block, offsets[i], device_buffers[i]->size()));
    }
    return use(std::move(out));
  };
  if (order.empty()) return slices();
  // The slices are made during the first transfer, which also follows `after` (a stream of
  // the first device).
  for (size_t k = 0; k < order.size(); ++k) {
    ARROW_RETURN_NOT_OK(EngineTransfer(*order[k], Direction::kToHost, pieces[order[k]],
                                       k == 0 ? slices : nullptr, k == 0 ? after : nullptr));
  }
  return Status::OK();
}

// The bytes a fixed-width array without children holds and covers, by arithmetic: libarrow's
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

// A host array whose buffers reach well beyond the values it covers (a slice, or a chunk
// cut from a larger array) is first compacted on the host, so that only the bytes it covers
// move and occupy device memory. A small overhang is cheaper to move than to compact.
std::shared_ptr<arrow::ArrayData> Compacted(const std::shared_ptr<arrow::ArrayData>& data) {
  if (data == nullptr) return data;
  int64_t total, referenced;
  if (!FixedWidthSizes(*data, &total, &referenced)) {
    total = arrow::util::TotalBufferSize(*data);
    auto counted = arrow::util::ReferencedBufferSize(*data);
    if (!counted.ok()) return data;
    referenced = *counted;
  }
  if (total - referenced <= referenced / 8 + 4096) return data;
  auto compact = arrow::Concatenate({arrow::MakeArray(data)});
  return compact.ok() ? (*compact)->data() : data;  // a layout Concatenate lacks: as it is
}

Status MoveArraysToDevice(const std::shared_ptr<CudaMemoryManager>& manager,
                          const ArrayDataVector& arrays, const UseArrays& use) {
  ArrayDataVector sources;
  sources.reserve(arrays.size());
  for (const auto& array : arrays) sources.push_back(Compacted(array));
  return CopyArrays(
      sources, /*count_nulls=*/true,
      [&](const BufferVector& buffers, const UseBuffers& rebuild) {
        return HostToDevice(manager, buffers, rebuild);
      },
      use);
}

Status MoveArraysToHost(const ArrayDataVector& arrays, const UseArrays& use, CUstream after) {
  return CopyArrays(
      arrays, /*count_nulls=*/false,
      [after](const BufferVector& buffers, const UseBuffers& rebuild) {
        return DeviceToHost(buffers, rebuild, after);
      },
      use);
}

}  // namespace

Result<BufferVector> CoalescedHostToDevice(const std::shared_ptr<CudaMemoryManager>& manager,
                                           const BufferVector& host_buffers) {
  return Collect<BufferVector>(
      [&](const UseBuffers& use) { return HostToDevice(manager, host_buffers, use); });
}

Result<BufferVector> CoalescedDeviceToHost(const BufferVector& device_buffers,
                                           CUstream after) {
  return Collect<BufferVector>(
      [&](const UseBuffers& use) { return DeviceToHost(device_buffers, use, after); });
}

Result<ArrayDataVector> ArraysToDevice(const std::shared_ptr<CudaMemoryManager>& manager,
                                       const ArrayDataVector& arrays) {
  return Collect<ArrayDataVector>(
      [&](const UseArrays& use) { return MoveArraysToDevice(manager, arrays, use); });
}

Result<ArrayDataVector> ArraysToHost(const ArrayDataVector& arrays, CUstream after) {
  return Collect<ArrayDataVector>(
      [&](const UseArrays& use) { return MoveArraysToHost(arrays, use, after); });
}

namespace {

// A chunked array, table or batch moved by `move(arrays, use)`: its result is assembled
// inside `use`, while the bytes still move.
template <typename Move>
Result<std::shared_ptr<arrow::ChunkedArray>> MoveChunkedArray(
    const std::shared_ptr<arrow::ChunkedArray>& array, Move move) {
  ArrayDataVector chunks;
  chunks.reserve(array->num_chunks());
  for (const auto& chunk : array->chunks()) chunks.push_back(chunk->data());
  std::shared_ptr<arrow::ChunkedArray> out;
  ARROW_RETURN_NOT_OK(move(chunks, [&](ArrayDataVector copies) {
    arrow::ArrayVector moved;
    moved.reserve(copies.size());
    for (auto& copy : copies) moved.push_back(arrow::MakeArray(std::move(copy)));
    out = std::make_shared<arrow::ChunkedArray>(std::move(moved), array->type());
    return Status::OK();
  }));
  return out;
}

template <typename Move>
Result<std::shared_ptr<arrow::Table>> MoveTable(const std::shared_ptr<arrow::Table>& table,
                                                Move move) {
  ArrayDataVector chunks;
  for (const auto& column : table->columns()) {
    for (const auto& chunk : column->chunks()) chunks.push_back(chunk->data());
  }
  std::shared_ptr<arrow::Table> out;
  ARROW_RETURN_NOT_OK(move(chunks, [&](ArrayDataVector copies) {
    std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
    columns.reserve(table->num_columns());
    auto next = copies.begin();
    for (const auto& column : table->columns()) {
      arrow::ArrayVector moved;
      moved.reserve(column->num_chunks());
      for (int i = 0; i < column->num_chunks(); ++i) {
        moved.push_back(arrow::MakeArray(std::move(*next++)));
      }
      columns.push_back(
          std::make_shared<arrow::ChunkedArray>(std::move(moved), column->type()));
    }
    out = arrow::Table::Make(table->schema(), std::move(columns), table->num_rows());
    return Status::OK();
  }));
  return out;
}

template <typename Move>
Result<std::shared_ptr<arrow::RecordBatch>> MoveBatch(
    const std::shared_ptr<arrow::RecordBatch>& batch, Move move,
    arrow::DeviceAllocationType device_type) {
  std::shared_ptr<arrow::RecordBatch> out;
  ARROW_RETURN_NOT_OK(move(batch->column_data(), [&](ArrayDataVector copies) {
    out = arrow::RecordBatch::Make(batch->schema(), batch->num_rows(), std::move(copies),
                                   device_type);
    return Status::OK();
  }));
  return out;
}

// Binds a manager to MoveArraysToDevice, a stream to MoveArraysToHost.
auto ToDevice(const std::shared_ptr<CudaMemoryManager>& manager) {
  return [&manager](const ArrayDataVector& arrays, const UseArrays& use) {
    return MoveArraysToDevice(manager, arrays, use);
  };
}
auto ToHost(CUstream after) {
  return [after](const ArrayDataVector& arrays, const UseArrays& use) {
    return MoveArraysToHost(arrays, use, after);
  };
}

}  // namespace

Result<std::shared_ptr<arrow::Table>> TableToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::Table>& table) {
  return MoveTable(table, ToDevice(manager));
}

Result<std::shared_ptr<arrow::Table>> TableToHost(const std::shared_ptr<arrow::Table>& table,
                                                  CUstream after) {
  return MoveTable(table, ToHost(after));
}

Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::ChunkedArray>& array) {
  return MoveChunkedArray(array, ToDevice(manager));
}

Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToHost(
    const std::shared_ptr<arrow::ChunkedArray>& array, CUstream after) {
  return MoveChunkedArray(array, ToHost(after));
}

Result<std::shared_ptr<arrow::RecordBatch>> BatchToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::RecordBatch>& batch) {
  return MoveBatch(batch, ToDevice(manager), arrow::DeviceAllocationType::kCUDA);
}

Result<std::shared_ptr<arrow::RecordBatch>> BatchToHost(
    const std::shared_ptr<arrow::RecordBatch>& batch, CUstream after) {
  return MoveBatch(batch, ToHost(after), arrow::DeviceAllocationType::kCPU);
}

bool OnDevice(const arrow::ArrayData& data) {
  for (const auto& buffer : data.buffers) {
    if (buffer != nullptr && !buffer->is_cpu()) return true;
  }
  for (const auto& child : data.child_data) {
    if (OnDevice(*child)) return true;
  }
  return data.dictionary != nullptr && OnDevice(*data.dictionary);
}

bool OnDevice(const arrow::ChunkedArray& data) {
  for (const auto& chunk : data.chunks()) {
    if (OnDevice(*chunk->data())) return true;
  }
  return false;
}

bool OnDevice(const arrow::RecordBatch& data) {
  for (const auto& column : data.column_data()) {
    if (OnDevice(*column)) return true;
  }
  return false;
}

bool OnDevice(const arrow::Table& data) {
  for (const auto& column : data.columns()) {
    if (OnDevice(*column)) return true;
  }
  return false;
}

}  // namespace arrow_gpu
