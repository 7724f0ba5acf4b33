// A boolean mask's selected rows counted a group of 32 at a time, and their ranks.

#include "filter.cuh"

// ranks[g] = the rank of group g's first selected row (see group_word), ranks[groups] and
// *total = the rows selected: the scan of the groups' counts, each counted as it is loaded,
// so that no count is written and read again, in one launch of a block per tile of SCAN_TILE
// groups; `state` (more than one tile) as ag_scan's.
extern "C" __global__ void ag_mask_ranks(const u8* mask, i64 mask_off, const u8* valid,
                                         i64 valid_off, i64 mode, i64 n, i64* ranks,
                                         i64* total, u64* state) {
  scan_tiles(GroupCounts{mask, mask_off, valid, valid_off, mode, n}, (n + 31) >> 5, (u8*)ranks,
             8, total, state);
}
