// The device kernels of `arrow_gpu.compute`, compiled at run time by NVRTC and cached on disk
// (arrow_gpu/_compute/kernels.py); no CUDA toolkit is needed to build or install arrow_gpu.
//
// Each `.cu` file is a unit that NVRTC compiles on its own (the units of a process at once,
// on threads), holding the kernels of one concern; the `.cuh` headers hold device code only,
// so that no kernel is compiled twice. This header is what every unit uses: the types, the
// grid-stride loop, and reads and writes of bits, integers and counts. Conventions:
//
// * every parameter is 64 bits wide (a pointer, or a `long long`), so that one launch
//   helper passes any of them;
// * positions are `long long`: -1 stands for a null row;
// * bitmaps are Arrow's (least significant bit first) with a bit offset beside the pointer;
//   a null bitmap pointer means "all bits set";
// * every loop is grid-stride with 64-bit positions, so any grid covers any length; but the
//   batched copies (copies.cu), which take a table of ranges in device memory and are
//   launched with one block per slice of a range, as the table says.
#pragma once

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;
// A 16-byte value, for the gathers and compactions of 16-byte types.
struct Pair { u64 lo, hi; };

#define FOR_EACH(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ unsigned bit_at(const u8* bits, i64 i) {
  return bits == 0 ? 1u : (bits[i >> 3] >> (i & 7)) & 1u;
}

// `count` (1 to 64) bits of src from bit `bit`, in the low bits; read byte by byte, so that no
// byte past the last bit is touched.
__device__ __forceinline__ u64 load_bits(const u8* src, i64 bit, i64 count) {
  u64 mask = count == 64 ? ~0ull : (1ull << count) - 1;
  if (src == 0) return mask;
  const u8* p = src + (bit >> 3);
  int shift = (int)(bit & 7);
  int nbytes = (shift + (int)count + 7) >> 3;  // at most 9
  u64 low = 0;
  for (int k = 0; k < nbytes && k < 8; ++k) low |= (u64)p[k] << (8 * k);
  u64 v = low >> shift;
  if (nbytes > 8) v |= (u64)p[8] << (64 - shift);  // shift > 0 here
  return v & mask;
}

__device__ __forceinline__ i64 load_int(const u8* p, i64 i, i64 width, i64 is_signed) {
  switch (width) {
    case 1: return is_signed ? (i64)((const signed char*)p)[i] : (i64)p[i];
    case 2: return is_signed ? (i64)((const short*)p)[i] : (i64)((const unsigned short*)p)[i];
    case 4: return is_signed ? (i64)((const int*)p)[i] : (i64)((const unsigned int*)p)[i];
    default: return ((const i64*)p)[i];  // uint64 past INT64_MAX reads negative: out of range
  }
}

__device__ __forceinline__ void store_int(u8* p, i64 i, i64 width, i64 value) {
  switch (width) {
    case 1: ((signed char*)p)[i] = (signed char)value; break;
    case 2: ((short*)p)[i] = (short)value; break;
    case 4: ((int*)p)[i] = (int)value; break;
    default: ((i64*)p)[i] = value;
  }
}

// n, or fewer where a count made on the device bounds the inputs (n_at not null): work
// launched for every row of a mask before the host knows how many it selects.
__device__ __forceinline__ i64 counted_inputs(i64 n, const i64* n_at) {
  return n_at != 0 ? min(n, *n_at) : n;
}

// The block's counts summed, in thread 0 (0 elsewhere). Every thread of the block must call
// it (after the grid-stride loops, where all threads meet).
__device__ __forceinline__ u64 block_sum(u64 count) {
  __shared__ u64 warp_counts[32];
  for (int delta = 16; delta > 0; delta >>= 1) count += __shfl_down_sync(0xffffffffu, count, delta);
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = count;
  __syncthreads();
  u64 sum = 0;
  if (threadIdx.x == 0) {
    for (unsigned w = 0; w < (blockDim.x + 31) >> 5; ++w) sum += warp_counts[w];
  }
  return sum;
}

// Adds the block's counts to *total: one atomic per block, since atomics on one address
// run one at a time, and one per warp was measured far slower (the figure is in
// bench/RESULTS.md, "Tuning notes"). Every thread of the block must call it.
__device__ __forceinline__ void add_count(u64* total, u64 count) {
  u64 sum = block_sum(count);
  if (threadIdx.x == 0 && sum != 0) atomicAdd(total, sum);
}
