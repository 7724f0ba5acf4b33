#include "compute/range_tables.h"

namespace arrow_gpu {
namespace {

// Fills each row's first_block, a row taking blocks_of(row) blocks; the blocks of all.
template <typename Row, typename BlocksOf>
int64_t LayBlocks(Row* rows, int64_t count, BlocksOf blocks_of) {
  int64_t blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    rows[i].first_block = blocks;
    blocks += blocks_of(rows[i]);
  }
  return blocks;
}

}  // namespace

int64_t LayCopyBlocks(CopyRow* rows, int64_t count) {
  return LayBlocks(rows, count,
                   [](const CopyRow& row) { return Blocks(row.nbytes, kCopyBlockBytes); });
}

int64_t LayBitBlocks(BitRow* rows, int64_t count) {
  return LayBlocks(rows, count, [](const BitRow& row) {
    // The words whose first bit the range holds; a range may hold none.
    const int64_t words = Blocks(row.dst_off + row.nbits, 64) - Blocks(row.dst_off, 64);
    return Blocks(words, kBitBlockWords);
  });
}

int64_t LayRebaseBlocks(RebaseRow* rows, int64_t count) {
  return LayBlocks(rows, count,
                   [](const RebaseRow& row) { return Blocks(row.n, kRebaseBlockItems); });
}

}  // namespace arrow_gpu
