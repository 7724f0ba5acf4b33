// The exclusive scan of integer inputs (4 or 8 bytes wide), in tiles, in one pass (scan.cu;
// mask.cu scans a small mask's group counts in one tile).
#pragma once

#include "common.cuh"

// --- Exclusive scan of integer inputs in one pass: a block per tile of SCAN_THREADS *
// SCAN_ITEMS inputs, each thread taking SCAN_ITEMS consecutive ones, which it sums alone
// before one scan of the threads' sums across the warp (not a warp scan of every 32
// inputs); its loads and stores are 16 bytes wide where the buffers allow. A tile's prefix
// comes from the tiles before it (decoupled look-back): each tile publishes its own sum as
// soon as it has it and its inclusive prefix once it knows it, and tiles are numbered in the
// order their blocks start (a ticket), so a tile only ever waits on tiles already running.
// One launch, the inputs read once, where tile sums scanned apart take three launches or
// more.
#define SCAN_THREADS 256
#define SCAN_ITEMS 16
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_WARPS (SCAN_THREADS / 32)

// Input i of a scan: `width` bytes wide (4: a string column's sizes, half the bytes of 8).
template <typename T>
struct ScanInputs {
  const T* in;
  __device__ __forceinline__ i64 operator()(i64 i) const { return (i64)in[i]; }
};

// v[k] = in(first + k), 0 past n.
template <typename Input>
__device__ __forceinline__ void load_items(const Input& in, i64 first, i64 n,
                                           i64 (&v)[SCAN_ITEMS]) {
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) v[k] = first + k < n ? in(first + k) : 0;
}

// The inputs of one 16-byte load at p: four 4-byte ones, or two 8-byte ones.
__device__ __forceinline__ void load16(const int* p, i64* v) {
  int4 w = *(const int4*)p;
  v[0] = w.x;
  v[1] = w.y;
  v[2] = w.z;
  v[3] = w.w;
}
__device__ __forceinline__ void load16(const i64* p, i64* v) {
  longlong2 w = *(const longlong2*)p;
  v[0] = w.x;
  v[1] = w.y;
}

// The same, of a buffer of inputs: 16 bytes a load where the thread's inputs allow.
template <typename T>
__device__ __forceinline__ void load_items(const ScanInputs<T>& in, i64 first, i64 n,
                                           i64 (&v)[SCAN_ITEMS]) {
  const T* p = in.in + first;
  if (first + SCAN_ITEMS > n || (u64)p % 16 != 0) {
    load_items<ScanInputs<T>>(in, first, n, v);
    return;
  }
  constexpr int per_load = 16 / sizeof(T);
#pragma unroll
  for (int q = 0; q < SCAN_ITEMS / per_load; ++q) load16(p + q * per_load, v + q * per_load);
}

// out[first + k] = v[k] (`width` bytes wide: 4 or 8), up to n.
__device__ __forceinline__ void store_items(u8* out, i64 width, i64 first, i64 n,
                                            const i64 (&v)[SCAN_ITEMS]) {
  u8* p = out + first * width;
  if (first + SCAN_ITEMS > n || (u64)p % 16 != 0) {
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
      if (first + k < n) store_int(out, first + k, width, v[k]);
    }
  } else if (width == 4) {
#pragma unroll
    for (int q = 0; q < SCAN_ITEMS / 4; ++q) {
      ((int4*)p)[q] = make_int4((int)v[4 * q], (int)v[4 * q + 1], (int)v[4 * q + 2],
                                (int)v[4 * q + 3]);
    }
  } else {
#pragma unroll
    for (int q = 0; q < SCAN_ITEMS / 2; ++q) {
      ((longlong2*)p)[q] = make_longlong2(v[2 * q], v[2 * q + 1]);
    }
  }
}

// The scan of `tile` of in(0) .. in(n - 1): out[i] = the exclusive prefix (4 or 8 bytes
// wide); the `last` tile writes out[n] and *total_out, the total. The threads' sums are
// scanned across the warp by shuffles; the warps' sums meet in shared memory, and warp 0
// turns the tile's sum into the sum of the inputs before the tile (`prefix`, which every
// lane of warp 0 calls).
template <typename Input, typename Prefix>
__device__ __forceinline__ void scan_tile(const Input& in, i64 n, i64 tile, bool last,
                                          Prefix prefix, u8* out, i64 out_width,
                                          i64* total_out) {
  __shared__ i64 warp_sums[SCAN_WARPS];
  __shared__ i64 tile_base;
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 first = tile * SCAN_TILE + (i64)threadIdx.x * SCAN_ITEMS;
  i64 v[SCAN_ITEMS];
  load_items(in, first, n, v);
  i64 own = 0;  // v[k] becomes the sum of this thread's inputs before it
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 input = v[k];
    v[k] = own;
    own += input;
  }
  i64 inclusive = own;
  for (int delta = 1; delta < 32; delta <<= 1) {
    i64 below = __shfl_up_sync(0xffffffffu, inclusive, delta);
    if (lane >= (unsigned)delta) inclusive += below;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  i64 below = 0, block_total = 0;
  for (unsigned w = 0; w < SCAN_WARPS; ++w) {
    if (w < warp) below += warp_sums[w];
    block_total += warp_sums[w];
  }
  if (warp == 0) {
    i64 base = prefix(block_total);
    if (lane == 0) tile_base = base;
  }
  __syncthreads();
  const i64 base = tile_base + below + inclusive - own;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) v[k] += base;
  store_items(out, out_width, first, n, v);
  if (last && threadIdx.x == 0) {
    i64 total = tile_base + block_total;
    store_int(out, n, out_width, total);
    *total_out = total;
  }
}

// A tile's status word: what it publishes (the top two bits) and the value, 62 bits wide
// (two's complement: inputs may be negative).
#define TILE_SUM 1ull     // the tile's own sum
#define TILE_PREFIX 2ull  // the sum of the tile and every tile before it

__device__ __forceinline__ void publish(u64* status, u64 flag, i64 value) {
  *(volatile u64*)status = (flag << 62) | ((u64)value & ((1ull << 62) - 1));
}

__device__ __forceinline__ i64 status_value(u64 status) { return (i64)(status << 2) >> 2; }

// Tiles a look-back reads at once, LOOK_BACK_SPAN a lane: a tile's look-back waits about
// one read of the L2 for each such window between it and the nearest tile with its prefix,
// and hundreds of tiles run at once (three blocks a multiprocessor).
#define LOOK_BACK_SPAN 4
#define LOOK_BACK_WINDOW (32 * LOOK_BACK_SPAN)

// Status of the tile `d` + 1 before `tile` (the same as a prefix of 0 before the first).
__device__ __forceinline__ u64 status_before(const u64* statuses, i64 tile, i64 d) {
  i64 t = tile - 1 - d;
  return t >= 0 ? *(const volatile u64*)(statuses + t) : TILE_PREFIX << 62;
}

// The sum of the inputs of the tiles before `tile`, by warp 0 (every lane calls it): a
// window of LOOK_BACK_WINDOW tiles back at a time, each lane LOOK_BACK_SPAN of them (lane l
// the l-th nearest of each 32), waiting until each has published, then summing up to the
// nearest that published its prefix. Every tile before one with its prefix has published,
// so a window reaching past it waits on nothing more.
__device__ __forceinline__ i64 look_back(const u64* statuses, i64 tile) {
  unsigned lane = threadIdx.x & 31;
  i64 sum = 0;
  for (i64 nearest = 0;; nearest += LOOK_BACK_WINDOW) {
    u64 status[LOOK_BACK_SPAN];
#pragma unroll
    for (int w = 0; w < LOOK_BACK_SPAN; ++w) {
      status[w] = status_before(statuses, tile, nearest + 32 * w + lane);
    }
    for (;;) {
      bool unpublished = false;
#pragma unroll
      for (int w = 0; w < LOOK_BACK_SPAN; ++w) unpublished |= (status[w] >> 62) == 0;
      if (!__any_sync(0xffffffffu, unpublished)) break;
#pragma unroll
      for (int w = 0; w < LOOK_BACK_SPAN; ++w) {
        if ((status[w] >> 62) == 0) {
          status[w] = status_before(statuses, tile, nearest + 32 * w + lane);
        }
      }
    }
    // Summed: the windows of 32 before the first that holds a prefix, and of that one the
    // lanes up to its nearest prefix.
    i64 value = 0;
    bool found = false;
#pragma unroll
    for (int w = 0; w < LOOK_BACK_SPAN; ++w) {
      unsigned prefixed = __ballot_sync(0xffffffffu, (status[w] >> 62) == TILE_PREFIX);
      if (!found && (prefixed == 0u || (int)lane < __ffs(prefixed))) {
        value += status_value(status[w]);
      }
      found = found || prefixed != 0u;
    }
    for (int delta = 16; delta > 0; delta >>= 1) {
      value += __shfl_xor_sync(0xffffffffu, value, delta);
    }
    sum += value;
    if (found) return sum;
  }
}

template <typename Input>
__device__ __forceinline__ void scan_tiles(const Input& in, i64 n, u8* out, i64 out_width,
                                           i64* total_out, u64* state) {
  if (state == 0) {  // one tile
    scan_tile(in, n, 0, true, [](i64) { return (i64)0; }, out, out_width, total_out);
    return;
  }
  __shared__ i64 ticket;
  if (threadIdx.x == 0) ticket = (i64)atomicAdd((unsigned long long*)state, 1ull);
  __syncthreads();
  const i64 tile = ticket;
  u64* statuses = state + 1;
  auto prefix = [&](i64 tile_sum) -> i64 {
    unsigned lane = threadIdx.x & 31;
    if (tile == 0) {
      if (lane == 0) publish(statuses, TILE_PREFIX, tile_sum);
      return 0;
    }
    if (lane == 0) publish(statuses + tile, TILE_SUM, tile_sum);
    i64 before = look_back(statuses, tile);
    if (lane == 0) publish(statuses + tile, TILE_PREFIX, before + tile_sum);
    return before;
  };
  scan_tile(in, n, tile, tile == (i64)gridDim.x - 1, prefix, out, out_width, total_out);
}
