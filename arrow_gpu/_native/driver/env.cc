#include "driver/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include <arrow/status.h>

namespace arrow_gpu {
namespace {

std::string Lower(const char* value) {
  std::string text(value);
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool Unset(const char* value) { return value == nullptr || *value == '\0'; }

arrow::Result<bool> ParseFlag(const char* name, const char* value, bool unset) {
  if (Unset(value)) return unset;
  const std::string text = Lower(value);
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return arrow::Status::Invalid(name, "='", value, "' is not a switch: use 1, true, yes or on ",
                                "to turn it on, 0, false, no or off (or leave it unset) for off");
}

arrow::Result<uint64_t> ParseSize(const char* name, const char* value, uint64_t unset) {
  if (Unset(value)) return unset;
  const std::string text = Lower(value);
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  // A suffix K, M, G or T (binary multiples), optionally followed by "b" or "ib".
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (std::string("kmgt").find(suffix[0]) != std::string::npos &&
             (suffix.size() == 1 || suffix.substr(1) == "b" || suffix.substr(1) == "ib")) {
    shift = 10 * (1 + static_cast<int>(std::string("kmgt").find(suffix[0])));
  }
  uint64_t number = 0;
  bool fits = digits > 0 && digits <= 19;
  if (fits) number = std::strtoull(text.substr(0, digits).c_str(), nullptr, 10);
  if (shift < 0 || !fits || (shift > 0 && number > (UINT64_MAX >> shift))) {
    return arrow::Status::Invalid(name, "='", value, "' is not a size: use a number of bytes ",
                                  "(4294967296) or a number with K, M, G or T for KiB, MiB, ",
                                  "GiB or TiB (4G, 512M)");
  }
  return number << shift;
}

arrow::Result<int64_t> ParseCount(const char* name, const char* value, int64_t unset,
                                  int64_t max) {
  if (Unset(value)) return unset;
  char* end = nullptr;
  const long long number = std::strtoll(value, &end, 10);
  if (!std::isdigit(static_cast<unsigned char>(*value)) || *end != '\0' || number > max) {
    return arrow::Status::Invalid(name, "='", value, "' is not a count: use a whole number ",
                                  "from 0 to ", max);
  }
  return number;
}

// The devices of `count` that CUDA_VISIBLE_DEVICES (`value`) lets a process see, in order.
std::vector<int> VisibleDevices(const char* value, int count) {
  std::vector<int> visible;
  if (value == nullptr) {
    for (int device = 0; device < count; ++device) visible.push_back(device);
    return visible;
  }
  const std::string text(value);
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, end - start);
    char* stop = nullptr;
    const long number = std::strtol(entry.c_str(), &stop, 10);
    const bool index = !entry.empty() && *stop == '\0' &&
                       std::isdigit(static_cast<unsigned char>(entry[0]));
    if (!index || number >= count ||
        std::find(visible.begin(), visible.end(), number) != visible.end()) {
      break;
    }
    visible.push_back(static_cast<int>(number));
    start = end + 1;
  }
  return visible;
}

}  // namespace

arrow::Result<bool> UsingSimulator() {
  static const arrow::Result<bool> requested =
      ParseFlag("ARROW_GPU_SIMULATOR", std::getenv("ARROW_GPU_SIMULATOR"), false);
  return requested;
}

arrow::Result<SimulatorOptions> SimulatorOptionsFromEnvironment() {
  static const arrow::Result<SimulatorOptions> options = []() -> arrow::Result<SimulatorOptions> {
    SimulatorOptions read;
    ARROW_ASSIGN_OR_RAISE(
        read.devices, ParseCount("ARROW_GPU_SIMULATOR_DEVICES",
                                 std::getenv("ARROW_GPU_SIMULATOR_DEVICES"), read.devices,
                                 SimulatorOptions::kMaxDevices));
    ARROW_ASSIGN_OR_RAISE(
        read.memory_per_device,
        ParseSize("ARROW_GPU_SIMULATOR_MEMORY", std::getenv("ARROW_GPU_SIMULATOR_MEMORY"),
                  read.memory_per_device));
    ARROW_ASSIGN_OR_RAISE(
        read.pinned_memory,
        ParseSize("ARROW_GPU_SIMULATOR_PINNED_MEMORY",
                  std::getenv("ARROW_GPU_SIMULATOR_PINNED_MEMORY"), read.pinned_memory));
    read.visible = VisibleDevices(std::getenv("CUDA_VISIBLE_DEVICES"), read.devices);
    return read;
  }();
  return options;
}

}  // namespace arrow_gpu
