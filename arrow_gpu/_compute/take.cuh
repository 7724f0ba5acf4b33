// Take: indices normalised, values and bits gathered by index, bitmaps copied and counted,
// and the sizes of the rows' ranges (offsets, views or fixed).
#pragma once

#include "common.cuh"

// Indices of any integer width to i64: -1 where null; *bad set where a valid index is
// negative or not below `bound`.
extern "C" __global__ void ag_indices(i64* out, const u8* idx, i64 width, i64 is_signed,
                                      const u8* valid, i64 valid_off, i64 n, i64 bound,
                                      unsigned* bad) {
  FOR_EACH(i, n) {
    i64 v = -1;
    if (bit_at(valid, valid_off + i)) {
      v = load_int(idx, i, width, is_signed);
      if (v < 0 || v >= bound) { atomicOr(bad, 1u); v = -1; }
    }
    out[i] = v;
  }
}

// A gather by index waits a memory latency per row: each thread takes GATHER_ITEMS rows at
// once (a grid's width apart, so that each round's accesses coalesce), their index loads
// issued together, then their value loads.
#define GATHER_ITEMS 4
#define FOR_EACH_GATHER_ROUND(base, stride, n)                                      \
  for (i64 stride = (i64)blockDim.x * gridDim.x,                                    \
           base = (i64)blockIdx.x * blockDim.x + threadIdx.x;                       \
       base < (n); base += stride * GATHER_ITEMS)

// What a gather reads its rows from: indices `width` bytes wide (4 or 8; unsigned unless
// is_signed), each of which must lie in [0, bound). One that does not is a null row where
// `bad` is null (int64 positions, -1 for a null row), else sets *bad, which the host reads
// back before it hands out the result, and gathers nothing.
struct GatherIndices {
  const u8* idx;
  i64 width, is_signed, bound;
  unsigned* bad;
};

__device__ __forceinline__ i64 position_at(const GatherIndices& rows, i64 i) {
  i64 j = load_int(rows.idx, i, rows.width, rows.is_signed);
  if (j >= 0 && j < rows.bound) return j;
  if (rows.bad != 0) atomicOr(rows.bad, 1u);
  return -1;
}

// The validity a gather makes beside the values: bit i of dst = row i is not null and bit j
// of src (all set where src is null), written in whole 32-bit words; the bits set are added
// to *count where it is not null. No validity where dst is null.
struct GatherValidity {
  unsigned* dst;
  const u8* src;
  i64 src_off;
  u64* count;
};

// One column of a gather: values `width` bytes wide, and their validity.
struct GatherColumn {
  u8* dst;
  const u8* src;
  i64 width;
  GatherValidity valid;
};

// The gathers' rounds run by whole warps (`base - lane` is warp-uniform), so that each
// round's 32 rows of a warp make one word of a validity (one ballot). A round's rows are
// base + k * stride, their positions j[k] (-1 for a null row or one past the end).
#define FOR_EACH_WARP_ROUND(base, lane, stride, n)                                       \
  for (i64 stride = (i64)blockDim.x * gridDim.x, lane = threadIdx.x & 31,                \
           base = (i64)blockIdx.x * blockDim.x + threadIdx.x;                            \
       base - lane < (n); base += stride * GATHER_ITEMS)

__device__ __forceinline__ void round_positions(i64 (&j)[GATHER_ITEMS], const GatherIndices& rows,
                                                i64 base, i64 stride, i64 n) {
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    i64 i = base + k * stride;
    j[k] = i < n ? position_at(rows, i) : -1;
  }
}

// A round's values, rows of `words` T each (one for the typed widths, whose loads go out
// together).
template <typename T>
__device__ __forceinline__ void gather_values(T* __restrict__ d, const T* __restrict__ s,
                                              i64 words, const i64 (&j)[GATHER_ITEMS],
                                              i64 base, i64 stride, i64 n) {
  if (words == 1) {
    T v[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) v[k] = j[k] >= 0 ? s[j[k]] : T();
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      if (i < n) d[i] = v[k];
    }
    return;
  }
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    i64 i = base + k * stride;
    if (i >= n) break;
    for (i64 w = 0; w < words; ++w) d[i * words + w] = j[k] >= 0 ? s[j[k] * words + w] : T();
  }
}

// A round of one column: its values in the widest type that its width and addresses allow,
// then its validity's words; the bits set are added to `count`.
__device__ __forceinline__ void gather_round(const GatherColumn& c, const i64 (&j)[GATHER_ITEMS],
                                             i64 base, i64 lane, i64 stride, i64 n,
                                             u64& count) {
  u64 align = (u64)c.dst | (u64)c.src;
  if (c.width == 1) {
    gather_values<u8>(c.dst, c.src, 1, j, base, stride, n);
  } else if (c.width == 2 && align % 2 == 0) {
    gather_values<unsigned short>((unsigned short*)c.dst, (const unsigned short*)c.src, 1, j,
                                  base, stride, n);
  } else if (c.width == 4 && align % 4 == 0) {
    gather_values<unsigned>((unsigned*)c.dst, (const unsigned*)c.src, 1, j, base, stride, n);
  } else if (c.width == 16 && align % 8 == 0) {
    gather_values<Pair>((Pair*)c.dst, (const Pair*)c.src, 1, j, base, stride, n);
  } else if (c.width % 8 == 0 && align % 8 == 0) {  // int64, float64, decimal256, ...
    gather_values<u64>((u64*)c.dst, (const u64*)c.src, c.width / 8, j, base, stride, n);
  } else {  // any other width, or unaligned buffers
    gather_values<u8>(c.dst, c.src, c.width, j, base, stride, n);
  }
  if (c.valid.dst == 0) return;
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    unsigned word =
        __ballot_sync(0xffffffffu, j[k] >= 0 && bit_at(c.valid.src, c.valid.src_off + j[k]));
    i64 first = base - lane + k * stride;
    if (lane == 0 && first < n) {
      c.valid.dst[first >> 5] = word;
      count += __popc(word);
    }
  }
}

// dst[i] = src[row i] for values `width` bytes wide (zeros for a null row), and the rows'
// validity where valid_dst is not null (see GatherIndices and GatherValidity). Launched by
// whole warps.
extern "C" __global__ void ag_gather(u8* dst, const u8* src, i64 width, const u8* idx,
                                     i64 idx_width, i64 idx_signed, i64 n, i64 bound,
                                     unsigned* bad, unsigned* valid_dst, const u8* valid_src,
                                     i64 valid_off, u64* valid_count) {
  const GatherIndices rows = {idx, idx_width, idx_signed, bound, bad};
  const GatherColumn column = {dst, src, width, {valid_dst, valid_src, valid_off, valid_count}};
  u64 count = 0;
  FOR_EACH_WARP_ROUND(base, lane, stride, n) {
    i64 j[GATHER_ITEMS];
    round_positions(j, rows, base, stride, n);
    gather_round(column, j, base, lane, stride, n, count);
  }
  if (valid_count != 0 && valid_dst != 0) add_count(valid_count, count);
}

// The gather of up to GATHER_COLUMNS columns (a table of `count` GatherColumn in device
// memory) at the same rows, as ag_gather gathers one: each row's index read once for all.
#define GATHER_COLUMNS 8
extern "C" __global__ void ag_gather_columns(const GatherColumn* columns, i64 count,
                                             const u8* idx, i64 idx_width, i64 idx_signed,
                                             i64 n, i64 bound, unsigned* bad) {
  const GatherIndices rows = {idx, idx_width, idx_signed, bound, bad};
  u64 counts[GATHER_COLUMNS] = {};
  FOR_EACH_WARP_ROUND(base, lane, stride, n) {
    i64 j[GATHER_ITEMS];
    round_positions(j, rows, base, stride, n);
#pragma unroll 1
    for (int c = 0; c < count && c < GATHER_COLUMNS; ++c) {
      gather_round(columns[c], j, base, lane, stride, n, counts[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < GATHER_COLUMNS; ++c) {
    if (c < count && columns[c].valid.dst != 0 && columns[c].valid.count != 0) {
      add_count(columns[c].valid.count, counts[c]);
    }
  }
}

// Bit i of dst = bit idx[i] of src (1 where src is null), 0 where idx[i] is -1; one thread
// per output byte, so no two threads write one byte. Adds the bits set to *set_count where
// it is not null.
extern "C" __global__ void ag_gather_bits(u8* dst, const u8* src, i64 src_off, const i64* idx,
                                          i64 n, u64* set_count) {
  u64 count = 0;
  FOR_EACH(b, (n + 7) >> 3) {
    i64 j[8];  // the byte's indices loaded together, then their bits
#pragma unroll
    for (int k = 0; k < 8; ++k) j[k] = b * 8 + k < n ? idx[b * 8 + k] : -1;
    unsigned byte = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) byte |= (j[k] >= 0 ? bit_at(src, src_off + j[k]) : 0u) << k;
    dst[b] = (u8)byte;
    count += __popc(byte);
  }
  if (set_count != 0) add_count(set_count, count);
}

// Bits [dst_off, dst_off + n) of dst = bits [src_off, ...) of src (all 1 for a null src),
// each xor `invert`; bits of dst outside the range are kept. One thread per dst byte.
extern "C" __global__ void ag_copy_bits(u8* dst, i64 dst_off, const u8* src, i64 src_off,
                                        i64 n, i64 invert) {
  if (n <= 0) return;
  i64 first = dst_off >> 3;
  i64 last = (dst_off + n - 1) >> 3;
  FOR_EACH(k, last - first + 1) {
    i64 b = first + k;
    unsigned byte = dst[b];
    for (int bit = 0; bit < 8; ++bit) {
      i64 d = b * 8 + bit;
      if (d < dst_off || d >= dst_off + n) continue;
      unsigned v = bit_at(src, src_off + (d - dst_off)) ^ (unsigned)invert;
      byte = (byte & ~(1u << bit)) | (v << bit);
    }
    dst[b] = (u8)byte;
  }
}

// Adds to *count the bits set in [off, off + n) of bits.
extern "C" __global__ void ag_popcount(const u8* bits, i64 off, i64 n, u64* count) {
  u64 c = 0;
  i64 first = off >> 3;
  i64 last = (off + n - 1) >> 3;
  FOR_EACH(k, n > 0 ? last - first + 1 : 0) {
    i64 b = first + k;
    unsigned v = bits[b];
    if (b == first) v &= 0xffu << (off & 7);
    if (b == last) v &= 0xffu >> (7 - ((off + n - 1) & 7));
    c += __popc(v);
  }
  add_count(count, c);
}

// Where the range of row j starts: offsets[j], or (fixed > 0) j * fixed.
__device__ __forceinline__ i64 range_start(const u8* offsets, i64 width, i64 fixed, i64 j) {
  return fixed > 0 ? j * fixed : load_int(offsets, j, width, 1);
}

// Its length: offsets[j + 1] - offsets[j], sizes[j] for views, or fixed.
__device__ __forceinline__ i64 range_size(const u8* offsets, const u8* sizes, i64 width,
                                          i64 fixed, i64 j) {
  if (fixed > 0) return fixed;
  if (sizes != 0) return load_int(sizes, j, width, 1);
  return load_int(offsets, j + 1, width, 1) - load_int(offsets, j, width, 1);
}

// sizes_out[i] = the length of row idx[i]'s range, 0 where idx[i] is -1 (rows taken as a
// gather takes them: their loads issued together).
extern "C" __global__ void ag_range_sizes(i64* sizes_out, const u8* offsets, const u8* sizes,
                                          i64 width, const i64* idx, i64 n) {
  FOR_EACH_GATHER_ROUND(base, stride, n) {
    i64 j[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      j[k] = i < n ? idx[i] : -1;
    }
    i64 size[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      size[k] = j[k] >= 0 ? range_size(offsets, sizes, width, 0, j[k]) : 0;
    }
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      if (i < n) sizes_out[i] = size[k];
    }
  }
}
