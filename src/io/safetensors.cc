// safetensors parsing with nlohmann::json, following the format's rules: a header of
// at most kMaxHeaderBytes and nesting depth 3, unique tensor names, and data_offsets
// that tile the data exactly (sorted, no overlap, no gap). Unaligned offsets are
// allowed by the format and harmless here: each tensor is copied into its own array.
#include "src/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

namespace mha::io {
namespace {

// Far below what parsing costs memory for, far above any one layer's header.
constexpr uint64_t kMaxHeaderBytes = 16 << 20;
// {name: {dtype, shape: [..], data_offsets: [..]}} is three levels deep.
constexpr int kMaxDepth = 3;

[[noreturn]] void Fail(const std::string& path, const std::string& message) {
  throw FileError(path + ": " + message);
}

std::string Tensor(const std::string& name) { return "tensor '" + Printable(name) + "'"; }

DType ParseDType(const std::string& path, const std::string& name,
                 const std::string& dtype) {
  if (dtype == "F32") return DType::kFloat32;
  if (dtype == "BOOL") return DType::kBool;
  if (dtype == "I32") return DType::kInt32;
  if (dtype == "I64") return DType::kInt64;
  Fail(path, Tensor(name) + " has unsupported dtype " + Printable(dtype));
}

Shape ParseShape(const std::string& path, const std::string& name,
                 const nlohmann::json& dims) {
  if (!dims.is_array() || dims.size() > Shape::kMaxRank) {
    Fail(path, Tensor(name) + ": shape must be a list of at most 4 dimensions");
  }
  int64_t d[Shape::kMaxRank] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].is_number_unsigned()) Fail(path, Tensor(name) + ": bad dimension");
    const uint64_t dim = dims[i].get<uint64_t>();
    if (dim > uint64_t{INT64_MAX}) {
      Fail(path, Tensor(name) + ": dimension " + std::to_string(dim) + " is too large");
    }
    d[i] = static_cast<int64_t>(dim);
  }
  return Shape(d, dims.size());
}

// One tensor's array, and its [begin, end) in the data.
Array ParseTensor(const std::string& path, const std::string& name,
                  const nlohmann::json& entry, const std::string& data,
                  std::pair<uint64_t, uint64_t>* range) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets") || !entry["dtype"].is_string()) {
    Fail(path, Tensor(name) + ": needs dtype, shape and data_offsets");
  }
  Array array;
  array.dtype = ParseDType(path, name, entry["dtype"].get<std::string>());
  array.shape = ParseShape(path, name, entry["shape"]);
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    Fail(path, Tensor(name) + ": data_offsets must be [begin, end]");
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end || end > data.size()) {
    Fail(path, Tensor(name) + ": data_offsets [" + std::to_string(begin) + ", " +
                   std::to_string(end) + "] out of range (data is " +
                   std::to_string(data.size()) + " bytes)");
  }
  const size_t bytes =
      CheckedByteSize(path + " " + Tensor(name), array.shape, array.dtype);
  if (end - begin != bytes) {
    Fail(path, Tensor(name) + ": " + std::to_string(end - begin) + " bytes, shape " +
                   array.shape.ToString() + " needs " + std::to_string(bytes));
  }
  array.bytes.assign(data.begin() + begin, data.begin() + end);
  *range = {begin, end};
  return array;
}

// Whether brackets nest deeper than `limit` outside strings: checked before parsing,
// so that a header of nested brackets costs nothing.
bool NestsDeeperThan(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '[' || c == '{') && ++depth > limit) {
      return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Parses the header text: JSON, an object, nested at most kMaxDepth deep, no name
// given twice (JSON parsers keep one of them silently).
nlohmann::json ParseHeader(const std::string& path, const std::string& text) {
  if (NestsDeeperThan(text, kMaxDepth)) {
    Fail(path, "header nests deeper than " + std::to_string(kMaxDepth));
  }
  std::set<std::string> names;
  std::string repeated;
  const nlohmann::json::parser_callback_t check =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
            !names.insert(parsed.get<std::string>()).second && repeated.empty()) {
          repeated = parsed.get<std::string>();
        }
        return true;
      };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception& e) {  // syntax, and numbers out of range
    Fail(path, "header is not valid JSON: " + Printable(e.what(), 200));
  }
  if (!header.is_object()) Fail(path, "header is not a JSON object");
  if (!repeated.empty()) Fail(path, Tensor(repeated) + " appears twice in the header");
  return header;
}

// The format's rule: the tensors' byte ranges, in order, tile the data exactly.
void CheckRangesTileData(const std::string& path,
                         std::vector<std::pair<uint64_t, uint64_t>> ranges,
                         uint64_t data_bytes) {
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) {
      Fail(path, begin < covered
                     ? "tensors' data_offsets overlap at byte " + std::to_string(begin)
                     : "data bytes [" + std::to_string(covered) + ", " +
                           std::to_string(begin) + ") belong to no tensor");
    }
    covered = end;
  }
  if (covered != data_bytes) {
    Fail(path, "data bytes [" + std::to_string(covered) + ", " +
                   std::to_string(data_bytes) + ") belong to no tensor");
  }
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
  if (content.compare(0, 6, "\x93NUMPY") == 0) {
    Fail(path,
         "is a .npy file, not safetensors: weights come as one .safetensors file of "
         "named tensors (mha.save_safetensors(path, model.state_dict()) writes one)");
  }
  if (header_len > content.size() - 8) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                   std::to_string(content.size()) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  }
  const nlohmann::json header = ParseHeader(path, content.substr(8, header_len));
  const std::string data = content.substr(8 + header_len);
  Safetensors result;
  result.path_ = path;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) Fail(path, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          Fail(path, "__metadata__ '" + Printable(key) + "' is not a string");
        }
      }
      continue;
    }
    ranges.emplace_back();
    result.tensors_.emplace(name, ParseTensor(path, name, entry, data, &ranges.back()));
  }
  CheckRangesTileData(path, std::move(ranges), data.size());
  return result;
}

TensorView Safetensors::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? TensorView() : it->second.view();
}

std::vector<std::string> Safetensors::Names() const {
  std::vector<std::string> names;
  for (const auto& entry : tensors_) names.push_back(entry.first);
  return names;
}

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, TensorView>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    if (view.dtype != DType::kFloat32 || !view.dense()) {
      Fail(path, Tensor(name) + " is " + DTypeName(view.dtype) +
                     (view.dense() ? "" : ", strided") + ", expected dense float32");
    }
    if (header.contains(name)) Fail(path, Tensor(name) + " is named twice");
    const uint64_t bytes = CheckedByteSize(path, view.shape, DType::kFloat32);
    std::vector<int64_t> shape;
    for (int axis = 0; axis < view.shape.rank(); ++axis)
      shape.push_back(view.shape[axis]);
    header[name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned
  const std::string temporary = path + ".partial";
  {
    std::ofstream file(temporary, std::ios::binary);
    if (!file) Fail(temporary, "cannot create");
    for (int i = 0; i < 8; ++i)
      file.put(static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff));
    file << text;
    for (const auto& entry : tensors) {
      const TensorView& view = entry.second;
      file.write(static_cast<const char*>(view.data),
                 static_cast<std::streamsize>(
                     CheckedByteSize(path, view.shape, DType::kFloat32)));
    }
    if (!file.flush()) {
      std::remove(temporary.c_str());
      Fail(temporary, "write failed");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    Fail(path, "cannot replace it with " + temporary);
  }
}

}  // namespace mha::io
