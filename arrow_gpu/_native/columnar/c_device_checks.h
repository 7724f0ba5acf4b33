// The checks of untrusted C structs: everything libarrow's importer would follow without
// looking (pointers, counts, depths, buffer counts against the type, the device a struct
// claims), checked before it does. Messages name the node: "array.children[2].dictionary".
#pragma once

#include <cstdint>
#include <ostream>

#include <arrow/c/abi.h>
#include <arrow/status.h>
#include <arrow/type_fwd.h>

#include "columnar/c_device.h"

namespace arrow_gpu {

inline bool IsCuda(int64_t device_type) {
  return device_type == ARROW_DEVICE_CUDA || device_type == ARROW_DEVICE_CUDA_HOST;
}

// Where a node sits in an untrusted struct tree ("array.children[2].dictionary"), spelled
// out only when an error names it: the checks run on every import and must not allocate.
struct NodePath {
  const char* step;
  int64_t index = -1;  // a child's index
  const NodePath* parent = nullptr;

  NodePath Child(int64_t i) const { return {".children", i, this}; }
  NodePath Dictionary() const { return {".dictionary", -1, this}; }
};

std::ostream& operator<<(std::ostream& os, const NodePath& path);

// A schema tree: not released, formats present, children counts and pointers sane.
arrow::Status CheckSchema(const ArrowSchema* schema, const NodePath& path, int depth);

struct ArrayFacts {
  bool offsets_on_host = false;   // libarrow's importer reads a last offset on the host
  bool unknown_null_count = false;
};

// Checks `array` against the type libarrow imported from its schema.

// Checks `array` against the type libarrow imported from its schema.
arrow::Status CheckArray(const arrow::DataType& declared, const ArrowArray* array,
                         const NodePath& path, ArrayFacts* facts);

// The device a struct claims: one arrow_gpu imports, a visible one, the one asked for.
arrow::Status CheckDevice(const ArrowDeviceArray& array, const ImportOptions& options);

// A CPU or CUDA_HOST array is read on the host (by libarrow's importer for offsets, and by
// every consumer after it), so a buffer the driver knows as device memory is a mislabelled
// array that would fault there.
arrow::Status CheckHostReadable(const ArrowDeviceArray& array);

}  // namespace arrow_gpu
