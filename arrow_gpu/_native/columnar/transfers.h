// Arrow-object transfers: an Array (children and dictionaries included), ChunkedArray,
// RecordBatch or Table moved between host and device with one copy-engine transfer for all
// its buffers, and rebuilt in C++ while the bytes move, so that a wide table costs no
// per-column work in Python.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/datum.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "columnar/device.h"

namespace arrow_gpu {

// Host memory that maps an open file: the bytes at addresses [begin, end) are those of file
// `fd` from `offset` on.
struct MappedFile {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  int fd = -1;  // none
  int64_t offset = 0;
};

// A copy of host `data` on `manager`'s device: all its buffers packed (64-byte aligned) into
// one allocation and moved by one transfer; complete when this returns. Same types,
// lengths, offsets and null counts (counted on the host first) as the source, as
// ArrayData::CopyTo would give, except that a host array whose buffers reach far beyond
// what it covers (a slice) is compacted first (offset 0), so that only the bytes it covers
// move. TypeError if some buffer is not in host memory; device batches say kCUDA.
// Buffers that lie in `mapped` are read from its file (pread), not through the mapping,
// whose first touch costs a page fault per page in this process; nothing is compacted then
// (the IPC writer already wrote each array's bytes only). IOError if the file cannot be
// read (or was truncated since it was mapped). A small copy runs on `stream` (of the
// device; nullptr: the legacy default stream) and waits for that stream alone; a large one
// goes through the staging ring after the work queued on `stream`.
arrow::Result<arrow::Datum> ToDevice(const arrow::Datum& data,
                                     const std::shared_ptr<CudaMemoryManager>& manager,
                                     const MappedFile& mapped = {}, CUstream stream = nullptr);

// Each batch of the host stream `reader`, copied to `manager`'s device (as ToDevice copies
// it) as soon as it is read, to the end of the stream or until `stop` is set (looked at
// before each read; the copies so far are returned): a decoder's batches go to the device
// one by one, so the host holds one at a time, with no interpreter between them.
arrow::Result<std::vector<std::shared_ptr<arrow::RecordBatch>>> ReadToDevice(
    arrow::RecordBatchReader& reader, const std::shared_ptr<CudaMemoryManager>& manager,
    const std::atomic<bool>& stop);

// A host copy of device `data`, packed into one host allocation, one transfer per context
// its buffers come from; complete when this returns. The copy follows, on the GPU, the work
// queued so far on `stream` (a stream of the first device; the host does not wait for the
// rest of it). Host buffers inside device data stay as they are; host batches say kCPU.
// The allocation comes from `pool` (the default pool if null): a pinned pool's memory is
// written by the DMA engine directly, with no staging.
arrow::Result<arrow::Datum> ToHost(const arrow::Datum& data, CUstream stream = nullptr,
                                   arrow::MemoryPool* pool = nullptr);

// Whether any buffer of `data` (children and dictionaries included) is outside host memory.
bool OnDevice(const arrow::Datum& data);

// Where the buffers of some data live (children and dictionaries included).
struct BufferPlaces {
  // Whether some buffer is in host memory (device data built with a host buffer in it is
  // refused by what would hand that buffer to a kernel).
  bool host = false;
  std::shared_ptr<arrow::Buffer> device;     // the first outside host memory; null if none
  std::shared_ptr<arrow::Buffer> elsewhere;  // the first on another device; null if none
};

// Where the buffers of `data` live: one walk, for the device compute runs on and the
// context of an argument.
BufferPlaces PlacesOf(const arrow::Datum& data);

}  // namespace arrow_gpu
