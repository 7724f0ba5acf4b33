// Each twin reads its parameters in the kernel's order and does what every thread of the grid
// does. Kernels whose grid-stride loops give each position to exactly one thread, and whose
// atomics only add or OR, give the same result for any grid: their twins loop over the
// positions. The batched copies, whose grid matters, are in kernel_twins_ranges.cc; what the
// twins share is in kernel_twins_common.h.
#include "driver/kernel_twins.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "driver/kernel_twins_common.h"

namespace arrow_gpu {
namespace twins {
namespace {

bool WholeWarps(unsigned threads) { return threads % 32 == 0; }

// Index i of `idx` as a position (the kernels' position_at): -1 where it is not in
// [0, bound), flagged at `bad` where that is not null.
i64 PositionAt(const u8* idx, i64 i, i64 width, i64 is_signed, i64 bound, u8* bad) {
  i64 j = LoadInt(idx, i, width, is_signed);
  if (j >= 0 && j < bound) return j;
  if (bad != nullptr) Store<uint32_t>(bad, 0, Load<uint32_t>(bad, 0) | 1u);
  return -1;
}

// The validity a gather makes beside its values (the kernels' GatherValidity): bit i of
// `dst` for row i, in whole 32-bit words, their bits set added to `count` (either may be
// null).
class GatheredValidity {
 public:
  GatheredValidity(u8* dst, u64* count, i64 rows) : dst_(dst), count_(count), rows_(rows) {}
  void Add(i64 i, bool valid) {
    if (valid) word_ |= 1u << (i & 31);
    if ((i & 31) == 31 || i == rows_ - 1) {
      if (dst_ != nullptr) Store<uint32_t>(dst_, i >> 5, word_);
      set_ += Popcount(word_);
      word_ = 0;
    }
  }
  void Finish() {
    if (dst_ != nullptr && count_ != nullptr) AddCount(count_, set_);
  }

 private:
  u8* dst_;
  u64* count_;
  i64 rows_;
  uint32_t word_ = 0;
  u64 set_ = 0;
};

CUresult Indices(unsigned, unsigned, void** params) {
  Params p(params);
  auto* out = p.Pointer<u8>();
  auto* idx = p.Pointer<const u8>();
  i64 width = p.Int(), is_signed = p.Int();
  auto* valid = p.Pointer<const u8>();
  i64 valid_off = p.Int(), n = p.Int(), bound = p.Int();
  auto* bad = p.Pointer<u8>();
  for (i64 i = 0; i < n; ++i) {
    Store<i64>(out, i,
               BitAt(valid, valid_off + i) ? PositionAt(idx, i, width, is_signed, bound, bad)
                                           : -1);
  }
  return CUDA_SUCCESS;
}

CUresult Gather(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads)) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  i64 width = p.Int();
  auto* idx = p.Pointer<const u8>();
  i64 idx_width = p.Int(), idx_signed = p.Int(), n = p.Int(), bound = p.Int();
  auto* bad = p.Pointer<u8>();
  auto* valid_dst = p.Pointer<u8>();
  auto* valid_src = p.Pointer<const u8>();
  i64 valid_off = p.Int();
  GatheredValidity validity(valid_dst, p.Pointer<u64>(), n);
  for (i64 i = 0; i < n; ++i) {
    i64 j = PositionAt(idx, i, idx_width, idx_signed, bound, bad);
    bool valid = j >= 0 && BitAt(valid_src, valid_off + j);
    if (valid_dst != nullptr && !valid) j = -1;  // a null value is not read
    if (width > 0 && j >= 0) {
      std::memcpy(dst + i * width, src + j * width, width);
    } else if (width > 0) {
      std::memset(dst + i * width, 0, width);
    }
    validity.Add(i, valid);
  }
  validity.Finish();
  return CUDA_SUCCESS;
}

CUresult GatherBits(unsigned, unsigned, void** params) {
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  i64 src_off = p.Int();
  auto* idx = p.Pointer<const u8>();
  i64 n = p.Int();
  auto* set_count = p.Pointer<u64>();
  u64 count = 0;
  for (i64 b = 0; b < (n + 7) >> 3; ++b) {
    unsigned byte = ByteOf(b, n, [&](i64 i) {
      i64 j = Load<i64>(idx, i);
      return j >= 0 ? BitAt(src, src_off + j) : 0u;
    });
    dst[b] = static_cast<u8>(byte);
    count += Popcount(byte);
  }
  if (set_count != nullptr) AddCount(set_count, count);
  return CUDA_SUCCESS;
}

CUresult CopyBits(unsigned, unsigned, void** params) {
  Params p(params);
  auto* dst = p.Pointer<u8>();
  i64 dst_off = p.Int();
  auto* src = p.Pointer<const u8>();
  i64 src_off = p.Int(), n = p.Int(), invert = p.Int();
  if (n <= 0) return CUDA_SUCCESS;
  for (i64 b = dst_off >> 3; b <= (dst_off + n - 1) >> 3; ++b) {
    unsigned byte = dst[b];
    for (int bit = 0; bit < 8; ++bit) {
      i64 d = b * 8 + bit;
      if (d < dst_off || d >= dst_off + n) continue;
      unsigned v = BitAt(src, src_off + (d - dst_off)) ^ static_cast<unsigned>(invert);
      byte = (byte & ~(1u << bit)) | (v << bit);
    }
    dst[b] = static_cast<u8>(byte);
  }
  return CUDA_SUCCESS;
}

CUresult PopcountBits(unsigned blocks, unsigned threads, void** params) {
  Params p(params);
  auto* bits = p.Pointer<const u8>();
  i64 off = p.Int(), n = p.Int();
  auto* block_counts = p.Pointer<u8>();
  std::vector<u64> counts(blocks, 0);
  const i64 first = off >> 3, last = (off + n - 1) >> 3;
  const i64 grid = static_cast<i64>(blocks) * threads;
  for (i64 b = first; n > 0 && b <= last; ++b) {
    unsigned v = bits[b];
    if (b == first) v &= 0xffu << (off & 7);
    if (b == last) v &= 0xffu >> (7 - ((off + n - 1) & 7));
    counts[((b - first) % grid) / threads] += Popcount(v);  // the block whose thread reads it
  }
  for (unsigned block = 0; block < blocks; ++block) Store<u64>(block_counts, block, counts[block]);
  return CUDA_SUCCESS;
}

i64 RangeStart(const u8* offsets, i64 width, i64 fixed, i64 j) {
  return fixed > 0 ? j * fixed : LoadInt(offsets, j, width, 1);
}

CUresult RangeSizes(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads)) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* sizes_out = p.Pointer<u8>();
  auto* offsets = p.Pointer<const u8>();
  auto* sizes = p.Pointer<const u8>();
  i64 width = p.Int();
  auto* idx = p.Pointer<const u8>();
  i64 idx_width = p.Int(), idx_signed = p.Int(), n = p.Int(), bound = p.Int();
  auto* bad = p.Pointer<u8>();
  n = CountedInputs(n, p.Pointer<const u8>());
  auto* valid_dst = p.Pointer<u8>();
  auto* valid_src = p.Pointer<const u8>();
  i64 valid_off = p.Int();
  GatheredValidity validity(valid_dst, p.Pointer<u64>(), n);
  auto* starts_out = p.Pointer<u8>();
  for (i64 i = 0; i < n; ++i) {
    i64 j = PositionAt(idx, i, idx_width, idx_signed, bound, bad), start = 0, size = 0;
    if (j >= 0) {
      start = LoadInt(offsets, j, width, 1);
      size = sizes != nullptr ? LoadInt(sizes, j, width, 1)
                              : LoadInt(offsets, j + 1, width, 1) - start;
    }
    StoreInt(sizes_out, i, width, size);
    if (starts_out != nullptr) StoreInt(starts_out, i, width, start);
    validity.Add(i, j >= 0 && BitAt(valid_src, valid_off + j));
  }
  validity.Finish();
  return CUDA_SUCCESS;
}

// What a scan leaves (ag_scan, ag_mask_ranks): out[i] = the sum of in(0) .. in(i - 1)
// (`out_width` bytes wide), out[n] and *total_out = the total. With a state, each tile takes a
// ticket and leaves its status at its inclusive prefix (the flag TILE_PREFIX in the top two
// bits, the value in 62); without one, a single block scans.
template <typename Input>
CUresult ScanItems(unsigned blocks, unsigned threads, Input in, i64 n, u8* out, i64 out_width,
                   u8* total_out, u8* state) {
  // A block per tile of SCAN_THREADS threads (its warps' sums meet in shared memory sized
  // for them).
  if (threads != kScanThreads) return CUDA_ERROR_INVALID_VALUE;
  if (state == nullptr && blocks != 1) return CUDA_ERROR_INVALID_VALUE;
  constexpr u64 kTilePrefix = u64{2} << 62, kValueBits = (u64{1} << 62) - 1;
  i64 run = 0;
  for (i64 b = 0; b < blocks; ++b) {
    for (i64 i = b * kScanTile; i < std::min((b + 1) * kScanTile, n); ++i) {
      StoreInt(out, i, out_width, run);
      run = Add(run, in(i));
    }
    if (state != nullptr) Store<u64>(state, 1 + b, kTilePrefix | (static_cast<u64>(run) & kValueBits));
  }
  if (state != nullptr) Store<i64>(state, 0, blocks);
  StoreInt(out, n, out_width, run);  // the last tile writes the total, wherever n ends
  Store<i64>(total_out, 0, run);
  return CUDA_SUCCESS;
}

CUresult Scan(unsigned blocks, unsigned threads, void** params) {
  Params p(params);
  auto* in = p.Pointer<const u8>();
  i64 in_width = p.Int(), n = p.Int();
  auto* out = p.Pointer<u8>();
  i64 out_width = p.Int();
  auto* total_out = p.Pointer<u8>();
  auto* state = p.Pointer<u8>();
  return ScanItems(blocks, threads, [&](i64 i) { return LoadInt(in, i, in_width, 1); }, n, out,
                   out_width, total_out, state);
}

// The rows of group g (32g .. 32g + 31) a mask selects, by `mode` (filter.cuh's group_word).
struct Mask {
  const u8* mask;
  i64 mask_off;
  const u8* valid;
  i64 valid_off;
  i64 mode;
  i64 n;

  static Mask Read(Params* p) {
    Mask m;
    m.mask = p->Pointer<const u8>();
    m.mask_off = p->Int();
    m.valid = p->Pointer<const u8>();
    m.valid_off = p->Int();
    m.mode = p->Int();
    m.n = p->Int();
    return m;
  }

  i64 groups() const { return (n + 31) >> 5; }

  unsigned Word(i64 g) const {
    i64 first = 32 * g;
    i64 count = std::min<i64>(n - first, 32);
    auto values = static_cast<unsigned>(LoadBits(mask, mask_off + first, count));
    auto is_valid = static_cast<unsigned>(LoadBits(valid, valid_off + first, count));
    unsigned rows = count == 32 ? 0xffffffffu : (1u << count) - 1u;
    return mode == 2 ? (values & is_valid) | (~is_valid & rows) : values & is_valid;
  }
};

// The scan of the mask's groups' counts of selected rows.
CUresult MaskRanks(unsigned blocks, unsigned threads, void** params) {
  Params p(params);
  Mask m = Mask::Read(&p);
  auto* ranks = p.Pointer<u8>();
  auto* total = p.Pointer<u8>();
  auto* state = p.Pointer<u8>();
  return ScanItems(blocks, threads, [&m](i64 g) { return i64{Popcount(m.Word(g))}; },
                   m.groups(), ranks, 8, total, state);
}

// Each row the mask selects, in order, with its rank among them (from its group's first
// rank): what every compaction by a mask visits.
template <typename F>
void ForEachSelected(const Mask& m, const u8* group_ranks, F&& visit) {
  for (i64 g = 0; g < m.groups(); ++g) {
    unsigned picked = m.Word(g);
    i64 rank = Load<i64>(group_ranks, g);
    for (unsigned lane = 0; lane < 32; ++lane, picked >>= 1) {
      if ((picked & 1u) != 0) visit(32 * g + lane, rank++);
    }
  }
}

// The kernels take 4 to 16 groups a warp at a time: every group once, whatever the grid of
// whole warps.
CUresult Compact(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads)) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  i64 width = p.Int();
  Mask m = Mask::Read(&p);
  ForEachSelected(m, p.Pointer<const u8>(), [&](i64 i, i64 rank) {
    if (src == nullptr) {
      Store<i64>(dst, rank, BitAt(m.valid, m.valid_off + i) ? i : -1);
    } else if (width > 0) {
      std::memcpy(dst + rank * width, src + i * width, width);
    }
  });
  return CUDA_SUCCESS;
}

CUresult CompactRanges(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads)) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* starts = p.Pointer<u8>();
  auto* sizes = p.Pointer<u8>();
  auto* offsets = p.Pointer<const u8>();
  i64 width = p.Int();
  Mask m = Mask::Read(&p);
  auto* group_ranks = p.Pointer<const u8>();
  auto* bytes = p.Pointer<u64>();
  u64 sum = 0;
  ForEachSelected(m, group_ranks, [&](i64 i, i64 rank) {
    i64 start = LoadInt(offsets, i, width, 1);
    i64 size = LoadInt(offsets, i + 1, width, 1) - start;
    StoreInt(starts, rank, width, start);
    StoreInt(sizes, rank, width, size);
    sum += static_cast<u64>(size);
  });
  if (bytes != nullptr) AddCount(bytes, sum);
  return CUDA_SUCCESS;
}

CUresult CompactBits(unsigned, unsigned, void** params) {
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  i64 src_off = p.Int();
  Mask m = Mask::Read(&p);
  auto* group_ranks = p.Pointer<const u8>();
  auto* set_count = p.Pointer<u64>();
  u64 count = 0;
  for (i64 g = 0; g < m.groups(); ++g) {
    unsigned picked = m.Word(g);
    if (picked == 0u) continue;
    i64 first = 32 * g;
    auto bits = static_cast<unsigned>(LoadBits(src, src_off + first, std::min<i64>(m.n - first, 32)));
    unsigned word = 0, next = 1;  // the selected bits, packed from bit 0
    for (unsigned rest = picked; rest != 0u; rest &= rest - 1, next <<= 1) {
      if (bits & rest & (0u - rest)) word |= next;
    }
    i64 at = Load<i64>(group_ranks, g);
    unsigned shift = static_cast<unsigned>(at & 31);
    Store<uint32_t>(dst, at >> 5, Load<uint32_t>(dst, at >> 5) | (word << shift));
    if (shift + Popcount(picked) > 32u) {
      Store<uint32_t>(dst, (at >> 5) + 1, Load<uint32_t>(dst, (at >> 5) + 1) | (word >> (32u - shift)));
    }
    count += Popcount(word);
  }
  if (set_count != nullptr) AddCount(set_count, count);
  return CUDA_SUCCESS;
}

CUresult ExpandRanges(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads)) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* out = p.Pointer<u8>();
  auto* offsets = p.Pointer<const u8>();
  i64 width = p.Int(), fixed = p.Int();
  auto* idx = p.Pointer<const u8>();
  auto* dst_offsets = p.Pointer<const u8>();
  i64 dst_width = p.Int(), n = p.Int();
  for (i64 i = 0; i < n; ++i) {
    i64 j = Load<i64>(idx, i);
    i64 d0 = fixed > 0 ? i * fixed : LoadInt(dst_offsets, i, dst_width, 1);
    i64 length = (fixed > 0 ? d0 + fixed : LoadInt(dst_offsets, i + 1, dst_width, 1)) - d0;
    i64 start = j >= 0 ? RangeStart(offsets, width, fixed, j) : -1;
    for (i64 k = 0; k < length; ++k) Store<i64>(out, d0 + k, start >= 0 ? start + k : -1);
  }
  return CUDA_SUCCESS;
}

CUresult GatherRanges(unsigned, unsigned threads, void** params) {
  if (!WholeWarps(threads) || threads > kRangeThreads) return CUDA_ERROR_INVALID_VALUE;
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  auto* starts = p.Pointer<const u8>();
  i64 width = p.Int();
  auto* dst_offsets = p.Pointer<const u8>();
  i64 dst_width = p.Int(), n = p.Int(), rows_per_warp = p.Int();
  const auto* total_at = p.Pointer<const i64>();
  i64 capacity = p.Int();
  // A warp's rows are taken ROWS_AT_ONCE (8) at a time, up to its 32 lanes.
  if (rows_per_warp != 8 && rows_per_warp != 32) return CUDA_ERROR_INVALID_VALUE;
  if (total_at != nullptr && *total_at > capacity) return CUDA_SUCCESS;
  for (i64 i = 0; i < n; ++i) {
    i64 d = LoadInt(dst_offsets, i, dst_width, 1);
    i64 length = LoadInt(dst_offsets, i + 1, dst_width, 1) - d;
    if (length <= 0) continue;
    i64 s = LoadInt(starts, i, width, 1);
    std::memmove(dst + d, src + s, length);
  }
  return CUDA_SUCCESS;
}

CUresult AndBits(unsigned, unsigned, void** params) {
  Params p(params);
  auto* dst = p.Pointer<u8>();
  auto* src = p.Pointer<const u8>();
  i64 src_off = p.Int(), n = p.Int();
  for (i64 b = 0; b < (n + 7) >> 3; ++b) {
    dst[b] &= static_cast<u8>(ByteOf(b, n, [&](i64 i) { return BitAt(src, src_off + i); }));
  }
  return CUDA_SUCCESS;
}

CUresult FillBytes(unsigned, unsigned, void** params) {
  Params p(params);
  auto* dst = p.Pointer<u8>();
  i64 n = p.Int(), value = p.Int();
  if (n > 0) std::memset(dst, static_cast<u8>(value), n);
  return CUDA_SUCCESS;
}

CUresult ReplaceNulls(unsigned, unsigned, void** params) {
  Params p(params);
  auto* idx = p.Pointer<u8>();
  i64 n = p.Int(), replacement = p.Int();
  for (i64 i = 0; i < n; ++i) {
    if (Load<i64>(idx, i) < 0) Store<i64>(idx, i, replacement);
  }
  return CUDA_SUCCESS;
}

CUresult UnionValidity(unsigned, unsigned, void** params) {
  Params p(params);
  auto* out = p.Pointer<u8>();
  auto* type_ids = p.Pointer<const int8_t>();
  auto* offsets = p.Pointer<const u8>();
  i64 n = p.Int();
  auto* children = p.Pointer<const u8>();
  for (i64 b = 0; b < (n + 7) >> 3; ++b) {
    out[b] = static_cast<u8>(ByteOf(b, n, [&](i64 i) {
      i64 child = 2 * (type_ids[i] & 127);
      auto* bits = reinterpret_cast<const u8*>(static_cast<uintptr_t>(Load<i64>(children, child)));
      i64 j = offsets != nullptr ? Load<int32_t>(offsets, i) : i;
      return BitAt(bits, Load<i64>(children, child + 1) + j);
    }));
  }
  return CUDA_SUCCESS;
}

CUresult TypeMask(unsigned, unsigned, void** params) {
  Params p(params);
  auto* bits = p.Pointer<u8>();
  auto* type_ids = p.Pointer<const int8_t>();
  i64 n = p.Int(), code = p.Int();
  for (i64 b = 0; b < (n + 7) >> 3; ++b) {
    bits[b] = static_cast<u8>(
        ByteOf(b, n, [&](i64 i) { return static_cast<unsigned>(type_ids[i] == code); }));
  }
  return CUDA_SUCCESS;
}

CUresult ScatterRanks(unsigned, unsigned, void** params) {
  Params p(params);
  auto* offsets = p.Pointer<u8>();
  auto* positions = p.Pointer<const u8>();
  i64 n = p.Int();
  for (i64 r = 0; r < n; ++r) {
    Store<int32_t>(offsets, Load<i64>(positions, r), static_cast<int32_t>(r));
  }
  return CUDA_SUCCESS;
}

CUresult FillIndices(unsigned, unsigned, void** params) {
  Params p(params);
  auto* out = p.Pointer<u8>();
  auto* valid = p.Pointer<const u8>();
  i64 valid_off = p.Int(), n = p.Int(), replacement = p.Int();
  for (i64 i = 0; i < n; ++i) Store<i64>(out, i, BitAt(valid, valid_off + i) ? i : replacement);
  return CUDA_SUCCESS;
}

CUresult RunOfRows(unsigned, unsigned, void** params) {
  Params p(params);
  auto* out = p.Pointer<u8>();
  auto* run_ends = p.Pointer<const u8>();
  i64 width = p.Int(), runs = p.Int();
  auto* rows = p.Pointer<const u8>();
  i64 offset = p.Int(), n = p.Int();
  for (i64 i = 0; i < n; ++i) {
    i64 row = rows != nullptr ? Load<i64>(rows, i) : i;
    i64 low = 0, high = runs;
    while (low < high) {
      i64 middle = low + ((high - low) >> 1);
      if (LoadInt(run_ends, middle, width, 1) > offset + row) {
        high = middle;
      } else {
        low = middle + 1;
      }
    }
    Store<i64>(out, i, row < 0 ? -1 : (low < runs ? low : runs - 1));
  }
  return CUDA_SUCCESS;
}

// Bit packing's kernel (cuda/bit_pack.cc): bitmap, flags, count (64 bits), invert (32 bits).
CUresult PackBits(unsigned, unsigned, void** params) {
  Params p(params);
  auto* bitmap = p.Pointer<u8>();
  auto* flags = p.Pointer<const u8>();
  i64 count = p.Int();
  uint32_t invert = p.U32();
  for (i64 b = 0; b < (count + 7) >> 3; ++b) {
    bitmap[b] = static_cast<u8>(ByteOf(b, count, [&](i64 i) {
      return (flags[i] != 0 ? 1u : 0u) ^ invert;
    }));
  }
  return CUDA_SUCCESS;
}

constexpr KernelTwin kTwins[] = {
    {"ag_indices", 9, Indices},
    {"ag_gather", 13, Gather},
    {"ag_gather_bits", 6, GatherBits},
    {"ag_copy_bits", 6, CopyBits},
    {"ag_popcount", 4, PopcountBits},
    {"ag_range_sizes", 16, RangeSizes},
    {"ag_scan", 7, Scan},
    {"ag_mask_ranks", 9, MaskRanks},
    {"ag_compact", 10, Compact},
    {"ag_compact_bits", 11, CompactBits},
    {"ag_compact_ranges", 12, CompactRanges},
    {"ag_expand_ranges", 8, ExpandRanges},
    {"ag_gather_ranges", 10, GatherRanges},
    {"ag_copy_ranges", 2, CopyRanges},
    {"ag_copy_bit_ranges", 2, CopyBitRanges},
    {"ag_rebase_ranges", 2, RebaseRanges},
    {"ag_and_bits", 4, AndBits},
    {"ag_fill_bytes", 3, FillBytes},
    {"ag_replace_nulls", 3, ReplaceNulls},
    {"ag_union_validity", 5, UnionValidity},
    {"ag_type_mask", 4, TypeMask},
    {"ag_scatter_ranks", 3, ScatterRanks},
    {"ag_fill_indices", 5, FillIndices},
    {"ag_run_of_rows", 7, RunOfRows},
    {"arrow_gpu_pack_bits", 4, PackBits},
};

}  // namespace
}  // namespace twins

const KernelTwin* FindKernelTwin(const char* name) {
  for (const KernelTwin& twin : twins::kTwins) {
    if (std::strcmp(twin.name, name) == 0) return &twin;
  }
  return nullptr;
}

bool IsKernelTwin(const void* function) {
  return std::any_of(std::begin(twins::kTwins), std::end(twins::kTwins),
                     [&](const KernelTwin& twin) { return &twin == function; });
}

arrow::Status RunKernelTwin(const std::string& name, int64_t blocks, int threads,
                            const std::vector<uint64_t>& args) {
  const KernelTwin* twin = FindKernelTwin(name.c_str());
  if (twin == nullptr) return arrow::Status::KeyError("no kernel twin is named '", name, "'");
  if (args.size() != static_cast<size_t>(twin->params)) {
    return arrow::Status::Invalid(name, " takes ", twin->params, " parameters, not ",
                                  args.size());
  }
  if (blocks < 1 || blocks > INT32_MAX || threads < 1 || threads > 1024) {
    return arrow::Status::Invalid("cannot launch ", blocks, " blocks of ", threads, " threads");
  }
  std::vector<uint64_t> values(args);
  std::vector<void*> params;
  for (uint64_t& value : values) params.push_back(&value);
  if (twin->launch(static_cast<unsigned>(blocks), static_cast<unsigned>(threads),
                   params.data()) != CUDA_SUCCESS) {
    return arrow::Status::Invalid("the twin of ", name, " refuses a launch of ", blocks,
                                  " blocks of ", threads, " threads");
  }
  return arrow::Status::OK();
}

}  // namespace arrow_gpu
