// The device kernels of `arrow_gpu.compute`, compiled at run time by NVRTC and cached on disk
// (arrow_gpu/_compute/kernels.py); no CUDA toolkit is needed to build or install arrow_gpu.
//
// A few generic kernels over bytes, bits, offsets and indices; which buffers they run over,
// per Arrow type, is decided in Python (`arrow_gpu.compute`). Conventions:
//
// * every parameter is 64 bits wide (a pointer, or a `long long`), so that one launch
//   helper passes any of them;
// * indices are `long long`, normalised once per call by `ag_indices`: -1 stands for a
//   null index (a null output row);
// * bitmaps are Arrow's (least significant bit first) with a bit offset beside the pointer;
//   a null bitmap pointer means "all bits set";
// * every loop is grid-stride with 64-bit positions, so any grid covers any length; but the
//   batched copies (`ag_copy_ranges`, `ag_copy_bit_ranges`, `ag_rebase_ranges`), which
//   take a table of ranges in device memory and are launched with one block per slice of a
//   range, as the table says (`arrow_gpu._compute.copy_plan`).

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

#define FOR_EACH(i, n) \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ unsigned bit_at(const u8* bits, i64 i) {
  return bits == 0 ? 1u : (bits[i >> 3] >> (i & 7)) & 1u;
}

// `count` (1 to 64) bits of src from bit `bit`, in the low bits; read byte by byte, so that no
// byte past the last bit is touched.
__device__ __forceinline__ u64 load_bits(const u8* src, i64 bit, i64 count) {
  u64 mask = count == 64 ? ~0ull : (1ull << count) - 1;
  if (src == 0) return mask;
  const u8* p = src + (bit >> 3);
  int shift = (int)(bit & 7);
  int nbytes = (shift + (int)count + 7) >> 3;  // at most 9
  u64 low = 0;
  for (int k = 0; k < nbytes && k < 8; ++k) low |= (u64)p[k] << (8 * k);
  u64 v = low >> shift;
  if (nbytes > 8) v |= (u64)p[8] << (64 - shift);  // shift > 0 here
  return v & mask;
}

__device__ __forceinline__ i64 load_int(const u8* p, i64 i, i64 width, i64 is_signed) {
  switch (width) {
    case 1: return is_signed ? (i64)((const signed char*)p)[i] : (i64)p[i];
    case 2: return is_signed ? (i64)((const short*)p)[i] : (i64)((const unsigned short*)p)[i];
    case 4: return is_signed ? (i64)((const int*)p)[i] : (i64)((const unsigned int*)p)[i];
    default: return ((const i64*)p)[i];  // uint64 past INT64_MAX reads negative: out of range
  }
}

__device__ __forceinline__ void store_int(u8* p, i64 i, i64 width, i64 value) {
  if (width == 4) ((int*)p)[i] = (int)value; else ((i64*)p)[i] = value;
}

// Adds the block's counts to *total: one atomic per block, since atomics on one address
// run one at a time, and one per warp was measured far slower (the figure is in
// bench/RESULTS.md, "Tuning notes"). Every thread of the block must call it (after the
// grid-stride loops, where all threads meet).
__device__ __forceinline__ void add_count(u64* total, u64 count) {
  __shared__ u64 warp_counts[32];
  for (int delta = 16; delta > 0; delta >>= 1) count += __shfl_down_sync(0xffffffffu, count, delta);
  if ((threadIdx.x & 31) == 0) warp_counts[threadIdx.x >> 5] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 sum = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) >> 5; ++w) sum += warp_counts[w];
    if (sum != 0) atomicAdd(total, sum);
  }
}

// Indices of any integer width to i64: -1 where null; *bad set where a valid index is
// negative or not below `bound`.
extern "C" __global__ void ag_indices(i64* out, const u8* idx, i64 width, i64 is_signed,
                                      const u8* valid, i64 valid_off, i64 n, i64 bound,
                                      unsigned* bad) {
  FOR_EACH(i, n) {
    i64 v = -1;
    if (bit_at(valid, valid_off + i)) {
      v = load_int(idx, i, width, is_signed);
      if (v < 0 || v >= bound) { atomicOr(bad, 1u); v = -1; }
    }
    out[i] = v;
  }
}

template <typename T>
__device__ __forceinline__ void gather_typed(u8* dst, const u8* src, const i64* idx, i64 n) {
  const T* s = (const T*)src;
  T* d = (T*)dst;
  FOR_EACH(i, n) {
    i64 j = idx[i];
    T v;
    if (j >= 0) v = s[j]; else v = T();
    d[i] = v;
  }
}

struct Pair { u64 lo, hi; };

// dst[i] = src[idx[i]] for values `width` bytes wide; zeros where idx[i] is -1.
extern "C" __global__ void ag_gather(u8* dst, const u8* src, const i64* idx, i64 n,
                                     i64 width) {
  u64 aligned = ((u64)dst | (u64)src) % (u64)(width < 8 ? width : 8) == 0;
  if (aligned && width == 1) { gather_typed<u8>(dst, src, idx, n); return; }
  if (aligned && width == 2) { gather_typed<unsigned short>(dst, src, idx, n); return; }
  if (aligned && width == 4) { gather_typed<unsigned>(dst, src, idx, n); return; }
  if (aligned && width == 8) { gather_typed<u64>(dst, src, idx, n); return; }
  if (aligned && width == 16) { gather_typed<Pair>(dst, src, idx, n); return; }
  FOR_EACH(i, n) {  // any other width (fixed_size_binary), or unaligned buffers
    i64 j = idx[i];
    for (i64 k = 0; k < width; ++k) dst[i * width + k] = j >= 0 ? src[j * width + k] : 0;
  }
}

// Bit i of dst = bit idx[i] of src (1 where src is null), 0 where idx[i] is -1; one thread
// per output byte, so no two threads write one byte. Adds the bits set to *set_count where
// it is not null.
extern "C" __global__ void ag_gather_bits(u8* dst, const u8* src, i64 src_off, const i64* idx,
                                          i64 n, u64* set_count) {
  u64 count = 0;
  FOR_EACH(b, (n + 7) >> 3) {
    unsigned byte = 0;
    i64 end = (b + 1) * 8 < n ? (b + 1) * 8 : n;
    for (i64 i = b * 8; i < end; ++i) {
      i64 j = idx[i];
      unsigned bit = j >= 0 ? bit_at(src, src_off + j) : 0u;
      byte |= bit << (i - b * 8);
    }
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

// Adds to *count the bits set in [off, off + n) of bits.
extern "C" __global__ void ag_popcount(const u8* bits, i64 off, i64 n, u64* count) {
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
  add_count(count, c);
}

// Where the range of row j starts: offsets[j], or (fixed > 0) j * fixed.
__device__ __forceinline__ i64 range_start(const u8* offsets, i64 width, i64 fixed, i64 j) {
  return fixed > 0 ? j * fixed : load_int(offsets, j, width, 1);
}

// Its length: offsets[j + 1] - offsets[j], sizes[j] for views, or fixed.
__device__ __forceinline__ i64 range_size(const u8* offsets, const u8* sizes, i64 width,
                                          i64 fixed, i64 j) {
  if (fixed > 0) return fixed;
  if (sizes != 0) return load_int(sizes, j, width, 1);
  return load_int(offsets, j + 1, width, 1) - load_int(offsets, j, width, 1);
}

// sizes_out[i] = the length of row idx[i]'s range, 0 where idx[i] is -1.
extern "C" __global__ void ag_range_sizes(i64* sizes_out, const u8* offsets, const u8* sizes,
                                          i64 width, const i64* idx, i64 n) {
  FOR_EACH(i, n) {
    i64 j = idx[i];
    sizes_out[i] = j >= 0 ? range_size(offsets, sizes, width, 0, j) : 0;
  }
}

// --- Exclusive scan of i64 inputs: reduce tiles, scan the tile sums (the same kernels,
// recursively, from the host), then scan each tile from its prefix. A tile is
// SCAN_THREADS * SCAN_ITEMS inputs, a block per tile; each warp takes 32 * SCAN_ITEMS
// consecutive inputs, 32 at a time, so that its loads and stores are contiguous.
#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_WARPS (SCAN_THREADS / 32)

// This thread's input of round k.
__device__ __forceinline__ i64 scan_position(int k) {
  return (i64)blockIdx.x * SCAN_TILE + (i64)(threadIdx.x >> 5) * (32 * SCAN_ITEMS) + 32 * k +
         (threadIdx.x & 31);
}

// tile_sums[b] = the sum of tile b's inputs.
extern "C" __global__ void ag_scan_reduce(const i64* in, i64 n, i64* tile_sums) {
  __shared__ i64 warp_sums[SCAN_WARPS];
  i64 sum = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    if (i < n) sum += in[i];
  }
  for (int delta = 16; delta > 0; delta >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, delta);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    i64 total = 0;
    for (int w = 0; w < SCAN_WARPS; ++w) total += warp_sums[w];
    tile_sums[blockIdx.x] = total;
  }
}

// The scan of each tile from tile_prefix[b] (0 when tile_prefix is null): out[i] = the
// exclusive prefix (4 or 8 bytes wide), out[n] = the total, and *total_out the total. Each
// round's 32 inputs are scanned across the warp by shuffles; the warps' sums meet in
// shared memory.
extern "C" __global__ void ag_scan_apply(const i64* in, i64 n, const i64* tile_prefix,
                                         u8* out, i64 out_width, i64* total_out) {
  __shared__ i64 warp_sums[SCAN_WARPS];
  unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  i64 prefixes[SCAN_ITEMS];  // within the warp's inputs
  i64 run = 0;
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    i64 v = i < n ? in[i] : 0;
    i64 inclusive = v;
    for (int delta = 1; delta < 32; delta <<= 1) {
      i64 below = __shfl_up_sync(0xffffffffu, inclusive, delta);
      if (lane >= (unsigned)delta) inclusive += below;
    }
    prefixes[k] = run + inclusive - v;
    run += __shfl_sync(0xffffffffu, inclusive, 31);
  }
  if (lane == 0) warp_sums[warp] = run;
  __syncthreads();
  i64 tile_base = tile_prefix != 0 ? tile_prefix[blockIdx.x] : 0;
  i64 base = tile_base, block_total = 0;
  for (unsigned w = 0; w < SCAN_WARPS; ++w) {
    if (w < warp) base += warp_sums[w];
    block_total += warp_sums[w];
  }
#pragma unroll
  for (int k = 0; k < SCAN_ITEMS; ++k) {
    i64 i = scan_position(k);
    if (i < n) store_int(out, i, out_width, base + prefixes[k]);
  }
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
    i64 total = tile_base + block_total;
    store_int(out, n, out_width, total);
    *total_out = total;
  }
}

// Compaction by a boolean mask: `mode` 1 drops the rows where the mask is null, mode 2
// emits them (as null rows). A group is 32 rows, 32g .. 32g + 31; ag_mask_counts counts each
// group's selected rows and their exclusive scan (ag_scan_*) gives each group's first rank,
// so that every compaction by the mask finds its rows' ranks without a scan of its own. A
// warp takes MASK_GROUPS consecutive groups at a time: their loads are issued together.
#define MASK_GROUPS 8
#define FOR_EACH_WARP_OF_GROUPS(first, n)                                                    \
  for (i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) & ~(i64)31) * MASK_GROUPS; \
       first < (n); first += (i64)blockDim.x * gridDim.x * MASK_GROUPS)

// Which of group g's rows a mask selects (by `mode`), as the bits of a word:
// read a word at a time, since a thread per row spends its time on instructions, not bytes.
__device__ __forceinline__ unsigned group_word(const u8* mask, i64 mask_off, const u8* valid,
                                               i64 valid_off, i64 mode, i64 n, i64 g) {
  i64 first = 32 * g;
  i64 count = n - first < 32 ? n - first : 32;
  unsigned values = (unsigned)load_bits(mask, mask_off + first, count);
  unsigned is_valid = (unsigned)load_bits(valid, valid_off + first, count);  // null: all set
  unsigned rows = count == 32 ? 0xffffffffu : (1u << count) - 1u;
  return mode == 2 ? (values & is_valid) | (~is_valid & rows) : values & is_valid;
}

// picked[k] = which rows of group first / 32 + k the mask selects: bit `lane` for row
// first + 32k + lane (lane k reads the word, the warp shares it). Every lane of the warp must
// call it.
__device__ __forceinline__ void pick_groups(unsigned* picked, i64 first, const u8* mask,
                                            i64 mask_off, const u8* valid, i64 valid_off,
                                            i64 mode, i64 n) {
  unsigned lane = threadIdx.x & 31;
  i64 g = (first >> 5) + lane;
  unsigned mine = lane < MASK_GROUPS && 32 * g < n
                      ? group_word(mask, mask_off, valid, valid_off, mode, n, g) : 0u;
#pragma unroll
  for (int k = 0; k < MASK_GROUPS; ++k) picked[k] = __shfl_sync(0xffffffffu, mine, k);
}

// counts[g] = how many rows of group g a mask selects: a thread per group.
extern "C" __global__ void ag_mask_counts(const u8* mask, i64 mask_off, const u8* valid,
                                          i64 valid_off, i64 mode, i64 n, i64* counts) {
  FOR_EACH(g, (n + 31) >> 5) {
    counts[g] = __popc(group_word(mask, mask_off, valid, valid_off, mode, n, g));
  }
}

// The rank of this lane's row among the rows the mask selects, given its group's ballot
// and first rank.
__device__ __forceinline__ i64 rank_in(unsigned picked, i64 group_rank) {
  return group_rank + __popc(picked & ((1u << (threadIdx.x & 31)) - 1u));
}

template <typename T>
__device__ __forceinline__ void compact_typed(T* dst, const T* src, const u8* mask,
                                              i64 mask_off, const u8* valid, i64 valid_off,
                                              i64 mode, i64 n, const i64* group_ranks) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  FOR_EACH_WARP_OF_GROUPS(first, n) {
    pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
#pragma unroll
    for (int k = 0; k < MASK_GROUPS; ++k) {
      if ((picked[k] >> lane) & 1u) {
        dst[rank_in(picked[k], group_ranks[(first >> 5) + k])] = src[first + 32 * k + lane];
      }
    }
  }
}

// What a mask selects, in order: the values of src, `width` bytes each; or, for a null src,
// the rows' positions as i64 (-1 for an emitted null). `group_ranks` from the scan of
// ag_mask_counts.
extern "C" __global__ void ag_compact(u8* dst, const u8* src, i64 width, const u8* mask,
                                      i64 mask_off, const u8* valid, i64 valid_off, i64 mode,
                                      i64 n, const i64* group_ranks) {
  unsigned lane = threadIdx.x & 31;
  unsigned picked[MASK_GROUPS];
  if (src == 0) {
    FOR_EACH_WARP_OF_GROUPS(first, n) {
      pick_groups(picked, first, mask, mask_off, valid, valid_off, mode, n);
#pragma unroll
      for (int k = 0; k < MASK_GROUPS; ++k) {
        i64 i = first + 32 * k + lane;
        if ((picked[k] >> lane) & 1u) {
          ((i64*)dst)[rank_in(picked[k], group_ranks[(first >> 5) + k])] =
              bit_at(valid, valid_off + i) ? i : -1;
        }
      }
    }
    return;
  }
  u64 aligned = ((u64)dst | (u64)src) % (u64)(width < 8 ? width : 8) == 0;
#define COMPACT_AS(T) \
  compact_typed<T>((T*)dst, (const T*)src, mask, mask_off, valid, valid_off, mode, n, group_ranks)
  if (aligned && width == 1) { COMPACT_AS(u8); return; }
  if (aligned && width == 2) { COMPACT_AS(unsigned short); return; }
  if (aligned && width == 4) { COMPACT_AS(unsigned); return; }
  if (aligned && width == 8) { COMPACT_AS(u64); return; }
  if (aligned && width == 16) { COMPACT_AS(Pair); return; }
#undef COMPACT_AS
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

// The bits of `bits` where `picked` is set, packed from bit 0 in order.
__device__ __forceinline__ unsigned packed_bits(unsigned bits, unsigned picked) {
  unsigned out = 0, next = 1;
  while (picked != 0u) {
    unsigned low = picked & (0u - picked);
    if (bits & low) out |= next;
    next <<= 1;
    picked ^= low;
  }
  return out;
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
    unsigned bits = (unsigned)load_bits(src, src_off + first, n - first < 32 ? n - first : 32);
    unsigned word = packed_bits(bits, picked);
    i64 at = group_ranks[g];
    unsigned shift = (unsigned)(at & 31);
    atomicOr(dst + (at >> 5), word << shift);
    if (shift + __popc(picked) > 32u) atomicOr(dst + (at >> 5) + 1, word >> (32u - shift));
    count += __popc(word);
  }
  if (set_count != 0) add_count(set_count, count);
}

// The loop over rows of the range kernels below: one row per thread, so that short rows
// (most strings) cost one thread each; a row longer than LONG_ROW items is handed to the
// whole warp, which takes the warp's long rows one after another. `first` is warp-uniform,
// so every lane runs the same iterations and may vote.
#define LONG_ROW 64
#define FOR_EACH_WARP_OF_ROWS(first, n)                                                   \
  for (i64 first = (((i64)blockIdx.x * blockDim.x + threadIdx.x) & ~(i64)31); first < (n); \
       first += (i64)blockDim.x * gridDim.x)

// Runs `copy(start, d0, length)` by all 32 lanes for each of the warp's rows that is long
// (`is_long`, voted by every lane), one row after another.
template <typename Copy>
__device__ __forceinline__ void for_each_long_row(bool is_long, i64 start, i64 d0, i64 length,
                                                  Copy copy) {
  unsigned longs = __ballot_sync(0xffffffffu, is_long);
  while (longs != 0) {
    int leader = __ffs(longs) - 1;
    longs &= longs - 1;
    copy(__shfl_sync(0xffffffffu, start, leader), __shfl_sync(0xffffffffu, d0, leader),
         __shfl_sync(0xffffffffu, length, leader));
  }
}

// Child positions of the selected rows' ranges: for row i (idx[i] = j), positions
// dst_offsets[i] .. dst_offsets[i + 1] (`dst_width` wide; or i * fixed .. (i + 1) * fixed)
// of out get start(j) + 0, 1, ...; -1 for every position of a null row.
extern "C" __global__ void ag_expand_ranges(i64* out, const u8* offsets, i64 width, i64 fixed,
                                            const i64* idx, const u8* dst_offsets,
                                            i64 dst_width, i64 n) {
  unsigned lane = threadIdx.x & 31;
  FOR_EACH_WARP_OF_ROWS(first, n) {
    i64 i = first + lane;
    i64 start = 0, d0 = 0, length = 0;
    if (i < n) {
      i64 j = idx[i];
      d0 = fixed > 0 ? i * fixed : load_int(dst_offsets, i, dst_width, 1);
      length = (fixed > 0 ? d0 + fixed : load_int(dst_offsets, i + 1, dst_width, 1)) - d0;
      start = j >= 0 ? range_start(offsets, width, fixed, j) : -1;
    }
    bool is_long = length > LONG_ROW;
    if (!is_long) {
      for (i64 k = 0; k < length; ++k) out[d0 + k] = start >= 0 ? start + k : -1;
    }
    for_each_long_row(is_long, start, d0, length, [&](i64 s, i64 d, i64 len) {
      for (i64 k = lane; k < len; k += 32) out[d + k] = s >= 0 ? s + k : -1;
    });
  }
}

struct alignas(16) Word16 { u64 low, high; };

// n bytes by `threads` threads from `thread` (a block's, or a warp's), where dst and src are
// equally aligned modulo sizeof(W): bytes up to dst's first aligned word, words, then the
// bytes left.
template <typename W>
__device__ __forceinline__ void copy_words(u8* __restrict__ dst, const u8* __restrict__ src,
                                           i64 n, unsigned thread, unsigned threads) {
  const i64 size = (i64)sizeof(W);
  i64 head = (size - (i64)((u64)dst & (u64)(size - 1))) & (size - 1);
  if (head > n) head = n;
  i64 words = (n - head) / size;
  i64 tail = head + words * size;
  for (i64 i = thread; i < head; i += threads) dst[i] = src[i];
  const W* __restrict__ s = (const W*)(src + head);
  W* __restrict__ d = (W*)(dst + head);
  for (i64 i = thread; i < words; i += threads) d[i] = s[i];
  for (i64 i = tail + thread; i < n; i += threads) dst[i] = src[i];
}

// n bytes by `threads` threads from `thread`, where dst and src are not equally aligned
// modulo 4 (a string column's characters, mostly): whole aligned words of dst, each the two aligned
// words of src it straddles shifted together. Those words are read whole: an aligned word
// that holds a byte of the range lies in the same page as that byte.
__device__ __forceinline__ void copy_skewed(u8* __restrict__ dst, const u8* __restrict__ src,
                                            i64 n, unsigned thread, unsigned threads) {
  i64 head = (4 - (i64)((u64)dst & 3)) & 3;
  if (head > n) head = n;
  i64 words = (n - head) >> 2;
  i64 tail = head + words * 4;
  for (i64 i = thread; i < head; i += threads) dst[i] = src[i];
  const u8* from = src + head;
  unsigned shift = 8u * (unsigned)((u64)from & 3);
  const unsigned* __restrict__ s = (const unsigned*)((u64)from & ~(u64)3);
  unsigned* __restrict__ d = (unsigned*)(dst + head);
  for (i64 i = thread; i < words; i += threads) d[i] = __funnelshift_r(s[i], s[i + 1], shift);
  for (i64 i = tail + thread; i < n; i += threads) dst[i] = src[i];
}

// n bytes by `threads` threads from `thread`, in the widest words both ends allow.
__device__ __forceinline__ void copy_bytes(u8* __restrict__ dst, const u8* __restrict__ src,
                                           i64 n, unsigned thread, unsigned threads) {
  u64 skew = (u64)dst ^ (u64)src;
  if ((skew & 15) == 0) copy_words<Word16>(dst, src, n, thread, threads);
  else if ((skew & 7) == 0) copy_words<u64>(dst, src, n, thread, threads);
  else if ((skew & 3) == 0) copy_words<unsigned>(dst, src, n, thread, threads);
  else copy_skewed(dst, src, n, thread, threads);
}

// The bytes of a warp's 32 rows, which lie one after another in dst from `begin` to `end`:
// this lane's row is `length` bytes of src at s, to dst at d (a row past the end is empty).
// Rows of a few bytes give a thread too little to copy and reads and writes no warp could
// coalesce, so the warp stages them in shared memory in their output order: each lane its own
// row where all are short (the loads of one instruction then lie close together in a filter),
// else the whole warp, rows in turn; then the warp writes them out as aligned words. Rows whose
// bytes overflow the stage are copied by the whole warp one at a time.
#define RANGE_WARPS 8  // of a block (the block size of every launch is 256)
#define STAGE_BYTES 2048  // per warp
#define LANE_ROW 16
__device__ __forceinline__ void copy_warp_rows(u8* dst, const u8* src, i64 s, i64 d,
                                               i64 length, i64 begin, i64 end, u8* stage) {
  unsigned lane = threadIdx.x & 31;
  i64 dst_skew = (i64)((u64)dst & 3);
  i64 base = ((begin + dst_skew) & ~(i64)3) - dst_skew;  // dst + base is 4-byte aligned
  if (end - base > STAGE_BYTES) {
    for (int r = 0; r < 32; ++r) {
      copy_bytes(dst + __shfl_sync(0xffffffffu, d, r), src + __shfl_sync(0xffffffffu, s, r),
                 __shfl_sync(0xffffffffu, length, r), lane, 32);
    }
    return;
  }
  // Loads are issued together before their bytes are staged: a load waited for before the
  // next is issued makes the warp wait a memory latency per row.
  int at = (int)(d - base);
  if (__all_sync(0xffffffffu, length <= LANE_ROW)) {
    // The aligned words that hold the row (at most 5; each lies in a page of the row's).
    unsigned skip = (unsigned)((u64)(src + s) & 3);
    const unsigned* held = (const unsigned*)(src + s - skip);
    int words = length > 0 ? (int)((skip + length + 3) >> 2) : 0;
    unsigned w[5];
#pragma unroll
    for (int q = 0; q < 5; ++q) w[q] = q < words ? held[q] : 0u;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned bytes = __funnelshift_r(w[q], w[q + 1], 8 * skip);  // the row's 4q .. 4q + 3
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        if (4 * q + b < length) stage[at + 4 * q + b] = (u8)(bytes >> (8 * b));
      }
    }
  } else {  // the warp stages 4 rows at a time, their first 64 bytes loaded together
    for (int r0 = 0; r0 < 32; r0 += 4) {
      const u8* from[4];
      int to[4], count[4];
      u8 low[4], high[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        from[j] = src + __shfl_sync(0xffffffffu, s, r0 + j);
        to[j] = __shfl_sync(0xffffffffu, at, r0 + j);
        count[j] = __shfl_sync(0xffffffffu, (int)length, r0 + j);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        low[j] = (int)lane < count[j] ? from[j][lane] : 0;
        high[j] = (int)lane + 32 < count[j] ? from[j][lane + 32] : 0;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if ((int)lane < count[j]) stage[to[j] + lane] = low[j];
        if ((int)lane + 32 < count[j]) stage[to[j] + lane + 32] = high[j];
        for (int k = lane + 64; k < count[j]; k += 32) stage[to[j] + k] = from[j][k];
      }
    }
  }
  __syncwarp();
  int low = (int)(begin - base), high = (int)(end - base);
  for (int p = 4 * lane; p < high; p += 4 * 32) {
    if (p >= low && p + 4 <= high) {
      *(unsigned*)(dst + base + p) = *(const unsigned*)(stage + p);
    } else {  // the first or last word, shared with the rows of other warps
      for (int q = p < low ? low : p; q < p + 4 && q < high; ++q) dst[base + q] = stage[q];
    }
  }
  __syncwarp();  // the stage is the warp's next rows'
}

// The selected rows' bytes (strings, binary): row idx[i]'s bytes of src, from offsets
// (`width` wide), to dst at dst_offsets[i] (`dst_width` wide), a warp per 32 rows.
extern "C" __global__ void ag_gather_ranges(u8* dst, const u8* src, const u8* offsets,
                                            i64 width, const i64* idx, const u8* dst_offsets,
                                            i64 dst_width, i64 n) {
  __shared__ __align__(16) u8 staged[RANGE_WARPS][STAGE_BYTES];
  unsigned lane = threadIdx.x & 31;
  FOR_EACH_WARP_OF_ROWS(first, n) {
    i64 i = first + lane;
    i64 s = 0, d = 0, length = 0;
    if (i < n) {
      i64 j = idx[i];
      d = load_int(dst_offsets, i, dst_width, 1);
      if (j >= 0) {
        s = load_int(offsets, j, width, 1);
        length = load_int(offsets, j + 1, width, 1) - s;
      }
    }
    int last_lane = n - first < 32 ? (int)(n - first) - 1 : 31;
    i64 begin = __shfl_sync(0xffffffffu, d, 0);
    i64 end = __shfl_sync(0xffffffffu, d + length, last_lane);
    copy_warp_rows(dst, src, s, d, length, begin, end, staged[threadIdx.x >> 5]);
  }
}

// --- Batched copies: one launch copies many ranges (concatenation copies every chunk of every
// column at once). The host lists the ranges in a table; `first_block` is the prefix of their
// sizes in blocks, so that blocks spread over the ranges in proportion to their sizes and each
// block finds its range by binary search. A range may own no block (the bit ranges below).
#define COPY_BLOCK_BYTES (256 * 64)
#define BIT_BLOCK_WORDS 256
#define REBASE_BLOCK_ITEMS (256 * 8)

// The last of `count` ranges whose first block is at most b: the range block b works on.
template <typename Range>
__device__ __forceinline__ i64 range_of_block(const Range* ranges, i64 count, i64 b) {
  i64 low = 0, high = count - 1;
  while (low < high) {
    i64 middle = (low + high + 1) >> 1;
    if (ranges[middle].first_block <= b) low = middle; else high = middle - 1;
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

extern "C" __global__ void ag_rebase_ranges(const RebaseRange* ranges, i64 count) {
  const RebaseRange range = ranges[range_of_block(ranges, count, blockIdx.x)];
  i64 start = ((i64)blockIdx.x - range.first_block) * REBASE_BLOCK_ITEMS;
  i64 end = range.n - start < REBASE_BLOCK_ITEMS ? range.n : start + REBASE_BLOCK_ITEMS;
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

// dst bits [0, n) &= bits [src_off, ...) of src (rows valid in every column).
extern "C" __global__ void ag_and_bits(u8* dst, const u8* src, i64 src_off, i64 n) {
  FOR_EACH(b, (n + 7) >> 3) {
    unsigned byte = 0;
    i64 end = (b + 1) * 8 < n ? (b + 1) * 8 : n;
    for (i64 i = b * 8; i < end; ++i) byte |= bit_at(src, src_off + i) << (i - b * 8);
    dst[b] &= (u8)byte;
  }
}

// n bytes of dst = value (a memset queued in order with the launches).
extern "C" __global__ void ag_fill_bytes(u8* dst, i64 n, i64 value) {
  FOR_EACH(i, n) dst[i] = (u8)value;
}

// idx[i] = replacement where it is -1 (null rows taken from an appended null row).
extern "C" __global__ void ag_replace_nulls(i64* idx, i64 n, i64 replacement) {
  FOR_EACH(i, n) if (idx[i] < 0) idx[i] = replacement;
}

// Bit i of out = whether row i of a union is valid as its child's value: `children` holds,
// per type code (128), the child's validity bits and their bit offset (a null pointer: all
// valid); a dense union's row is at offsets[i] of its child, a sparse union's (null
// offsets) at i.
extern "C" __global__ void ag_union_validity(u8* out, const signed char* type_ids,
                                             const int* offsets, i64 n, const i64* children) {
  FOR_EACH(b, (n + 7) >> 3) {
    unsigned byte = 0;
    i64 end = (b + 1) * 8 < n ? (b + 1) * 8 : n;
    for (i64 i = b * 8; i < end; ++i) {
      const i64* child = children + 2 * (type_ids[i] & 127);
      i64 j = offsets != 0 ? (i64)offsets[i] : i;
      unsigned valid = bit_at((const u8*)child[0], child[1] + j);
      byte |= valid << (i - b * 8);
    }
    out[b] = (u8)byte;
  }
}

// Bit i of bits = whether type_ids[i] is `code` (a dense union's rows of one child).
extern "C" __global__ void ag_type_mask(u8* bits, const signed char* type_ids, i64 n, i64 code) {
  FOR_EACH(b, (n + 7) >> 3) {
    unsigned byte = 0;
    i64 end = (b + 1) * 8 < n ? (b + 1) * 8 : n;
    for (i64 i = b * 8; i < end; ++i) byte |= (unsigned)(type_ids[i] == code) << (i - b * 8);
    bits[b] = (u8)byte;
  }
}

// offsets[positions[r]] = r for r < n: each row's place in its child, in row order.
extern "C" __global__ void ag_scatter_ranks(int* offsets, const i64* positions, i64 n) {
  FOR_EACH(r, n) offsets[positions[r]] = (int)r;
}

// out[i] = i where row i is valid, else `replacement` (fill_null as a take).
extern "C" __global__ void ag_fill_indices(i64* out, const u8* valid, i64 valid_off, i64 n,
                                           i64 replacement) {
  FOR_EACH(i, n) out[i] = bit_at(valid, valid_off + i) ? i : replacement;
}
