// Device code of the gathers by index (take.cu, range_sizes.cu): indices checked as they are
// read, values and their validity gathered a round of rows at a time, ranges sized.
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
    // Each row's validity bit is loaded before its value (an L2 read, the bitmap being
    // small), and a null row's value is not read at all: a random DRAM read saved per null.
    unsigned valid_bit[GATHER_ITEMS];
#pragma unroll
    for (int k = 0; k < GATHER_ITEMS; ++k) {
      valid_bit[k] = validity_bit(valid, j[k]);
      if (valid.dst != 0 && !valid_bit[k]) j[k] = -1;
    }
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
