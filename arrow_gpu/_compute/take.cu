// Gathers by index: indices normalised, values and bits gathered, bitmaps copied and
// counted.

#include "take.cuh"

// Indices of any integer width to i64 positions: -1 where null; *bad set where a valid
// index is negative or not below `bound`.
extern "C" __global__ void ag_indices(i64* out, const u8* idx, i64 width, i64 is_signed,
                                      const u8* valid, i64 valid_off, i64 n, i64 bound,
                                      unsigned* bad) {
  const GatherIndices rows = {idx, width, is_signed, bound, bad};
  FOR_EACH(i, n) out[i] = bit_at(valid, valid_off + i) ? position_at(rows, i) : -1;
}

// dst[i] = src[row i] for values `width` bytes wide, and the rows' validity where valid_dst
// is not null (see GatherIndices and GatherValidity); zeros for a null row (a null index, or
// a null value where the validity is made). Launched by whole warps.
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
