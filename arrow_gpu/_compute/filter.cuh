// Filter: compaction of values and bits by a boolean mask, 32 rows a group.
#pragma once

#include "common.cuh"
#include "scan.cuh"

// Compaction by a boolean mask: `mode` 1 drops the rows where the mask is null, mode 2
// emits them (as null rows). A group is 32 rows, 32g .. 32g + 31; ag_mask_counts counts each
// group's selected rows and their exclusive scan (ag_scan_*) gives each group's first rank,
// so that every compaction by the mask finds its rows' ranks without a scan of its own. A
// warp takes MASK_GROUPS consecutive groups at a time: their loads are issued together.
#define MASK_GROUPS 8
#define FOR_EACH_WARP_OF_GROUPS(first, n)                                                    \
  for (i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) & ~(i64)31) * MASK_GROUPS; \
       first < (n); first += (i64)blockDim.x * gridDim.x * MASK_GROUPS)

// Which of group g's rows a mask selects (by `mode`), as the bits of a word:
// read a word at a time, since a thread per row spends its time on instructions, not bytes.
__device__ __forceinline__ unsigned group_word(const u8* mask, i64 mask_off, const u8* valid,
                                               i64 valid_off, i64 mode, i64 n, i64 g) {
  i64 first = 32 * g;
  i64 count = n - first < 32 ? n - first : 32;
  unsigned values = (unsigned)load_bits(mask, mask_off + first, count);
  unsigned is_valid = (unsigned)load_bits(valid, valid_off + first, count);  // null: all set
  unsigned rows = count == 32 ? 0xffffffffu : (1u << count) - 1u;
  return mode == 2 ? (values & is_valid) | (~is_valid & rows) : values & is_valid;
}

// picked[k] = which rows of group first / 32 + k the mask selects: bit `lane` for row
// first + 32k + lane (lane k reads the word, the warp shares it). Every lane of the warp must
// call it.
__device__ __forceinline__ void pick_groups(unsigned* picked, i64 first, const u8* mask,
                                            i64 mask_off, const u8* valid, i64 valid_off,
                                            i64 mode, i64 n) {
  unsigned lane = threadIdx.x & 31;
  i64 g = (first >> 5) + lane;
  unsigned mine = lane < MASK_GROUPS && 32 * g < n
                      ? group_word(mask, mask_off, valid, valid_off, mode, n, g) : 0u;
#pragma unroll
  for (int k = 0; k < MASK_GROUPS; ++k) picked[k] = __shfl_sync(0xffffffffu, mine, k);
}

// counts[g] = how many rows of group g a mask selects: a thread per group.
extern "C" __global__ void ag_mask_counts(const u8* mask, i64 mask_off, const u8* valid,
                                          i64 valid_off, i64 mode, i64 n, i64* counts) {
  FOR_EACH(g, (n + 31) >> 5) {
    counts[g] = __popc(group_word(mask, mask_off, valid, valid_off, mode, n, g));
  }
}

struct GroupCounts {
  const u8* mask;
  i64 mask_off;
  const u8* valid;
  i64 valid_off, mode, n;
  __device__ __forceinline__ i64 operator()(i64 g) const {
    return __popc(group_word(mask, mask_off, valid, valid_off, mode, n, g));
  }
};

// ag_mask_counts and the scan of its counts in one launch, for a mask of at most SCAN_TILE
// groups (a small call's time is its launches): ranks[g] = the rank of group g's first
// selected row, ranks[groups] and *total = the rows selected. One block of SCAN_THREADS.
extern "C" __global__ void ag_mask_ranks(const u8* mask, i64 mask_off, const u8* valid,
                                         i64 valid_off, i64 mode, i64 n, i64* ranks,
                                         i64* total) {
  scan_tile(GroupCounts{mask, mask_off, valid, valid_off, mode, n}, (n + 31) >> 5, 0,
            (u8*)ranks, 8, total);
}

// The rank of this lane's row among the rows the mask selects, given its group's ballot
// and first rank.
__device__ __forceinline__ i64 rank_in(unsigned picked, i64 group_rank) {
  return group_rank + __popc(picked & ((1u << (threadIdx.x & 31)) - 1u));
}

// All loads of the warp's groups are issued before the first store (dst and src do not
// overlap), so that the warp waits one memory latency per MASK_GROUPS groups, not per group.
template <typename T>
__device__ __forceinline__ void compact_typed(T* __restrict__ dst, const T* __restrict__ src,
                                              const u8* mask, i64 mask_off, const u8* valid,
                                              i64 valid_off, i64 mode, i64 n,
                                              const i64* group_ranks) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  FOR_EACH_WARP_OF_GROUPS(first, n) {
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
    T v[MASK_GROUPS];
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      if ((picked[k] >> lane) & 1u) v[k] = src[first + 32 * k + lane];
    }
    i64 mine = lane < MASK_GROUPS && first + 32 * lane < n ? group_ranks[(first >> 5) + lane] : 0;
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      i64 group_rank = __shfl_sync(0xffffffffu, mine, k);
      if ((picked[k] >> lane) & 1u) dst[rank_in(picked[k], group_rank)] = v[k];
    }
  }
}

// What a mask selects, in order: the values of src, `width` bytes each; or, for a null src,
// the rows' positions as i64 (-1 for an emitted null). `group_ranks` from the scan of
// ag_mask_counts.
extern "C" __global__ void ag_compact(u8* dst, const u8* src, i64 width, const u8* mask,
                                      i64 mask_off, const u8* valid, i64 valid_off, i64 mode,
                                      i64 n, const i64* group_ranks) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  if (src == 0) {
    FOR_EACH_WARP_OF_GROUPS(first, n) {
      pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
#pragma unroll
      for (int k = 0; k < MASK_GROUPS; ++k) {
        i64 i = first + 32 * k + lane;
        if ((picked[k] >> lane) & 1u) {
          ((i64*)dst)[rank_in(picked[k], group_ranks[(first >> 5) + k])] =
              bit_at(valid, valid_off + i) ? i : -1;
        }
      }
    }
    return;
  }
  u64 aligned = ((u64)dst | (u64)src) % (u64)(width < 8 ? width : 8) == 0;
#define COMPACT_AS(T) \
  compact_typed<T>((T*)dst, (const T*)src, mask, mask_off, valid, valid_off, mode, n, group_ranks)
  if (aligned && width == 1) { COMPACT_AS(u8); return; }
  if (aligned && width == 2) { COMPACT_AS(unsigned short); return; }
  if (aligned && width == 4) { COMPACT_AS(unsigned); return; }
  if (aligned && width == 8) { COMPACT_AS(u64); return; }
  if (aligned && width == 16) { COMPACT_AS(Pair); return; }
#undef COMPACT_AS
  FOR_EACH_WARP_OF_GROUPS(first, n) {  // any other width, or unaligned buffers
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
    for (int k = 0; k < MASK_GROUPS; ++k) {
      if (!((picked[k] >> lane) & 1u)) continue;
      i64 rank = rank_in(picked[k], group_ranks[(first >> 5) + k]);
      i64 i = first + 32 * k + lane;
      for (i64 b = 0; b < width; ++b) dst[rank * width + b] = src[i * width + b];
    }
  }
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

// The bits of a bitmap (src from bit src_off; all set for a null src) at the rows a mask
// selects, in order, to dst from bit 0: whole 32-bit words, zeroed beforehand. A thread per
// group packs its selected bits into one word and ORs it into place at the group's rank (a
// word may straddle two); adds the bits set to *set_count where it is not null.
extern "C" __global__ void ag_compact_bits(unsigned* dst, const u8* src, i64 src_off,
                                           const u8* mask, i64 mask_off, const u8* valid,
                                           i64 valid_off, i64 mode, i64 n,
                                           const i64* group_ranks, u64* set_count) {
  u64 count = 0;
  FOR_EACH(g, (n + 31) >> 5) {
    unsigned picked = group_word(mask, mask_off, valid, valid_off, mode, n, g);
    if (picked == 0u) continue;
    i64 first = 32 * g;
    unsigned bits = (unsigned)load_bits(src, src_off + first, n - first < 32 ? n - first : 32);
    unsigned word = packed_bits(bits, picked);
    i64 at = group_ranks[g];
    unsigned shift = (unsigned)(at & 31);
    atomicOr(dst + (at >> 5), word << shift);
    if (shift + __popc(picked) > 32u) atomicOr(dst + (at >> 5) + 1, word >> (32u - shift));
    count += __popc(word);
  }
  if (set_count != 0) add_count(set_count, count);
}
