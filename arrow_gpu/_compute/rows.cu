// The selected rows' ranges: child positions expanded, and their bytes copied.

#include "rows.cuh"

// Child positions of the selected rows' ranges: for row i (idx[i] = j), positions
// dst_offsets[i] .. dst_offsets[i + 1] (`dst_width` wide; or i * fixed .. (i + 1) * fixed)
// of out get start(j) + 0, 1, ...; -1 for every position of a null row.
extern "C" __global__ void ag_expand_ranges(i64* out, const u8* offsets, i64 width, i64 fixed,
                                            const i64* idx, const u8* dst_offsets,
                                            i64 dst_width, i64 n) {
  unsigned lane = threadIdx.x & 31;
  FOR_EACH_WARP_OF_ROWS(first, n) {
    i64 i = first + lane;
    i64 start = 0, d0 = 0, length = 0;
    if (i < n) {
      i64 j = idx[i];
      d0 = fixed > 0 ? i * fixed : load_int(dst_offsets, i, dst_width, 1);
      length = (fixed > 0 ? d0 + fixed : load_int(dst_offsets, i + 1, dst_width, 1)) - d0;
      start = j >= 0 ? range_start(offsets, width, fixed, j) : -1;
    }
    bool is_long = length > LONG_ROW;
    if (!is_long) {
      for (i64 k = 0; k < length; ++k) out[d0 + k] = start >= 0 ? start + k : -1;
    }
    for_each_long_row(is_long, start, d0, length, [&](i64 s, i64 d, i64 len) {
      for (i64 k = lane; k < len; k += 32) out[d + k] = s >= 0 ? s + k : -1;
    });
  }
}

// The selected rows' bytes (strings, binary): row i's bytes of src from starts[i] (`width`, 4
// or 8 bytes wide; ag_range_sizes or ag_compact_ranges wrote them, read here in order
// whichever way the rows lie) to dst from dst_offsets[i] to dst_offsets[i + 1] (`dst_width`
// wide, 4 or 8), a warp per `rows_per_warp` rows: 32, or 8 where rows are long. A warp copies
// long rows one after another, so a column of them has few warps of 32 rows, each long, and
// the last of them run with the device half idle; 8 rows a warp keep it busy to the end (the
// launch's grid is no larger than the blocks the device runs at once, so that every warp takes
// its share from the start). Where total_at is not null, dst holds `capacity` bytes, sized
// before the rows' total (the int64 there) was known: nothing is copied if the total exceeds
// it.
extern "C" __global__ void ag_gather_ranges(u8* dst, const u8* src, const u8* starts, i64 width,
                                            const u8* dst_offsets, i64 dst_width, i64 n,
                                            i64 rows_per_warp, const i64* total_at,
                                            i64 capacity) {
  __shared__ __align__(16) u8 staged[RANGE_WARPS][STAGE_BYTES];
  __shared__ __align__(16) u8 spans[RANGE_WARPS][SPAN_BYTES];
  if (total_at != 0 && *total_at > capacity) return;
  const unsigned lane = threadIdx.x & 31;
  const int rows = (int)rows_per_warp;
  const i64 warps = ((i64)blockDim.x * gridDim.x) >> 5;
  for (i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * rows; first < n;
       first += warps * rows) {
    i64 i = first + lane;
    i64 s = 0, d = 0, length = 0;
    if ((int)lane < rows && i < n) {
      d = load_offset(dst_offsets, i, dst_width);
      length = load_offset(dst_offsets, i + 1, dst_width) - d;  // 0 for a null row
      s = load_offset(starts, i, width);
    }
    int last_lane = n - first < rows ? (int)(n - first) - 1 : rows - 1;
    i64 begin = __shfl_sync(0xffffffffu, d, 0);
    i64 end = __shfl_sync(0xffffffffu, d + length, last_lane);
    copy_warp_rows(dst, src, s, d, length, begin, end, staged[threadIdx.x >> 5],
                   spans[threadIdx.x >> 5], rows);
  }
}
