// The feature flags, made from the option table: a flag's value is parsed by the type
// of the C++ field its line names.
#include "tools/mha_run/feature_flags.h"

#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "src/features/feature_options.h"

namespace mha::cli {
namespace {

using internal::FeatureOptionInfo;

template <class T>
struct IsGroup : std::false_type {};
template <class G>
struct IsGroup<std::optional<G>> : std::is_class<G> {};

// The C++ field a line's flag sets.
template <class Field>
using FieldType =
    std::remove_pointer_t<decltype(Field::In(std::declval<AttentionFeatures&>()))>;

template <class T>
constexpr bool kIsSwitch = std::is_same_v<T, bool> || IsGroup<T>::value;

void Parse(const std::string& flag, const std::string& text, std::optional<float>& out) {
  out = ParseFloat(flag, text);
}
void Parse(const std::string&, const std::string&, bool& out) { out = true; }
void Parse(const std::string& flag, const std::string& text, std::vector<float>& out) {
  out.clear();
  for (size_t begin = 0; begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    out.push_back(ParseFloat(flag, text.substr(begin, comma - begin)));
    begin = comma + 1;
  }
}
void Parse(const std::string& flag, const std::string& text,
           std::optional<int64_t>& out) {
  out = ParseCount(flag, text);
}
template <class Group>
void Parse(const std::string&, const std::string&, std::optional<Group>& out) {
  out.emplace();
}
void Parse(const std::string& flag, const std::string& text, double& out) {
  out = ParseNumber(flag, text);
}
void Parse(const std::string& flag, const std::string& text, QkNormScope& out) {
  const std::optional<QkNormScope> scope = internal::QkNormScopeNamed(text);
  if (!scope) {
    throw UsageError(flag + ": expected one of per_head, across_heads, got '" + text +
                     "'");
  }
  out = *scope;
}

template <class T>
const char* ValueName() {
  if constexpr (std::is_same_v<T, std::vector<float>>) return " V,V,...";
  if constexpr (std::is_same_v<T, QkNormScope>) return " per_head|across_heads";
  if constexpr (std::is_same_v<T, std::optional<int64_t>>) return " N";
  return " V";
}

}  // namespace

double ParseNumber(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw UsageError(flag + ": expected a number, got '" + text + "'");
  }
  return value;
}

float ParseFloat(const std::string& flag, const std::string& text) {
  const double value = ParseNumber(flag, text);
  const float narrowed = static_cast<float>(value);
  if ((value != 0.0 && narrowed == 0.0f) ||
      (std::isfinite(value) && std::isinf(narrowed))) {
    throw UsageError(flag + ": '" + text + "' is outside float32's range (" +
                     (narrowed == 0.0f ? "it would be 0" : "it would be infinite") + ")");
  }
  return narrowed;
}

int64_t ParseCount(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || value < 0) {
    throw UsageError(flag + ": expected a non-negative integer, got '" + text + "'");
  }
  return value;
}

bool IsFeatureFlag(const std::string& flag, bool& takes_value) {
  bool found = false;
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto field) {
    if (info.flag() != flag) return;
    found = true;
    takes_value = !kIsSwitch<FieldType<decltype(field)>>;
  });
  return found;
}

AttentionFeatures ParseFeatureFlags(const std::map<std::string, std::string>& given) {
  AttentionFeatures features;
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto field) {
    const auto it = given.find(info.flag());
    if (it == given.end()) return;
    auto* out = decltype(field)::In(features);
    if (!out) {
      throw UsageError(it->first + " applies only with " + internal::FlagFor(info.group));
    }
    Parse(it->first, it->second, *out);
  });
  return features;
}

std::string FeatureFlagsUsage() {
  std::string usage;
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto field) {
    using T = FieldType<decltype(field)>;
    usage += "  " + info.flag() + (kIsSwitch<T> ? "" : ValueName<T>()) + ": " + info.doc +
             " (default " + info.default_text + ")\n";
  });
  return usage;
}

}  // namespace mha::cli
