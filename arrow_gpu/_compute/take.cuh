// Take: indices normalised, values and bits gathered by index, bitmaps copied and counted,
// and the sizes of the rows' ranges (offsets, views or fixed).
#pragma once

#include "common.cuh"

// What a gather reads its rows from: indices `width` bytes wide (unsigned unless
// is_signed), each of which must lie in [0, bound). One that does not is a null row where
// `bad` is null (int64 positions, -1 for a null row), else sets *bad, which the host reads
// back before it hands out the result, and gathers nothing.
struct GatherIndices {
  const u8* idx;
  i64 width, is_signed, bound;
  unsigned* bad;
};

// Index j as a position: itself where it lies in [0, bound), else -1 (and `out` set).
__device__ __forceinline__ i64 checked(const GatherIndices& rows, i64 j, bool& out) {
  bool in = j >= 0 && j < rows.bound;
  out = out || !in;
  return in ? j : -1;
}

__device__ __forceinline__ void flag_if(const GatherIndices& rows, bool out) {
  if (out && rows.bad != 0) atomicOr(rows.bad, 1u);
}

__device__ __forceinline__ i64 position_at(const GatherIndices& rows, i64 i) {
  bool out = false;
  i64 j = checked(rows, load_int(rows.idx, i, rows.width, rows.is_signed), out);
  flag_if(rows, out);
  return j;
}

// Indices of any integer width to i64 positions: -1 where null; *bad set where a valid
// index is negative or not below `bound`.
extern "C" __global__ void ag_indices(i64* out, const u8* idx, i64 width, i64 is_signed,
                                      const u8* valid, i64 valid_off, i64 n, i64 bound,
                                      unsigned* bad) {
  const GatherIndices rows = {idx, width, is_signed, bound, bad};
  FOR_EACH(i, n) out[i] = bit_at(valid, valid_off + i) ? position_at(rows, i) : -1;
}

// A gather by index waits a memory latency per row: each thread takes GATHER_ITEMS rows at
// once (a grid's width apart, so that each round's accesses coalesce), their index loads
// issued together, then their value loads.
#define GATHER_ITEMS 4

// A round's rows: positions (-1 for a null row) or -1 past the last row.
struct RoundRows {
  i64 j[GATHER_ITEMS];
};

// Their indices are all loaded before the first is checked, since a check (a branch on the
// index) waits for its load.
__device__ __forceinline__ RoundRows round_rows(const GatherIndices& rows, i64 base,
                                                i64 stride, i64 n) {
  RoundRows r;
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    i64 i = base + k * stride;
    r.j[k] = i < n ? load_int(rows.idx, i, rows.width, rows.is_signed) : 0;
  }
  bool out = false;
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    r.j[k] = base + k * stride < n ? checked(rows, r.j[k], out) : -1;
  }
  flag_if(rows, out);
  return r;
}
#define FOR_EACH_GATHER_ROUND(base, stride, n)                                      \
  for (i64 stride = (i64)blockDim.x * gridDim.x,                                    \
           base = (i64)blockIdx.x * blockDim.x + threadIdx.x;                       \
       base < (n); base += stride * GATHER_ITEMS)

// The validity a gather makes beside the values: bit i of dst = row i is not null and bit j
// of src (all set where src is null), written in whole 32-bit words; the bits set are added
// to *count where it is not null. No validity where dst is null.
struct GatherValidity {
  unsigned* dst;
  const u8* src;
  i64 src_off;
  u64* count;
};

// Loads and stores named global: a column's pointers come from shared memory, where the
// compiler cannot tell their space, and generic accesses were measured slower.
template <typename T>
__device__ __forceinline__ T load_global(const T* p) { return __ldg(p); }
template <>
__device__ __forceinline__ Pair load_global(const Pair* p) {
  return {__ldg(&p->lo), __ldg(&p->hi)};
}
template <typename T>
__device__ __forceinline__ void store_global(T* p, T v) { __stcg(p, v); }
template <>
__device__ __forceinline__ void store_global(Pair* p, Pair v) {
  __stcg(&p->lo, v.lo);
  __stcg(&p->hi, v.hi);
}

// Values of one T each at the round's rows: their loads go out together, then the stores.
template <typename T>
__device__ __forceinline__ void gather_round(u8* dst, const u8* src, const RoundRows& r,
                                             i64 base, i64 stride, i64 n) {
  T v[GATHER_ITEMS];
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    v[k] = r.j[k] >= 0 ? load_global((const T*)src + r.j[k]) : T();
  }
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    i64 i = base + k * stride;
    if (i < n) store_global((T*)dst + i, v[k]);
  }
}

// Values of `words` T each (wider than a word, or of a width or alignment no word fits), a
// row at a time: rare types, kept out of line so that the kernel's registers stay few.
template <typename T>
__device__ __noinline__ void gather_round_wide(u8* dst, const u8* src, i64 words,
                                               const RoundRows r, i64 base, i64 stride,
                                               i64 n) {
  T* d = (T*)dst;
  const T* s = (const T*)src;
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    i64 i = base + k * stride;
    if (i >= n) break;
    for (i64 w = 0; w < words; ++w) d[i * words + w] = r.j[k] >= 0 ? s[r.j[k] * words + w] : T();
  }
}

// The columns one gather launch takes at the same rows: each round's indices are read
// (and checked) once for all of them, where a launch per column reads them again each time.
#define GATHER_COLUMNS 4

// How a column's values are loaded: a round's rows as one word each of 1, 2, 4, 8 or 16
// bytes, or row by row in 8-byte words or bytes.
enum { GATHER_U8, GATHER_U16, GATHER_U32, GATHER_U64, GATHER_PAIR, GATHER_WORDS,
       GATHER_BYTES };

// One column of a gather: dst[i] = src[row i], `width` bytes each (zeros for a null row),
// loaded as `kind` says, and the rows' validity.
struct GatherColumn {
  u8* dst;
  const u8* src;
  i64 width;
  GatherValidity valid;
  int kind;
};

__device__ __forceinline__ int gather_kind(const u8* dst, const u8* src, i64 width) {
  u64 align = (u64)dst | (u64)src;
  if (width == 1) return GATHER_U8;
  if (width == 2 && align % 2 == 0) return GATHER_U16;
  if (width == 4 && align % 4 == 0) return GATHER_U32;
  if (width == 8 && align % 8 == 0) return GATHER_U64;
  if (width == 16 && align % 8 == 0) return GATHER_PAIR;
  if (width % 8 == 0 && align % 8 == 0) return GATHER_WORDS;  // decimal256, ...
  return GATHER_BYTES;  // any other width, or unaligned buffers
}

#define GATHER_COLUMN(c)                                                                  \
  {dst##c, src##c, width##c, {valid_dst##c, valid_src##c, valid_off##c, valid_count##c},  \
   gather_kind(dst##c, src##c, width##c)}

// For each of the first `columns` (1 to GATHER_COLUMNS) columns: dst[i] = src[row i] for
// values `width` bytes wide (zeros for a null row), and the rows' validity where valid_dst
// is not null (see GatherIndices and GatherValidity; the parameters of unused columns are
// not used). The loop runs by whole warps, each round's 32 rows of a warp a word of each
// validity (one ballot). Launched by whole warps, at most 256 threads a block: its
// registers are held to 64, four such blocks a multiprocessor.
extern "C" __global__ void __launch_bounds__(256, 4) ag_gather(
    const u8* idx, i64 idx_width, i64 idx_signed, i64 n, i64 bound, unsigned* bad, i64 columns,
    u8* dst0, const u8* src0, i64 width0, unsigned* valid_dst0, const u8* valid_src0,
    i64 valid_off0, u64* valid_count0,
    u8* dst1, const u8* src1, i64 width1, unsigned* valid_dst1, const u8* valid_src1,
    i64 valid_off1, u64* valid_count1,
    u8* dst2, const u8* src2, i64 width2, unsigned* valid_dst2, const u8* valid_src2,
    i64 valid_off2, u64* valid_count2,
    u8* dst3, const u8* src3, i64 width3, unsigned* valid_dst3, const u8* valid_src3,
    i64 valid_off3, u64* valid_count3) {
  const GatherIndices rows = {idx, idx_width, idx_signed, bound, bad};
  if (columns > GATHER_COLUMNS) columns = GATHER_COLUMNS;
  // In shared memory, so that the loop over the columns needs no registers for them.
  // The block's count of each validity's set bits is there too.
  __shared__ GatherColumn cols[GATHER_COLUMNS];
  __shared__ u64 counts[GATHER_COLUMNS];
  if (threadIdx.x == 0) {
    const GatherColumn given[GATHER_COLUMNS] = {GATHER_COLUMN(0), GATHER_COLUMN(1),
                                                GATHER_COLUMN(2), GATHER_COLUMN(3)};
    for (int c = 0; c < GATHER_COLUMNS; ++c) cols[c] = given[c], counts[c] = 0;
  }
  __syncthreads();
  const i64 stride = (i64)blockDim.x * gridDim.x;
  const i64 lane = threadIdx.x & 31;
  for (i64 base = (i64)blockIdx.x * blockDim.x + threadIdx.x; base - lane < n;
       base += stride * GATHER_ITEMS) {
    const RoundRows r = round_rows(rows, base, stride, n);
    for (int c = 0; c < columns; ++c) {
      const GatherColumn& col = cols[c];
      switch (col.kind) {
        case GATHER_U8: gather_round<u8>(col.dst, col.src, r, base, stride, n); break;
        case GATHER_U16: gather_round<unsigned short>(col.dst, col.src, r, base, stride, n); break;
        case GATHER_U32: gather_round<unsigned>(col.dst, col.src, r, base, stride, n); break;
        case GATHER_U64: gather_round<u64>(col.dst, col.src, r, base, stride, n); break;
        case GATHER_PAIR: gather_round<Pair>(col.dst, col.src, r, base, stride, n); break;
        case GATHER_WORDS:
          gather_round_wide<u64>(col.dst, col.src, col.width / 8, r, base, stride, n);
          break;
        default: gather_round_wide<u8>(col.dst, col.src, col.width, r, base, stride, n);
      }
      if (col.valid.dst == 0) continue;
      unsigned bit[GATHER_ITEMS];  // loaded together, then voted on
#pragma unroll
      for (int k = 0; k < GATHER_ITEMS; ++k) {
        i64 b = col.valid.src_off + r.j[k];
        bit[k] = r.j[k] < 0 ? 0u
                 : col.valid.src == 0 ? 1u
                 : (load_global(col.valid.src + (b >> 3)) >> (b & 7)) & 1u;
      }
#pragma unroll
      for (int k = 0; k < GATHER_ITEMS; ++k) {
        unsigned word = __ballot_sync(0xffffffffu, bit[k]);
        i64 first = base - lane + k * stride;
        if (lane == 0 && first < n) {
          store_global(col.valid.dst + (first >> 5), word);
          atomicAdd(&counts[c], (u64)__popc(word));
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < columns) {
    const GatherColumn& col = cols[threadIdx.x];
    if (col.valid.dst != 0 && col.valid.count != 0 && counts[threadIdx.x] != 0) {
      atomicAdd(col.valid.count, counts[threadIdx.x]);
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
