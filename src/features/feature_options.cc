// The names feature_options.h derives from a line of the table.
#include "src/features/feature_options.h"

#include <algorithm>

namespace mha::internal {

std::string FlagFor(const std::string& name) {
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string FeatureOptionInfo::flag() const { return FlagFor(name); }

const char* QkNormScopeName(QkNormScope scope) {
  return scope == QkNormScope::kPerHead ? "per_head" : "across_heads";
}

std::optional<QkNormScope> QkNormScopeNamed(const std::string& name) {
  for (QkNormScope scope : {QkNormScope::kPerHead, QkNormScope::kAcrossHeads}) {
    if (name == QkNormScopeName(scope)) return scope;
  }
  return std::nullopt;
}

}  // namespace mha::internal
