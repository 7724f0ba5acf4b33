// A boolean mask's selected rows counted a group of 32 at a time, and their ranks.

#include "filter.cuh"

// counts[g] = how many rows of group g a mask selects: a thread per group.
extern "C" __global__ void ag_mask_counts(const u8* mask, i64 mask_off, const u8* valid,
                                          i64 valid_off, i64 mode, i64 n, i64* counts) {
  FOR_EACH(g, (n + 31) >> 5) {
    counts[g] = __popc(group_word(mask, mask_off, valid, valid_off, mode, n, g));
  }
}

// ag_mask_counts and the scan of its counts in one launch, for a mask of at most SCAN_TILE
// groups (a small call's time is its launches): ranks[g] = the rank of group g's first
// selected row, ranks[groups] and *total = the rows selected. One block of SCAN_THREADS.
extern "C" __global__ void ag_mask_ranks(const u8* mask, i64 mask_off, const u8* valid,
                                         i64 valid_off, i64 mode, i64 n, i64* ranks,
                                         i64* total) {
  scan_tile(GroupCounts{mask, mask_off, valid, valid_off, mode, n}, (n + 31) >> 5, 0, true,
            [](i64) { return (i64)0; }, (u8*)ranks, 8, total);
}
