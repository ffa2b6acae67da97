// safetensors files: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the raw data. Read checks a file
// header first, then the tensors it asks for; WriteSafetensors writes float32 tensors, as
// mha-run and the layer files read.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/io/array.h"

namespace mha::io {

class Safetensors {
 public:
  // Checks the whole header (bounds, dtypes, shapes, byte ranges), then reads the
  // tensors whose names start with `prefix`, named without it ("" reads all).
  // BF16 and F16 tensors are widened to float32.
  static Safetensors Read(const std::string& path, const std::string& prefix = "");

  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor, or an absent view when it is not in the file.
  TensorView Find(const std::string& name) const;
  const std::string& path() const { return path_; }
  std::vector<std::string> Names() const;

 private:
  std::string path_;
  std::map<std::string, Array> tensors_;
};

// Writes `tensors` (float32 views, by name) to `path` through a temporary file beside
// it, so a failed write leaves whatever was at `path` as it was.
void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, TensorView>>& tensors);

}  // namespace mha::io
