// Device code of a boolean mask's selection (mask.cu, compact.cu), 32 rows a group.
#pragma once

#include "common.cuh"
#include "scan.cuh"

// Compaction by a boolean mask: `mode` 1 drops the rows where the mask is null, mode 2
// emits them (as null rows). A group is 32 rows, 32g .. 32g + 31; the exclusive scan of the
// groups' counts of selected rows (ag_mask_ranks) gives each group's first rank, so that
// every compaction by the mask finds its rows' ranks without a scan of its own. A
// warp takes MASK_GROUPS consecutive groups at a time: their loads are issued together.
#define MASK_GROUPS 8
#define FOR_EACH_WARP_OF_GROUPS(first, n)                                                    \
  for (i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) & ~(i64)31) * MASK_GROUPS; \
       first < (n); first += (i64)blockDim.x * gridDim.x * MASK_GROUPS)

// load_bits, not inlined (OUTLINED below).
__device__ __noinline__ unsigned load_unaligned_word(const u8* bits, i64 bit, i64 count) {
  return (unsigned)load_bits(bits, bit, count);
}

// `count` (1 to 32) bits of a bitmap from bit `bit` (all set for a null bitmap): one load
// where they are a whole aligned word (a mask from bit 0 and every group but its last), else
// load_bits' bytes; a call to them where OUTLINED (a scan's many items a thread, each with
// the byte loop inlined, made a unit's compile several times longer).
template <bool OUTLINED = false>
__device__ __forceinline__ unsigned load_word(const u8* bits, i64 bit, i64 count) {
  if (bits == 0) return count == 32 ? 0xffffffffu : (1u << count) - 1u;
  const u8* p = bits + (bit >> 3);
  if (count == 32 && (bit & 31) == 0 && ((u64)p & 3) == 0) return *(const unsigned*)p;
  return OUTLINED ? load_unaligned_word(bits, bit, count) : (unsigned)load_bits(bits, bit, count);
}

// Which of group g's rows a mask selects (by `mode`), as the bits of a word:
// read a word at a time, since a thread per row spends its time on instructions, not bytes.
template <bool OUTLINED = false>
__device__ __forceinline__ unsigned group_word(const u8* mask, i64 mask_off, const u8* valid,
                                               i64 valid_off, i64 mode, i64 n, i64 g) {
  i64 first = 32 * g;
  i64 count = n - first < 32 ? n - first : 32;
  unsigned values = load_word<OUTLINED>(mask, mask_off + first, count);
  unsigned is_valid = load_word<OUTLINED>(valid, valid_off + first, count);  // null: all set
  unsigned rows = count == 32 ? 0xffffffffu : (1u << count) - 1u;
  return mode == 2 ? (values & is_valid) | (~is_valid & rows) : values & is_valid;
}

// Lane `lane` < groups: the word of group first / 32 + lane (0 past the mask's end).
__device__ __forceinline__ unsigned lane_group_word(int groups, i64 first, const u8* mask,
                                                    i64 mask_off, const u8* valid,
                                                    i64 valid_off, i64 mode, i64 n) {
  unsigned lane = threadIdx.x & 31;
  i64 g = (first >> 5) + lane;
  return (int)lane < groups && first < n && 32 * g < n
             ? group_word(mask, mask_off, valid, valid_off, mode, n, g) : 0u;
}

// picked[k] = which rows of group first / 32 + k the mask selects: bit `lane` for row
// first + 32k + lane (lane k reads the word, the warp shares it). Every lane of the warp must
// call it.
__device__ __forceinline__ void pick_groups(unsigned* picked, i64 first, const u8* mask,
                                            i64 mask_off, const u8* valid, i64 valid_off,
                                            i64 mode, i64 n) {
  unsigned mine = lane_group_word(MASK_GROUPS, first, mask, mask_off, valid, valid_off, mode, n);
#pragma unroll
  for (int k = 0; k < MASK_GROUPS; ++k) picked[k] = __shfl_sync(0xffffffffu, mine, k);
}

// A scan's input g: how many rows of group g a mask selects (ag_mask_ranks).
struct GroupCounts {
  const u8* mask;
  i64 mask_off;
  const u8* valid;
  i64 valid_off, mode, n;
  __device__ __forceinline__ i64 operator()(i64 g) const {
    return __popc(group_word<true>(mask, mask_off, valid, valid_off, mode, n, g));
  }
};

// The rank of this lane's row among the rows the mask selects, given its group's ballot
// and first rank.
__device__ __forceinline__ i64 rank_in(unsigned picked, i64 group_rank) {
  return group_rank + __popc(picked & ((1u << (threadIdx.x & 31)) - 1u));
}

// What compact_rows stores for row i: the value of a source column ...
template <typename T>
struct ValueAt {
  const T* __restrict__ src;
  __device__ __forceinline__ T operator()(i64 i) const { return src[i]; }
};

// ... or the row's position, -1 where the mask is null (an emitted null) ...
struct PositionAt {
  const u8* valid;
  i64 valid_off;
  __device__ __forceinline__ i64 operator()(i64 i) const {
    return bit_at(valid, valid_off + i) ? i : -1;
  }
};

// ... or where the row's range starts and how long it is (strings, binary: T their offsets).
template <typename T>
struct Range {
  T start, size;
};

template <typename T>
struct RangeAt {
  const T* __restrict__ offsets;
  __device__ __forceinline__ Range<T> operator()(i64 i) const {
    T start = offsets[i];
    return {start, offsets[i + 1] - start};
  }
};

// Where compact_rows stores the value of the row of rank r: dst[r] ...
template <typename T>
struct StoreAt {
  T* __restrict__ dst;
  __device__ __forceinline__ void operator()(i64 r, const T& v) const { dst[r] = v; }
};

// ... or, for a range, its start and its size apart (the copy reads the starts, the scan
// of the result's offsets the sizes), summing the sizes it stores.
template <typename T>
struct StoreRange {
  T* __restrict__ starts;
  T* __restrict__ sizes;
  u64 bytes = 0;
  __device__ __forceinline__ void operator()(i64 r, const Range<T>& v) {
    starts[r] = v.start;
    sizes[r] = v.size;
    bytes += (u64)v.size;
  }
};

// A warp compacts GROUPS groups a round. All loads of a round's values are issued before
// its first store (dst and src do not overlap), and the mask's words of the warp's next
// round are loaded before this round's values, so that a round waits one memory latency,
// not one for the mask and one for the values. 16-byte values take half the groups of a
// round, so that every width fits the registers of 8-byte ones (more resident warps), and
// 4-byte values twice as many, so that a round's loads carry as many bytes.
template <typename T, int GROUPS, typename Rows, typename Store>
__device__ __forceinline__ void compact_rows(Store&& store, Rows row, const u8* mask,
                                             i64 mask_off, const u8* valid, i64 valid_off,
                                             i64 mode, i64 n, const i64* group_ranks) {
  unsigned lane = threadIdx.x & 31;
  const i64 stride = ((i64)blockDim.x * gridDim.x >> 5) * 32 * GROUPS;
  i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 32 * GROUPS;
  unsigned mine = lane_group_word(GROUPS, first, mask, mask_off, valid, valid_off, mode, n);
  for (; first < n; first += stride) {
    unsigned picked[GROUPS];
#pragma unroll
    for (int k = 0; k < GROUPS; ++k) picked[k] = __shfl_sync(0xffffffffu, mine, k);
    mine = lane_group_word(GROUPS, first + stride, mask, mask_off, valid, valid_off, mode, n);
    T v[GROUPS];
#pragma unroll
    for (int k = 0; k < GROUPS; ++k) {
      if ((picked[k] >> lane) & 1u) v[k] = row(first + 32 * k + lane);
    }
    // The round's groups' ranks as 32-bit steps from its first group's (a round holds at most
    // 512 rows): a shuffle a group, where 64-bit ranks take two.
    i64 rank = (int)lane < GROUPS && first + 32 * lane < n ? group_ranks[(first >> 5) + lane] : 0;
    const i64 base = __shfl_sync(0xffffffffu, rank, 0);
    const unsigned step = (unsigned)(rank - base);
#pragma unroll
    for (int k = 0; k < GROUPS; ++k) {
      i64 group_rank = base + __shfl_sync(0xffffffffu, step, k);
      if ((picked[k] >> lane) & 1u) store(rank_in(picked[k], group_rank), v[k]);
    }
  }
}

// Where the ranges of the rows a mask selects start, and how long they are, in order:
// starts[r] and sizes[r] `width` wide (as the offsets) for the selected row of rank r, their
// sum added to *bytes where it is not null (the bytes a result must hold, known before the
// sizes are scanned). A mask's rows are read in order, so the offsets are read once,
// coalesced, where positions would be written, read back and followed to the offsets (a pass
// each); the copy of the rows' bytes reads the starts, the scan into the result's offsets
// the sizes. Rows a null of the mask makes null rows (mode 2) are selected by positions
// instead.
template <typename T, int GROUPS>
__device__ __forceinline__ void compact_ranges(u8* starts, u8* sizes, const u8* offsets,
                                               const u8* mask, i64 mask_off, const u8* valid,
                                               i64 valid_off, i64 mode, i64 n,
                                               const i64* group_ranks, u64* bytes) {
  StoreRange<T> store{(T*)starts, (T*)sizes};
  compact_rows<Range<T>, GROUPS>(store, RangeAt<T>{(const T*)offsets}, mask, mask_off, valid,
                                 valid_off, mode, n, group_ranks);
  if (bytes != 0) add_count(bytes, store.bytes);
}

// The bits of `bits` where `picked` is set, packed from bit 0 in order.
__device__ __forceinline__ unsigned packed_bits(unsigned bits, unsigned picked) {
  unsigned out = 0, next = 1;
  while (picked != 0u) {
    unsigned low = picked & (0u - picked);
    if (bits & low) out |= next;
    next <<= 1;
    picked ^= low;
  }
  return out;
}
