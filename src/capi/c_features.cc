// mha_features into AttentionFeatures, one line of mha/feature_options.h at a time:
// each C field is converted by the type of the C++ field its line names.
#include <optional>
#include <vector>

#include "src/capi/c_support.h"
#include "src/features/feature_options.h"

namespace mha::capi {
namespace {

// A C feature field into its C++ field (null: the field's group is unset, so the
// field is not read); a zero field is "not set". The values are checked where every
// face's are, by the layer or the core.
void FromC(float c, std::optional<float>* out, int64_t) {
  if (c != 0.0f) *out = c;
}
void FromC(int c, bool* out, int64_t) {
  if (out) *out = c != 0;
}
void FromC(const float* c, std::vector<float>* out, int64_t num_heads) {
  if (c && num_heads > 0 && num_heads <= (int64_t{1} << 20))
    out->assign(c, c + num_heads);
}
void FromC(int64_t c, std::optional<int64_t>* out, int64_t) {
  if (c != 0) *out = c;
}
void FromC(mha_optional_int64 c, std::optional<int64_t>* out, int64_t) {
  if (c.has_value) *out = c.value;
}
template <class Group>
void FromC(int c, std::optional<Group>* out, int64_t) {
  if (c) out->emplace();
}
void FromC(double c, double* out, int64_t) {
  if (out && c != 0.0) *out = c;
}
void FromC(mha_qk_norm_scope c, mha::QkNormScope* out, int64_t) {
  if (!out) return;
  const int scope = EnumValue(c);
  if (scope != MHA_QK_NORM_PER_HEAD && scope != MHA_QK_NORM_ACROSS_HEADS) {
    UnknownValue("features.qk_norm_scope", scope);
  }
  *out = scope == MHA_QK_NORM_PER_HEAD ? mha::QkNormScope::kPerHead
                                       : mha::QkNormScope::kAcrossHeads;
}

}  // namespace

mha::AttentionFeatures ToFeatures(const mha_features& c, int64_t num_heads) {
  mha::AttentionFeatures features;
#define MHA_FEATURE_OPTION(name, group, member, c_type, default_text, range, doc) \
  FromC(c.name, MHA_FEATURE_FIELD(group, member)::In(features), num_heads);
#include "mha/feature_options.h"
#undef MHA_FEATURE_OPTION
  return features;
}

}  // namespace mha::capi
