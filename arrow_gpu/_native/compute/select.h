// Rows of device arrays selected by a boolean mask or integer indices, planned and launched
// natively: the whole selection of a batch's flat columns (fixed-width values, bitmaps,
// binary and string ranges, dictionary indices) in one call, with the host waiting only for
// work ordered after the caller's stream, and only where a size must be known (the rows a
// mask selects; the bytes of the selected strings and every null count, read together).
// Nested types are the caller's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <arrow/array/data.h>
#include <arrow/result.h>
#include <arrow/type.h>

#include "columnar/device.h"
#include "cuda/kernels.h"
#include "engine/read_back.h"

namespace arrow_gpu {

// The kernels (of arrow_gpu/_compute/*.cu) a selection or a concatenation
// (compute/concat.h) launches, resolved once per loaded module, and the most blocks a
// launch gets (gather_ranges: those the device runs at once, where it can tell).
struct SelectKernels {
  CUfunction fill_bytes = nullptr;
  CUfunction indices = nullptr;
  CUfunction gather = nullptr;
  CUfunction gather_bits = nullptr;
  CUfunction mask_ranks = nullptr;
  CUfunction scan = nullptr;
  CUfunction compact = nullptr;
  CUfunction compact_bits = nullptr;
  CUfunction compact_ranges = nullptr;
  CUfunction range_sizes = nullptr;
  CUfunction gather_ranges = nullptr;
  CUfunction copy_ranges = nullptr;
  CUfunction copy_bit_ranges = nullptr;
  CUfunction rebase_ranges = nullptr;
  CUfunction popcount = nullptr;
  int64_t max_blocks = 1;
  int64_t range_blocks = 0;  // 0: max_blocks
};

// What picks the rows: integer indices of any width and sign (null: a null row), or a
// boolean mask whose null slots are dropped or emitted as null rows.
struct RowSelector {
  enum class Kind { kIndices, kMask };
  Kind kind = Kind::kIndices;
  std::shared_ptr<arrow::ArrayData> data;
  bool emit_null = false;  // kMask
  int64_t bound = 0;       // kIndices: the rows of the data, which every index must be below
};

// Sets kernels->range_blocks: the blocks of gather_ranges `context`'s device runs at once.
arrow::Status SizeRangeGrid(const CudaContext& context, SelectKernels* kernels);

// Whether SelectRows and Gathers gather arrays of `type`: the flat types.
bool SelectSupports(const arrow::DataType& type);

struct Selected {
  int64_t rows = 0;
  std::vector<std::shared_ptr<arrow::ArrayData>> columns;
};

// Each of `columns` (all of supported types, on `manager`'s device) at the rows `selector`
// picks, in new device memory of `manager`, with exact null counts; complete on return.
// Launches queue on `stream` (a large mask's latency-bound ones on lanes forked from it and
// joined back: Gathers::Lane); the host waits only for work ordered after `stream`'s. An
// index out of range is an IndexError, selected strings past 32-bit offsets a CapacityError.
arrow::Result<Selected> SelectRows(const std::shared_ptr<CudaMemoryManager>& manager,
                                   const SelectKernels& kernels, CUstream stream,
                                   const std::vector<std::shared_ptr<arrow::ArrayData>>& columns,
                                   const RowSelector& selector);

// Rows to gather (device addresses as integers, 0 for none): compacted straight from a
// boolean mask where one picked them and none of its null slots became a row, by indices
// without nulls that each gather checks as it reads them, else by int64 positions (-1 for a
// null row).
struct GatherRows {
  int64_t length = 0;
  // by_mask: `length` is the mask's, a bound on the rows it selects, whose count is read
  // with the other counters (the arrays are sized by the bound until then).
  bool length_pending = false;
  uint64_t length_at = 0;  // length_pending: where the device counts the rows
  bool may_have_nulls = false;  // some row is null
  bool by_mask = false;
  uint64_t mask_values = 0, mask_valid = 0;
  int64_t mask_offset = 0, mask_length = 0;
  int64_t mode = 0;     // of the kernels' group_word: 1 drops null mask slots, 2 emits them
  uint64_t ranks = 0;   // per 32 mask slots, the rank of the first selected row
  uint64_t positions = 0;  // by_mask, indices: made at the first gather that needs them
  // Indices read as they are (`index_width` bytes, signed or not; their validity from bit
  // `indices_offset`), each checked against `bound` by the gathers, which flag one out of
  // range at `out_of_range`.
  uint64_t indices = 0, indices_valid = 0, out_of_range = 0;
  int64_t index_width = 0, indices_offset = 0, bound = 0;
  bool index_signed = false;
  bool indices_checked = false;  // a gather or the positions have checked every index
};

// A flat array's gathers, queued: what completes its array once their counts are known.
struct PendingGather {
  std::shared_ptr<arrow::ArrayData> array;  // no null count yet, nor a binary's bytes
  bool counted_validity = false;
  // A binary-like array's bytes, gathered once their total is known, from each selected
  // row's start in the source's values (`width` wide, as the offsets), which the pass that
  // sized the rows kept.
  bool pending_ranges = false;
  uint64_t source_values = 0, starts = 0;
  // The source's buffers those addresses lie in: the caller may drop the array (a slice or
  // an extended copy made for this take) before the bytes are gathered.
  std::vector<std::shared_ptr<arrow::Buffer>> source_buffers;
  int width = 0;
  // Where the offsets wait for a mask's count: its sizes at the rows, whose scan the
  // offsets are. Their total is counted at `bytes_count` either way.
  bool offsets_pending = false;
  uint64_t sizes = 0, bytes_count = 0;
  // Room the bytes were copied into before their total was read (GatherRangesAhead).
  std::shared_ptr<arrow::Buffer> ahead;
};

// The gathers of flat arrays at rows, queued on `stream`. What they count goes to int64
// counters in zeroed device memory that the caller reads back once for all of them (one
// round trip), then completes the arrays. Device memory it allocates (scratch and results)
// stays alive as long as this does, and at least until the stream has run its launches.
class Gathers {
 public:
  Gathers(std::shared_ptr<CudaMemoryManager> manager, const SelectKernels& kernels,
          CUstream stream);
  // Waits on the stream where launches were queued since the host last did: a plan that
  // fails part way (a CapacityError, an allocation) must not hand their memory to the
  // allocator while they still run.
  ~Gathers();
  Gathers(const Gathers&) = delete;
  Gathers& operator=(const Gathers&) = delete;

  // The rows `selector` picks; an index out of range sets the counter at `out_of_range`.
  // The rows a mask selects are counted at `mask_rows`, which is read here (every later
  // allocation is sized by it) unless `defer_count` and the mask alone picks them: then
  // the caller reads it with the other counters (GatherRows::length_pending). Indices
  // without nulls are kept as they are where `direct_indices`: the caller then makes sure
  // that they are checked (GatherRows::indices_checked) before it reads the counter.
  arrow::Result<GatherRows> MakeRows(const RowSelector& selector, uint64_t out_of_range,
                                     uint64_t mask_rows, bool defer_count = false,
                                     bool direct_indices = false);

  // Queues the gathers of `column` (of a supported type) at `rows`: the set bits of its
  // validity at the rows are added to the counter at `valid_count` (where the rows may be
  // null or it has a validity bitmap); a binary-like column's selected bytes are written
  // to the one at `bytes_count`. A binary-like column's `ranges`, where given, were queued
  // by QueueRanges before (at the mask's every row, its count pending).
  arrow::Result<PendingGather> Queue(const arrow::ArrayData& column, GatherRows* rows,
                                     uint64_t valid_count, uint64_t bytes_count,
                                     PendingGather* ranges = nullptr);
  // The part of Queue that sizes a binary-like column's rows: what GatherRanges needs.
  arrow::Result<PendingGather> QueueRanges(const arrow::ArrayData& column, GatherRows* rows,
                                           uint64_t valid_count, uint64_t bytes_count);

  // `pending`'s array, given the counters' values: its length (`rows`), its exact null
  // count, a binary's bytes gathered (queued; complete once the stream reaches them):
  // GatherRanges, then Finish. Selected strings past 32-bit offsets are a CapacityError.
  arrow::Result<std::shared_ptr<arrow::ArrayData>> Complete(PendingGather pending,
                                                            int64_t rows, int64_t valid_bits,
                                                            int64_t bytes);
  // Queues the scan of a binary-like array's sizes into its offsets where they waited for
  // its `rows` to be counted (offsets_pending), their total to its bytes' counter again.
  arrow::Status ScanOffsets(PendingGather* pending, int64_t rows);
  // Queues the copy of a binary-like array's bytes, its `rows` known, before their total is
  // read: into room for the bytes expected and a little more (kAheadSlackBytes), which the
  // copy leaves untouched should the total exceed it. Then a take waits once, for its
  // counters, not a second time for the copy that their total sized. Room that cannot be
  // allocated is no error: the bytes are copied once their total is known.
  arrow::Status GatherRangesAhead(PendingGather* pending, int64_t rows);
  // Queues the copy of a binary-like array's `bytes` (and its offsets, where they waited
  // for the count of `rows`): what needs the bytes' count, not the null count. Bytes copied
  // ahead are kept in their room, cut to `bytes`, unless it holds many more; otherwise (or
  // where the room was too small) they are copied into a buffer of their own.
  arrow::Status GatherRanges(PendingGather* pending, int64_t rows, int64_t bytes);
  // `pending`'s array cut to `rows`, with its null count from `valid_bits`.
  arrow::Result<std::shared_ptr<arrow::ArrayData>> Finish(PendingGather pending, int64_t rows,
                                                          int64_t valid_bits);

  // The rows `selector` picks, ready for gathers of nested arrays as well: an index out
  // of range is an IndexError (read back here, one wait).
  arrow::Result<GatherRows> Rows(const RowSelector& selector);
  // The rows' int64 positions (-1 for a null row), made from the mask or the indices at
  // the first call.
  arrow::Result<uint64_t> Positions(GatherRows* rows);
  // The exclusive scan of `n` integers `src_width` (4 or 8) bytes wide at `src` into `out`
  // (n + 1 entries of `out_width` bytes), and its total, read back (one wait).
  arrow::Result<int64_t> Scan(uint64_t src, int src_width, int64_t n, uint64_t out,
                              int out_width);
  // How many of the `n` bits at `bits` from bit `offset` are set, read back (one wait):
  // every count of set bits the package makes on the device.
  arrow::Result<int64_t> CountSetBits(uint64_t bits, int64_t offset, int64_t n);

  // Zeroed device memory for counters and for bitmaps or'ed into: carved from what
  // ReserveZeros filled while it has room, else filled on its own.
  arrow::Result<std::shared_ptr<arrow::Buffer>> Zeros(int64_t nbytes);
  // Fills `nbytes` of device memory with one launch for the next Zeros to carve from.
  arrow::Status ReserveZeros(int64_t nbytes);
  // Device bytes once the work queued on the stream so far is done.
  arrow::Status Read(void* dst, uint64_t src, int64_t nbytes);
  // The same read queued, collected later (QueuedRead::Wait) while the stream goes on with
  // the work queued after it.
  arrow::Result<QueuedRead> QueueRead(uint64_t src, int64_t nbytes);
  arrow::Status Synchronize();
  // Waits on the stream where work was queued since the host last did.
  arrow::Status Settle();

  // Where launches go. A large mask's work bound by latency (bitmaps of a few MB; a binary
  // column's sizing, the scan of its sizes with its look-back, the copy of its bytes) is
  // forked from the caller's stream to streams the context lends, and runs beside the
  // compactions, which are bound by bandwidth. The caller's stream waits for the lanes on the
  // device (Join) before any counter is read; the host waits on a lane only for a read
  // queued there (the strings' byte count behind their sizing).
  enum class Lane { kCaller, kRanges, kBitmaps };
  // Lends `lane` a stream that waits, on the device, for the work queued on the caller's
  // stream so far.
  arrow::Status Fork(Lane lane);
  // Later launches go to `lane`'s stream; to the caller's where `lane` was not forked.
  void Use(Lane lane) { lane_ = lane; }
  // Makes the caller's stream wait for the work queued on every lane; Read does first.
  arrow::Status Join();

 private:
  arrow::Status Compact(CUfunction kernel, std::vector<uint64_t> outputs,
                        const GatherRows& rows, std::vector<uint64_t> trailing = {});
  arrow::Result<uint64_t> GatheredValidity(bool wanted, int64_t n, arrow::ArrayData* taken);
  arrow::Status Gather(uint64_t dst, uint64_t src, int64_t width, GatherRows* rows,
                       uint64_t valid_dst, uint64_t valid_src, int64_t valid_offset,
                       uint64_t valid_count);
  std::array<uint64_t, 6> IndexArgs(GatherRows* rows);
  // Launches the copy of `pending`'s `rows` rows' bytes (`bytes` of them, or about as many)
  // into `data`; its room `capacity` where `total_at` (their total) is not null.
  arrow::Status CopyRanges(const PendingGather& pending, int64_t rows, uint64_t data,
                           int64_t bytes, uint64_t total_at, int64_t capacity);
  arrow::Result<std::shared_ptr<arrow::Buffer>> TakeBits(
      const std::shared_ptr<arrow::Buffer>& bits, int64_t offset, GatherRows* rows,
      uint64_t count_at);
  arrow::Status QueueScan(uint64_t src, int src_width, int64_t n, uint64_t out, int out_width,
                          uint64_t total);
  arrow::Result<uint64_t> ScanState(int64_t n);
  // The blocks of a grid of one thread per `threads_wanted`, up to the device's share.
  int64_t Blocks(int64_t threads_wanted) const;
  arrow::Status Launch(CUfunction function, int64_t threads_wanted, std::vector<uint64_t> args,
                       int64_t blocks = -1);
  arrow::Result<std::shared_ptr<arrow::Buffer>> Alloc(int64_t nbytes);
  // Queues the zeroing of `nbytes` of device memory at `address`.
  arrow::Status FillZeros(uint64_t address, int64_t nbytes);
  // The stream of the lane in use (the caller's where it was not forked).
  CUstream launch_stream() const;
  // Work was queued on launch_stream().
  void MarkQueued();
  // Where a forked lane's stream and state are kept in lent_ and unjoined_.
  static size_t LentIndex(Lane lane) { return static_cast<size_t>(lane) - 1; }

  std::shared_ptr<CudaMemoryManager> manager_;
  const CudaContext& context_;
  SelectKernels kernels_;
  CUstream stream_;
  std::vector<std::shared_ptr<arrow::Buffer>> scratch_;
  std::shared_ptr<arrow::Buffer> zeros_;  // reserved; carved from zeros_used_ on
  int64_t zeros_used_ = 0;
  bool unsettled_ = false;  // launches queued since the host last waited on the stream
  Lane lane_ = Lane::kCaller;
  // Per forked lane (kRanges, kBitmaps): its lent stream, and whether work was queued on it
  // since the caller's stream last waited for it.
  std::array<CUstream, 2> lent_{nullptr, nullptr};
  std::array<bool, 2> unjoined_{false, false};
};

}  // namespace arrow_gpu
