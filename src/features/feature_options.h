// The lines of include/mha/feature_options.h for C++: each option's field in
// AttentionFeatures with its name, default, range and doc, for the faces made from the
// table (the C conversion, the Python keywords, mha-run's flags) and the tests that
// check the faces written by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mha/features.hpp"

namespace mha::internal {

struct FeatureOptionInfo {
  const char* name;    // the C field; mha-run's flag is --name with '_' as '-'
  const char* group;   // "features", or the optional group holding the member
  const char* member;  // the C++ and Python field
  const char* default_text;
  const char* range;
  const char* doc;

  // "softcap", "qk_norm.eps": as C++ and Python spell it from AttentionFeatures.
  std::string path() const {
    return std::string(group) == "features" ? member : std::string(group) + "." + member;
  }
  std::string flag() const;  // "--qk-norm-eps"
};

// A member of AttentionFeatures itself.
template <auto Member>
struct FeatureField {
  template <class Features>
  static auto* In(Features& features) {
    return &(features.*Member);
  }
};

// A member of an optional group (QkNorm, AttentionTemperature): null while the group
// is unset, so a face sets the group's own line first.
template <auto Group, auto Member>
struct GroupField {
  template <class Features>
  static auto* In(Features& features) {
    auto& group = features.*Group;
    return group ? &((*group).*Member) : nullptr;
  }
};

#define MHA_FEATURE_FIELD_features(member) \
  ::mha::internal::FeatureField<&::mha::AttentionFeatures::member>
#define MHA_FEATURE_FIELD_qk_norm(member) \
  ::mha::internal::GroupField<&::mha::AttentionFeatures::qk_norm, &::mha::QkNorm::member>
#define MHA_FEATURE_FIELD_temperature_tuning(member)                         \
  ::mha::internal::GroupField<&::mha::AttentionFeatures::temperature_tuning, \
                              &::mha::AttentionTemperature::member>
// The field type of a line: MHA_FEATURE_FIELD(qk_norm, eps)::In(features).
#define MHA_FEATURE_FIELD(group, member) MHA_FEATURE_FIELD_##group(member)

// Calls visit(info, Field{}) for every option, in the table's order (a group's line
// before its members').
template <class Visit>
void ForEachFeatureOption(Visit&& visit) {
#define MHA_FEATURE_OPTION(name, group, member, c_type, default_text, range, doc) \
  visit(FeatureOptionInfo{#name, #group, #member, default_text, range, doc},      \
        MHA_FEATURE_FIELD(group, member){});
#include "mha/feature_options.h"
#undef MHA_FEATURE_OPTION
}

// mha-run's flag for a name: "qk_norm_eps" -> "--qk-norm-eps".
std::string FlagFor(const std::string& name);

// QkNormScope's names in every face: "per_head", "across_heads"; nullopt otherwise.
const char* QkNormScopeName(QkNormScope scope);
std::optional<QkNormScope> QkNormScopeNamed(const std::string& name);

}  // namespace mha::internal
