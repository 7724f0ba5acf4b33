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

// Index j as a position: j where it lies in [0, bound), else -1 and *bad set (where bad is
// not null).
__device__ __forceinline__ i64 checked_position(i64 j, i64 bound, unsigned* bad) {
  if (j >= 0 && j < bound) return j;
  if (bad != 0) atomicOr(bad, 1u);
  return -1;
}

__device__ __forceinline__ i64 position_at(const GatherIndices& rows, i64 i) {
  return checked_position(load_int(rows.idx, i, rows.width, rows.is_signed), rows.bound,
                          rows.bad);
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
// issued together, then their value loads. The loop runs by whole warps, each round's 32
// rows of a warp a word of the validity (one ballot).
#define GATHER_ITEMS 4
#define FOR_EACH_GATHER_ROUND(base, lane, stride, n)                                 \
  for (i64 base = (i64)blockIdx.x * blockDim.x + threadIdx.x; base - (lane) < (n);   \
       base += (stride) * GATHER_ITEMS)

// Stores and index loads a gather makes once: marked to leave the L2 first, so that more of
// it holds the lines the random reads of the values may hit again.
template <typename T>
__device__ __forceinline__ void store_once(T* p, T v) { *p = v; }
__device__ __forceinline__ void store_once(u64* p, u64 v) { __stcs(p, v); }
__device__ __forceinline__ void store_once(unsigned* p, unsigned v) { __stcs(p, v); }
__device__ __forceinline__ void store_once(unsigned short* p, unsigned short v) { __stcs(p, v); }
__device__ __forceinline__ i64 position_once(const GatherIndices& rows, i64 i) {
  i64 j = rows.width == 8 ? __ldcs((const i64*)rows.idx + i)
                          : load_int(rows.idx, i, rows.width, rows.is_signed);
  return checked_position(j, rows.bound, rows.bad);
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

// Row j's bit of the validity (0 for a null row, j -1), or 0 where none is made.
__device__ __forceinline__ unsigned validity_bit(const GatherValidity& valid, i64 j) {
  return valid.dst != 0 && j >= 0 ? bit_at(valid.src, valid.src_off + j) : 0u;
}

// The validity words of a round's rows (bit[k] this lane's row base + k * stride), each
// written by lane 0, their bits set added to *count.
__device__ __forceinline__ void put_validity(const GatherValidity& valid,
                                             const unsigned (&bit)[GATHER_ITEMS], i64 base,
                                             i64 lane, i64 stride, i64 n, u64* count) {
#pragma unroll
  for (int k = 0; k < GATHER_ITEMS; ++k) {
    unsigned word = __ballot_sync(0xffffffffu, bit[k]);
    i64 first = base - lane + k * stride;
    if (lane == 0 && first < n) {
      store_once(&valid.dst[first >> 5], word);
      *count += __popc(word);
    }
  }
}

// Rows of `words` T each (one for the typed widths, whose loads go out together).
template <typename T>
__device__ __forceinline__ void gather_rows(T* __restrict__ d, const T* __restrict__ s,
                                            i64 words, const GatherIndices rows, i64 n,
                                            const GatherValidity valid) {
  const i64 stride = (i64)blockDim.x * gridDim.x;
  const i64 lane = threadIdx.x & 31;
  u64 count = 0;
  FOR_EACH_GATHER_ROUND(base, lane, stride, n) {
    i64 j[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      j[k] = i < n ? position_once(rows, i) : -1;
    }
    // Each row's validity bit is loaded beside its value (an L2 read beside a DRAM one),
    // not after the values are stored, which the compiler cannot reorder it across.
    unsigned valid_bit[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) valid_bit[k] = validity_bit(valid, j[k]);
    if (words == 1) {
      T v[GATHER_ITEMS];
#pragma unroll
      for (int k = 0; k < GATHER_ITEMS; ++k) v[k] = j[k] >= 0 ? s[j[k]] : T();
#pragma unroll
      for (int k = 0; k < GATHER_ITEMS; ++k) {
        i64 i = base + k * stride;
        if (i < n) store_once(&d[i], v[k]);
      }
    } else {
      for (int k = 0; k < GATHER_ITEMS; ++k) {
        i64 i = base + k * stride;
        if (i >= n) break;
        for (i64 w = 0; w < words; ++w) d[i * words + w] = j[k] >= 0 ? s[j[k] * words + w] : T();
      }
    }
    if (valid.dst != 0) put_validity(valid, valid_bit, base, lane, stride, n, &count);
  }
  if (valid.count != 0) add_count(valid.count, count);
}

// dst[i] = src[row i] for values `width` bytes wide (zeros for a null row), and the rows'
// validity where valid_dst is not null (see GatherIndices and GatherValidity). Launched by
// whole warps.
extern "C" __global__ void ag_gather(u8* dst, const u8* src, i64 width, const u8* idx,
                                     i64 idx_width, i64 idx_signed, i64 n, i64 bound,
                                     unsigned* bad, unsigned* valid_dst, const u8* valid_src,
                                     i64 valid_off, u64* valid_count) {
  const GatherIndices rows = {idx, idx_width, idx_signed, bound, bad};
  const GatherValidity valid = {valid_dst, valid_src, valid_off, valid_count};
  u64 align = (u64)dst | (u64)src;
  if (width == 1) { gather_rows<u8>(dst, src, 1, rows, n, valid); return; }
  if (width == 2 && align % 2 == 0) {
    gather_rows<unsigned short>((unsigned short*)dst, (const unsigned short*)src, 1, rows, n,
                                valid);
    return;
  }
  if (width == 4 && align % 4 == 0) {
    gather_rows<unsigned>((unsigned*)dst, (const unsigned*)src, 1, rows, n, valid);
    return;
  }
  if (width == 16 && align % 8 == 0) {
    gather_rows<Pair>((Pair*)dst, (const Pair*)src, 1, rows, n, valid);
    return;
  }
  if (width % 8 == 0 && align % 8 == 0) {  // int64, float64, decimal256, ...
    gather_rows<u64>((u64*)dst, (const u64*)src, width / 8, rows, n, valid);
    return;
  }
  gather_rows<u8>(dst, src, width, rows, n, valid);  // any other width, or unaligned buffers
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

// block_counts[b] = the bits set in [off, off + n) of bits that block b of the grid counts:
// every block writes its own (so nothing is zeroed before), and the host sums them.
extern "C" __global__ void ag_popcount(const u8* bits, i64 off, i64 n, u64* block_counts) {
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
  u64 sum = block_sum(c);
  if (threadIdx.x == 0) block_counts[blockIdx.x] = sum;
}

// Where the range of row j starts: offsets[j], or (fixed > 0) j * fixed.
__device__ __forceinline__ i64 range_start(const u8* offsets, i64 width, i64 fixed, i64 j) {
  return fixed > 0 ? j * fixed : load_int(offsets, j, width, 1);
}

// Indices of one type, each checked as position_at checks them (an unsigned 64-bit index past
// INT64_MAX reads negative: out of range): the sizing pass of a take reads them typed, since
// position_at's choice of width and sign per row cost it a fifth of its time.
template <typename T>
struct TypedIndices {
  const T* idx;
  i64 bound;
  unsigned* bad;
  __device__ __forceinline__ i64 operator()(i64 i) const {
    return checked_position((i64)idx[i], bound, bad);
  }
};

struct AnyIndices {
  GatherIndices rows;
  __device__ __forceinline__ i64 operator()(i64 i) const { return position_at(rows, i); }
};

// The body of ag_range_sizes for indices read by `Rows` and offsets (and sizes) of type O.
template <typename O, typename Rows>
__device__ __forceinline__ void size_ranges(O* sizes_out, const O* offsets, const O* sizes,
                                            Rows row, i64 n, const GatherValidity& valid,
                                            O* starts_out) {
  const i64 stride = (i64)blockDim.x * gridDim.x;
  const i64 lane = threadIdx.x & 31;
  u64 count = 0;
  FOR_EACH_GATHER_ROUND(base, lane, stride, n) {
    i64 j[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      j[k] = i < n ? row(i) : -1;
    }
    O start[GATHER_ITEMS], size[GATHER_ITEMS];
    unsigned valid_bit[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      start[k] = j[k] >= 0 ? offsets[j[k]] : O(0);
      size[k] = j[k] < 0 ? O(0) : sizes != 0 ? sizes[j[k]] : offsets[j[k] + 1] - start[k];
      valid_bit[k] = validity_bit(valid, j[k]);
    }
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      i64 i = base + k * stride;
      if (i < n) {
        sizes_out[i] = size[k];
        if (starts_out != 0) starts_out[i] = start[k];
      }
    }
    if (valid.dst != 0) put_validity(valid, valid_bit, base, lane, stride, n, &count);
  }
  if (valid.count != 0) add_count(valid.count, count);
}

template <typename O>
__device__ __forceinline__ void size_ranges_of(u8* sizes_out, const u8* offsets,
                                               const u8* sizes, const GatherIndices& rows, i64 n,
                                               const GatherValidity& valid, u8* starts_out) {
  auto run = [&](auto row) {
    size_ranges<O>((O*)sizes_out, (const O*)offsets, (const O*)sizes, row, n, valid,
                   (O*)starts_out);
  };
  if (rows.width == 8) {
    run(TypedIndices<i64>{(const i64*)rows.idx, rows.bound, rows.bad});
  } else if (rows.width == 4 && rows.is_signed) {
    run(TypedIndices<int>{(const int*)rows.idx, rows.bound, rows.bad});
  } else if (rows.width == 4) {
    run(TypedIndices<unsigned>{(const unsigned*)rows.idx, rows.bound, rows.bad});
  } else {
    run(AnyIndices{rows});
  }
}

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
