// mha::Error: the one exception type the library throws for invalid input.
#pragma once

#include <stdexcept>
#include <string>

namespace mha {

// Thrown for every invalid config, shape, dtype, pointer or size. The message names
// the argument and the values seen. A call that throws has written nothing: every
// output buffer and object it was given is left as it was.
//
// Running out of memory throws std::bad_alloc instead. The layer, the caches and the
// inputs are then as they were, but outputs may be partly written (docs/errors.md).
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace mha
