// NumPy .npy files (format versions 1-3): little-endian float32, bool, int32, int64.
#pragma once

#include <string>

#include "src/io/array.h"

namespace mha::io {

Array ReadNpy(const std::string& path);
void WriteNpy(const std::string& path, const float* data, const Shape& shape);

}  // namespace mha::io
