#include "compute/select.h"

#include <algorithm>
#include <utility>

#include <arrow/type_traits.h>

#include "engine/copy_engine.h"

namespace arrow_gpu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kScanTile = 256 * 8;  // SCAN_THREADS * SCAN_ITEMS of the kernels' source
constexpr int64_t kMaskGroupRows = 8;   // a compaction's rows per thread: MASK_GROUPS
constexpr int64_t kInt32Max = 2147483647;
constexpr uint64_t kNone = 0;  // a null pointer argument: "all bits set", "not counted"

uint64_t Address(const std::shared_ptr<arrow::Buffer>& buffer) {
  return buffer == nullptr ? kNone : static_cast<uint64_t>(buffer->address());
}

const std::shared_ptr<arrow::Buffer>& BufferAt(const arrow::ArrayData& data, size_t index) {
  static const std::shared_ptr<arrow::Buffer> kAbsent;
  return index < data.buffers.size() ? data.buffers[index] : kAbsent;
}

// A validity bitmap may hold nulls unless it is absent or its count is known to be zero.
bool MayHaveNulls(const arrow::ArrayData& data) {
  return BufferAt(data, 0) != nullptr && data.null_count.load() != 0;
}

bool IsBinaryLike(arrow::Type::type id) {
  return id == arrow::Type::BINARY || id == arrow::Type::STRING ||
         id == arrow::Type::LARGE_BINARY || id == arrow::Type::LARGE_STRING;
}

int OffsetWidth(arrow::Type::type id) {
  return id == arrow::Type::LARGE_BINARY || id == arrow::Type::LARGE_STRING ? 8 : 4;
}

// The selected rows: compacted straight from a mask where one picked them and none of its
// null slots became a row, else by int64 positions (-1 for a null row).
struct Rows {
  int64_t length = 0;
  bool may_have_nulls = false;
  bool by_mask = false;
  uint64_t mask_values = kNone, mask_valid = kNone;
  int64_t mask_offset = 0, mask_length = 0, mode = 0;
  uint64_t ranks = kNone;
  uint64_t positions = kNone;  // made at the first gather that needs them, for a mask
};

// A column whose selected bytes are known only once the counters are read: its ranges are
// gathered then.
struct PendingRanges {
  size_t column;
  int total_slot;
  uint64_t source_values, source_offsets;
  int width;
};

class Plan {
 public:
  Plan(std::shared_ptr<CudaMemoryManager> manager, const SelectKernels& kernels, CUstream stream)
      : manager_(std::move(manager)),
        context_(*manager_->cuda_context()),
        kernels_(kernels),
        stream_(stream) {}

  arrow::Result<Selected> Run(const std::vector<std::shared_ptr<arrow::ArrayData>>& columns,
                              const RowSelector& selector) {
    // Slots of one zeroed buffer, read back once: 0 an index out of range, 1 the rows a mask
    // selects, then per column the set bits of its validity and its selected bytes.
    const int slots = 2 + 2 * static_cast<int>(columns.size());
    ARROW_ASSIGN_OR_RAISE(counters_, Zeros(8 * slots));
    ARROW_ASSIGN_OR_RAISE(Rows rows, MakeRows(selector));
    std::vector<std::shared_ptr<arrow::ArrayData>> out;
    std::vector<int> validity_slots;
    std::vector<PendingRanges> pending;
    int next_slot = 2;
    for (size_t i = 0; i < columns.size(); ++i) {
      const arrow::ArrayData& column = *columns[i];
      int validity_slot = -1;
      std::shared_ptr<arrow::Buffer> validity;
      if (BufferAt(column, 0) != nullptr || rows.may_have_nulls) {
        validity_slot = next_slot++;
        ARROW_ASSIGN_OR_RAISE(validity, TakeBits(BufferAt(column, 0), column.offset, &rows,
                                                 SlotAddress(validity_slot)));
      }
      validity_slots.push_back(validity_slot);
      ARROW_ASSIGN_OR_RAISE(auto taken, TakeValues(column, &rows, &next_slot, &pending, i));
      taken->buffers[0] = std::move(validity);
      out.push_back(std::move(taken));
    }
    std::vector<int64_t> counts(slots, 0);
    ARROW_RETURN_NOT_OK(Read(counts.data(), Address(counters_), 8 * slots));
    if (selector.kind == RowSelector::Kind::kIndices && counts[0] != 0) {
      return arrow::Status::IndexError("index out of bounds: take indices must lie in [0, ",
                                       selector.bound, ")");
    }
    for (const PendingRanges& ranges : pending) {
      const int64_t total = counts[ranges.total_slot];
      arrow::ArrayData& taken = *out[ranges.column];
      if (ranges.width == 4 && total > kInt32Max) {
        return arrow::Status::CapacityError(
            "the selected ", taken.type->ToString(), " values hold ", total,
            " items, more than 32-bit offsets can address: cast to the large_ type first");
      }
      ARROW_ASSIGN_OR_RAISE(auto bytes, Alloc(total));
      ARROW_RETURN_NOT_OK(Launch(kernels_.gather_ranges, rows.length,
                                 {Address(bytes), ranges.source_values, ranges.source_offsets,
                                  static_cast<uint64_t>(ranges.width), rows.positions,
                                  Address(taken.buffers[1]),
                                  static_cast<uint64_t>(ranges.width),
                                  static_cast<uint64_t>(rows.length)}));
      taken.buffers[2] = std::move(bytes);
    }
    // The gathers queued after the read must be done before their arrays are handed out.
    if (!pending.empty()) ARROW_RETURN_NOT_OK(context_.SynchronizeStream(stream_));
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t nulls = 0;
      if (validity_slots[i] >= 0) nulls = rows.length - counts[validity_slots[i]];
      if (nulls == 0) out[i]->buffers[0] = nullptr;
      out[i]->null_count.store(nulls);
    }
    return Selected{rows.length, std::move(out)};
  }

 private:
  arrow::Result<Rows> MakeRows(const RowSelector& selector) {
    const arrow::ArrayData& data = *selector.data;
    Rows rows;
    const int64_t n = data.length;
    const auto& valid = BufferAt(data, 0);
    if (selector.kind == RowSelector::Kind::kIndices) {
      const int width = data.type->byte_width();
      const bool is_signed = arrow::is_signed_integer(data.type->id());
      ARROW_ASSIGN_OR_RAISE(auto positions, Alloc(8 * n));
      ARROW_RETURN_NOT_OK(Launch(
          kernels_.indices, n,
          {Address(positions), Address(BufferAt(data, 1)) + data.offset * width,
           static_cast<uint64_t>(width), static_cast<uint64_t>(is_signed), Address(valid),
           static_cast<uint64_t>(data.offset), static_cast<uint64_t>(n),
           static_cast<uint64_t>(selector.bound), SlotAddress(0)}));
      rows.length = n;
      rows.may_have_nulls = MayHaveNulls(data);
      rows.positions = Address(positions);
      return rows;
    }
    rows.mask_values = Address(BufferAt(data, 1));
    rows.mask_valid = Address(valid);
    rows.mask_offset = data.offset;
    rows.mask_length = n;
    rows.mode = selector.emit_null ? 2 : 1;  // of the kernels' group_word
    if (n == 0) return rows;
    const int64_t groups = (n + 31) / 32;
    ARROW_ASSIGN_OR_RAISE(auto counts, Alloc(8 * groups));
    ARROW_RETURN_NOT_OK(Launch(kernels_.mask_counts, groups,
                               {rows.mask_values, static_cast<uint64_t>(rows.mask_offset),
                                rows.mask_valid, static_cast<uint64_t>(rows.mask_offset),
                                static_cast<uint64_t>(rows.mode), static_cast<uint64_t>(n),
                                Address(counts)}));
    ARROW_ASSIGN_OR_RAISE(auto ranks, Alloc(8 * (groups + 1)));
    ARROW_RETURN_NOT_OK(QueueScan(Address(counts), groups, Address(ranks), 8, SlotAddress(1)));
    rows.ranks = Address(ranks);
    // Every later allocation is sized by this count: the one read before the gathers.
    ARROW_RETURN_NOT_OK(Read(&rows.length, SlotAddress(1), 8));
    if (selector.emit_null && MayHaveNulls(data)) {
      // Null slots become null rows, which only a gather by positions makes.
      rows.may_have_nulls = true;
      ARROW_RETURN_NOT_OK(Positions(&rows).status());
    } else {
      rows.by_mask = true;
    }
    return rows;
  }

  // The rows' int64 positions, made from the mask at the first call.
  arrow::Result<uint64_t> Positions(Rows* rows) {
    if (rows->positions != kNone || rows->length == 0) return rows->positions;
    ARROW_ASSIGN_OR_RAISE(auto positions, Alloc(8 * rows->length));
    ARROW_RETURN_NOT_OK(Compact(Address(positions), kNone, 8, *rows));
    rows->positions = Address(positions);
    return rows->positions;
  }

  arrow::Status Compact(uint64_t dst, uint64_t src, int64_t width, const Rows& rows) {
    const int64_t n = rows.mask_length;
    return Launch(kernels_.compact, (n + kMaskGroupRows - 1) / kMaskGroupRows,
                  {dst, src, static_cast<uint64_t>(width), rows.mask_values,
                   static_cast<uint64_t>(rows.mask_offset), rows.mask_valid,
                   static_cast<uint64_t>(rows.mask_offset), static_cast<uint64_t>(rows.mode),
                   static_cast<uint64_t>(n), rows.ranks});
  }

  // The bits of `bits` (from bit `offset`; all set where absent) at the rows; how many are
  // set is added to the counter at `count_at` (kNone: not counted).
  arrow::Result<std::shared_ptr<arrow::Buffer>> TakeBits(
      const std::shared_ptr<arrow::Buffer>& bits, int64_t offset, Rows* rows,
      uint64_t count_at) {
    const int64_t n = rows->length;
    if (rows->by_mask) {
      const int64_t m = rows->mask_length;
      ARROW_ASSIGN_OR_RAISE(auto out, Zeros(4 * ((n + 31) / 32)));  // whole words, or'ed in
      ARROW_RETURN_NOT_OK(Launch(kernels_.compact_bits, (m + 31) / 32,
                                 {Address(out), Address(bits), static_cast<uint64_t>(offset),
                                  rows->mask_values, static_cast<uint64_t>(rows->mask_offset),
                                  rows->mask_valid, static_cast<uint64_t>(rows->mask_offset),
                                  static_cast<uint64_t>(rows->mode), static_cast<uint64_t>(m),
                                  rows->ranks, count_at}));
      return out;
    }
    ARROW_ASSIGN_OR_RAISE(auto out, Alloc((n + 7) / 8));
    ARROW_RETURN_NOT_OK(Launch(kernels_.gather_bits, (n + 7) / 8,
                               {Address(out), Address(bits), static_cast<uint64_t>(offset),
                                rows->positions, static_cast<uint64_t>(n), count_at}));
    return out;
  }

  // The array of `column`'s values at the rows, its validity left to the caller.
  arrow::Result<std::shared_ptr<arrow::ArrayData>> TakeValues(
      const arrow::ArrayData& column, Rows* rows, int* next_slot,
      std::vector<PendingRanges>* pending, size_t index) {
    const int64_t n = rows->length;
    const arrow::Type::type id = column.type->id();
    auto taken = arrow::ArrayData::Make(column.type, n, {nullptr, nullptr}, 0, 0);
    if (id == arrow::Type::BOOL) {
      ARROW_ASSIGN_OR_RAISE(taken->buffers[1],
                            TakeBits(BufferAt(column, 1), column.offset, rows, kNone));
      return taken;
    }
    if (IsBinaryLike(id)) {
      const int width = OffsetWidth(id);
      const uint64_t source_offsets = Address(BufferAt(column, 1)) + column.offset * width;
      ARROW_ASSIGN_OR_RAISE(uint64_t positions, Positions(rows));
      ARROW_ASSIGN_OR_RAISE(auto sizes, Alloc(8 * n));
      ARROW_RETURN_NOT_OK(Launch(kernels_.range_sizes, n,
                                 {Address(sizes), source_offsets, kNone,
                                  static_cast<uint64_t>(width), positions,
                                  static_cast<uint64_t>(n)}));
      ARROW_ASSIGN_OR_RAISE(auto offsets, Alloc(width * (n + 1)));
      const int slot = (*next_slot)++;
      if (n == 0) {
        ARROW_RETURN_NOT_OK(Launch(kernels_.fill_bytes, width,
                                   {Address(offsets), static_cast<uint64_t>(width), 0}));
      } else {
        ARROW_RETURN_NOT_OK(QueueScan(Address(sizes), n, Address(offsets), width,
                                      SlotAddress(slot)));
      }
      taken->buffers = {nullptr, std::move(offsets), nullptr};
      pending->push_back({index, slot, Address(BufferAt(column, 2)), source_offsets, width});
      return taken;
    }
    const bool dictionary = id == arrow::Type::DICTIONARY;
    const arrow::DataType& value_type =
        dictionary ? *static_cast<const arrow::DictionaryType&>(*column.type).index_type()
                   : *column.type;
    const int64_t width = value_type.byte_width();
    const uint64_t source = Address(BufferAt(column, 1)) + column.offset * width;
    ARROW_ASSIGN_OR_RAISE(taken->buffers[1], Alloc(width * n));
    const uint64_t values = Address(taken->buffers[1]);
    if (width == 0) {  // fixed_size_binary(0) has nothing to gather
    } else if (rows->by_mask) {
      if (n > 0) ARROW_RETURN_NOT_OK(Compact(values, source, width, *rows));
    } else {
      ARROW_RETURN_NOT_OK(Launch(kernels_.gather, n,
                                 {values, source, rows->positions, static_cast<uint64_t>(n),
                                  static_cast<uint64_t>(width)}));
    }
    if (dictionary) taken->dictionary = column.dictionary;
    return taken;
  }

  // Queues the exclusive scan of `n` > 0 int64 at `src` into `out` (entries of
  // `out_width` bytes, n + 1 of them), its total to the int64 at `total`, without waiting.
  arrow::Status QueueScan(uint64_t src, int64_t n, uint64_t out, int out_width, uint64_t total) {
    const int64_t tiles = (n + kScanTile - 1) / kScanTile;
    uint64_t prefixes = kNone;
    if (tiles > 1) {
      ARROW_ASSIGN_OR_RAISE(auto sums, Alloc(8 * tiles));
      ARROW_RETURN_NOT_OK(Launch(kernels_.scan_reduce, 0,
                                 {src, static_cast<uint64_t>(n), Address(sums)}, tiles));
      ARROW_ASSIGN_OR_RAISE(auto scanned, Alloc(8 * (tiles + 1)));
      ARROW_ASSIGN_OR_RAISE(auto sums_total, Alloc(8));
      ARROW_RETURN_NOT_OK(
          QueueScan(Address(sums), tiles, Address(scanned), 8, Address(sums_total)));
      prefixes = Address(scanned);
    }
    return Launch(kernels_.scan_apply, 0,
                  {src, static_cast<uint64_t>(n), prefixes, out,
                   static_cast<uint64_t>(out_width), total},
                  tiles);
  }

  // A grid of `blocks`, or (blocks < 0) one thread per `threads_wanted`, up to the device's
  // share; nothing for no threads.
  arrow::Status Launch(CUfunction function, int64_t threads_wanted, std::vector<uint64_t> args,
                       int64_t blocks = -1) {
    if (blocks < 0) {
      if (threads_wanted <= 0) return arrow::Status::OK();
      blocks = std::min((threads_wanted + kThreads - 1) / kThreads, kernels_.max_blocks);
    }
    return arrow_gpu::Launch(context_, function, blocks, kThreads, args, stream_);
  }

  // Device memory of the package's allocator; scratch stays alive until the plan is done
  // (its launches may still run when a result's buffer is handed out).
  arrow::Result<std::shared_ptr<arrow::Buffer>> Alloc(int64_t nbytes) {
    ARROW_ASSIGN_OR_RAISE(auto buffer, manager_->AllocateBuffer(std::max<int64_t>(nbytes, 0)));
    std::shared_ptr<arrow::Buffer> shared(std::move(buffer));
    scratch_.push_back(shared);
    return shared;
  }

  arrow::Result<std::shared_ptr<arrow::Buffer>> Zeros(int64_t nbytes) {
    ARROW_ASSIGN_OR_RAISE(auto buffer, Alloc(nbytes));
    ARROW_RETURN_NOT_OK(
        Launch(kernels_.fill_bytes, nbytes, {Address(buffer), static_cast<uint64_t>(nbytes), 0}));
    return buffer;
  }

  uint64_t SlotAddress(int slot) const { return Address(counters_) + 8 * slot; }

  // Device bytes once the work queued on the stream so far is done.
  arrow::Status Read(void* dst, uint64_t src, int64_t nbytes) {
    return EngineDeviceToHost(context_, dst, src, nbytes, HostMemory::kUnknown, stream_);
  }

  std::shared_ptr<CudaMemoryManager> manager_;
  const CudaContext& context_;
  const SelectKernels& kernels_;
  CUstream stream_;
  std::shared_ptr<arrow::Buffer> counters_;
  std::vector<std::shared_ptr<arrow::Buffer>> scratch_;
};

}  // namespace

bool SelectSupports(const arrow::DataType& type) {
  const arrow::Type::type id = type.id();
  if (id == arrow::Type::BOOL || id == arrow::Type::DICTIONARY || IsBinaryLike(id)) return true;
  if (id == arrow::Type::NA || id == arrow::Type::EXTENSION) return false;
  const auto* fixed = dynamic_cast<const arrow::FixedWidthType*>(&type);
  return fixed != nullptr && fixed->bit_width() % 8 == 0;
}

arrow::Result<Selected> SelectRows(const std::shared_ptr<CudaMemoryManager>& manager,
                                   const SelectKernels& kernels, CUstream stream,
                                   const std::vector<std::shared_ptr<arrow::ArrayData>>& columns,
                                   const RowSelector& selector) {
  for (const auto& column : columns) {
    if (!SelectSupports(*column->type)) {
      return arrow::Status::NotImplemented("no native selection of ", column->type->ToString());
    }
  }
  Plan plan(manager, kernels, stream);
  return plan.Run(columns, selector);
}

}  // namespace arrow_gpu
