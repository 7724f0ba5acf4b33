// The exclusive scan of integer inputs: offsets from sizes, ranks from counts.

#include "scan.cuh"

// The exclusive scan of n integers `in_width` (4 or 8) bytes wide: out[i] = the sum of
// in[0 .. i) (`out_width` bytes wide), out[n] and *total_out = the total. A block per tile;
// `state` (more than one tile) is zeroed device memory of 8 * (tiles + 1) bytes: the
// tickets, then each tile's status, which it leaves at TILE_PREFIX.
extern "C" __global__ void ag_scan(const u8* in, i64 in_width, i64 n, u8* out, i64 out_width,
                                   i64* total_out, u64* state) {
  if (in_width == 4) {
    scan_tiles(ScanInputs<int>{(const int*)in}, n, out, out_width, total_out, state);
  } else {
    scan_tiles(ScanInputs<i64>{(const i64*)in}, n, out, out_width, total_out, state);
  }
}
