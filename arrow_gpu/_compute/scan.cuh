// The exclusive scan of integer inputs (4 or 8 bytes wide), in tiles.
#pragma once

#include "common.cuh"

// --- Exclusive scan of integer inputs: reduce tiles, scan the tile sums (the same kernels,
// recursively, from the host), then scan each tile from its prefix. A tile is
// SCAN_THREADS * SCAN_ITEMS inputs, a block per tile; each warp takes 32 * SCAN_ITEMS
// consecutive inputs, 32 at a time, so that its loads and stores are contiguous.
#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_WARPS (SCAN_THREADS / 32)

// This thread's input of round k.
__device__ __forceinline__ i64 scan_position(int k) {
  return (i64)blockIdx.x * SCAN_TILE + (i64)(threadIdx.x >> 5) * (32 * SCAN_ITEMS) + 32 * k +
         (threadIdx.x & 31);
}

// Input i of a scan: `width` bytes wide (4: a string column's sizes, half the bytes of 8).
template <typename T>
struct ScanInputs {
  const T* in;
  __device__ __forceinline__ i64 operator()(i64 i) const { return (i64)in[i]; }
};

// tile_sums[b] = the sum of tile b's inputs, of the first counted_inputs(n, n_at): the sums
// of sizes made before their count is read, whose scan follows once it is.
template <typename Input>
__device__ __forceinline__ void reduce_tile(const Input& in, i64 n, i64* tile_sums) {
  __shared__ i64 warp_sums[SCAN_WARPS];
  i64 sum = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    if (i < n) sum += in(i);
  }
  for (int delta = 16; delta > 0; delta >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, delta);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    i64 total = 0;
    for (int w = 0; w < SCAN_WARPS; ++w) total += warp_sums[w];
    tile_sums[blockIdx.x] = total;
  }
}

extern "C" __global__ void ag_scan_reduce(const u8* in, i64 in_width, i64 n, i64* tile_sums,
                                          const i64* n_at) {
  n = counted_inputs(n, n_at);
  if (in_width == 4) {
    reduce_tile(ScanInputs<int>{(const int*)in}, n, tile_sums);
  } else {
    reduce_tile(ScanInputs<i64>{(const i64*)in}, n, tile_sums);
  }
}

// The scan of this block's tile of in(0) .. in(n - 1) from `tile_base`: out[i] = the
// exclusive prefix (4 or 8 bytes wide); the last block writes out[n] and *total_out, the
// total. Each round's 32 inputs are scanned across the warp by shuffles; the warps' sums
// meet in shared memory.
template <typename Input>
__device__ __forceinline__ void scan_tile(const Input& in, i64 n, i64 tile_base, u8* out,
                                          i64 out_width, i64* total_out) {
  __shared__ i64 warp_sums[SCAN_WARPS];
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Every round's input loaded first, then the rounds' scans across the warp side by side.
  i64 v[SCAN_ITEMS], prefixes[SCAN_ITEMS];
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    v[k] = i < n ? in(i) : 0;
    prefixes[k] = v[k];
  }
  for (int delta = 1; delta < 32; delta <<= 1) {
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
      i64 below = __shfl_up_sync(0xffffffffu, prefixes[k], delta);
      if (lane >= (unsigned)delta) prefixes[k] += below;
    }
  }
  i64 run = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 inclusive = prefixes[k];
    prefixes[k] = run + inclusive - v[k];
    run += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  if (lane == 0) warp_sums[warp] = run;
  __syncthreads();
  i64 base = tile_base, block_total = 0;
  for (unsigned w = 0; w < SCAN_WARPS; ++w) {
    if (w < warp) base += warp_sums[w];
    block_total += warp_sums[w];
  }
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    if (i < n) store_int(out, i, out_width, base + prefixes[k]);
  }
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
    i64 total = tile_base + block_total;
    store_int(out, n, out_width, total);
    *total_out = total;
  }
}

// The scan of each tile from tile_prefix[b] (0 when tile_prefix is null): out[i] = the
// exclusive prefix (4 or 8 bytes wide), out[n] = the total, and *total_out the total.
extern "C" __global__ void ag_scan_apply(const u8* in, i64 in_width, i64 n,
                                         const i64* tile_prefix, u8* out, i64 out_width,
                                         i64* total_out) {
  const i64 base = tile_prefix != 0 ? tile_prefix[blockIdx.x] : 0;
  if (in_width == 4) {
    scan_tile(ScanInputs<int>{(const int*)in}, n, base, out, out_width, total_out);
  } else {
    scan_tile(ScanInputs<i64>{(const i64*)in}, n, base, out, out_width, total_out);
  }
}
