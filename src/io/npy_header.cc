// ParseNpyHeader: a recursive-descent reader of the one Python literal an .npy header
// holds, {'key': value, ...}, with values a string, True/False or a tuple of ints.
#include "src/io/npy_header.h"

#include <cctype>
#include <map>
#include <vector>

namespace mha::io {
namespace {

struct Value {
  enum Kind { kString, kBool, kTuple } kind = kString;
  std::string text;
  bool flag = false;
  std::vector<int64_t> ints;
};

class Parser {
 public:
  Parser(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  // The dict, with later duplicates replacing earlier ones.
  std::map<std::string, Value> Dict() {
    Expect('{');
    std::map<std::string, Value> entries;
    while (!Accept('}')) {
      std::string key = String();
      Expect(':');
      entries[key] = ValueLiteral();
      if (!Accept(',')) {
        Expect('}');
        break;
      }
    }
    SkipSpace();
    if (at_ != text_.size()) Fail("unexpected text after the dict");
    return entries;
  }

  [[noreturn]] void Fail(const std::string& what) const {
    throw FileError(path_ + ": npy header: " + what + " at byte " + std::to_string(at_) +
                    " of " + Printable(text_.substr(0, 80)));
  }

 private:
  void SkipSpace() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t')) {
      ++at_;
    }
  }
  bool Accept(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!Accept(c)) Fail(std::string("expected '") + c + "'");
  }

  std::string String() {
    SkipSpace();
    const char quote = at_ < text_.size() ? text_[at_] : '\0';
    if (quote != '\'' && quote != '"') Fail("expected a quoted string");
    const size_t end = text_.find(quote, at_ + 1);
    if (end == std::string::npos) Fail("unterminated string");
    std::string value = text_.substr(at_ + 1, end - at_ - 1);
    if (value.find('\\') != std::string::npos) Fail("escapes in strings are not read");
    at_ = end + 1;
    return value;
  }

  bool Word(const char* word) {
    SkipSpace();
    const std::string w = word;
    if (text_.compare(at_, w.size(), w) != 0) return false;
    const size_t next = at_ + w.size();
    // 'Truex' is a name, not True.
    if (next < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[next])) || text_[next] == '_')) {
      return false;
    }
    at_ = next;
    return true;
  }

  int64_t Int() {
    SkipSpace();
    const size_t start = at_;
    int64_t value = 0;
    while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, text_[at_] - '0', &value)) {
        Fail("dimension too large");
      }
      ++at_;
    }
    if (at_ == start) Fail("expected a non-negative integer");
    if (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) ||
                               text_[at_] == '.' || text_[at_] == '_')) {
      Fail("expected a non-negative integer");
    }
    return value;
  }

  Value ValueLiteral() {
    Value value;
    SkipSpace();
    if (Word("True")) return Value{Value::kBool, "", true, {}};
    if (Word("False")) return Value{Value::kBool, "", false, {}};
    if (Accept('(')) {
      value.kind = Value::kTuple;
      bool trailing_comma = false;
      while (!Accept(')')) {
        value.ints.push_back(Int());
        trailing_comma = Accept(',');
        if (!trailing_comma) {
          Expect(')');
          break;
        }
      }
      // (5) is the int 5 in Python, not a tuple.
      if (value.ints.size() == 1 && !trailing_comma) Fail("'shape' (n) is not a tuple");
      return value;
    }
    value.kind = Value::kString;
    value.text = String();
    return value;
  }

  const std::string& path_;
  const std::string& text_;
  size_t at_ = 0;
};

DType DTypeOf(const std::string& path, const std::string& descr) {
  if (descr == "<f4") return DType::kFloat32;
  if (descr == "|b1") return DType::kBool;
  if (descr == "<i4") return DType::kInt32;
  if (descr == "<i8") return DType::kInt64;
  throw FileError(path + ": unsupported dtype '" + Printable(descr) +
                  "' (want <f4, |b1, <i4 or <i8)");
}

}  // namespace

NpyHeader ParseNpyHeader(const std::string& path, const std::string& text) {
  Parser parser(path, text);
  const std::map<std::string, Value> entries = parser.Dict();
  for (const auto& [key, value] : entries) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      parser.Fail("unexpected key '" + Printable(key) + "'");
    }
  }
  const auto get = [&](const char* key, Value::Kind kind) -> const Value& {
    const auto found = entries.find(key);
    if (found == entries.end()) parser.Fail(std::string("no '") + key + "'");
    if (found->second.kind != kind)
      parser.Fail(std::string("'") + key + "' has the wrong type");
    return found->second;
  };
  NpyHeader header;
  header.dtype = DTypeOf(path, get("descr", Value::kString).text);
  header.fortran_order = get("fortran_order", Value::kBool).flag;
  const std::vector<int64_t>& dims = get("shape", Value::kTuple).ints;
  if (dims.size() > static_cast<size_t>(Shape::kMaxRank)) {
    throw FileError(path + ": rank " + std::to_string(dims.size()) + " exceeds 4");
  }
  header.shape = Shape(dims.data(), dims.size());
  return header;
}

}  // namespace mha::io
