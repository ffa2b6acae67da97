// mha_features into AttentionFeatures, one line of mha/feature_options.h at a time:
// each C field is converted by the type of the C++ field its line names.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "src/capi/c_support.h"
#include "src/features/feature_options.h"

namespace mha::capi {
namespace {

// Whether a C feature field is set: a zero field is "not set" (the default). Every
// field is taken by reference: an enum is read as bytes (EnumValue), never loaded.
bool IsSet(float c) { return c != 0.0f; }
bool IsSet(int c) { return c != 0; }
bool IsSet(const float* c) { return c != nullptr; }
bool IsSet(int64_t c) { return c != 0; }
bool IsSet(const mha_optional_int64& c) { return c.has_value != 0; }
bool IsSet(double c) { return c != 0.0; }
bool IsSet(const mha_qk_norm_scope& c) { return EnumValue(c) != 0; }

// A set field's value, for messages.
std::string Shown(double c) {
  std::ostringstream text;
  text << c;
  return text.str();
}
std::string Shown(const float*) { return "an array"; }
std::string Shown(int64_t c) { return std::to_string(c); }
std::string Shown(int c) { return std::to_string(c); }
std::string Shown(const mha_optional_int64& c) { return std::to_string(c.value); }
std::string Shown(const mha_qk_norm_scope& c) { return std::to_string(EnumValue(c)); }

// A set C feature field into its C++ field. The values are checked where every
// face's are, by the layer or the core.
void FromC(float c, std::optional<float>* out, int64_t) { *out = c; }
void FromC(int c, bool* out, int64_t) { *out = c != 0; }
void FromC(const float* c, std::vector<float>* out, int64_t num_heads) {
  if (num_heads > 0 && num_heads <= (int64_t{1} << 20)) out->assign(c, c + num_heads);
}
void FromC(int64_t c, std::optional<int64_t>* out, int64_t) { *out = c; }
void FromC(const mha_optional_int64& c, std::optional<int64_t>* out, int64_t) {
  *out = c.value;
}
template <class Group>
void FromC(int, std::optional<Group>* out, int64_t) {
  out->emplace();
}
void FromC(double c, double* out, int64_t) { *out = c; }
void FromC(const mha_qk_norm_scope& c, mha::QkNormScope* out, int64_t) {
  const int scope = EnumValue(c);
  if (scope != MHA_QK_NORM_PER_HEAD && scope != MHA_QK_NORM_ACROSS_HEADS) {
    UnknownValue("features.qk_norm_scope", scope);
  }
  *out = scope == MHA_QK_NORM_PER_HEAD ? mha::QkNormScope::kPerHead
                                       : mha::QkNormScope::kAcrossHeads;
}

// One line's field: `out` is null while its group is off, and a member set without
// its group is refused (mha-run refuses the same flags), not ignored.
template <class C, class Out>
void Convert(const C& c, Out* out, int64_t num_heads, const char* name,
             const char* group) {
  if (!IsSet(c)) return;
  if (!out) {
    throw mha::Error(std::string("mha: features.") + name + ": set to " + Shown(c) +
                     ", but features." + group +
                     " is off (set it too, or leave this field zero)");
  }
  FromC(c, out, num_heads);
}

}  // namespace

mha::AttentionFeatures ToFeatures(const mha_features& c, int64_t num_heads) {
  mha::AttentionFeatures features;
#define MHA_FEATURE_OPTION(name, group, member, c_type, default_text, range, doc)   \
  Convert(c.name, MHA_FEATURE_FIELD(group, member)::In(features), num_heads, #name, \
          #group);
#include "mha/feature_options.h"
#undef MHA_FEATURE_OPTION
  return features;
}

}  // namespace mha::capi
