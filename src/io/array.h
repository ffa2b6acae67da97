// Array: an owned n-d array read from a file, viewable as an mha::TensorView.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mha/tensor.hpp"

namespace mha::io {

// Thrown for unreadable or malformed files; the message names the file.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Array {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;

  TensorView view() const { return TensorView(bytes.data(), dtype, shape); }
};

// `text` fit to quote in a message: printable ASCII kept, every other byte as \xNN,
// cut after max_chars with "...".
std::string Printable(const std::string& text, size_t max_chars = 80);

// Element count of `shape`, failing with `what` when it or its byte size overflows.
size_t CheckedByteSize(const std::string& what, const Shape& shape, DType dtype);

}  // namespace mha::io
