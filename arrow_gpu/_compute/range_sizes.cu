// The sizes and starts of the ranges (strings, binary, lists) of the rows a take picks.

#include "take.cuh"

// sizes_out[i] = the length of row i's range (`width` wide, as the offsets: a column of
// 32-bit offsets scans half the bytes; see GatherIndices: 0 for a null row; rows taken as a
// gather takes them, their loads issued together), for the first counted_inputs(n, n_at);
// with the rows' validity where valid_dst is not null (see GatherValidity), so that a take of
// strings reads its indices once for both; and where starts_out is not null, each range's
// start there (`width` wide, 0 for a null row), so that the copy of the ranges' items reads
// neither the indices nor the offsets again (a take's are random reads).
extern "C" __global__ void ag_range_sizes(u8* sizes_out, const u8* offsets, const u8* sizes,
                                          i64 width, const u8* idx, i64 idx_width,
                                          i64 idx_signed, i64 n, i64 bound, unsigned* bad,
                                          const i64* n_at, unsigned* valid_dst,
                                          const u8* valid_src, i64 valid_off, u64* valid_count,
                                          u8* starts_out) {
  n = counted_inputs(n, n_at);
  const GatherIndices rows = {idx, idx_width, idx_signed, bound, bad};
  const GatherValidity valid = {valid_dst, valid_src, valid_off, valid_count};
  if (width == 4) {
    size_ranges_of<int>(sizes_out, offsets, sizes, rows, n, valid, starts_out);
  } else {
    size_ranges_of<i64>(sizes_out, offsets, sizes, rows, n, valid, starts_out);
  }
}
