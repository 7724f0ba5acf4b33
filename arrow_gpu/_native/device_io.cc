#include "device_io.h"

namespace arrow_gpu {

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> MakeDeviceBufferReader(
    std::shared_ptr<arrow::Buffer>) {
  return arrow::Status::NotImplemented("reading device buffers as files is not supported yet");
}

arrow::Result<std::shared_ptr<arrow::io::OutputStream>> MakeDeviceBufferWriter(
    std::shared_ptr<arrow::Buffer>) {
  return arrow::Status::NotImplemented("writing device buffers as files is not supported yet");
}

}  // namespace arrow_gpu
