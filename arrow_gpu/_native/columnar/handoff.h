// Hand-offs between processes of one host: a batch or table described as the Arrow IPC
// messages that carry it (schema, dictionaries, batches), with each message's body left in
// the sender's device buffers, named by their driver allocation (an IPC handle) and an
// offset in it. The receiver rebuilds the batches either as views of those buffers or from
// one copy of all bodies into an allocation of its own: one device copy per hand-off.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>
#include <arrow/type.h>

#include "columnar/device.h"
#include "driver/driver.h"

namespace arrow_gpu {

// Bytes of a message body and the device memory that holds them.
struct HandoffSegment {
  int64_t body_offset = 0;                // where they go in the message body
  std::shared_ptr<arrow::Buffer> source;  // exactly those bytes, on the device
  // Filled by DescribeHandoff: the driver allocation holding `source`, exported.
  bool exportable = false;  // false where the driver cannot export it (pools, foreign memory)
  CUipcMemHandle handle{};
  int64_t allocation_offset = 0;  // where `source` starts in the allocation
  int64_t allocation_size = 0;
};

struct HandoffMessage {
  std::shared_ptr<arrow::Buffer> metadata;  // the flatbuffer Message, on the host
  int64_t body_length = 0;
  std::vector<HandoffSegment> segments;  // in body order; padding and empty buffers omitted
};

// The messages of an IPC stream of `batches`, each body buffer exported where it lives.
// Body buffers that are not this package's device memory are left unexportable.
arrow::Result<std::vector<HandoffMessage>> DescribeHandoff(
    const std::shared_ptr<arrow::Schema>& schema,
    const std::vector<std::shared_ptr<arrow::RecordBatch>>& batches);

// The batches `messages` describe, on `manager`'s device. With `copy`, every body is copied
// (device to device, or peer to peer) into one new allocation of `manager`, and the copies
// have finished on return; without, the batches' buffers are views of the segments' sources
// and keep them alive. Segments that do not fit their message's body, buffers that do not
// lie inside one segment, and data of the other endianness are refused (Invalid). The
// messages must not be compressed nor delta dictionary batches (Arrow would decompress or
// concatenate those bodies on the host): the caller checks their metadata first.
arrow::Result<std::vector<std::shared_ptr<arrow::RecordBatch>>> ReadHandoff(
    const std::vector<HandoffMessage>& messages,
    const std::shared_ptr<CudaMemoryManager>& manager, bool copy,
    std::shared_ptr<arrow::Schema>* schema);

}  // namespace arrow_gpu
