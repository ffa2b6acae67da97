// mha-run's feature flags, one per line of include/mha/feature_options.h: --softcap V,
// --alibi, --qk-norm --qk-norm-eps E, ... (a switch for an on/off option).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "mha/features.hpp"

namespace mha::cli {

// A command line that cannot be run as written (exit code 2, with the usage).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A flag's value as a number, or as a non-negative integer; a UsageError naming the
// flag and the text otherwise.
double ParseNumber(const std::string& flag, const std::string& text);
// A number as float32, refused where float32 would make it 0 or infinite.
float ParseFloat(const std::string& flag, const std::string& text);
int64_t ParseCount(const std::string& flag, const std::string& text);

// Whether `flag` is a feature option's, and if so whether a value follows it.
bool IsFeatureFlag(const std::string& flag, bool& takes_value);

// The features the given flags set (flag -> its value, "" for a switch), each line
// of the table in its order, so a group's switch applies before its members' flags.
AttentionFeatures ParseFeatureFlags(const std::map<std::string, std::string>& given);

// One usage line per feature flag: the flag, its value, its doc and default.
std::string FeatureFlagsUsage();

}  // namespace mha::cli
