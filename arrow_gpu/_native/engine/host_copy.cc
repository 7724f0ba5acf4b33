#include "engine/host_copy.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9))
#include <cpuid.h>
#include <immintrin.h>
#define ARROW_GPU_CLDEMOTE 1
#endif

namespace arrow_gpu::engine {
namespace {

constexpr int64_t kStreamingBytes = 16 << 10;  // parts UnstageParts streams, from this size

// Copies with non-temporal stores where the CPU has them (memcpy elsewhere), for
// destinations this CPU does not read soon. A download's destination is large: writing
// around the caches spares the read of every destination line before it is overwritten. A
// small upload's staging is read next by the DMA engine (see Pipeline::Stage).
void StreamingCopy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, src += 64, dst += 64) {
    const auto* from = reinterpret_cast<const __m128i*>(src);
    auto* to = reinterpret_cast<__m128i*>(dst);
    __m128i a = _mm_loadu_si128(from), b = _mm_loadu_si128(from + 1);
    __m128i c = _mm_loadu_si128(from + 2), d = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, a);
    _mm_stream_si128(to + 1, b);
    _mm_stream_si128(to + 2, c);
    _mm_stream_si128(to + 3, d);
  }
  std::memcpy(dst, src, n);
  _mm_sfence();  // the streamed stores are ordered before whatever this thread does next
#else
  std::memcpy(dst, src, n);
#endif
}

// Reads `file`'s next `n` bytes into `dst`, across short reads and interrupted calls.
arrow::Status ReadFile(const FileRange& file, uint8_t* dst, int64_t n) {
  for (int64_t done = 0; done < n;) {
    ssize_t got = ::pread(file.fd, dst + done, static_cast<size_t>(n - done),
                          static_cast<off_t>(file.offset + done));
    if (got > 0) {
      done += got;
    } else if (got == 0) {
      return arrow::Status::IOError("the file ends at byte ", file.offset + done,
                                    ", before the ", n - done, " bytes that should follow: "
                                    "was it truncated while being read?");
    } else if (errno != EINTR) {
      return arrow::Status::IOError("cannot read ", n - done, " bytes at byte ",
                                    file.offset + done, " of the file (fd ", file.fd,
                                    "): ", std::strerror(errno));
    }
  }
  return arrow::Status::OK();
}

#if defined(ARROW_GPU_CLDEMOTE)
bool CanDemote() {
  static const bool can = [] {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 25)) != 0;
  }();
  return can;
}
#endif

}  // namespace

arrow::Status StageParts(size_t begin, size_t end, const std::vector<Part>& parts,
                         uint8_t* base, bool streaming) {
  for (size_t k = begin; k < end; ++k) {
    const Part& part = parts[k];
    if (part.joins) {
      const Part& last = parts[k - 1];
      int64_t end = last.slot_offset + last.size;
      std::memset(base + end, 0, static_cast<size_t>(part.slot_offset - end));
    }
    uint8_t* staged = base + part.slot_offset;
    auto size = static_cast<size_t>(part.size);
    if (part.FromFile()) {
      ARROW_RETURN_NOT_OK(ReadFile(part.file, staged, part.size));
      if (streaming) Demote(staged, part.size);  // what the non-temporal stores spare
    } else if (streaming) {
      StreamingCopy(staged, part.host, size);
    } else {
      std::memcpy(staged, part.host, size);
    }
  }
  return arrow::Status::OK();
}

void UnstageParts(size_t begin, size_t end, const std::vector<Part>& parts,
                  const uint8_t* base) {
  for (size_t k = begin; k < end; ++k) {
    const Part& part = parts[k];
    auto size = static_cast<size_t>(part.size);
    if (part.size >= kStreamingBytes) {
      StreamingCopy(part.host, base + part.slot_offset, size);
    } else {
      std::memcpy(part.host, base + part.slot_offset, size);
    }
  }
}

#if defined(ARROW_GPU_CLDEMOTE)
__attribute__((target("cldemote"))) void Demote(const uint8_t* address, int64_t n) {
  if (!CanDemote()) return;
  for (int64_t offset = 0; offset < n; offset += 64) {
    _cldemote(const_cast<uint8_t*>(address) + offset);
  }
}
#else
void Demote(const uint8_t*, int64_t) {}
#endif

}  // namespace arrow_gpu::engine
