// Array size checks.
#include "src/io/array.h"

namespace mha::io {

std::string Printable(const std::string& text, size_t max_chars) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f) {
      out.push_back(static_cast<char>(byte));
    } else {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 15]);
    }
  }
  if (text.size() > max_chars) out += "...";
  return out;
}

size_t CheckedByteSize(const std::string& what, const Shape& shape, DType dtype) {
  uint64_t count = DTypeSize(dtype);
  for (int axis = 0; axis < shape.rank(); ++axis) {
    if (shape[axis] < 0 ||
        __builtin_mul_overflow(count, static_cast<uint64_t>(shape[axis]), &count) ||
        count > (uint64_t{1} << 62)) {
      throw FileError(what + ": shape " + shape.ToString() + " is too large");
    }
  }
  return static_cast<size_t>(count);
}

}  // namespace mha::io
