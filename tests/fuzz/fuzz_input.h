// FuzzInput: reads the fuzzer's bytes as the values a hostile caller would choose,
// and writes byte runs to files for the readers that take paths.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace mha::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // The next byte, or 0 once the input is used up.
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }

  // A size: mostly small (0..max_small), sometimes any int64 (huge, negative).
  int64_t Size(int64_t max_small) {
    const uint8_t pick = Byte();
    if (pick < 224) return pick % (max_small + 1);
    int64_t any = 0;
    for (int i = 0; i < 8; ++i) any = (any << 8) | Byte();
    return any;
  }

  // A float from four bytes: any bit pattern, NaN and infinities included.
  float Float() {
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits = (bits << 8) | Byte();
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }

  // The next `count` bytes (fewer at the end of the input) as a string.
  std::string Bytes(size_t count) {
    const size_t n = std::min(count, size_ - at_);
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }
  std::string Rest() { return Bytes(size_ - at_); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// Writes `bytes` to a file of this process in /dev/shm (or /tmp) and returns its path.
inline std::string WriteTemp(const std::string& name, const std::string& bytes) {
  static const std::string dir =
      std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/mha_fuzz_" +
      std::to_string(getpid()) + "_";
  const std::string path = dir + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

}  // namespace mha::fuzz
