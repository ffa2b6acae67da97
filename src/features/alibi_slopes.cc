// AlibiSlopes: BLOOM's build_alibi_tensor slopes, for any number of heads.
#include <cmath>

#include "mha/features.hpp"
#include "src/base/check.h"
#include "src/features/logit_features.h"

namespace mha {

namespace internal {

void AlibiSlopesInto(int64_t num_heads, std::vector<float>& slopes) {
  if (num_heads < 1 || num_heads > (int64_t{1} << 20)) {
    Fail("AlibiSlopes: num_heads must be in [1, 2^20], got ", num_heads);
  }
  const int64_t power = int64_t{1} << static_cast<int>(std::floor(std::log2(num_heads)));
  // base^i with base = 2^(-8 / power), i = 1..power.
  const double base = std::pow(2.0, -8.0 / static_cast<double>(power));
  slopes.clear();
  for (int64_t i = 1; i <= power; ++i) slopes.push_back(float(std::pow(base, i)));
  // The rest: odd powers of the sequence for 2 * power heads.
  const double extra_base = std::pow(2.0, -4.0 / static_cast<double>(power));
  for (int64_t i = 1; static_cast<int64_t>(slopes.size()) < num_heads; i += 2) {
    slopes.push_back(static_cast<float>(std::pow(extra_base, i)));
  }
}

}  // namespace internal

std::vector<float> AlibiSlopes(int64_t num_heads) {
  std::vector<float> slopes;
  internal::AlibiSlopesInto(num_heads, slopes);
  return slopes;
}

}  // namespace mha
