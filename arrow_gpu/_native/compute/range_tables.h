// The tables of the batched copy kernels (copies.cu: CopyRange, BitRange, RebaseRange) and
// how their work is split into blocks: one layout for the native concatenation and for the
// tables arrow_gpu/_compute/copy_plan.py writes.
#pragma once

#include <cstdint>

namespace arrow_gpu {

// As in the kernels' source: threads per block and the work of one block.
constexpr int kCopyThreads = 256;
constexpr int64_t kCopyBlockBytes = 256 * 64;
constexpr int64_t kBitBlockWords = 256;
constexpr int64_t kRebaseBlockItems = 256 * 8;

// Rows of 64-bit words, as the kernels read them.
struct CopyRow {
  uint64_t src, dst;
  int64_t nbytes, first_block;
};
struct BitRow {
  uint64_t src;
  int64_t src_off;
  uint64_t dst;
  int64_t dst_off, nbits, first_block;
  uint64_t count;  // the address of a counter its set bits are added to (0: none)
  int64_t unused;
};
struct RebaseRow {
  uint64_t src, dst;
  int64_t n, width, delta;
  uint64_t type_ids, deltas;
  int64_t first_block;
};
static_assert(sizeof(CopyRow) == 32 && sizeof(BitRow) == 64 && sizeof(RebaseRow) == 64,
              "rows as the kernels read them");

// How many blocks of `per_block` units hold `units`.
inline int64_t Blocks(int64_t units, int64_t per_block) {
  return (units + per_block - 1) / per_block;
}

// Each fills its rows' first_block (the blocks the rows before it take: blocks spread over
// the ranges by their work) and returns the blocks of all.
int64_t LayCopyBlocks(CopyRow* rows, int64_t count);
int64_t LayBitBlocks(BitRow* rows, int64_t count);
int64_t LayRebaseBlocks(RebaseRow* rows, int64_t count);

}  // namespace arrow_gpu
