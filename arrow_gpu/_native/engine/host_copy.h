// The host copy kernels: CPU copies between pageable memory and staging (and reads from
// files into staging), written so that the DMA engine and the CPU caches get along
// (non-temporal stores, cache-line demotion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <arrow/status.h>

#include "engine/planner.h"

namespace arrow_gpu::engine {

// Pageable memory or file -> staging for parts [begin, end), with non-temporal stores if
// `streaming` (a part read from its file is demoted instead: the kernel's copy goes through
// the caches); gaps that one DMA spans are zeroed (no stale staging bytes leak). IOError if a
// file cannot be read, or ends before a part does.
arrow::Status StageParts(size_t begin, size_t end, const std::vector<Part>& parts,
                         uint8_t* base, bool streaming = false);

// Staging -> pageable; large parts are streamed around the caches (small ones are likely
// read again soon, from the cache).
void UnstageParts(size_t begin, size_t end, const std::vector<Part>& parts,
                  const uint8_t* base);

// Moves the cache lines of [address, address + n) from this core's private caches to the
// shared one, where the CPU has CLDEMOTE (a no-op elsewhere): the DMA engine reads lines
// that a core still holds modified much slower than others.
void Demote(const uint8_t* address, int64_t n);

}  // namespace arrow_gpu::engine
