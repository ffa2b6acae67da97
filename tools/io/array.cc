// Array size checks.
#include "tools/io/array.h"

namespace mha::io {

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
