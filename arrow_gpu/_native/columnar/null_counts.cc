#include "columnar/null_counts.h"

#include <vector>

#include <arrow/device.h>
#include <arrow/util/bitmap_ops.h>

namespace arrow_gpu {

arrow::Status ResolveNullCounts(const std::shared_ptr<arrow::ArrayData>& data) {
  if (data->null_count.load() == arrow::kUnknownNullCount) {
    const auto& validity = data->buffers.empty() ? nullptr : data->buffers[0];
    if (validity != nullptr && !validity->is_cpu() && data->length > 0) {
      const int64_t first = data->offset / 8;
      const int64_t end = (data->offset + data->length + 7) / 8;
      std::vector<uint8_t> bits(end - first);
      ARROW_RETURN_NOT_OK(
          arrow::MemoryManager::CopyBufferSliceToCPU(validity, first, end - first, bits.data()));
      data->null_count.store(
          data->length - arrow::internal::CountSetBits(bits.data(), data->offset % 8, data->length));
    } else {
      data->GetNullCount();  // host memory, or no bitmap at all: no device read
    }
  }
  for (const auto& child : data->child_data) ARROW_RETURN_NOT_OK(ResolveNullCounts(child));
  if (data->dictionary) ARROW_RETURN_NOT_OK(ResolveNullCounts(data->dictionary));
  return arrow::Status::OK();
}

}  // namespace arrow_gpu
