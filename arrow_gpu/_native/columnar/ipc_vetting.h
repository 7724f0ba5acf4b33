// Which reads of an Arrow IPC stream or file over device memory are message bodies that
// may stay on the device.
//
// libarrow decodes a record batch body where its bytes are, except in three cases: it
// decompresses a compressed body, byte-swaps the body of data whose schema says
// big-endian, and concatenates a delta dictionary batch's values with the dictionary
// before them, on the host. A body of any of these kinds must never reach libarrow as
// device memory. libarrow also reads metadata and a file's footer on the host. This watches the
// reads an IPC reader makes through a file, recognises each message's metadata as it is
// read (through ipc_metadata.h's reader) and judges the body that follows it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace arrow_gpu {

class IpcBodyVetting {
 public:
  explicit IpcBodyVetting(int64_t file_size) : file_size_(file_size) {}

  enum class Body {
    kOther,          // not a body of a message whose metadata was seen
    kOnDevice,       // a body libarrow decodes in place: safe to hand out as device memory
    kDecodedOnHost,  // a body libarrow would decode on the host (`why` says why)
  };

  // What a buffer read of `size` bytes at `position` is.
  Body Classify(int64_t position, int64_t size, std::string* why);

  // Whether a buffer read is a stream message's metadata, read after its framing.
  bool IsStreamMetadata(int64_t position, int64_t size) const {
    return position == last_copy_end_ && size == last_copy_tail_;
  }

  // The length of the framing and metadata of a message that a buffer read of `size` bytes
  // starting with `head` begins with (a file's message is read whole: framing, metadata,
  // body), or -1.
  static int64_t FramedMetadataLength(const uint8_t head[8], int64_t size);

  // A copying read: a stream message's framing (its length above all) is read this way.
  void SawCopy(int64_t position, const uint8_t* data, int64_t size);

  // A buffer read that was served as a host copy: message metadata, a file's trailer or
  // footer, or anything else.
  void SawHostCopy(int64_t position, const uint8_t* data, int64_t size);

 private:
  // The body of a record or dictionary batch whose metadata was seen.
  struct PendingBody {
    int64_t length;
    std::string why;  // why libarrow would decode it on the host, or empty
  };

  void SawMessage(const uint8_t* metadata, int64_t size, int64_t body_start);
  void SawFooter(const uint8_t* footer, int64_t size);

  int64_t file_size_;
  int64_t last_copy_end_ = -1;
  int64_t last_copy_tail_ = -1;  // the int32 that ends the last copying read
  int64_t footer_start_ = -1;
  int64_t footer_length_ = -1;
  bool big_endian_ = false;  // some schema seen said so; sticky, to stay on the safe side
  std::map<int64_t, PendingBody> bodies_;  // by start position
};

}  // namespace arrow_gpu
