// The copy engine: every host<->device transfer of the package goes through it.
//
// Small copies are one synchronous driver copy (latency is what matters there). Large copies
// from or to pageable host memory are pipelined: CPU threads copy chunks between the
// pageable memory and a bounded ring of pinned staging slots while the DMA engine moves the
// slots filled before them, so staging and transfer overlap. Pinned memory goes direct.
// Many small buffers can be coalesced into one transfer (CoalescedHostToDevice), and whole
// Arrow arrays moved with one transfer for all their buffers (ArraysToDevice).
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/array.h>
#include <arrow/array/data.h>
#include <arrow/array/util.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/buffer.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include "context.h"

namespace arrow_gpu {

class CudaMemoryManager;

struct TransferOptions {
  // Total pinned staging memory (the ring); 0 turns the pipeline off: direct copies only.
  int64_t staging_bytes = int64_t{64} << 20;
  // Size of one staging slot, the unit of pipelining (clamped to staging_bytes / 2).
  int64_t chunk_bytes = int64_t{4} << 20;
  // CPU threads copying between pageable memory and the ring (the caller's thread included).
  int threads = 0;  // 0: chosen from the machine's cores
  // Copies smaller than this are one synchronous driver copy.
  int64_t small_copy_bytes = int64_t{1} << 20;
};

TransferOptions GetTransferOptions();
// Validates and installs new options; the staging ring is re-made on its next use.
arrow::Status SetTransferOptions(const TransferOptions& options);
// Frees the staging ring now (it is made again when needed); while a transfer uses it (this
// may be called from its progress callback), that transfer frees it when it ends.
void ReleaseStaging();
// Pinned bytes the staging ring holds now.
int64_t StagingBytesHeld();

// A Python callable called as callback(nbytes) as transfers progress (nbytes moved since
// the last call), from the thread that started the transfer; None to stop. An exception it
// raises cancels the transfer.
void SetProgressCallback(PyObject* callback);

// Where host memory is known to be (kUnknown: asked of the driver for large copies).
enum class HostMemory { kUnknown, kPageable, kPinned };

arrow::Status EngineHostToDevice(const CudaContext& context, uintptr_t dst, const void* src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown);
arrow::Status EngineDeviceToHost(const CudaContext& context, void* dst, uintptr_t src,
                                 int64_t nbytes, HostMemory kind = HostMemory::kUnknown);

// Host buffers packed (64-byte aligned) into one device allocation of `manager` with one
// pipelined transfer; returns zero-copy device slices of it, one per input, in order.
arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> CoalescedHostToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::vector<std::shared_ptr<arrow::Buffer>>& host_buffers);
// Device buffers (of this package) packed into one host allocation; returns slices of it.
arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> CoalescedDeviceToHost(
    const std::vector<std::shared_ptr<arrow::Buffer>>& device_buffers);

// Copies of arrays (children and dictionaries included) whose buffers all come from one
// coalesced transfer; same types, lengths, offsets and null counts (counted on the host
// first) as the sources, as ArrayData::CopyTo would give, except that a host array whose
// buffers reach far beyond what it covers (a slice) is compacted first (offset 0), so that
// only the bytes it covers move.
arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ArraysToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::vector<std::shared_ptr<arrow::ArrayData>>& arrays);
arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ArraysToHost(
    const std::vector<std::shared_ptr<arrow::ArrayData>>& arrays);

// Whole chunked arrays, tables and batches moved the same way, rebuilt in C++ so that a wide
// table costs no per-column work in Python. Device batches say kCUDA, host ones kCPU.
arrow::Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::ChunkedArray>& array);
arrow::Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToHost(
    const std::shared_ptr<arrow::ChunkedArray>& array);
arrow::Result<std::shared_ptr<arrow::Table>> TableToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::Table>& table);
arrow::Result<std::shared_ptr<arrow::Table>> TableToHost(
    const std::shared_ptr<arrow::Table>& table);
arrow::Result<std::shared_ptr<arrow::RecordBatch>> BatchToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::RecordBatch>& batch);
arrow::Result<std::shared_ptr<arrow::RecordBatch>> BatchToHost(
    const std::shared_ptr<arrow::RecordBatch>& batch);

// Whether any buffer (children and dictionaries included) is outside host memory.
bool OnDevice(const arrow::ArrayData& data);
bool OnDevice(const arrow::ChunkedArray& data);
bool OnDevice(const arrow::RecordBatch& data);
bool OnDevice(const arrow::Table& data);

}  // namespace arrow_gpu
