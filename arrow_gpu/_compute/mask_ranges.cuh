// A mask's selection of strings and binary values, straight from the mask's groups of 32
// rows: no positions of the selected rows and no size per row. Each group's selected bytes
// are summed and scanned (as its selected rows are, by ag_mask_counts), so a selected row's
// output offset is its group's first byte plus the lengths before it in the group, a scan
// across the warp.
#pragma once

#include "filter.cuh"
#include "rows.cuh"

// The length of this lane's row of the group at `first` (0 unless `picked` selects it), and
// where it starts in src: lane's row is first + lane.
__device__ __forceinline__ i64 picked_range(const u8* offsets, i64 width, i64 first,
                                            unsigned picked, i64* start) {
  unsigned lane = threadIdx.x & 31;
  *start = 0;
  if (!((picked >> lane) & 1u)) return 0;
  *start = load_int(offsets, first + lane, width, 1);
  return load_int(offsets, first + lane + 1, width, 1) - *start;
}

// The sum of `value` over the lanes below this one.
__device__ __forceinline__ i64 lanes_below(i64 value) {
  unsigned lane = threadIdx.x & 31;
  i64 inclusive = value;
  for (int delta = 1; delta < 32; delta <<= 1) {
    i64 below = __shfl_up_sync(0xffffffffu, inclusive, delta);
    if (lane >= (unsigned)delta) inclusive += below;
  }
  return inclusive - value;
}

// group_bytes[g] = the bytes of the rows of group g the mask selects (`offsets` `width`
// wide, from the source's first row).
extern "C" __global__ void ag_mask_range_bytes(i64* group_bytes, const u8* offsets, i64 width,
                                               const u8* mask, i64 mask_off, const u8* valid,
                                               i64 valid_off, i64 mode, i64 n) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  FOR_EACH_WARP_OF_GROUPS(first, n) {
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
    i64 length[MASK_GROUPS];
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      i64 start;
      length[k] = picked_range(offsets, width, first + 32 * k, picked[k], &start);
    }
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      i64 sum = length[k];
      for (int delta = 16; delta > 0; delta >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, delta);
      if (lane == 0 && first + 32 * k < n) group_bytes[(first >> 5) + k] = sum;
    }
  }
}

// The selected rows' offsets (`dst_width` wide): row rank r at group_bases[g] plus the bytes
// of the group's selected rows before it; the end, group_bases[groups], after the last.
extern "C" __global__ void ag_mask_offsets(u8* dst_offsets, i64 dst_width, const u8* offsets,
                                           i64 width, const u8* mask, i64 mask_off,
                                           const u8* valid, i64 valid_off, i64 mode, i64 n,
                                           const i64* group_ranks, const i64* group_bases) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  i64 groups = (n + 31) >> 5;
  FOR_EACH_WARP_OF_GROUPS(first, n) {
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      i64 g = (first >> 5) + k, start;
      i64 length = picked_range(offsets, width, first + 32 * k, picked[k], &start);
      i64 at = lanes_below(length);
      if (g < groups && ((picked[k] >> lane) & 1u)) {
        store_int(dst_offsets, rank_in(picked[k], group_ranks[g]), dst_width,
                  group_bases[g] + at);
      }
      if (g == groups - 1 && lane == 0) {
        store_int(dst_offsets, group_ranks[groups], dst_width, group_bases[groups]);
      }
    }
  }
}

// The selected rows' bytes, to dst at the offsets ag_mask_offsets wrote: a warp per group,
// its selected rows one after another in dst from group_bases[g] to group_bases[g + 1].
extern "C" __global__ void ag_mask_ranges(u8* dst, const u8* src, const u8* offsets, i64 width,
                                          const u8* mask, i64 mask_off, const u8* valid,
                                          i64 valid_off, i64 mode, i64 n,
                                          const i64* group_bases) {
  __shared__ __align__(16) u8 staged[RANGE_WARPS][STAGE_BYTES];
  unsigned lane = threadIdx.x & 31;
  i64 groups = (n + 31) >> 5;
  for (i64 g = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < groups;
       g += ((i64)blockDim.x * gridDim.x) >> 5) {
    unsigned mine = lane == 0 ? group_word(mask, mask_off, valid, valid_off, mode, n, g) : 0u;
    unsigned picked = __shfl_sync(0xffffffffu, mine, 0);
    i64 begin = group_bases[g], end = group_bases[g + 1];
    i64 s;
    i64 length = picked_range(offsets, width, 32 * g, picked, &s);
    i64 d = begin + lanes_below(length);
    copy_warp_rows(dst, src, s, d, length, begin, end, staged[threadIdx.x >> 5]);
  }
}
