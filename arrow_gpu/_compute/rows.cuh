// Device code of the copies of the selected rows' bytes (rows.cu, copies.cu): a warp of rows
// at a time, in the widest words both ends allow.
#pragma once

#include "take.cuh"

// The loop over rows of ag_expand_ranges: one row per thread, so that short rows
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

// The bytes of row at..at + 3 that `word` holds, to row[at..], those of them in [0, count).
__device__ __forceinline__ void put_word(u8* row, unsigned word, i64 at, i64 count) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    if (at + b >= 0 && at + b < count) row[at + b] = (u8)(word >> (8 * b));
  }
}

// The bytes of a warp's `rows` rows (a multiple of ROWS_AT_ONCE; this lane's: `length` bytes
// of src at s, to dst at d), read by the whole warp as the aligned words that hold them (an
// aligned word that holds a byte of a row lies in that byte's page), ROWS_AT_ONCE rows at a
// time, each lane ROW_WORDS words of every one, all those loads issued before a byte is
// written: a warp that waits for a row's words before it asks for the next row's waits a
// memory latency per row, which bounded the copy of rows of a few hundred bytes, not the
// bandwidth (bench/RESULTS.md).
#define ROWS_AT_ONCE 8
#define ROW_WORDS 2
__device__ __forceinline__ void copy_rows_in_turn(u8* dst, const u8* src, i64 s, i64 d,
                                                  i64 length, int rows) {
  unsigned lane = threadIdx.x & 31;
  for (int r0 = 0; r0 < rows; r0 += ROWS_AT_ONCE) {
    unsigned words[ROWS_AT_ONCE][ROW_WORDS];
#pragma unroll
    for (int j = 0; j < ROWS_AT_ONCE; ++j) {
      const u8* from = src + __shfl_sync(0xffffffffu, s, r0 + j);
      i64 count = __shfl_sync(0xffffffffu, length, r0 + j);
      i64 skip = (i64)((u64)from & 3);
      const unsigned* held = (const unsigned*)(from - skip);
#pragma unroll
      for (int q = 0; q < ROW_WORDS; ++q) {
        i64 k = lane + 32 * q;
        words[j][q] = 4 * k < skip + count ? held[k] : 0u;
      }
    }
#pragma unroll
    for (int j = 0; j < ROWS_AT_ONCE; ++j) {
      const u8* from = src + __shfl_sync(0xffffffffu, s, r0 + j);
      u8* row = dst + __shfl_sync(0xffffffffu, d, r0 + j);
      i64 count = __shfl_sync(0xffffffffu, length, r0 + j);
      i64 skip = (i64)((u64)from & 3);
      const unsigned* held = (const unsigned*)(from - skip);
#pragma unroll
      for (int q = 0; q < ROW_WORDS; ++q) {
        put_word(row, words[j][q], 4 * (lane + 32 * q) - skip, count);
      }
      // The words of a row longer than those, ROW_WORDS per lane at a time.
      for (i64 k0 = 32 * ROW_WORDS; 4 * k0 < skip + count; k0 += 32 * ROW_WORDS) {
        unsigned more[ROW_WORDS];
#pragma unroll
        for (int q = 0; q < ROW_WORDS; ++q) {
          i64 k = k0 + lane + 32 * q;
          more[q] = 4 * k < skip + count ? held[k] : 0u;
        }
#pragma unroll
        for (int q = 0; q < ROW_WORDS; ++q) {
          put_word(row, more[q], 4 * (k0 + lane + 32 * q) - skip, count);
        }
      }
    }
  }
}

// Stages the rows of a warp whose rows are all short (this lane's: `length` <= LANE_ROW
// bytes of src at s, to stage[at..]), each lane its own: the aligned words that hold the row
// (at most 5; each lies in a page of the row's), all loaded before a byte is staged.
#define LANE_ROW 16
__device__ __forceinline__ void stage_short_rows(const u8* src, i64 s, i64 length, int at,
                                                 u8* stage) {
  const u8* row = src + s;
  const int n = (int)length;
  unsigned skip = (unsigned)((u64)row & 3);
  const unsigned* held = (const unsigned*)(row - skip);
  int words = n > 0 ? (int)((skip + n + 3) >> 2) : 0;
  unsigned w[5];
#pragma unroll
  for (int q = 0; q < 5; ++q) w[q] = q < words ? held[q] : 0u;
  u8* into = stage + at;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned bytes = __funnelshift_r(w[q], w[q + 1], 8 * skip);  // the row's 4q .. 4q + 3
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if (4 * q + b < n) into[4 * q + b] = (u8)(bytes >> (8 * b));
    }
  }
}

// Stages a warp's rows (lane r's: `length` bytes at from(r, s), to stage[at..]) by the whole
// warp, 4 rows at a time, their first 64 bytes loaded together.
template <typename From>
__device__ __forceinline__ void stage_rows(From from, i64 s, i64 length, int at, u8* stage) {
  unsigned lane = threadIdx.x & 31;
  for (int r0 = 0; r0 < 32; r0 += 4) {
    const u8* row[4];
    int to[4], count[4];
    u8 low[4], high[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      row[j] = from(r0 + j, __shfl_sync(0xffffffffu, s, r0 + j));
      to[j] = __shfl_sync(0xffffffffu, at, r0 + j);
      count[j] = __shfl_sync(0xffffffffu, (int)length, r0 + j);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      low[j] = (int)lane < count[j] ? row[j][lane] : 0;
      high[j] = (int)lane + 32 < count[j] ? row[j][lane + 32] : 0;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((int)lane < count[j]) stage[to[j] + lane] = low[j];
      if ((int)lane + 32 < count[j]) stage[to[j] + lane + 32] = high[j];
      for (int k = lane + 64; k < count[j]; k += 32) stage[to[j] + k] = row[j][k];
    }
  }
}

// Stages this lane's row, held in shared memory (`n` bytes from position `offset` of a span
// or slot whose byte p is byte_at(p) and whose aligned 16-byte unit u is unit_at(u)), to
// stage[at..]: the aligned 4-byte words of the stage it covers, each put together from the
// two aligned words of the row it straddles, read 16 bytes at a time (only units that hold a
// byte of the row, so only memory the span or slot loaded), and bytes at its two ends, whose
// words the neighbouring rows share. For rows of some tens of bytes it takes fewer
// instructions than stage_rows' byte a lane; but the warp waits for its longest row, so only
// rows of at most LANE_STAGED_ROW bytes are staged this way.
#define LANE_STAGED_ROW 128
template <typename Byte, typename Unit>
__device__ __forceinline__ void stage_row_by_lane(Byte byte_at, Unit unit_at, int offset,
                                                  int n, int at, u8* stage) {
  int head = (4 - (at & 3)) & 3;
  if (head > n) head = n;
  for (int b = 0; b < head; ++b) stage[at + b] = byte_at(offset + b);
  int words = (n - head) >> 2;
  if (words > 0) {
    int first = offset + head;
    unsigned shift = 8u * (unsigned)(first & 3);
    int begin = first >> 2, end = begin + words;  // the row's words that start a staged one
    unsigned* into = (unsigned*)(stage + at + head);
    int last = (shift != 0 ? end : end - 1) >> 2;  // the unit of the last word read
    uint4 unit = unit_at(begin >> 2);
    for (int u = begin >> 2; u <= last; ++u) {
      uint4 next = u < last ? unit_at(u + 1) : make_uint4(0u, 0u, 0u, 0u);
      const unsigned w[5] = {unit.x, unit.y, unit.z, unit.w, next.x};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        int i = 4 * u + q;
        if (i >= begin && i < end) into[i - begin] = __funnelshift_r(w[q], w[q + 1], shift);
      }
      unit = next;
    }
  }
  for (int b = head + 4 * words; b < n; ++b) stage[at + b] = byte_at(offset + b);
}

// A warp's shared memory in ag_gather_ranges: its stage and its span.
#define RANGE_WARPS 8  // of a block (the block size of every launch is 256)
#define STAGE_BYTES 2048  // per warp
#define SPAN_BYTES 4096   // per warp: with the stage, 48 KiB a block, as much as a block has

#if __CUDA_ARCH__ >= 800
// A 16-byte word of global memory into shared memory, without a register on the way: the
// load stays in flight until wait_loads_to_shared (sm_80 on).
__device__ __forceinline__ void load_to_shared(u8* into, const Word16* from) {
  unsigned at = (unsigned)__cvta_generic_to_shared(into);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(from));
}

__device__ __forceinline__ void wait_loads_to_shared() {
  asm volatile("cp.async.wait_all;\n" ::);
}
#endif

// The 16-byte words of src from `first` (16-byte aligned) into span, `words` of them, by the
// warp: every load in flight at once, straight into shared memory where the device can
// (sm_80 on), else a few words a lane at a time through registers.
__device__ __forceinline__ void load_span(u8* span, u64 first, i64 words) {
  unsigned lane = threadIdx.x & 31;
  const Word16* from = (const Word16*)first;
#if __CUDA_ARCH__ >= 800
  for (i64 k = lane; k < words; k += 32) load_to_shared(span + 16 * k, from + k);
  wait_loads_to_shared();
#else
  Word16* into = (Word16*)span;
  for (i64 k0 = 0; k0 < words; k0 += 64) {
    Word16 held[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      if (k0 + lane + 32 * q < words) held[q] = from[k0 + lane + 32 * q];
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      if (k0 + lane + 32 * q < words) into[k0 + lane + 32 * q] = held[q];
    }
  }
#endif
  __syncwarp();
}

#define SLOT_BYTES (SPAN_BYTES / 32)
// Where byte p of row r's slot lies in the span: the slot's 16-byte words in an order that
// differs from row to row (word w at w ^ (r % 8)). Slots lie a multiple of 128 bytes (all
// 32 banks) apart and rows start within their slot's first 16 bytes, so in order the lanes
// staging their rows' same word would read the same few banks; this way those of a quarter
// warp read different ones.
__device__ __forceinline__ int slot_place(int r, int p) {
  return SLOT_BYTES * r + ((((p >> 4) ^ (r & 7)) << 4) | (p & 15));
}

// Each of a warp's 32 rows (lane r's: `length` <= SLOT_BYTES - 15 bytes of src at s) into
// slot r of span (see slot_place), as the 16-byte words of src that hold it (each lies in a
// page of the row's): every row's loads in flight at once, where rows far apart (a take's)
// loaded a few rows at a time wait a memory latency for every few rows. Straight into shared
// memory (sm_80 on).
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void load_slots(u8* span, const u8* src, i64 s, i64 length) {
  unsigned lane = threadIdx.x & 31;
  u64 first = (u64)(src + s) & ~(u64)15;
  int words = length > 0 ? (int)((((u64)(src + s + length) + 15) & ~(u64)15) - first) / 16 : 0;
  for (int k = lane; k < 32 * (SLOT_BYTES / 16); k += 32) {
    int r = k / (SLOT_BYTES / 16), w = k % (SLOT_BYTES / 16);
    u64 from = __shfl_sync(0xffffffffu, first, r);
    if (w < __shfl_sync(0xffffffffu, words, r)) {
      load_to_shared(span + slot_place(r, 16 * w), (const Word16*)from + w);
    }
  }
  wait_loads_to_shared();
  __syncwarp();
}
#endif

// The bytes of a warp's `rows` rows (32, or 8 of lanes 0-7), which lie one after another in
// dst from `begin` to `end`: this lane's row is `length` bytes of src at s, to dst at d (a row
// past the end, or of a lane past `rows`, is empty).
// Rows of a few bytes give a thread too little to copy and reads and writes no warp could
// coalesce, so the warp stages them in shared memory in their output order, then writes them
// out as aligned 16-byte words. Where all are short, each lane stages its own row (the loads
// of one instruction then lie close together in a filter). Else, where the rows lie within
// SPAN_BYTES of src (a filter's rows, which keep their order, mostly do), the warp reads that
// whole span into shared memory first, 16 bytes a lane and every load at once, and stages the
// rows from there (each lane its own where none is longer than LANE_STAGED_ROW, else 4 rows at
// a time): the bytes between them cost less than a round of small loads per 4 rows. Rows apart
// (a take's) that are all short enough go through slots of the span (load_slots), staged a
// lane a row, else are staged from src 4 rows at a time. Rows whose bytes overflow the stage
// are copied by copy_rows_in_turn.
__device__ __forceinline__ void copy_warp_rows(u8* dst, const u8* src, i64 s, i64 d,
                                               i64 length, i64 begin, i64 end, u8* stage,
                                               u8* span, int rows) {
  unsigned lane = threadIdx.x & 31;
  i64 dst_skew = (i64)((u64)dst & 15);
  i64 base = ((begin + dst_skew) & ~(i64)15) - dst_skew;  // dst + base is 16-byte aligned
  if (end - base > STAGE_BYTES) {
    copy_rows_in_turn(dst, src, s, d, length, rows);
    return;
  }
  int at = (int)(d - base);
  if (__all_sync(0xffffffffu, length <= LANE_ROW)) {
    stage_short_rows(src, s, length, at, stage);
  } else {
    // The 16-byte words of src that hold the warp's rows, `words` of them from `first`; a
    // take's random rows are ruled out by one vote (all near lane 0's row) before the
    // reductions that find them.
    i64 s0 = __shfl_sync(0xffffffffu, s, 0);
    bool near = length == 0 || (s - s0 < SPAN_BYTES && s0 - s < SPAN_BYTES);
    u64 first = 0;
    i64 words = SPAN_BYTES / 16 + 1;  // more than a span holds, unless found fewer
    if (__all_sync(0xffffffffu, near)) {
      first = length > 0 ? (u64)(src + s) : ~0ull;
      u64 last = length > 0 ? (u64)(src + s + length) : 0;
      for (int delta = 16; delta > 0; delta >>= 1) {
        first = min(first, __shfl_xor_sync(0xffffffffu, first, delta));
        last = max(last, __shfl_xor_sync(0xffffffffu, last, delta));
      }
      first &= ~(u64)15;
      words = (i64)(((last + 15) & ~(u64)15) - first) / 16;  // a row is not empty
    }
    if (words * 16 <= SPAN_BYTES) {
      load_span(span, first, words);
      auto in_span = [&](int, i64 at_s) { return span + ((u64)(src + at_s) - first); };
      if (__all_sync(0xffffffffu, length <= LANE_STAGED_ROW)) {
        stage_row_by_lane([&](int p) { return span[p]; },
                          [&](int u) { return ((const uint4*)span)[u]; },
                          (int)((u64)(src + s) - first), (int)length, at, stage);
      } else {
        stage_rows(in_span, s, length, at, stage);
      }
#if __CUDA_ARCH__ >= 800
    } else if (__all_sync(0xffffffffu, length <= SLOT_BYTES - 15)) {
      load_slots(span, src, s, length);
      const int r = (int)lane;
      stage_row_by_lane([&](int p) { return span[slot_place(r, p)]; },
                        [&](int u) { return *(const uint4*)(span + slot_place(r, 16 * u)); },
                        (int)((u64)(src + s) & 15), (int)length, at, stage);
#endif
    } else {
      stage_rows([&](int, i64 at_s) { return src + at_s; }, s, length, at, stage);
    }
  }
  __syncwarp();
  int low = (int)(begin - base), high = (int)(end - base);
  for (int p = 16 * lane; p < high; p += 16 * 32) {
    if (p >= low && p + 16 <= high) *(Word16*)(dst + base + p) = *(const Word16*)(stage + p);
  }
  // The first and last words, which the rows of other warps share where they are not whole:
  // a byte a lane (lanes 0-15 the first word's, 16-31 the last's): a lane looping over them
  // cost a fifth of the instructions of a warp's round of short rows (bench/RESULTS.md).
  const int last = high & ~15;
  const bool first_partial = low > 0 || high < 16;
  const bool last_partial = (high & 15) != 0 && last >= 16;
  const int q = lane < 16 ? (int)lane : last + (int)lane - 16;
  if (lane < 16 ? first_partial && q >= low && q < high : last_partial && q < high) {
    dst[base + q] = stage[q];
  }
  __syncwarp();  // the stage and the span are the warp's next rows'
}

// Entry `i` of offsets (or starts) 4 or 8 bytes wide: one branch-free pair of loads, where
// load_int's choice among four widths took a tenth of a round of short rows' instructions.
__device__ __forceinline__ i64 load_offset(const u8* p, i64 i, i64 width) {
  return width == 4 ? (i64)((const int*)p)[i] : ((const i64*)p)[i];
}
