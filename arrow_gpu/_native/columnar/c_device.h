// The C Device Data Interface on libarrow's own bridge (arrow/c/bridge.h).
//
// libarrow does the struct work; arrow_gpu adds what Arrow leaves to a device: a CUDA sync
// event recorded on the producer's stream at export and waited on at import, null counts
// resolved without reading device memory on the host (Arrow's exporter and several pyarrow
// operations count validity bits on the host when a count is unknown), and checks of an
// untrusted producer's structs before libarrow's importer follows their pointers.
//
// Export is in c_device_export.cc, the checks of untrusted structs in c_device_checks.h,
// import in c_device_import.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <arrow/c/abi.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "driver/driver.h"

namespace arrow_gpu {

// Export of data that `stream` produced (null: the legacy default stream). For CUDA and
// CUDA_HOST data an event recorded on `stream` becomes the struct's sync_event; it lives
// until the consumer releases the struct. `out_schema` may be null.
arrow::Status ExportArray(const std::shared_ptr<arrow::Array>& array, CUstream stream,
                          ArrowDeviceArray* out, ArrowSchema* out_schema);
arrow::Status ExportBatch(const std::shared_ptr<arrow::RecordBatch>& batch, CUstream stream,
                          ArrowDeviceArray* out, ArrowSchema* out_schema);

// A stream of the reader's batches, each exported as ExportBatch does; a reader says
// nothing of its device, so the stream is CUDA's. `schema` (optional) is what get_schema
// answers, for a requested schema of the same layout.
arrow::Status ExportStream(std::shared_ptr<arrow::RecordBatchReader> reader,
                           std::shared_ptr<arrow::Schema> schema, CUstream stream,
                           ArrowDeviceArrayStream* out);
// The same for a table, chunk by chunk, on the device of its buffers (CUDA if it has none);
// Invalid if they span several device types.
arrow::Status ExportTableStream(std::shared_ptr<arrow::Table> table,
                                std::shared_ptr<arrow::Schema> schema, CUstream stream,
                                ArrowDeviceArrayStream* out);

// The consumer's `requested` schema (released here) replaces `exported` when both describe
// the same physical layout (names, nullability and metadata may differ): arrow_gpu never
// casts device data. TypeError otherwise; on error `exported` is released too.
arrow::Status ApplyRequestedSchema(ArrowSchema* exported, ArrowSchema* requested);

// How imported data is made ready for the consumer.
struct ImportOptions {
  CUstream stream = nullptr;  // device work on it waits for the producer's event
  bool has_stream = false;    // without a stream, the host waits
  bool check_device = false;  // refuse data that is not on (device_type, device_id)
  int32_t device_type = 0;
  int64_t device_id = 0;
};

// Import of structs moved out of their capsules: both are released on every path.
arrow::Result<std::shared_ptr<arrow::Array>> ImportArray(ArrowSchema* schema,
                                                         ArrowDeviceArray* array,
                                                         const ImportOptions& options);
arrow::Result<std::shared_ptr<arrow::RecordBatch>> ImportBatch(ArrowSchema* schema,
                                                               ArrowDeviceArray* array,
                                                               const ImportOptions& options);

// The consumer side of an ArrowDeviceArrayStream, which it owns (moved in) and releases.
class StreamImporter {
 public:
  static arrow::Result<std::shared_ptr<StreamImporter>> Open(ArrowDeviceArrayStream* stream);
  ~StreamImporter();

  const std::shared_ptr<arrow::Schema>& schema() const { return schema_; }
  // The next batch, or null at the end of the stream (after which the stream is released).
  arrow::Result<std::shared_ptr<arrow::RecordBatch>> Next(const ImportOptions& options);

 private:
  StreamImporter() = default;
  arrow::Status Failure(int code, const char* what);
  void Release();

  ArrowDeviceArrayStream stream_{};
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<arrow::DataType> type_;  // the batches' struct type
  std::shared_ptr<arrow::Field> field_;
};

// Exported arrays and streams whose consumer has not released them yet (a leak check).
int64_t LiveExports();

}  // namespace arrow_gpu
