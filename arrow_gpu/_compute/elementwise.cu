// Kernels of a thread per row (or per byte of a bitmap) that serve one operation each:
// bitmaps and'ed, bytes filled, indices of null rows replaced or made, a union's validity and
// rows, the runs of run-end encoded rows.

#include "common.cuh"

// dst bits [0, n) &= bits [src_off, ...) of src (rows valid in every column).
extern "C" __global__ void ag_and_bits(u8* dst, const u8* src, i64 src_off, i64 n) {
  FOR_EACH(b, (n + 7) >> 3) {
    unsigned byte = 0;
    i64 end = (b + 1) * 8 < n ? (b + 1) * 8 : n;
    for (i64 i = b * 8; i < end; ++i) byte |= bit_at(src, src_off + i) << (i - b * 8);
    dst[b] &= (u8)byte;
  }
}

// n bytes of dst = value (a memset queued in order with the launches): the bytes before
// dst's first 16-byte boundary and after its last one a byte a thread, 16 a thread between.
extern "C" __global__ void ag_fill_bytes(u8* dst, i64 n, i64 value) {
  const i64 head = min(n, (i64)((16 - ((u64)dst & 15)) & 15));
  const i64 words = (n - head) >> 4;
  const unsigned byte = (unsigned)value & 0xffu;
  const unsigned word = byte * 0x01010101u;
  FOR_EACH(i, words) ((uint4*)(dst + head))[i] = make_uint4(word, word, word, word);
  FOR_EACH(i, n - (words << 4)) dst[i < head ? i : i + (words << 4)] = (u8)byte;
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

// out[i] = the run of row rows[i] (of row i where rows is null) of a run-end encoded array
// whose first row is `offset`: the first of its `runs` runs whose end lies past that row
// (the last run for rows past them all, which valid arrays have not); -1 for a row -1.
extern "C" __global__ void ag_run_of_rows(i64* out, const u8* run_ends, i64 width, i64 runs,
                                          const i64* rows, i64 offset, i64 n) {
  FOR_EACH(i, n) {
    i64 row = rows != 0 ? rows[i] : i;
    i64 low = 0, high = runs;
    while (low < high) {
      i64 middle = low + ((high - low) >> 1);
      if (load_int(run_ends, middle, width, 1) > offset + row) high = middle; else low = middle + 1;
    }
    out[i] = row < 0 ? -1 : (low < runs ? low : runs - 1);
  }
}
