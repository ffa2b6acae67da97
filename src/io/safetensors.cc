// safetensors parsing with nlohmann::json, following the format's rules: a header of
// at most kMaxHeaderBytes and nesting depth 3, unique tensor names, and data_offsets
// that tile the data exactly (sorted, no overlap, no gap). The header is checked
// before any data is read, then each tensor read on its own (a file is never held
// whole); unaligned offsets are allowed by the format and harmless here: each tensor
// is read into its own array.
#include "src/io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "src/base/fp16.h"

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

// A dtype as stored, and what it loads as: 16-bit floats widen to float32 on load.
struct StoredType {
  DType loaded;
  size_t stored_bytes;
  bool half = false;  // IEEE float16 (F16), not bfloat16
};

StoredType ParseDType(const std::string& path, const std::string& name,
                      const std::string& dtype) {
  if (dtype == "F32") return {DType::kFloat32, 4};
  if (dtype == "BF16") return {DType::kFloat32, 2};
  if (dtype == "F16") return {DType::kFloat32, 2, true};
  if (dtype == "BOOL") return {DType::kBool, 1};
  if (dtype == "I32") return {DType::kInt32, 4};
  if (dtype == "I64") return {DType::kInt64, 8};
  Fail(path, Tensor(name) + " has unsupported dtype " + Printable(dtype) +
                 " (F32, BF16, F16, BOOL, I32 and I64 are read)");
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

// One tensor's entry as the header states it, checked against the data's size.
struct Entry {
  StoredType type;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

Entry ParseEntry(const std::string& path, const std::string& name,
                 const nlohmann::json& entry, uint64_t data_bytes) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets") || !entry["dtype"].is_string()) {
    Fail(path, Tensor(name) + ": needs dtype, shape and data_offsets");
  }
  Entry parsed;
  parsed.type = ParseDType(path, name, entry["dtype"].get<std::string>());
  parsed.shape = ParseShape(path, name, entry["shape"]);
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    Fail(path, Tensor(name) + ": data_offsets must be [begin, end]");
  }
  parsed.begin = offsets[0].get<uint64_t>();
  parsed.end = offsets[1].get<uint64_t>();
  if (parsed.begin > parsed.end || parsed.end > data_bytes) {
    Fail(path, Tensor(name) + ": data_offsets [" + std::to_string(parsed.begin) + ", " +
                   std::to_string(parsed.end) + "] out of range (data is " +
                   std::to_string(data_bytes) + " bytes)");
  }
  // Checked as loaded (a 16-bit tensor widens): the stored size is then in range too.
  const size_t loaded_bytes =
      CheckedByteSize(path + " " + Tensor(name), parsed.shape, parsed.type.loaded);
  const size_t bytes =
      loaded_bytes / DTypeSize(parsed.type.loaded) * parsed.type.stored_bytes;
  if (parsed.end - parsed.begin != bytes) {
    Fail(path, Tensor(name) + ": " + std::to_string(parsed.end - parsed.begin) +
                   " bytes, shape " + parsed.shape.ToString() + " needs " +
                   std::to_string(bytes));
  }
  return parsed;
}

// The tensor's bytes read from `file` at `data_start` + its range, 16-bit floats
// widened to float32.
Array LoadEntry(const std::string& path, const std::string& name, const Entry& entry,
                std::ifstream& file, uint64_t data_start) {
  Array array;
  array.dtype = entry.type.loaded;
  array.shape = entry.shape;
  std::vector<uint8_t> stored(entry.end - entry.begin);
  file.seekg(static_cast<std::streamoff>(data_start + entry.begin));
  if (!file.read(reinterpret_cast<char*>(stored.data()),
                 static_cast<std::streamsize>(stored.size()))) {
    Fail(path, Tensor(name) + ": read failed");
  }
  if (entry.type.stored_bytes == DTypeSize(entry.type.loaded)) {
    array.bytes = std::move(stored);
    return array;
  }
  const size_t count = stored.size() / 2;
  array.bytes.resize(count * sizeof(float));
  float* out = reinterpret_cast<float*>(array.bytes.data());
  for (size_t i = 0; i < count; ++i) {
    const uint16_t bits = static_cast<uint16_t>(stored[2 * i] | (stored[2 * i + 1] << 8));
    out[i] =
        entry.type.half ? internal::FloatFromFp16(bits) : internal::FloatFromBf16(bits);
  }
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

Safetensors Safetensors::Read(const std::string& path, const std::string& prefix) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    Fail(path, "is a directory: weights come as one .safetensors file");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) Fail(path, std::string("cannot open: ") + std::strerror(errno));
  file.seekg(0, std::ios::end);
  const uint64_t file_bytes = static_cast<uint64_t>(file.tellg());
  file.seekg(0);
  char start[8] = {};
  if (file_bytes < 8 || !file.read(start, 8)) Fail(path, "truncated: no header length");
  if (std::string(start, 6) == "\x93NUMPY") {
    Fail(path,
         "is a .npy file, not safetensors: weights come as one .safetensors file of "
         "named tensors (mha.save_safetensors(path, model.state_dict()) writes one)");
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t{static_cast<uint8_t>(start[i])} << (8 * i);
  }
  if (header_len > file_bytes - 8) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                   std::to_string(file_bytes) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  }
  std::string text(header_len, '\0');
  if (!file.read(text.data(), static_cast<std::streamsize>(header_len))) {
    Fail(path, "truncated header");
  }
  const nlohmann::json header = ParseHeader(path, text);
  const uint64_t data_bytes = file_bytes - 8 - header_len;
  // Every entry is checked before any tensor is read; only those under `prefix` are.
  std::vector<std::pair<std::string, Entry>> entries;
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
    entries.emplace_back(name, ParseEntry(path, name, entry, data_bytes));
    ranges.emplace_back(entries.back().second.begin, entries.back().second.end);
  }
  CheckRangesTileData(path, std::move(ranges), data_bytes);
  Safetensors result;
  result.path_ = path;
  for (const auto& [name, entry] : entries) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    result.tensors_.emplace(name.substr(prefix.size()),
                            LoadEntry(path, name, entry, file, 8 + header_len));
  }
  if (!prefix.empty() && result.tensors_.empty()) {
    Fail(path,
         "no tensor's name starts with the prefix '" + Printable(prefix) + "'" +
             (entries.empty() ? "" : " (one is '" + Printable(entries[0].first) + "')"));
  }
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

namespace {

// A file beside `path` that no one else has: created with O_EXCL under a name of this
// process and a counter, so a planted link or another writer's file is never opened.
int CreateTemporaryBeside(const std::string& path, std::string* temporary) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    *temporary = path + ".tmp." + std::to_string(getpid()) + "." +
                 std::to_string(counter.fetch_add(1));
    const int fd =
        open(temporary->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

bool WriteAll(int fd, const void* data, size_t bytes) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = write(fd, next, std::min<size_t>(bytes, size_t{1} << 30));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    next += written;
    bytes -= static_cast<size_t>(written);
  }
  return true;
}

// The header text, every tensor checked first: nothing is created for a refused call.
std::string WriteHeader(const std::string& path,
                        const std::vector<std::pair<std::string, TensorView>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    if (name == "__metadata__") {
      Fail(path, "'__metadata__' is the format's reserved name, not a tensor's");
    }
    if (!view.present()) Fail(path, Tensor(name) + " has no data");
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
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  return file + text;
}

}  // namespace

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, TensorView>>& tensors) {
  const std::string header = WriteHeader(path, tensors);
  std::string temporary;
  const int fd = CreateTemporaryBeside(path, &temporary);
  if (fd < 0)
    Fail(path, std::string("cannot create a file beside it: ") + strerror(errno));
  bool written = WriteAll(fd, header.data(), header.size());
  for (const auto& entry : tensors) {
    const TensorView& view = entry.second;
    written = written &&
              WriteAll(fd, view.data, CheckedByteSize(path, view.shape, DType::kFloat32));
  }
  const int write_error = errno;
  written = close(fd) == 0 && written;
  if (!written) {
    unlink(temporary.c_str());
    Fail(temporary, std::string("write failed: ") + strerror(write_error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    unlink(temporary.c_str());
    Fail(path, "cannot replace it with " + temporary + ": " + strerror(rename_error));
  }
}

}  // namespace mha::io
