#include "compute/select.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include <arrow/buffer.h>
#include <arrow/type_traits.h>
#include <arrow/util/bitmap_ops.h>

namespace arrow_gpu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kScanTile = 256 * 16;  // SCAN_THREADS * SCAN_ITEMS of the kernels' source
constexpr int64_t kMaskGroupRows = 8;   // a compaction's rows per thread: MASK_GROUPS
constexpr int64_t kInt32Max = 2147483647;
constexpr uint64_t kNone = 0;  // a null pointer argument: "all bits set", "not counted"
constexpr int64_t kNoBound = INT64_MAX;  // of positions, which are below it or -1 (null)
// A selection whose counters and mask-compacted bitmaps take at most this much zeroed device
// memory fills it all with one launch (a small call's time is its launches); the bitmaps are
// then slices of one allocation, which no large result should hold for another's sake.
constexpr int64_t kSharedZerosBytes = int64_t{64} << 10;

// The room a piece of zeroed memory takes in a reserve: whole 64-byte lines.
int64_t ZerosPiece(int64_t nbytes) { return (nbytes + 63) / 64 * 64; }

// A bitmap of at most this many bytes is counted on the host (CountSetBits): one read
// either way, and a launch less (a small call's time is its launches and waits).
constexpr int64_t kHostCountBytes = int64_t{16} << 10;

// The tiles (ag_scan's blocks) of a scan of `n` inputs: one at least, which writes the total.
int64_t ScanTiles(int64_t n) { return std::max<int64_t>((n + kScanTile - 1) / kScanTile, 1); }

// The zeroed state a scan of `n` inputs takes (ag_scan: none for one tile), for
// ReserveZeros: its tickets, then a status per tile.
int64_t ScanStateBytes(int64_t n) {
  const int64_t tiles = ScanTiles(n);
  return tiles > 1 ? 8 * (tiles + 1) : 0;
}

// A mask's selection whose arrays, sized for every row of the mask, take at most this much
// device memory is gathered before its row count is known: one wait instead of two, for
// the memory of the rows not selected (a small call's time is its waits).
constexpr int64_t kUncountedBytes = int64_t{8} << 20;

// A mask's binary columns are sized before its count is read (SelectRows) where their
// starts and sizes for every row of the mask take at most this much scratch: the wait saved
// matters to calls of some milliseconds, and past them a selective mask would hold several
// times the scratch of its selected rows.
constexpr int64_t kRangesFirstBytes = int64_t{256} << 20;

// A binary column's bytes copied before their total is known get room for the bytes its
// rows are expected to hold, a thirty-second more, and this much more: a random take of a
// few rows strays further from its expected bytes than one of many. Bytes that turn out
// to take less than their room by more than a sixteenth of themselves and this much are
// copied into a buffer of their own: a result holds at most that much room.
constexpr int64_t kAheadSlackBytes = int64_t{64} << 10;

// A mask of at least this many rows forks its work bound by latency to lanes beside the
// caller's stream (Gathers::Fork): below it there is little device work to overlap, and the
// events add to a small call's host time.
constexpr int64_t kForkRows = int64_t{1} << 20;

// Selected rows averaging more bytes than this go 8 to a warp rather than 32
// (ag_gather_ranges): rows of the 0-400-byte strings of bench/compute_bench.py stay 32.
constexpr int64_t kLongRowBytes = 256;

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

// The bytes of one value of a fixed-width type (a dictionary's: of its indices).
int64_t ByteWidth(const arrow::DataType& type) {
  const arrow::DataType& values =
      type.id() == arrow::Type::DICTIONARY
          ? *static_cast<const arrow::DictionaryType&>(type).index_type()
          : type;
  return values.byte_width();
}

arrow::Status IndexOutOfBounds(int64_t bound) {
  return arrow::Status::IndexError("index out of bounds: take indices must lie in [0, ", bound,
                                   ")");
}

}  // namespace

Gathers::Gathers(std::shared_ptr<CudaMemoryManager> manager, const SelectKernels& kernels,
                 CUstream stream)
    : manager_(std::move(manager)),
      context_(*manager_->cuda_context()),
      kernels_(kernels),
      stream_(stream) {}

Gathers::~Gathers() {
  // A plan that failed before its Join: the scratch its lanes read must outlive their work.
  for (size_t i = 0; i < lent_.size(); ++i) {
    if (unjoined_[i]) ARROW_UNUSED(context_.SynchronizeStream(lent_[i]));
  }
  ARROW_UNUSED(Settle());
  // Given back idle: no later borrower's work waits behind this plan's.
  for (CUstream stream : lent_) {
    if (stream != nullptr) context_.GiveBackStream(stream);
  }
}

arrow::Status Gathers::Fork(Lane lane) {
  CUstream& stream = lent_[LentIndex(lane)];
  if (stream == nullptr) {
    ARROW_ASSIGN_OR_RAISE(stream, context_.LendStream());
  }
  return context_.Order(stream, stream_);
}

CUstream Gathers::launch_stream() const {
  if (lane_ == Lane::kCaller) return stream_;
  CUstream stream = lent_[LentIndex(lane_)];
  return stream != nullptr ? stream : stream_;
}

arrow::Status Gathers::Join() {
  for (size_t i = 0; i < lent_.size(); ++i) {
    if (!unjoined_[i]) continue;
    ARROW_RETURN_NOT_OK(context_.Order(stream_, lent_[i]));
    unjoined_[i] = false;
  }
  return arrow::Status::OK();
}

arrow::Result<GatherRows> Gathers::MakeRows(const RowSelector& selector, uint64_t out_of_range,
                                            uint64_t mask_rows, bool defer_count,
                                            bool direct_indices) {
  const arrow::ArrayData& data = *selector.data;
  GatherRows rows;
  const int64_t n = data.length;
  const auto& valid = BufferAt(data, 0);
  if (selector.kind == RowSelector::Kind::kIndices) {
    rows.length = n;
    rows.may_have_nulls = MayHaveNulls(data);
    rows.index_width = data.type->byte_width();
    rows.index_signed = arrow::is_signed_integer(data.type->id());
    rows.indices = Address(BufferAt(data, 1)) + data.offset * rows.index_width;
    rows.indices_valid = Address(valid);
    rows.indices_offset = data.offset;
    rows.bound = selector.bound;
    rows.out_of_range = out_of_range;
    // Null indices become null rows through their positions.
    if (rows.may_have_nulls || !direct_indices) ARROW_RETURN_NOT_OK(Positions(&rows).status());
    return rows;
  }
  rows.mask_values = Address(BufferAt(data, 1));
  rows.mask_valid = Address(valid);
  rows.mask_offset = data.offset;
  rows.mask_length = n;
  rows.mode = selector.emit_null ? 2 : 1;
  if (n == 0) return rows;
  const int64_t groups = (n + 31) / 32;
  ARROW_ASSIGN_OR_RAISE(auto ranks, Alloc(8 * (groups + 1)));
  // The groups counted as they are scanned: one launch, no counts written and read again.
  ARROW_ASSIGN_OR_RAISE(uint64_t state, ScanState(groups));
  ARROW_RETURN_NOT_OK(Launch(kernels_.mask_ranks, 0,
                             {rows.mask_values, static_cast<uint64_t>(rows.mask_offset),
                              rows.mask_valid, static_cast<uint64_t>(rows.mask_offset),
                              static_cast<uint64_t>(rows.mode), static_cast<uint64_t>(n),
                              Address(ranks), mask_rows, state},
                             ScanTiles(groups)));
  rows.ranks = Address(ranks);
  // Null slots that become null rows are made only by a gather by positions.
  const bool by_positions = selector.emit_null && MayHaveNulls(data);
  if (defer_count && !by_positions) {
    rows.length = n;
    rows.length_pending = true;
    rows.length_at = mask_rows;
    rows.by_mask = true;
    return rows;
  }
  ARROW_RETURN_NOT_OK(Read(&rows.length, mask_rows, 8));
  if (by_positions) {
    rows.may_have_nulls = true;
    ARROW_RETURN_NOT_OK(Positions(&rows).status());
  } else {
    rows.by_mask = true;
  }
  return rows;
}

arrow::Result<PendingGather> Gathers::Queue(const arrow::ArrayData& column, GatherRows* rows,
                                            uint64_t valid_count, uint64_t bytes_count,
                                            PendingGather* ranges) {
  const int64_t n = rows->length;
  const arrow::Type::type id = column.type->id();
  PendingGather pending;
  if (ranges != nullptr) {
    pending = std::move(*ranges);
  } else if (IsBinaryLike(id)) {
    Use(Lane::kRanges);
    ARROW_ASSIGN_OR_RAISE(pending, QueueRanges(column, rows, valid_count, bytes_count));
    Use(Lane::kCaller);
  } else {
    pending.array = arrow::ArrayData::Make(column.type, n, {nullptr, nullptr}, 0, 0);
  }
  arrow::ArrayData& taken = *pending.array;
  // A bitmap whose count of nulls is known to be 0 is not gathered: the rows take none.
  const bool has_validity = MayHaveNulls(column) || rows->may_have_nulls;
  pending.counted_validity = has_validity;
  // Values gathered by index bring their validity in the same pass (a binary's, in the pass
  // that sizes its rows); bits and masks' rows take theirs apart.
  const bool gathered_validity = id != arrow::Type::BOOL && !rows->by_mask;
  Use(Lane::kBitmaps);
  if (has_validity && !gathered_validity) {
    ARROW_ASSIGN_OR_RAISE(taken.buffers[0],
                          TakeBits(BufferAt(column, 0), column.offset, rows, valid_count));
  }
  if (id == arrow::Type::BOOL) {
    ARROW_ASSIGN_OR_RAISE(taken.buffers[1],
                          TakeBits(BufferAt(column, 1), column.offset, rows, kNone));
  }
  Use(Lane::kCaller);
  if (id == arrow::Type::BOOL) return pending;
  if (IsBinaryLike(id)) return pending;  // its ranges queued (QueueRanges)
  const bool dictionary = id == arrow::Type::DICTIONARY;
  const int64_t width = ByteWidth(*column.type);
  const uint64_t source = Address(BufferAt(column, 1)) + column.offset * width;
  ARROW_ASSIGN_OR_RAISE(taken.buffers[1], Alloc(width * n));
  const uint64_t values = Address(taken.buffers[1]);
  if (rows->by_mask) {
    // fixed_size_binary(0) has nothing to compact
    if (n > 0 && width > 0) {
      ARROW_RETURN_NOT_OK(
          Compact(kernels_.compact, {values, source, static_cast<uint64_t>(width)}, *rows));
    }
  } else {  // the values and their validity in one pass over the rows
    ARROW_ASSIGN_OR_RAISE(uint64_t valid_dst, GatheredValidity(has_validity, n, &taken));
    ARROW_RETURN_NOT_OK(Gather(values, source, width, rows, valid_dst,
                               Address(BufferAt(column, 0)), column.offset, valid_count));
  }
  if (dictionary) taken.dictionary = column.dictionary;
  return pending;
}

// A binary-like column's ranges at `rows`, queued: each row's size and start, and their scan
// into the offsets (or, where the rows' count is pending, the sums that scan starts from),
// the bytes to the counter at `bytes_count`; a take's validity in the same pass. Complete
// gathers the bytes.
arrow::Result<PendingGather> Gathers::QueueRanges(const arrow::ArrayData& column,
                                                  GatherRows* rows, uint64_t valid_count,
                                                  uint64_t bytes_count) {
  const int64_t n = rows->length;
  PendingGather pending;
  pending.array = arrow::ArrayData::Make(column.type, n, {nullptr, nullptr}, 0, 0);
  arrow::ArrayData& taken = *pending.array;
  const bool has_validity = MayHaveNulls(column) || rows->may_have_nulls;
  const int width = OffsetWidth(column.type->id());
  const uint64_t source_offsets = Address(BufferAt(column, 1)) + column.offset * width;
  // Each row's size and start, as wide as the offsets: the scan of the sizes makes the
  // result's offsets, and the copy of the rows' bytes reads the starts in order, not the
  // offsets again (a take's at random).
  ARROW_ASSIGN_OR_RAISE(auto sizes, Alloc(width * n));
  ARROW_ASSIGN_OR_RAISE(auto starts, Alloc(width * n));
  if (rows->by_mask) {  // in order: read from the offsets, with no positions in between
    // Where the mask's count is pending, the compaction sums the sizes: the bytes are read
    // with the count, the sizes scanned once it is known.
    if (n > 0) {
      ARROW_RETURN_NOT_OK(Compact(kernels_.compact_ranges,
                                  {Address(starts), Address(sizes), source_offsets,
                                   static_cast<uint64_t>(width)},
                                  *rows, {rows->length_pending ? bytes_count : kNone}));
    }
  } else {
    // A take's rows are sized from its indices as they are (each checked as it is read);
    // a mask's whose nulls make null rows, from their positions.
    if (rows->indices == kNone) ARROW_RETURN_NOT_OK(Positions(rows).status());
    ARROW_ASSIGN_OR_RAISE(uint64_t valid_dst, GatheredValidity(has_validity, n, &taken));
    std::vector<uint64_t> args{Address(sizes), source_offsets, kNone,
                               static_cast<uint64_t>(width)};
    const std::array<uint64_t, 6> indices = IndexArgs(rows);
    args.insert(args.end(), indices.begin(), indices.end());
    args.insert(args.end(), {rows->length_at, valid_dst, Address(BufferAt(column, 0)),
                             static_cast<uint64_t>(column.offset),
                             valid_dst == kNone ? kNone : valid_count, Address(starts)});
    ARROW_RETURN_NOT_OK(Launch(kernels_.range_sizes, n, std::move(args)));
  }
  taken.buffers.resize(3);
  pending.bytes_count = bytes_count;
  if (rows->length_pending) {  // scanned into the offsets once the count is known
    pending.offsets_pending = true;
    pending.sizes = Address(sizes);
  } else {
    ARROW_ASSIGN_OR_RAISE(taken.buffers[1], Alloc(width * (n + 1)));
    ARROW_RETURN_NOT_OK(
        QueueScan(Address(sizes), width, n, Address(taken.buffers[1]), width, bytes_count));
  }
  pending.pending_ranges = true;
  pending.source_values = Address(BufferAt(column, 2));
  pending.source_buffers = column.buffers;
  pending.width = width;
  pending.starts = Address(starts);
  return pending;
}

arrow::Result<std::shared_ptr<arrow::ArrayData>> Gathers::Complete(PendingGather pending,
                                                                   int64_t rows,
                                                                   int64_t valid_bits,
                                                                   int64_t bytes) {
  if (pending.pending_ranges) ARROW_RETURN_NOT_OK(GatherRanges(&pending, rows, bytes));
  return Finish(std::move(pending), rows, valid_bits);
}

arrow::Status Gathers::GatherRangesAhead(PendingGather* pending, int64_t rows) {
  if (!pending->pending_ranges || pending->offsets_pending || rows == 0) return arrow::Status::OK();
  // The bytes expected: the source's average row, its values over the rows its offsets
  // cover (all of them, for a slice: the host knows no offset's value), at each row.
  const std::vector<std::shared_ptr<arrow::Buffer>>& source = pending->source_buffers;
  int64_t expected = 0;
  if (source.size() > 2 && source[1] != nullptr && source[2] != nullptr) {
    const int64_t covered = source[1]->size() / pending->width - 1;
    if (covered > 0) {
      expected = static_cast<int64_t>(
          std::min(static_cast<double>(source[2]->size()) / covered * rows, 1e18));
    }
  }
  int64_t room = expected + expected / 32 + kAheadSlackBytes;
  if (pending->width == 4) room = std::min(room, kInt32Max);  // more is a CapacityError
  auto allocated = Alloc(room);
  if (!allocated.ok()) return arrow::Status::OK();  // copied once the total is known
  pending->ahead = std::move(allocated).ValueUnsafe();
  return CopyRanges(*pending, rows, Address(pending->ahead), expected, pending->bytes_count,
                    room);
}

arrow::Status Gathers::GatherRanges(PendingGather* pending, int64_t rows, int64_t bytes) {
  arrow::ArrayData& taken = *pending->array;
  if (pending->width == 4 && bytes > kInt32Max) {
    return arrow::Status::CapacityError(
        "the selected ", taken.type->ToString(), " values hold ", bytes,
        " items, more than 32-bit offsets can address: cast to the large_ type first");
  }
  std::shared_ptr<arrow::Buffer> room = std::move(pending->ahead);
  if (room != nullptr && bytes <= room->size()) {  // copied there already
    if (room->size() - bytes <= bytes / 16 + kAheadSlackBytes) {
      taken.buffers[2] = arrow::SliceBuffer(std::move(room), 0, bytes);
      return arrow::Status::OK();
    }
    ARROW_ASSIGN_OR_RAISE(taken.buffers[2], Alloc(bytes));
    if (bytes == 0) return arrow::Status::OK();
    MarkQueued();
    return context_.CopyDeviceToDevice(Address(taken.buffers[2]), Address(room), bytes,
                                       context_, launch_stream());
  }
  // Too many bytes for the room, if any: the copy ahead left it untouched.
  ARROW_RETURN_NOT_OK(ScanOffsets(pending, rows));
  ARROW_ASSIGN_OR_RAISE(taken.buffers[2], Alloc(bytes));
  return CopyRanges(*pending, rows, Address(taken.buffers[2]), bytes, kNone, 0);
}

arrow::Status Gathers::ScanOffsets(PendingGather* pending, int64_t rows) {
  if (!pending->offsets_pending) return arrow::Status::OK();
  arrow::ArrayData& taken = *pending->array;
  ARROW_ASSIGN_OR_RAISE(taken.buffers[1], Alloc(pending->width * (rows + 1)));
  pending->offsets_pending = false;
  return QueueScan(pending->sizes, pending->width, rows, Address(taken.buffers[1]),
                   pending->width, pending->bytes_count);
}

arrow::Status Gathers::CopyRanges(const PendingGather& pending, int64_t rows, uint64_t data,
                                  int64_t bytes, uint64_t total_at, int64_t capacity) {
  if (rows == 0) return arrow::Status::OK();
  const int64_t rows_per_warp = bytes > kLongRowBytes * rows ? 8 : 32;
  int64_t blocks = Blocks((rows + rows_per_warp - 1) / rows_per_warp * 32);
  if (kernels_.range_blocks > 0) blocks = std::min(blocks, kernels_.range_blocks);
  return Launch(kernels_.gather_ranges, rows,
                {data, pending.source_values, pending.starts,
                 static_cast<uint64_t>(pending.width), Address(pending.array->buffers[1]),
                 static_cast<uint64_t>(pending.width), static_cast<uint64_t>(rows),
                 static_cast<uint64_t>(rows_per_warp), total_at,
                 static_cast<uint64_t>(capacity)},
                blocks);
}

arrow::Result<std::shared_ptr<arrow::ArrayData>> Gathers::Finish(PendingGather pending,
                                                                 int64_t rows,
                                                                 int64_t valid_bits) {
  arrow::ArrayData& taken = *pending.array;
  if (taken.length != rows) {  // sized for every row of a mask: cut to the rows it selected
    taken.length = rows;
    const int64_t bits = (rows + 7) / 8;
    for (size_t i = 0; i < 2; ++i) {  // a binary's offsets are made for its rows
      if (taken.buffers[i] == nullptr || (i == 1 && pending.pending_ranges)) continue;
      const int64_t size =
          i == 0 || taken.type->id() == arrow::Type::BOOL ? bits : ByteWidth(*taken.type) * rows;
      taken.buffers[i] = arrow::SliceBuffer(taken.buffers[i], 0, size);
    }
  }
  const int64_t nulls = pending.counted_validity ? rows - valid_bits : 0;
  if (nulls == 0) taken.buffers[0] = nullptr;
  taken.null_count.store(nulls);
  return std::move(pending.array);
}

arrow::Result<GatherRows> Gathers::Rows(const RowSelector& selector) {
  ARROW_ASSIGN_OR_RAISE(auto counters, Zeros(16));  // an index out of range; a mask's rows
  const uint64_t out_of_range = Address(counters), mask_rows = out_of_range + 8;
  ARROW_ASSIGN_OR_RAISE(GatherRows rows, MakeRows(selector, out_of_range, mask_rows));
  if (selector.kind == RowSelector::Kind::kIndices && rows.length > 0) {
    int64_t bad = 0;
    ARROW_RETURN_NOT_OK(Read(&bad, out_of_range, 8));
    if (bad != 0) return IndexOutOfBounds(selector.bound);
  }
  return rows;
}

arrow::Result<int64_t> Gathers::Scan(uint64_t src, int src_width, int64_t n, uint64_t out,
                                     int out_width) {
  if (n == 0) {
    ARROW_RETURN_NOT_OK(
        Launch(kernels_.fill_bytes, out_width, {out, static_cast<uint64_t>(out_width), 0}));
    return 0;
  }
  ARROW_ASSIGN_OR_RAISE(auto total, Alloc(8));
  ARROW_RETURN_NOT_OK(QueueScan(src, src_width, n, out, out_width, Address(total)));
  int64_t value = 0;
  ARROW_RETURN_NOT_OK(Read(&value, Address(total), 8));
  return value;
}

arrow::Result<uint64_t> Gathers::Positions(GatherRows* rows) {
  if (rows->positions != kNone || rows->length == 0) return rows->positions;
  const int64_t n = rows->length;
  ARROW_ASSIGN_OR_RAISE(auto positions, Alloc(8 * n));
  if (rows->indices == kNone) {  // a mask's
    ARROW_RETURN_NOT_OK(Compact(kernels_.compact, {Address(positions), kNone, 8}, *rows));
  } else {  // indices, each checked
    ARROW_RETURN_NOT_OK(Launch(
        kernels_.indices, n,
        {Address(positions), rows->indices, static_cast<uint64_t>(rows->index_width),
         static_cast<uint64_t>(rows->index_signed), rows->indices_valid,
         static_cast<uint64_t>(rows->indices_offset), static_cast<uint64_t>(n),
         static_cast<uint64_t>(rows->bound), rows->out_of_range}));
    rows->indices_checked = true;
  }
  rows->positions = Address(positions);
  return rows->positions;
}

// The validity bitmap of `taken`'s n rows, for a gather to write in whole 32-bit words:
// its address, or kNone where `wanted` is false (no bitmap).
arrow::Result<uint64_t> Gathers::GatheredValidity(bool wanted, int64_t n,
                                                  arrow::ArrayData* taken) {
  if (!wanted) return kNone;
  ARROW_ASSIGN_OR_RAISE(auto words, Alloc(4 * ((n + 31) / 32)));
  const uint64_t address = Address(words);
  taken->buffers[0] = arrow::SliceBuffer(std::move(words), 0, (n + 7) / 8);
  return address;
}

// Values `width` bytes wide at the rows, from their indices (checked as they are read) or
// positions, with the rows' validity where `valid_dst` is given (whole 32-bit words).
arrow::Status Gathers::Gather(uint64_t dst, uint64_t src, int64_t width, GatherRows* rows,
                              uint64_t valid_dst, uint64_t valid_src, int64_t valid_offset,
                              uint64_t valid_count) {
  std::vector<uint64_t> args{dst, src, static_cast<uint64_t>(width)};
  const std::array<uint64_t, 6> indices = IndexArgs(rows);
  args.insert(args.end(), indices.begin(), indices.end());
  args.insert(args.end(), {valid_dst, valid_src, static_cast<uint64_t>(valid_offset),
                           valid_dst == kNone ? kNone : valid_count});
  return Launch(kernels_.gather, rows->length, std::move(args));
}

// The kernels' GatherIndices of the rows and their count: the indices as they are (each
// checked as it is read, flagged at the out-of-range counter) where no positions were made,
// else the positions.
std::array<uint64_t, 6> Gathers::IndexArgs(GatherRows* rows) {
  const bool direct = rows->positions == kNone;
  rows->indices_checked = rows->indices_checked || direct;
  return {direct ? rows->indices : rows->positions,
          static_cast<uint64_t>(direct ? rows->index_width : 8),
          static_cast<uint64_t>(direct ? rows->index_signed : true),
          static_cast<uint64_t>(rows->length),
          static_cast<uint64_t>(direct ? rows->bound : kNoBound),
          direct ? rows->out_of_range : kNone};
}

// A compaction by the mask of `rows` (ag_compact, ag_compact_ranges): the kernel's
// `outputs` (its arguments before the mask's) at the rows the mask selects, and its
// `trailing` arguments after the mask's.
arrow::Status Gathers::Compact(CUfunction kernel, std::vector<uint64_t> outputs,
                               const GatherRows& rows, std::vector<uint64_t> trailing) {
  const int64_t n = rows.mask_length;
  outputs.insert(outputs.end(),
                 {rows.mask_values, static_cast<uint64_t>(rows.mask_offset), rows.mask_valid,
                  static_cast<uint64_t>(rows.mask_offset), static_cast<uint64_t>(rows.mode),
                  static_cast<uint64_t>(n), rows.ranks});
  outputs.insert(outputs.end(), trailing.begin(), trailing.end());
  return Launch(kernel, (n + kMaskGroupRows - 1) / kMaskGroupRows, std::move(outputs));
}

// The bits of `bits` (from bit `offset`; all set where absent) at the rows; how many are
// set is added to the counter at `count_at` (kNone: not counted).
arrow::Result<std::shared_ptr<arrow::Buffer>> Gathers::TakeBits(
    const std::shared_ptr<arrow::Buffer>& bits, int64_t offset, GatherRows* rows,
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
  ARROW_ASSIGN_OR_RAISE(uint64_t positions, Positions(rows));
  ARROW_ASSIGN_OR_RAISE(auto out, Alloc((n + 7) / 8));
  ARROW_RETURN_NOT_OK(Launch(kernels_.gather_bits, (n + 7) / 8,
                             {Address(out), Address(bits), static_cast<uint64_t>(offset),
                              positions, static_cast<uint64_t>(n), count_at}));
  return out;
}

arrow::Result<int64_t> Gathers::CountSetBits(uint64_t bits, int64_t offset, int64_t n) {
  if (n <= 0) return 0;
  const int64_t first = offset / 8, nbytes = (offset + n + 7) / 8 - first;
  if (nbytes <= kHostCountBytes) {  // read back as they are: no launch
    std::vector<uint8_t> host(nbytes);
    ARROW_RETURN_NOT_OK(Read(host.data(), bits + first, nbytes));
    return arrow::internal::CountSetBits(host.data(), offset % 8, n);
  }
  // A count per block, summed here: no counter to zero first (a launch a small call saves).
  const int64_t blocks = Blocks(nbytes);  // a thread a byte
  ARROW_ASSIGN_OR_RAISE(auto counts, Alloc(8 * blocks));
  ARROW_RETURN_NOT_OK(Launch(kernels_.popcount, 0,
                             {bits, static_cast<uint64_t>(offset), static_cast<uint64_t>(n),
                              Address(counts)},
                             blocks));
  std::vector<int64_t> values(blocks);
  ARROW_RETURN_NOT_OK(Read(values.data(), Address(counts), 8 * blocks));
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

// Queues the exclusive scan of `n` integers `src_width` bytes wide at `src` into `out`
// (entries of `out_width` bytes, n + 1 of them), its total to the int64 at `total`, without
// waiting: one launch (ag_scan).
arrow::Status Gathers::QueueScan(uint64_t src, int src_width, int64_t n, uint64_t out,
                                 int out_width, uint64_t total) {
  ARROW_ASSIGN_OR_RAISE(uint64_t state, ScanState(n));
  return Launch(kernels_.scan, 0,
                {src, static_cast<uint64_t>(src_width), static_cast<uint64_t>(n), out,
                 static_cast<uint64_t>(out_width), total, state},
                ScanTiles(n));
}

// The zeroed state of a scan of `n` inputs (ag_scan, ag_mask_ranks) through which its tiles
// past the first find their prefixes; none (kNone) for one tile.
arrow::Result<uint64_t> Gathers::ScanState(int64_t n) {
  if (ScanTiles(n) == 1) return kNone;
  ARROW_ASSIGN_OR_RAISE(auto zeros, Zeros(ScanStateBytes(n)));
  return Address(zeros);
}

// A grid of `blocks`, or (blocks < 0) one thread per `threads_wanted` (Blocks); nothing
// for no threads.
arrow::Status Gathers::Launch(CUfunction function, int64_t threads_wanted,
                              std::vector<uint64_t> args, int64_t blocks) {
  if (blocks < 0) {
    if (threads_wanted <= 0) return arrow::Status::OK();
    blocks = Blocks(threads_wanted);
  }
  MarkQueued();
  return arrow_gpu::Launch(context_, function, blocks, kThreads, args, launch_stream());
}

int64_t Gathers::Blocks(int64_t threads_wanted) const {
  return std::min((threads_wanted + kThreads - 1) / kThreads, kernels_.max_blocks);
}

// Device memory of the package's allocator; scratch stays alive as long as the gathers
// (their launches may still run when a result's buffer is handed out).
arrow::Result<std::shared_ptr<arrow::Buffer>> Gathers::Alloc(int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, manager_->AllocateBuffer(std::max<int64_t>(nbytes, 0)));
  std::shared_ptr<arrow::Buffer> shared(std::move(buffer));
  scratch_.push_back(shared);
  return shared;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> Gathers::Zeros(int64_t nbytes) {
  if (zeros_ != nullptr && zeros_used_ + nbytes <= zeros_->size()) {
    auto piece = arrow::SliceBuffer(zeros_, zeros_used_, nbytes);
    zeros_used_ += ZerosPiece(nbytes);
    return piece;
  }
  ARROW_ASSIGN_OR_RAISE(auto buffer, Alloc(nbytes));
  ARROW_RETURN_NOT_OK(FillZeros(Address(buffer), nbytes));
  return buffer;
}

arrow::Status Gathers::ReserveZeros(int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(zeros_, Alloc(nbytes));
  zeros_used_ = 0;
  return FillZeros(Address(zeros_), nbytes);
}

// A thread per 16 bytes, as ag_fill_bytes stores them: a thread a byte made a grid of the
// device's share for a bitmap of a few MB, most of its threads idle.
arrow::Status Gathers::FillZeros(uint64_t address, int64_t nbytes) {
  return Launch(kernels_.fill_bytes, (nbytes + 15) / 16,
                {address, static_cast<uint64_t>(nbytes), 0});
}

arrow::Status Gathers::Read(void* dst, uint64_t src, int64_t nbytes) {
  ARROW_RETURN_NOT_OK(Join());  // what the forked work counted, too
  ARROW_RETURN_NOT_OK(ReadBack(context_, dst, src, nbytes, stream_));
  unsettled_ = false;
  return arrow::Status::OK();
}

arrow::Result<QueuedRead> Gathers::QueueRead(uint64_t src, int64_t nbytes) {
  if (launch_stream() == stream_) ARROW_RETURN_NOT_OK(Join());
  MarkQueued();
  return QueuedRead::Queue(context_, src, nbytes, launch_stream());
}

void Gathers::MarkQueued() {
  unsettled_ = true;
  if (lane_ != Lane::kCaller && lent_[LentIndex(lane_)] != nullptr) {
    unjoined_[LentIndex(lane_)] = true;
  }
}

arrow::Status Gathers::Synchronize() {
  ARROW_RETURN_NOT_OK(context_.SynchronizeStream(stream_));
  unsettled_ = false;
  return arrow::Status::OK();
}

arrow::Status Gathers::Settle() { return unsettled_ ? Synchronize() : arrow::Status::OK(); }

arrow::Status SizeRangeGrid(const CudaContext& context, SelectKernels* kernels) {
  ARROW_ASSIGN_OR_RAISE(kernels->range_blocks,
                        ResidentBlocks(context, kernels->gather_ranges, kThreads));
  return arrow::Status::OK();
}

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
  Gathers gathers(manager, kernels, stream);
  // Slots of one zeroed buffer, read back once: 0 an index out of range, 1 the rows a mask
  // selects, then per column the set bits of its validity and its selected bytes.
  const int slots = 2 + 2 * static_cast<int>(columns.size());
  // Zeroed memory, filled by one launch: the counters and the scans' states (the mask's
  // groups; a binary column's sizes, at most as many as the selector's rows), and the words
  // a mask compacts each bitmap into where they are small too.
  const bool by_mask = selector.kind == RowSelector::Kind::kMask;
  const int64_t n = selector.data->length;
  int64_t zero_bytes = ZerosPiece(8 * slots), bitmap_bytes = 0;
  if (by_mask) zero_bytes += ZerosPiece(ScanStateBytes((n + 31) / 32));
  for (const auto& column : columns) {
    if (IsBinaryLike(column->type->id())) zero_bytes += ZerosPiece(ScanStateBytes(n));
    if (by_mask) {
      bitmap_bytes += ZerosPiece(4 * ((n + 31) / 32)) *
                      (MayHaveNulls(*column) + (column->type->id() == arrow::Type::BOOL));
    }
  }
  if (zero_bytes + bitmap_bytes <= kSharedZerosBytes) zero_bytes += bitmap_bytes;
  ARROW_RETURN_NOT_OK(gathers.ReserveZeros(zero_bytes));
  ARROW_ASSIGN_OR_RAISE(auto counters, gathers.Zeros(8 * slots));
  auto slot = [&counters](int i) { return Address(counters) + 8 * i; };
  // A mask's gathers are queued before its count is known where the results they make for
  // every row of the mask are small (cut to the rows later). A binary column's share is its
  // validity; its offsets and bytes are made once the count is known, from starts and sizes
  // (scratch, freed on return) of 8 or 16 bytes a row besides.
  // A larger mask's binary columns size their rows before its count is read, at every row
  // of the mask (scratch, of 8 or 16 bytes a row; kRangesFirstBytes at most). The count is
  // read behind the mask's scan while the device goes on with the sizing (QueuedRead); once
  // it is known, the sizes' scan into the offsets is queued behind the sizing, the other
  // columns' gathers beside it, and the bytes' copy into room for as many as expected
  // (GatherRangesAhead) behind the scan: the device never waits for the host in between,
  // and the host waits on the stream once, for the null counts and the bytes. Null slots of
  // the mask that become null rows are picked by positions, which wait for the count.
  int64_t row_bytes = 0, range_bytes = 0;
  for (const auto& column : columns) {
    const arrow::Type::type id = column->type->id();
    if (IsBinaryLike(id)) {
      row_bytes += 1;
      range_bytes += 2 * OffsetWidth(id) * n;
    } else {
      row_bytes += 1 + (id == arrow::Type::BOOL ? 1 : ByteWidth(*column->type));
    }
  }
  const bool defer_count = by_mask && n * row_bytes <= kUncountedBytes;
  const bool ranges_first = by_mask && !defer_count && range_bytes > 0 &&
                            range_bytes <= kRangesFirstBytes &&
                            !(selector.emit_null && MayHaveNulls(*selector.data));
  ARROW_ASSIGN_OR_RAISE(GatherRows rows,
                        gathers.MakeRows(selector, slot(0), slot(1), defer_count || ranges_first,
                                         /*direct_indices=*/true));
  std::vector<int64_t> counts(slots, 0);
  std::vector<std::optional<PendingGather>> ranges(columns.size());
  // A large mask's binary columns are sized, scanned and copied on a lane of their own, its
  // bitmaps compacted on another, beside the compactions of the other columns (Gathers::Lane).
  const bool fork = by_mask && n >= kForkRows && !defer_count;
  if (ranges_first) {
    ARROW_ASSIGN_OR_RAISE(QueuedRead count_read, gathers.QueueRead(slot(1), 8));
    if (fork) ARROW_RETURN_NOT_OK(gathers.Fork(Gathers::Lane::kRanges));
    gathers.Use(Gathers::Lane::kRanges);
    for (size_t i = 0; i < columns.size(); ++i) {
      if (!IsBinaryLike(columns[i]->type->id())) continue;
      ARROW_ASSIGN_OR_RAISE(ranges[i], gathers.QueueRanges(*columns[i], &rows, slot(2 + 2 * i),
                                                          slot(3 + 2 * i)));
    }
    gathers.Use(Gathers::Lane::kCaller);
    ARROW_RETURN_NOT_OK(count_read.Wait(&rows.length));
    rows.length_pending = false;
    gathers.Use(Gathers::Lane::kRanges);
    for (std::optional<PendingGather>& queued : ranges) {
      if (queued) ARROW_RETURN_NOT_OK(gathers.ScanOffsets(&*queued, rows.length));
    }
    gathers.Use(Gathers::Lane::kCaller);
  } else if (fork && range_bytes > 0) {
    ARROW_RETURN_NOT_OK(gathers.Fork(Gathers::Lane::kRanges));
  }
  if (fork && bitmap_bytes > 0) ARROW_RETURN_NOT_OK(gathers.Fork(Gathers::Lane::kBitmaps));
  std::vector<PendingGather> pending;
  pending.reserve(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    ARROW_ASSIGN_OR_RAISE(auto queued,
                          gathers.Queue(*columns[i], &rows, slot(2 + 2 * i), slot(3 + 2 * i),
                                        ranges[i] ? &*ranges[i] : nullptr));
    pending.push_back(std::move(queued));
  }
  gathers.Use(Gathers::Lane::kRanges);
  for (PendingGather& queued : pending) {
    ARROW_RETURN_NOT_OK(gathers.GatherRangesAhead(&queued, rows.length));
  }
  gathers.Use(Gathers::Lane::kCaller);
  // Indices that no gather has read (no columns, or none gathered by index) are checked.
  if (selector.kind == RowSelector::Kind::kIndices && !rows.indices_checked) {
    ARROW_RETURN_NOT_OK(gathers.Positions(&rows).status());
  }
  ARROW_RETURN_NOT_OK(gathers.Read(counts.data(), Address(counters), 8 * slots));
  if (selector.kind == RowSelector::Kind::kIndices && counts[0] != 0) {
    return IndexOutOfBounds(selector.bound);
  }
  if (rows.length_pending) rows.length = counts[1];
  // The lanes were joined to read the counters; bytes that outgrew their room (or whose
  // offsets waited for the count read with the counters) are copied now.
  for (size_t i = 0; i < pending.size(); ++i) {
    if (!pending[i].pending_ranges) continue;
    ARROW_RETURN_NOT_OK(gathers.GatherRanges(&pending[i], rows.length, counts[3 + 2 * i]));
  }
  // What was queued after the read must be done before the arrays are handed out.
  ARROW_RETURN_NOT_OK(gathers.Settle());
  Selected selected{rows.length, {}};
  for (size_t i = 0; i < pending.size(); ++i) {
    ARROW_ASSIGN_OR_RAISE(auto column,
                          gathers.Finish(std::move(pending[i]), rows.length, counts[2 + 2 * i]));
    selected.columns.push_back(std::move(column));
  }
  return selected;
}

}  // namespace arrow_gpu
