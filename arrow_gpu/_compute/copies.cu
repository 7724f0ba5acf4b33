// Batched copies of many byte, bit and offset ranges in one launch, from a table of ranges.

#include "rows.cuh"

// --- Batched copies: one launch copies many ranges (concatenation copies every chunk of every
// column at once). The host lists the ranges in a table; `first_block` is the prefix of their
// sizes in blocks, so that blocks spread over the ranges in proportion to their sizes and each
// block finds its range by binary search. A range may own no block (the bit ranges below).
#define COPY_BLOCK_BYTES (256 * 64)
#define BIT_BLOCK_WORDS 256
#define REBASE_BLOCK_ITEMS (256 * 8)

// The last of `count` ranges whose first block is at most b: the range block b works on.
// Each warp searches 32 ranges a step, a lane each (two dependent loads for up to 1,024
// ranges, where a binary search takes ten): a block waits for its range before it moves a
// byte, and short blocks spent longer finding it than copying. Every lane must call it.
template <typename Range>
__device__ __forceinline__ i64 range_of_block(const Range* ranges, i64 count, i64 b) {
  const i64 lane = threadIdx.x & 31;
  i64 low = 0, high = count;  // ranges[low].first_block <= b; the answer is below high
  while (high - low > 1) {
    const i64 step = (high - low + 31) >> 5;
    const i64 probe = low + lane * step;
    const unsigned below = __ballot_sync(0xffffffffu,
                                         probe < high && ranges[probe].first_block <= b);
    low += (i64)(31 - __clz(below)) * step;
    high = low + step < high ? low + step : high;
  }
  return low;
}

struct CopyRange { const u8* src; u8* dst; i64 nbytes; i64 first_block; };

// Each block copies COPY_BLOCK_BYTES of one range, in the widest words both ends allow.
extern "C" __global__ void ag_copy_ranges(const CopyRange* ranges, i64 count) {
  const CopyRange range = ranges[range_of_block(ranges, count, blockIdx.x)];
  i64 start = ((i64)blockIdx.x - range.first_block) * COPY_BLOCK_BYTES;
  i64 n = range.nbytes - start < COPY_BLOCK_BYTES ? range.nbytes - start : COPY_BLOCK_BYTES;
  copy_bytes(range.dst + start, range.src + start, n, threadIdx.x, blockDim.x);
}

// Bits [dst_off, dst_off + nbits) of the bitmap dst = bits [src_off, ...) of src (all set for a
// null src). The ranges of one dst bitmap are listed together, in order, and tile it from bit
// 0; its bitmap is allocated in whole 64-bit words. Where count is not null, the bits set in
// the words the range owns are added to *count.
struct BitRange {
  const u8* src; i64 src_off; u8* dst; i64 dst_off; i64 nbits; i64 first_block; u64* count;
  i64 unused;
};

// One thread per destination word: a range owns the words whose first bit it holds, and its
// threads fill them from it and from the ranges after it that reach into them, so that no two
// threads write one word.
extern "C" __global__ void ag_copy_bit_ranges(const BitRange* ranges, i64 count) {
  i64 r = range_of_block(ranges, count, blockIdx.x);
  const BitRange own = ranges[r];
  i64 end_word = (own.dst_off + own.nbits + 63) >> 6;
  i64 w = ((own.dst_off + 63) >> 6) + ((i64)blockIdx.x - own.first_block) * BIT_BLOCK_WORDS +
          threadIdx.x;
  u64 set = 0;
  if (w < end_word) {
    i64 word_start = w * 64;
    i64 word_end = word_start + 64;
    u64 word = 0;
    for (i64 j = r; j < count && ranges[j].dst == own.dst && ranges[j].dst_off < word_end; ++j) {
      const BitRange piece = ranges[j];
      i64 low = piece.dst_off > word_start ? piece.dst_off : word_start;
      i64 high = piece.dst_off + piece.nbits < word_end ? piece.dst_off + piece.nbits : word_end;
      if (low < high) {
        word |= load_bits(piece.src, piece.src_off + (low - piece.dst_off), high - low)
                << (low - word_start);
      }
    }
    ((u64*)own.dst)[w] = word;
    set = __popcll(word);
  }
  if (own.count != 0) add_count(own.count, set);  // the same for the whole block
}

// n items of src to dst, each moved by delta: offsets (`width` 4 or 8: + delta, or with
// type_ids, + deltas[type_ids[i]], a dense union's offsets by child), or views (`width` 16:
// the buffer index of an out-of-line view, longer than 12 bytes, + delta).
struct RebaseRange {
  const u8* src; u8* dst; i64 n; i64 width; i64 delta; const signed char* type_ids;
  const int* deltas; i64 first_block;
};

// Offsets of one width, one delta: a thread loads REBASE_LOADS items before it stores any,
// where an item at a time kept one load in flight (its store may alias the next load).
#define REBASE_LOADS 4
template <typename T>
__device__ __forceinline__ void rebase_offsets(const T* __restrict__ src, T* __restrict__ dst,
                                               i64 start, i64 end, T delta) {
  for (i64 round = start + threadIdx.x; round < end; round += REBASE_LOADS * blockDim.x) {
    T v[REBASE_LOADS];
#pragma unroll
    for (int k = 0; k < REBASE_LOADS; ++k) {
      const i64 i = round + k * blockDim.x;
      v[k] = i < end ? src[i] : T();
    }
#pragma unroll
    for (int k = 0; k < REBASE_LOADS; ++k) {
      const i64 i = round + k * blockDim.x;
      if (i < end) dst[i] = v[k] + delta;
    }
  }
}

extern "C" __global__ void ag_rebase_ranges(const RebaseRange* ranges, i64 count) {
  const RebaseRange range = ranges[range_of_block(ranges, count, blockIdx.x)];
  i64 start = ((i64)blockIdx.x - range.first_block) * REBASE_BLOCK_ITEMS;
  i64 end = range.n - start < REBASE_BLOCK_ITEMS ? range.n : start + REBASE_BLOCK_ITEMS;
  if (range.type_ids == 0 && range.width == 4) {
    rebase_offsets<int>((const int*)range.src, (int*)range.dst, start, end, (int)range.delta);
    return;
  }
  if (range.type_ids == 0 && range.width == 8) {
    rebase_offsets<i64>((const i64*)range.src, (i64*)range.dst, start, end, range.delta);
    return;
  }
#pragma unroll 1
  for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
    if (range.width == 16) {
      const int* s = (const int*)(range.src + 16 * i);
      int* d = (int*)(range.dst + 16 * i);
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[0] > 12 ? s[2] + (int)range.delta : s[2];
      d[3] = s[3];
    } else {
      i64 delta = range.type_ids != 0 ? range.deltas[range.type_ids[i] & 127] : range.delta;
      store_int(range.dst, i, range.width, load_int(range.src, i, range.width, 1) + delta);
    }
  }
}
