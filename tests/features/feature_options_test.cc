// Every line of include/mha/feature_options.h reaches the C++ field it names, the same
// from the C struct and from mha-run's flags: each option set to a value that is not
// its default, through each face, gives that value in AttentionFeatures.
// (tests/python/test_stubs.py checks the Python face, mha.pyi and docs/api.md.)
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "src/capi/c_support.h"
#include "src/features/feature_options.h"
#include "tools/mha_run/feature_flags.h"

namespace mha::testing {
namespace {

using internal::FeatureOptionInfo;

constexpr int64_t kHeads = 2;
const float kSlopes[kHeads] = {0.5f, 0.25f};

// A value that is no field's default, per C type (C faces) ...
void SetC(float& c) { c = 2.5f; }
void SetC(int& c) { c = 1; }
void SetC(const float*& c) { c = kSlopes; }
void SetC(int64_t& c) { c = 3; }
void SetC(mha_optional_int64& c) { c = {1, 3}; }
void SetC(double& c) { c = 0.25; }
void SetC(mha_qk_norm_scope& c) { c = MHA_QK_NORM_ACROSS_HEADS; }

// ... as mha-run's flag text, per C++ type ...
std::string FlagText(const std::optional<float>*) { return "2.5"; }
std::string FlagText(const bool*) { return ""; }
std::string FlagText(const std::vector<float>*) { return "0.5,0.25"; }
std::string FlagText(const std::optional<int64_t>*) { return "3"; }
template <class Group>
std::string FlagText(const std::optional<Group>*) {
  return "";
}
std::string FlagText(const double*) { return "0.25"; }
std::string FlagText(const QkNormScope*) { return "across_heads"; }

// ... and what both must give in C++.
bool IsSample(const std::optional<float>& v) { return v == 2.5f; }
bool IsSample(bool v) { return v; }
bool IsSample(const std::vector<float>& v) {
  return v == std::vector<float>{0.5f, 0.25f};
}
bool IsSample(const std::optional<int64_t>& v) { return v == 3; }
template <class Group>
bool IsSample(const std::optional<Group>& v) {
  return v.has_value();
}
bool IsSample(double v) { return v == 0.25; }
bool IsSample(QkNormScope v) { return v == QkNormScope::kAcrossHeads; }

mha_features EveryCField() {
  mha_features c{};
#define MHA_FEATURE_OPTION(name, group, member, c_type, default_text, range, doc) \
  SetC(c.name);
#include "mha/feature_options.h"
#undef MHA_FEATURE_OPTION
  return c;
}

std::map<std::string, std::string> EveryFlag() {
  std::map<std::string, std::string> flags;
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto field) {
    AttentionFeatures features;
    flags[info.flag()] = FlagText(decltype(field)::In(features));
  });
  return flags;
}

TEST(FeatureOptions, EveryOptionReachesItsFieldFromCAndFromMhaRun) {
  const AttentionFeatures from_c = capi::ToFeatures(EveryCField(), kHeads);
  const AttentionFeatures from_flags = cli::ParseFeatureFlags(EveryFlag());
  int options = 0;
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto field) {
    ++options;
    using Field = decltype(field);
    const auto* c_value = Field::In(from_c);
    const auto* flag_value = Field::In(from_flags);
    ASSERT_NE(c_value, nullptr) << info.name << ": its group is unset from C";
    ASSERT_NE(flag_value, nullptr) << info.flag() << ": its group is unset";
    EXPECT_TRUE(IsSample(*c_value))
        << "C field " << info.name << " did not reach " << info.path();
    EXPECT_TRUE(IsSample(*flag_value)) << info.flag() << " did not reach " << info.path();
  });
  EXPECT_GE(options, 14);
}

// The names a line derives: the C field, the flag and the path agree with it.
TEST(FeatureOptions, NamesFollowTheGroupAndMember) {
  internal::ForEachFeatureOption([&](const FeatureOptionInfo& info, auto) {
    const std::string group = info.group, member = info.member;
    EXPECT_EQ(info.name, group == "features" ? member : group + "_" + member);
    EXPECT_EQ(info.path(), group == "features" ? member : group + "." + member);
    EXPECT_NE(std::string(info.doc), "") << info.name;
    EXPECT_NE(std::string(info.default_text), "") << info.name;
  });
}

// A group's member given without its group is refused by mha-run and from C, naming
// both (and, from C, the value seen), never silently ignored.
TEST(FeatureOptions, AGroupMemberNeedsItsGroup) {
  try {
    cli::ParseFeatureFlags({{"--qk-norm-eps", "1e-5"}});
    ADD_FAILURE() << "no error";
  } catch (const cli::UsageError& e) {
    EXPECT_STREQ(e.what(), "--qk-norm-eps applies only with --qk-norm");
  }
  mha_features c{};
  c.qk_norm_eps = 1e-5;
  try {
    capi::ToFeatures(c, kHeads);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "mha: features.qk_norm_eps: set to 1e-05, but features.qk_norm is off "
                 "(set it too, or leave this field zero)");
  }
  c.qk_norm = 1;
  EXPECT_EQ(capi::ToFeatures(c, kHeads).qk_norm->eps, 1e-5);
}

}  // namespace
}  // namespace mha::testing
