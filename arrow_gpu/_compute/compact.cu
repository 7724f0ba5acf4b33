// Compaction of values, ranges and bits by a boolean mask.

#include "filter.cuh"

// What a mask selects, in order: the values of src, `width` bytes each; or, for a null src,
// the rows' positions as i64 (-1 for an emitted null). `group_ranks` from
// ag_mask_ranks.
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

// The bits of a bitmap (src from bit src_off; all set for a null src) at the rows a mask
// selects, in order, to dst from bit 0: whole 32-bit words, zeroed beforehand. A thread per
// group packs its selected bits into one word and ORs it into place at the group's rank (a
// word may straddle two); adds the bits set to *set_count where it is not null.
extern "C" __global__ void ag_compact_bits(unsigned* dst, const u8* src, i64 src_off,
                                           const u8* mask, i64 mask_off, const u8* valid,
                                           i64 valid_off, i64 mode, i64 n,
                                           const i64* group_ranks, u64* set_count) {
  u64 count = 0;
  FOR_EACH(g, (n + 31) >> 5) {
    unsigned picked = group_word(mask, mask_off, valid, valid_off, mode, n, g);
    if (picked == 0u) continue;
    i64 first = 32 * g;
    unsigned bits = load_word(src, src_off + first, n - first < 32 ? n - first : 32);
    unsigned word = packed_bits(bits, picked);
    i64 at = group_ranks[g];
    unsigned shift = (unsigned)(at & 31);
    atomicOr(dst + (at >> 5), word << shift);
    if (shift + __popc(picked) > 32u) atomicOr(dst + (at >> 5) + 1, word >> (32u - shift));
    count += __popc(word);
  }
  if (set_count != 0) add_count(set_count, count);
}
