// What the kernels' host twins share (kernel_twins.cc, kernel_twins_ranges.cc): the kernels'
// constants, a launch's parameters read in order, and memory read and written through memcpy,
// as the device does, at any alignment; sums wrap as the device's integers do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "driver/driver.h"

namespace arrow_gpu::twins {

using i64 = int64_t;
using u64 = uint64_t;
using u8 = uint8_t;

// The kernels' constants (arrow_gpu/_compute/*.cu and *.cuh).
constexpr i64 kScanThreads = 256;
constexpr i64 kScanTile = 256 * 16;
constexpr unsigned kRangeThreads = 256;  // ag_gather_ranges' stage: RANGE_WARPS warps
constexpr i64 kCopyBlockBytes = 256 * 64;
constexpr i64 kBitBlockWords = 256;
constexpr i64 kRebaseBlockItems = 256 * 8;

// The parameters of one launch, read in order.
class Params {
 public:
  explicit Params(void** params) : params_(params) {}
  i64 Int() {
    i64 value;
    std::memcpy(&value, params_[next_++], sizeof(value));
    return value;
  }
  uint32_t U32() {
    uint32_t value;
    std::memcpy(&value, params_[next_++], sizeof(value));
    return value;
  }
  template <typename T>
  T* Pointer() {
    return reinterpret_cast<T*>(static_cast<uintptr_t>(Int()));
  }

 private:
  void** params_;
  int next_ = 0;
};

template <typename T>
T Load(const void* base, i64 i) {
  T value;
  std::memcpy(&value, static_cast<const u8*>(base) + i * static_cast<i64>(sizeof(T)),
              sizeof(T));
  return value;
}

template <typename T>
void Store(void* base, i64 i, T value) {
  std::memcpy(static_cast<u8*>(base) + i * static_cast<i64>(sizeof(T)), &value, sizeof(T));
}

inline i64 Add(i64 a, i64 b) { return static_cast<i64>(static_cast<u64>(a) + static_cast<u64>(b)); }

// The kernels' counted_inputs: n, or the count at n_at where that is smaller.
inline i64 CountedInputs(i64 n, const u8* n_at) {
  return n_at == nullptr ? n : std::min(n, Load<i64>(n_at, 0));
}

inline void AddCount(u64* total, u64 count) { Store<u64>(total, 0, Load<u64>(total, 0) + count); }

inline unsigned Popcount(u64 bits) { return static_cast<unsigned>(__builtin_popcountll(bits)); }

inline unsigned BitAt(const u8* bits, i64 i) {
  return bits == nullptr ? 1u : (bits[i >> 3] >> (i & 7)) & 1u;
}

inline u64 LoadBits(const u8* src, i64 bit, i64 count) {
  u64 mask = count == 64 ? ~0ull : (1ull << count) - 1;
  if (src == nullptr) return mask;
  const u8* p = src + (bit >> 3);
  int shift = static_cast<int>(bit & 7);
  int nbytes = (shift + static_cast<int>(count) + 7) >> 3;
  u64 low = 0;
  for (int k = 0; k < nbytes && k < 8; ++k) low |= static_cast<u64>(p[k]) << (8 * k);
  u64 value = low >> shift;
  if (nbytes > 8) value |= static_cast<u64>(p[8]) << (64 - shift);
  return value & mask;
}

inline i64 LoadInt(const u8* p, i64 i, i64 width, i64 is_signed) {
  switch (width) {
    case 1: return is_signed ? Load<int8_t>(p, i) : Load<uint8_t>(p, i);
    case 2: return is_signed ? Load<int16_t>(p, i) : Load<uint16_t>(p, i);
    case 4: return is_signed ? Load<int32_t>(p, i) : static_cast<i64>(Load<uint32_t>(p, i));
    default: return Load<i64>(p, i);
  }
}

inline void StoreInt(u8* p, i64 i, i64 width, i64 value) {
  switch (width) {
    case 1: Store<int8_t>(p, i, static_cast<int8_t>(value)); break;
    case 2: Store<int16_t>(p, i, static_cast<int16_t>(value)); break;
    case 4: Store<int32_t>(p, i, static_cast<int32_t>(value)); break;
    default: Store<i64>(p, i, value);
  }
}

// A byte of bits [8b, min(8b + 8, n)), bit i of it `bit(i)`: the kernels' thread per byte.
template <typename Bit>
unsigned ByteOf(i64 b, i64 n, Bit bit) {
  unsigned byte = 0;
  i64 end = std::min((b + 1) * 8, n);
  for (i64 i = b * 8; i < end; ++i) byte |= bit(i) << (i - b * 8);
  return byte;
}

// The batched copies' twins (kernel_twins_ranges.cc): each block works on the range whose
// blocks include it, as the kernels' tables say.
CUresult CopyRanges(unsigned blocks, unsigned threads, void** params);
CUresult CopyBitRanges(unsigned blocks, unsigned threads, void** params);
CUresult RebaseRanges(unsigned blocks, unsigned threads, void** params);

}  // namespace arrow_gpu::twins
