// libFuzzer target: the .npy reader on any file.
#include "src/io/npy.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mha::fuzz::WriteTemp(
      "input.npy", std::string(reinterpret_cast<const char*>(data), size));
  try {
    const mha::io::Array array = mha::io::ReadNpy(path);
    if (array.bytes.size() != mha::io::CheckedByteSize(path, array.shape, array.dtype)) {
      __builtin_trap();  // the reader promised a shape its data does not fill
    }
  } catch (const mha::io::FileError&) {
  }
  return 0;
}
