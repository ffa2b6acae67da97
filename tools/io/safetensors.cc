// safetensors parsing with nlohmann::json; every offset is checked against the file.
#include "tools/io/safetensors.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace mha::io {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& message) {
  throw FileError(path + ": " + message);
}

DType ParseDType(const std::string& path, const std::string& name,
                 const std::string& dtype) {
  if (dtype == "F32") return DType::kFloat32;
  if (dtype == "BOOL") return DType::kBool;
  if (dtype == "I32") return DType::kInt32;
  if (dtype == "I64") return DType::kInt64;
  Fail(path, "tensor '" + name + "' has unsupported dtype " + dtype);
}

Shape ParseShape(const std::string& path, const std::string& name,
                 const nlohmann::json& dims) {
  if (!dims.is_array() || dims.size() > Shape::kMaxRank) {
    Fail(path, "tensor '" + name + "': shape must be a list of at most 4 dimensions");
  }
  int64_t d[Shape::kMaxRank] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].is_number_unsigned()) Fail(path, "tensor '" + name + "': bad dimension");
    d[i] = dims[i].get<int64_t>();
  }
  return Shape(d, dims.size());
}

Array ParseTensor(const std::string& path, const std::string& name,
                  const nlohmann::json& entry, const std::string& data) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets") || !entry["dtype"].is_string()) {
    Fail(path, "tensor '" + name + "': needs dtype, shape and data_offsets");
  }
  Array array;
  array.dtype = ParseDType(path, name, entry["dtype"].get<std::string>());
  array.shape = ParseShape(path, name, entry["shape"]);
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    Fail(path, "tensor '" + name + "': data_offsets must be [begin, end]");
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > data.size()) {
    Fail(path, "tensor '" + name + "': data_offsets [" + std::to_string(begin) + ", " +
                   std::to_string(end) + "] out of range (data is " +
                   std::to_string(data.size()) + " bytes)");
  }
  const size_t bytes =
      CheckedByteSize(path + " tensor '" + name + "'", array.shape, array.dtype);
  if (end - begin != bytes) {
    Fail(path, "tensor '" + name + "': " + std::to_string(end - begin) +
                   " bytes, shape " + array.shape.ToString() + " needs " +
                   std::to_string(bytes));
  }
  array.bytes.assign(data.begin() + begin, data.begin() + end);
  return array;
}

}  // namespace

Safetensors Safetensors::Read(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) Fail(path, "cannot open");
  const std::string content((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
  if (content.size() < 8) Fail(path, "truncated: no header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t{static_cast<uint8_t>(content[i])} << (8 * i);
  }
  if (header_len > content.size() - 8) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                   std::to_string(content.size()) + " bytes)");
  }
  const nlohmann::json header = nlohmann::json::parse(
      content.begin() + 8, content.begin() + 8 + header_len, nullptr,
      /*allow_exceptions=*/false);
  if (!header.is_object()) Fail(path, "header is not a JSON object");
  const std::string data = content.substr(8 + header_len);
  Safetensors result;
  result.path_ = path;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    result.tensors_.emplace(name, ParseTensor(path, name, entry, data));
  }
  return result;
}

TensorView Safetensors::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? TensorView() : it->second.view();
}

}  // namespace mha::io
