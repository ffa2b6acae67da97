// The .npy header: a Python dict literal, parsed as numpy's own reader
// (ast.literal_eval, then its key checks) would take it, never matched as text.
#pragma once

#include <string>

#include "src/io/array.h"

namespace mha::io {

struct NpyHeader {
  DType dtype = DType::kFloat32;
  Shape shape;
  bool fortran_order = false;
};

// Parses `text` (the header's bytes after the length field). Exactly the keys
// 'descr', 'fortran_order' and 'shape' (a repeated key keeps its last value, as a
// Python dict does); 'descr' one of '<f4', '|b1', '<i4', '<i8'; 'fortran_order' True
// or False; 'shape' a tuple of non-negative ints of rank <= 4. Anything else throws
// FileError naming `path` and what was wrong.
NpyHeader ParseNpyHeader(const std::string& path, const std::string& text);

}  // namespace mha::io
