// .npy reading and writing: the header parsed as the literal it is (npy_header.cc),
// the data length checked against its shape.
#include "src/io/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "src/io/npy_header.h"

namespace mha::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void Fail(const std::string& path, const std::string& message) {
  throw FileError(path + ": " + message);
}

}  // namespace

Array ReadNpy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) Fail(path, "cannot open");
  const std::string content((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
  if (content.compare(0, kMagicSize, kMagic) != 0)
    Fail(path, "not a .npy file (bad magic)");
  if (content.size() < kMagicSize + 4) Fail(path, "truncated npy header");
  const int major = static_cast<uint8_t>(content[6]);
  if (major < 1 || major > 3)
    Fail(path, "unsupported npy version " + std::to_string(major));
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (content.size() < 8 + length_bytes) Fail(path, "truncated npy header");
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_len |= size_t{static_cast<uint8_t>(content[8 + i])} << (8 * i);
  }
  const size_t data_start = 8 + length_bytes + header_len;
  if (data_start > content.size()) Fail(path, "truncated npy header");
  const NpyHeader header =
      ParseNpyHeader(path, content.substr(8 + length_bytes, header_len));
  if (header.fortran_order) Fail(path, "fortran_order arrays are not supported");
  Array array;
  array.dtype = header.dtype;
  array.shape = header.shape;
  const size_t bytes = CheckedByteSize(path, array.shape, array.dtype);
  if (content.size() - data_start != bytes) {
    Fail(path, "data is " + std::to_string(content.size() - data_start) +
                   " bytes, shape " + array.shape.ToString() + " needs " +
                   std::to_string(bytes));
  }
  array.bytes.assign(content.begin() + data_start, content.end());
  return array;
}

void WriteNpy(const std::string& path, const float* data, const Shape& shape) {
  std::string dims;
  for (int axis = 0; axis < shape.rank(); ++axis)
    dims += std::to_string(shape[axis]) + ", ";
  // Python tuples: "(5,)" and "(2, 3)".
  if (shape.rank() == 1) dims.pop_back();
  if (shape.rank() > 1) dims.resize(dims.size() - 2);
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces so the data starts on a 64-byte boundary, ending in '\n'.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream file(path, std::ios::binary);
  if (!file) Fail(path, "cannot create");
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  file.write(kMagic, kMagicSize);
  file.put(1).put(0);
  file.put(static_cast<char>(header_len & 0xff)).put(static_cast<char>(header_len >> 8));
  file << header;
  file.write(reinterpret_cast<const char*>(data),
             static_cast<std::streamsize>(CheckedByteSize(path, shape, DType::kFloat32)));
  if (!file) Fail(path, "write failed");
}

}  // namespace mha::io
