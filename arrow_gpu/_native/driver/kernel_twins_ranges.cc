// The twins of the batched copies (ag_copy_ranges, ag_copy_bit_ranges, ag_rebase_ranges),
// whose grid matters: a table in device memory gives each range its first block, and block b
// works on the last range whose first block is at most b, as the kernels do.
#include "driver/kernel_twins_common.h"

namespace arrow_gpu::twins {
namespace {

// The batched copies' tables, as copies.cu lays them out.
struct CopyRange {
  const u8* src;
  u8* dst;
  i64 nbytes;
  i64 first_block;
};
struct BitRange {
  const u8* src;
  i64 src_off;
  u8* dst;
  i64 dst_off;
  i64 nbits;
  i64 first_block;
  u64* count;
  i64 unused;
};
struct RebaseRange {
  const u8* src;
  u8* dst;
  i64 n;
  i64 width;
  i64 delta;
  const int8_t* type_ids;
  const u8* deltas;
  i64 first_block;
};

// The index of the last of `count` ranges whose first block is at most b: the range block b
// works on (range_of_block).
template <typename Range>
i64 RangeOfBlock(const u8* ranges, i64 count, i64 b) {
  i64 low = 0, high = count - 1;
  while (low < high) {
    i64 middle = (low + high + 1) >> 1;
    if (Load<Range>(ranges, middle).first_block <= b) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

}  // namespace

CUresult CopyRanges(unsigned blocks, unsigned, void** params) {
  Params p(params);
  auto* ranges = p.Pointer<const u8>();
  i64 count = p.Int();
  if (count < 1) return CUDA_ERROR_INVALID_VALUE;  // the kernel would read no range's memory
  for (i64 b = 0; b < blocks; ++b) {
    auto range = Load<CopyRange>(ranges, RangeOfBlock<CopyRange>(ranges, count, b));
    i64 start = (b - range.first_block) * kCopyBlockBytes;
    i64 n = std::min(range.nbytes - start, kCopyBlockBytes);
    if (n > 0) std::memmove(range.dst + start, range.src + start, n);
  }
  return CUDA_SUCCESS;
}

// A thread per destination word, BIT_BLOCK_WORDS words per block from the range's first
// owned word; each block adds the bits set in its words to the range's count.
CUresult CopyBitRanges(unsigned blocks, unsigned threads, void** params) {
  Params p(params);
  auto* ranges = p.Pointer<const u8>();
  i64 count = p.Int();
  if (count < 1) return CUDA_ERROR_INVALID_VALUE;
  for (i64 b = 0; b < blocks; ++b) {
    i64 r = RangeOfBlock<BitRange>(ranges, count, b);
    auto own = Load<BitRange>(ranges, r);
    i64 end_word = (own.dst_off + own.nbits + 63) >> 6;
    i64 first_word = ((own.dst_off + 63) >> 6) + (b - own.first_block) * kBitBlockWords;
    u64 set = 0;
    for (i64 w = first_word; w < std::min(first_word + threads, end_word); ++w) {
      i64 word_start = w * 64, word_end = word_start + 64;
      u64 word = 0;
      for (i64 j = r; j < count; ++j) {
        auto piece = Load<BitRange>(ranges, j);
        if (piece.dst != own.dst || piece.dst_off >= word_end) break;
        i64 low = std::max(piece.dst_off, word_start);
        i64 high = std::min(piece.dst_off + piece.nbits, word_end);
        if (low < high) {
          word |= LoadBits(piece.src, piece.src_off + (low - piece.dst_off), high - low)
                  << (low - word_start);
        }
      }
      Store<u64>(own.dst, w, word);
      set += Popcount(word);
    }
    if (own.count != nullptr) AddCount(own.count, set);
  }
  return CUDA_SUCCESS;
}

CUresult RebaseRanges(unsigned blocks, unsigned, void** params) {
  Params p(params);
  auto* ranges = p.Pointer<const u8>();
  i64 count = p.Int();
  if (count < 1) return CUDA_ERROR_INVALID_VALUE;
  for (i64 b = 0; b < blocks; ++b) {
    auto range = Load<RebaseRange>(ranges, RangeOfBlock<RebaseRange>(ranges, count, b));
    i64 start = (b - range.first_block) * kRebaseBlockItems;
    i64 end = range.n - start < kRebaseBlockItems ? range.n : start + kRebaseBlockItems;
    for (i64 i = start; i < end; ++i) {
      if (range.width == 16) {  // a view: the buffer index of an out-of-line one moves
        auto length = Load<int32_t>(range.src, 4 * i);
        auto index = Load<uint32_t>(range.src, 4 * i + 2);
        std::memmove(range.dst + 16 * i, range.src + 16 * i, 16);
        if (length > 12) {
          Store<uint32_t>(range.dst, 4 * i + 2, index + static_cast<uint32_t>(range.delta));
        }
      } else {
        i64 delta = range.type_ids != nullptr
                        ? Load<int32_t>(range.deltas, range.type_ids[i] & 127)
                        : range.delta;
        StoreInt(range.dst, i, range.width, Add(LoadInt(range.src, i, range.width, 1), delta));
      }
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace arrow_gpu::twins
