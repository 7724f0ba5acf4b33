#include "compute/concat.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/range_tables.h"
#include "engine/read_back.h"

namespace arrow_gpu {

namespace {

constexpr int64_t kOffsetsMax = 2147483647;  // of 32-bit offsets

uint64_t AddressOf(const std::shared_ptr<arrow::Buffer>& buffer) {
  return buffer == nullptr ? 0 : static_cast<uint64_t>(buffer->address());
}

uint64_t PartBuffer(const arrow::ArrayData& data, size_t index) {
  return index < data.buffers.size() ? AddressOf(data.buffers[index]) : 0;
}

// A part's nulls as its data knows them without counting (-1: not known); none without a
// validity bitmap.
int64_t StoredNulls(const arrow::ArrayData& data) {
  return PartBuffer(data, 0) == 0 ? 0 : data.null_count.load();
}

bool IsOffsetBinary(arrow::Type::type id) {
  return id == arrow::Type::BINARY || id == arrow::Type::STRING ||
         id == arrow::Type::LARGE_BINARY || id == arrow::Type::LARGE_STRING;
}

// Whether two dictionaries are one: the same data, or a flat one in the same memory.
bool SameDictionary(const std::shared_ptr<arrow::ArrayData>& a,
                    const std::shared_ptr<arrow::ArrayData>& b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr || !SelectSupports(*a->type) || !a->type->Equals(*b->type) ||
      a->offset != b->offset || a->length != b->length ||
      a->buffers.size() != b->buffers.size()) {
    return false;
  }
  for (size_t i = 0; i < a->buffers.size(); ++i) {
    if (AddressOf(a->buffers[i]) != AddressOf(b->buffers[i])) return false;
  }
  return true;
}

// The copies of one concatenation, gathered, then uploaded as one table per kernel and
// launched once per kind. Sources are inputs and destinations new buffers, so the kinds
// may run in any order.
class ConcatPlan {
 public:
  ConcatPlan(std::shared_ptr<CudaMemoryManager> manager, const SelectKernels& kernels,
             CUstream stream)
      : manager_(std::move(manager)),
        context_(*manager_->cuda_context()),
        kernels_(kernels),
        stream_(stream) {}

  arrow::Result<std::shared_ptr<arrow::Buffer>> Alloc(int64_t nbytes) {
    ARROW_ASSIGN_OR_RAISE(auto buffer,
                          manager_->AllocateBuffer(std::max<int64_t>(nbytes, 0)));
    return std::shared_ptr<arrow::Buffer>(std::move(buffer));
  }

  void Copy(uint64_t src, uint64_t dst, int64_t nbytes) {
    if (nbytes > 0) copies_.push_back({src, dst, nbytes, 0});
  }

  // A piece of a bitmap (allocated in whole 64-bit words, its pieces given in order from
  // bit 0); src 0 for bits all set. Its set bits are added to `counter` unless it is < 0.
  void Bits(uint64_t src, int64_t src_off, uint64_t dst, int64_t dst_off, int64_t nbits,
            int counter) {
    if (nbits > 0) {  // `count` holds the counter's index + 1 until Run knows its address
      bits_.push_back({src, src_off, dst, dst_off, nbits, 0,
                       static_cast<uint64_t>(counter + 1), 0});
    }
  }

  // `n` offsets of `width` bytes moved by `delta`; src 0: one zero (the plan's constant,
  // whose address Run writes).
  void Rebase(uint64_t src, uint64_t dst, int64_t n, int64_t width, int64_t delta) {
    if (n > 0) rebases_.push_back({src, dst, n, width, delta, 0, 0, 0});
  }

  int NewCounter() { return counters_++; }

  // The bytes of each device range (`src`, `nbytes`) one after another, gathered by one
  // launch queued behind the work queued so far and copied back; Collect waits for them,
  // so that the host can plan meanwhile.
  struct RangesRead {
    std::vector<uint8_t> data;
    std::shared_ptr<arrow::Buffer> upload;  // the table and the gathered bytes
    QueuedRead read;  // declared after `upload`: a read never collected is waited for first

    arrow::Result<std::vector<uint8_t>> Collect() {
      if (!data.empty()) ARROW_RETURN_NOT_OK(read.Wait(data.data()));
      return std::move(data);
    }
  };

  arrow::Result<RangesRead> QueueRanges(const std::vector<uint64_t>& src,
                                        const std::vector<int64_t>& nbytes) {
    int64_t total = 0;
    for (int64_t size : nbytes) total += size;
    RangesRead ranges;
    ranges.data.resize(total);
    if (total == 0) return ranges;
    const int64_t table_bytes = static_cast<int64_t>(sizeof(CopyRow) * src.size());
    ARROW_ASSIGN_OR_RAISE(ranges.upload, Alloc(table_bytes + total));
    const uint64_t area = AddressOf(ranges.upload) + table_bytes;
    std::vector<CopyRow> rows;
    rows.reserve(src.size());
    int64_t at = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      rows.push_back({src[i], area + at, nbytes[i], 0});
      at += nbytes[i];
    }
    const int64_t blocks = LayCopyBlocks(rows.data(), rows.size());
    arrow::Status queued = context_.CopyHostToDeviceAsync(AddressOf(ranges.upload),
                                                          rows.data(), table_bytes, stream_);
    if (queued.ok()) {
      queued = LaunchTable(kernels_.copy_ranges, AddressOf(ranges.upload), rows.size(), blocks);
    }
    if (queued.ok()) {
      auto read = QueuedRead::Queue(context_, area, total, stream_);
      if (read.ok()) {
        ranges.read = std::move(*read);
        return ranges;
      }
      queued = read.status();
    }
    return Unqueued(queued);
  }

  // Room in the tables for about `parts` rows of each kind.
  void Reserve(size_t parts) {
    copies_.reserve(parts);
    bits_.reserve(parts);
    rebases_.reserve(parts);
  }

  // Uploads the tables, launches each kind once and waits for them: the counters' values.
  arrow::Result<std::vector<int64_t>> Run() {
    std::vector<int64_t> counts(counters_, 0);
    if (copies_.empty() && bits_.empty() && rebases_.empty()) return counts;
    const int64_t copy_blocks = LayCopyBlocks(copies_.data(), copies_.size());
    const int64_t bit_blocks = LayBitBlocks(bits_.data(), bits_.size());
    const int64_t rebase_blocks = LayRebaseBlocks(rebases_.data(), rebases_.size());
    // One upload: the tables, a zero, the counters (zeroed); the counters come back.
    const int64_t copies_at = 0;
    const int64_t bits_at = copies_at + sizeof(CopyRow) * copies_.size();
    const int64_t rebases_at = bits_at + sizeof(BitRow) * bits_.size();
    const int64_t zero_at = rebases_at + sizeof(RebaseRow) * rebases_.size();
    const int64_t counters_at = zero_at + 8;
    const int64_t nbytes = counters_at + 8 * counters_;
    ARROW_ASSIGN_OR_RAISE(auto upload, Alloc(nbytes));
    const uint64_t base = AddressOf(upload);
    for (BitRow& row : bits_) {
      row.count = row.count == 0 ? 0 : base + counters_at + 8 * (row.count - 1);
    }
    for (RebaseRow& row : rebases_) {
      if (row.src == 0) row.src = base + zero_at;
    }
    std::vector<uint8_t> blob(nbytes, 0);
    std::memcpy(blob.data() + copies_at, copies_.data(), bits_at - copies_at);
    std::memcpy(blob.data() + bits_at, bits_.data(), rebases_at - bits_at);
    std::memcpy(blob.data() + rebases_at, rebases_.data(), zero_at - rebases_at);
    arrow::Status queued = context_.CopyHostToDeviceAsync(base, blob.data(), nbytes, stream_);
    if (queued.ok() && copy_blocks > 0) {
      queued = LaunchTable(kernels_.copy_ranges, base + copies_at, copies_.size(), copy_blocks);
    }
    if (queued.ok() && bit_blocks > 0) {
      queued = LaunchTable(kernels_.copy_bit_ranges, base + bits_at, bits_.size(), bit_blocks);
    }
    if (queued.ok() && rebase_blocks > 0) {
      queued = LaunchTable(kernels_.rebase_ranges, base + rebases_at, rebases_.size(),
                           rebase_blocks);
    }
    if (!queued.ok()) return Unqueued(queued);
    // The one wait: the counters' copy back where there are some, else the stream's end.
    if (counters_ > 0) {
      ARROW_RETURN_NOT_OK(
          ReadBack(context_, counts.data(), base + counters_at, 8 * counters_, stream_));
    } else {
      ARROW_RETURN_NOT_OK(context_.SynchronizeStream(stream_));
    }
    return counts;
  }

 private:
  // A plan that failed part way: what was queued still reads its tables, which go once the
  // stream is done with them.
  arrow::Status Unqueued(arrow::Status failed) {
    ARROW_UNUSED(context_.SynchronizeStream(stream_));
    return failed;
  }

  arrow::Status LaunchTable(CUfunction function, uint64_t table, size_t count,
                            int64_t blocks) {
    return Launch(context_, function, blocks, kCopyThreads,
                  {table, static_cast<uint64_t>(count)}, stream_);
  }

  std::shared_ptr<CudaMemoryManager> manager_;
  const CudaContext& context_;
  SelectKernels kernels_;
  CUstream stream_;
  std::vector<CopyRow> copies_;
  std::vector<BitRow> bits_;
  std::vector<RebaseRow> rebases_;
  int counters_ = 0;
};

// A column being concatenated: its result, and what completes it once the plan ran.
struct ConcatColumn {
  std::shared_ptr<arrow::ArrayData> out;
  int64_t known_nulls = 0;
  int counter = -1;  // where its validity's set bits are counted, when its nulls are unknown
};

// The parts' validity, copied unless none of them may hold a null: their nulls summed where
// every part's is known, else counted by the plan.
arrow::Status PlanValidity(ConcatPlan* plan, const ConcatParts& parts, ConcatColumn* column) {
  bool any = false, known = true;
  int64_t nulls = 0;
  for (const auto& part : parts) {
    const int64_t stored = StoredNulls(*part);
    any = any || stored != 0;
    known = known && stored >= 0;
    nulls += std::max<int64_t>(stored, 0);
  }
  if (!any) return arrow::Status::OK();
  const int64_t n = column->out->length;
  ARROW_ASSIGN_OR_RAISE(column->out->buffers[0], plan->Alloc(8 * Blocks(n, 64)));
  const uint64_t dst = AddressOf(column->out->buffers[0]);
  if (known) {
    column->known_nulls = nulls;
  } else {
    column->counter = plan->NewCounter();
  }
  int64_t position = 0;
  for (const auto& part : parts) {
    const uint64_t src = StoredNulls(*part) == 0 ? 0 : PartBuffer(*part, 0);
    plan->Bits(src, part->offset, dst, position, part->length, column->counter);
    position += part->length;
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ConcatColumns(
    const std::shared_ptr<CudaMemoryManager>& manager, const SelectKernels& kernels,
    CUstream stream, const std::vector<ConcatParts>& columns, bool copy_one) {
  std::vector<ConcatColumn> planned(columns.size());
  // Checked before any launch: what the plan cannot concatenate goes elsewhere whole.
  std::vector<std::shared_ptr<arrow::ArrayData>> results(columns.size());
  std::vector<bool> copied(columns.size(), false);
  for (size_t c = 0; c < columns.size(); ++c) {
    const ConcatParts& parts = columns[c];
    if (parts.size() == 1 && !copy_one) {
      results[c] = parts[0];
      continue;
    }
    if (parts.empty()) {
      return arrow::Status::NotImplemented("no parts to tell a column's type");
    }
    const auto& type = parts[0]->type;
    if (!SelectSupports(*type)) {
      return arrow::Status::NotImplemented("no native concatenation of ", type->ToString());
    }
    for (const auto& part : parts) {
      if (!part->type->Equals(*type) ||
          (type->id() == arrow::Type::DICTIONARY &&
           !SameDictionary(part->dictionary, parts[0]->dictionary))) {
        return arrow::Status::NotImplemented("parts of different types or dictionaries");
      }
    }
    copied[c] = true;
  }
  ConcatPlan plan(manager, kernels, stream);
  // Where each binary part's items start and end, read for all columns in one round trip,
  // queued first: the host plans the other columns while the device reads them.
  std::vector<uint64_t> ends;
  std::vector<int64_t> end_sizes;
  size_t parts_total = 0;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!copied[c]) continue;
    parts_total += columns[c].size();
    if (!IsOffsetBinary(columns[c][0]->type->id())) continue;
    const int width = columns[c][0]->type->layout().buffers[1].byte_width;
    for (const auto& part : columns[c]) {
      if (part->length == 0) continue;  // an empty part's offsets may be absent
      const uint64_t begin = PartBuffer(*part, 1) + part->offset * width;
      ends.insert(ends.end(), {begin, begin + part->length * width});
      end_sizes.insert(end_sizes.end(), {width, width});
    }
  }
  ARROW_ASSIGN_OR_RAISE(auto ranges, plan.QueueRanges(ends, end_sizes));
  plan.Reserve(parts_total);
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!copied[c]) continue;
    const ConcatParts& parts = columns[c];
    const auto& type = parts[0]->type;
    int64_t n = 0;
    for (const auto& part : parts) n += part->length;
    ConcatColumn& column = planned[c];
    column.out = arrow::ArrayData::Make(type, n, {nullptr, nullptr}, 0, 0);
    arrow::ArrayData& out = *column.out;
    ARROW_RETURN_NOT_OK(PlanValidity(&plan, parts, &column));
    const arrow::Type::type id = type->id();
    if (IsOffsetBinary(id)) continue;  // once the read is in
    if (id == arrow::Type::BOOL) {
      ARROW_ASSIGN_OR_RAISE(out.buffers[1], plan.Alloc(8 * Blocks(n, 64)));
      int64_t position = 0;
      for (const auto& part : parts) {
        plan.Bits(PartBuffer(*part, 1), part->offset, AddressOf(out.buffers[1]), position,
                  part->length, -1);
        position += part->length;
      }
    } else {
      const arrow::DataType& values =
          id == arrow::Type::DICTIONARY
              ? *static_cast<const arrow::DictionaryType&>(*type).index_type()
              : *type;
      const int64_t width = values.byte_width();
      ARROW_ASSIGN_OR_RAISE(out.buffers[1], plan.Alloc(width * n));
      int64_t position = 0;
      for (const auto& part : parts) {
        plan.Copy(PartBuffer(*part, 1) + part->offset * width,
                  AddressOf(out.buffers[1]) + position * width, part->length * width);
        position += part->length;
      }
      if (id == arrow::Type::DICTIONARY) out.dictionary = parts[0]->dictionary;
    }
  }
  ARROW_ASSIGN_OR_RAISE(std::vector<uint8_t> read, ranges.Collect());
  size_t read_at = 0;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!copied[c] || !IsOffsetBinary(columns[c][0]->type->id())) continue;
    const ConcatParts& parts = columns[c];
    const auto& type = parts[0]->type;
    arrow::ArrayData& out = *planned[c].out;
    const int64_t n = out.length;
    const int width = type->layout().buffers[1].byte_width;
    std::vector<int64_t> first(parts.size(), 0), items(parts.size(), 0);
    int64_t total = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      if (parts[p]->length == 0) continue;
      int64_t bounds[2] = {0, 0};
      for (int64_t& bound : bounds) {
        if (width == 4) {
          int32_t value;
          std::memcpy(&value, read.data() + read_at, 4);
          bound = value;
        } else {
          std::memcpy(&bound, read.data() + read_at, 8);
        }
        read_at += width;
      }
      first[p] = bounds[0];
      items[p] = bounds[1] - bounds[0];
      total += items[p];
    }
    if (width == 4 && total > kOffsetsMax) {
      return arrow::Status::CapacityError(
          "the concatenated ", type->ToString(), " values hold ", total,
          " items, more than 32-bit offsets can address: cast to the large_ type first");
    }
    ARROW_ASSIGN_OR_RAISE(out.buffers[1], plan.Alloc(width * (n + 1)));
    out.buffers.resize(3);
    ARROW_ASSIGN_OR_RAISE(out.buffers[2], plan.Alloc(total));
    const uint64_t offsets = AddressOf(out.buffers[1]), data = AddressOf(out.buffers[2]);
    int64_t position = 0, byte = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const arrow::ArrayData& part = *parts[p];
      plan.Rebase(PartBuffer(part, 1) + part.offset * width, offsets + position * width,
                  part.length, width, byte - first[p]);
      plan.Copy(PartBuffer(part, 2) + first[p], data + byte, items[p]);
      position += part.length;
      byte += items[p];
    }
    plan.Rebase(0, offsets + n * width, 1, width, total);  // the last offset
  }
  ARROW_ASSIGN_OR_RAISE(std::vector<int64_t> counts, plan.Run());
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!copied[c]) continue;
    ConcatColumn& column = planned[c];
    arrow::ArrayData& out = *column.out;
    const int64_t nulls =
        column.counter < 0 ? column.known_nulls : out.length - counts[column.counter];
    if (nulls == 0) out.buffers[0] = nullptr;
    out.null_count.store(nulls);
    results[c] = std::move(column.out);
  }
  return results;
}

arrow::Result<std::vector<uint8_t>> ReadRanges(const std::shared_ptr<CudaMemoryManager>& manager,
                                               const SelectKernels& kernels, CUstream stream,
                                               const std::vector<uint64_t>& src,
                                               const std::vector<int64_t>& nbytes) {
  ConcatPlan plan(manager, kernels, stream);
  ARROW_ASSIGN_OR_RAISE(auto ranges, plan.QueueRanges(src, nbytes));
  return ranges.Collect();
}

}  // namespace arrow_gpu
