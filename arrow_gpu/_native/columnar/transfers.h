// Arrow-object transfers: arrays (children and dictionaries included), chunked arrays,
// record batches and tables moved between host and device with one copy-engine transfer
// for all their buffers, and rebuilt in C++ so that a wide table costs no per-column work
// in Python.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/array/data.h>
#include <arrow/buffer.h>
#include <arrow/chunked_array.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>
#include <arrow/table.h>

#include "columnar/device.h"

namespace arrow_gpu {

// Host buffers packed (64-byte aligned) into one device allocation of `manager` with one
// pipelined transfer; returns zero-copy device slices of it, one per input, in order.
arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> CoalescedHostToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::vector<std::shared_ptr<arrow::Buffer>>& host_buffers);
// Device buffers (of this package) packed into one host allocation; returns slices of it.
// Every transfer to the host is complete when it returns; `after`, if given, is a stream of
// the (first) device whose work queued so far the copy follows on the GPU (see
// EngineDeviceToHost).
arrow::Result<std::vector<std::shared_ptr<arrow::Buffer>>> CoalescedDeviceToHost(
    const std::vector<std::shared_ptr<arrow::Buffer>>& device_buffers,
    CUstream after = nullptr);

// Copies of arrays (children and dictionaries included) whose buffers all come from one
// coalesced transfer; same types, lengths, offsets and null counts (counted on the host
// first) as the sources, as ArrayData::CopyTo would give, except that a host array whose
// buffers reach far beyond what it covers (a slice) is compacted first (offset 0), so that
// only the bytes it covers move.
arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ArraysToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::vector<std::shared_ptr<arrow::ArrayData>>& arrays);
arrow::Result<std::vector<std::shared_ptr<arrow::ArrayData>>> ArraysToHost(
    const std::vector<std::shared_ptr<arrow::ArrayData>>& arrays, CUstream after = nullptr);

// Whole chunked arrays, tables and batches moved the same way, rebuilt in C++ so that a wide
// table costs no per-column work in Python. Device batches say kCUDA, host ones kCPU.
arrow::Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::ChunkedArray>& array);
arrow::Result<std::shared_ptr<arrow::ChunkedArray>> ChunkedArrayToHost(
    const std::shared_ptr<arrow::ChunkedArray>& array, CUstream after = nullptr);
arrow::Result<std::shared_ptr<arrow::Table>> TableToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::Table>& table);
arrow::Result<std::shared_ptr<arrow::Table>> TableToHost(
    const std::shared_ptr<arrow::Table>& table, CUstream after = nullptr);
arrow::Result<std::shared_ptr<arrow::RecordBatch>> BatchToDevice(
    const std::shared_ptr<CudaMemoryManager>& manager,
    const std::shared_ptr<arrow::RecordBatch>& batch);
arrow::Result<std::shared_ptr<arrow::RecordBatch>> BatchToHost(
    const std::shared_ptr<arrow::RecordBatch>& batch, CUstream after = nullptr);

// Whether any buffer (children and dictionaries included) is outside host memory.
bool OnDevice(const arrow::ArrayData& data);
bool OnDevice(const arrow::ChunkedArray& data);
bool OnDevice(const arrow::RecordBatch& data);
bool OnDevice(const arrow::Table& data);

}  // namespace arrow_gpu
