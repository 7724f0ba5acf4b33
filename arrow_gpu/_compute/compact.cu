// Compaction of values, ranges and bits by a boolean mask.

#include "filter.cuh"

// What a mask selects, in order: the values of src, `width` bytes each; or, for a null src,
// the rows' positions as i64 (-1 for an emitted null). `group_ranks` from the scan of
// ag_mask_counts.
extern "C" __global__ void ag_compact(u8* dst, const u8* src, i64 width, const u8* mask,
                                      i64 mask_off, const u8* valid, i64 valid_off, i64 mode,
                                      i64 n, const i64* group_ranks) {
  if (src == 0) {
    compact_rows<i64, MASK_GROUPS>(StoreAt<i64>{(i64*)dst}, PositionAt{valid, valid_off}, mask,
                                   mask_off, valid, valid_off, mode, n, group_ranks);
    return;
  }
  u64 aligned = ((u64)dst | (u64)src) % (u64)(width < 8 ? width : 8) == 0;
#define COMPACT_AS(T, GROUPS)                                                            \
  compact_rows<T, GROUPS>(StoreAt<T>{(T*)dst}, ValueAt<T>{(const T*)src}, mask, mask_off, \
                          valid, valid_off, mode, n, group_ranks)
  if (aligned && width == 1) { COMPACT_AS(u8, MASK_GROUPS); return; }
  if (aligned && width == 2) { COMPACT_AS(unsigned short, MASK_GROUPS); return; }
  if (aligned && width == 4) { COMPACT_AS(unsigned, 2 * MASK_GROUPS); return; }
  if (aligned && width == 8) { COMPACT_AS(u64, MASK_GROUPS); return; }
  if (aligned && width == 16) { COMPACT_AS(Pair, MASK_GROUPS / 2); return; }
#undef COMPACT_AS
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  FOR_EACH_WARP_OF_GROUPS(first, n) {  // any other width, or unaligned buffers
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
    for (int k = 0; k < MASK_GROUPS; ++k) {
      if (!((picked[k] >> lane) & 1u)) continue;
      i64 rank = rank_in(picked[k], group_ranks[(first >> 5) + k]);
      i64 i = first + 32 * k + lane;
      for (i64 b = 0; b < width; ++b) dst[rank * width + b] = src[i * width + b];
    }
  }
}

extern "C" __global__ void ag_compact_ranges(u8* starts, u8* sizes, const u8* offsets,
                                             i64 width, const u8* mask, i64 mask_off,
                                             const u8* valid, i64 valid_off, i64 mode, i64 n,
                                             const i64* group_ranks, u64* bytes) {
  if (width == 4) {
    compact_ranges<int, MASK_GROUPS>(starts, sizes, offsets, mask, mask_off, valid, valid_off,
                                     mode, n, group_ranks, bytes);
  } else {
    compact_ranges<i64, MASK_GROUPS / 2>(starts, sizes, offsets, mask, mask_off, valid,
                                         valid_off, mode, n, group_ranks, bytes);
  }
}

// The words a warp's round of 32 groups (1,024 mask rows) writes: their selected bits lie one
// after another, at most 1,024 of them from any bit of a word, so 33 words at most.
#define ROUND_WORDS 33
#define COMPACT_BITS_WARPS 8  // of a block (the block size of every launch is 256)

// The bits of a bitmap (src from bit src_off; all set for a null src) at the rows a mask
// selects, in order, to dst from bit 0: whole 32-bit words, zeroed beforehand. A warp takes 32
// consecutive groups a round, a lane each: each lane packs its group's selected bits into one
// word and ORs it into the round's words in shared memory at its group's rank; the warp then
// stores the words between the round's first and last, which no other round touches, and ORs
// those two into dst, which a round before or after may share. A thread per group OR'ing
// into dst itself made a global atomic or two per group, which serialise on a word
// neighbouring groups share. Adds the bits set to *set_count where it is not null. Launched
// by whole warps, COMPACT_BITS_WARPS at most a block.
extern "C" __global__ void ag_compact_bits(unsigned* dst, const u8* src, i64 src_off,
                                           const u8* mask, i64 mask_off, const u8* valid,
                                           i64 valid_off, i64 mode, i64 n,
                                           const i64* group_ranks, u64* set_count) {
  __shared__ unsigned round_words[COMPACT_BITS_WARPS][ROUND_WORDS];
  unsigned* words = round_words[threadIdx.x >> 5];
  const unsigned lane = threadIdx.x & 31;
  const i64 groups = (n + 31) >> 5;
  u64 count = 0;
  for (i64 first = ((i64)blockIdx.x * blockDim.x + threadIdx.x) & ~(i64)31; first < groups;
       first += (i64)blockDim.x * gridDim.x) {
    const i64 g = first + lane;
    unsigned picked = 0, word = 0;
    i64 at = 0;
    if (g < groups) {
      picked = group_word(mask, mask_off, valid, valid_off, mode, n, g);
      i64 row = 32 * g;
      word = packed_bits(load_word(src, src_off + row, n - row < 32 ? n - row : 32), picked);
      at = group_ranks[g];
    }
    // The round's rows lie from the first group's rank to the last one's end.
    const i64 begin = __shfl_sync(0xffffffffu, at, 0);
    const i64 last = groups - first < 32 ? groups - first - 1 : 31;
    const i64 end = __shfl_sync(0xffffffffu, at + __popc(picked), (int)last);
    if (begin == end) continue;  // nothing selected (warp-uniform)
    words[lane] = 0;
    if (lane < ROUND_WORDS - 32) words[32 + lane] = 0;
    __syncwarp();
    if (picked != 0u) {
      i64 bit = at - (begin & ~(i64)31);  // from the round's first word
      unsigned shift = (unsigned)(bit & 31);
      atomicOr(&words[bit >> 5], word << shift);
      if (shift + __popc(picked) > 32u) atomicOr(&words[(bit >> 5) + 1], word >> (32u - shift));
      count += __popc(word);
    }
    __syncwarp();
    const i64 first_word = begin >> 5, last_word = (end - 1) >> 5;
    for (i64 w = first_word + lane; w <= last_word; w += 32) {
      unsigned value = words[w - first_word];
      if (w == first_word || w == last_word) {
        atomicOr(dst + w, value);
      } else {
        dst[w] = value;
      }
    }
    __syncwarp();  // the words are the next round's
  }
  if (set_count != 0) add_count(set_count, count);
}
