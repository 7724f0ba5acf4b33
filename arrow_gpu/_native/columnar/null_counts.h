// Null counts resolved without reading device memory on the host: Arrow's exporter and
// several pyarrow operations count validity bits on the host when a count is unknown, which
// on device data faults, so every count is made exact first, through the driver.
#pragma once

#include <memory>

#include <arrow/array/data.h>
#include <arrow/status.h>

namespace arrow_gpu {

// Exact null counts for every node of `data` whose count is unknown; validity bitmaps in
// device memory are copied to the host (1/8 byte a value). The data must be ready.
arrow::Status ResolveNullCounts(const std::shared_ptr<arrow::ArrayData>& data);

}  // namespace arrow_gpu
