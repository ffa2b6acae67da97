// Values per token in groups of channels (value_groups.h): scalar, once per written
// token, far from the kernel's loop.
#include "src/kv/value_groups.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/kv/int4_codes.h"

namespace mha::internal {

void QuantizeValueGroups(const KvPages& pages, int64_t position, const float* value,
                         int64_t value_head_dim) {
  const int64_t page = position / pages.page_size, slot = position % pages.page_size;
  const size_t page_size = static_cast<size_t>(pages.page_size);
  uint8_t* codes = pages.ValuePage(page);
  float* scales = ValueGroupScales(pages, page);
  float* mins = ValueGroupMins(pages, page);
  const bool finite = std::all_of(value, value + value_head_dim,
                                  [](float x) { return std::isfinite(x); });
  ValueTokenScales(pages, page)[slot] =
      finite ? 1.0f : std::numeric_limits<float>::quiet_NaN();
  const int64_t group = static_cast<int64_t>(kValueGroup);
  const int64_t padded =
      static_cast<int64_t>(RoundUp(static_cast<size_t>(value_head_dim), kPanelWidth));
  for (int64_t g = 0; g < ValueGroups(pages.padded_value_head_dim); ++g) {
    const int64_t first = g * group, end = std::min(value_head_dim, first + group);
    ZeroPointRange range;
    if (finite && first < end) {
      const auto [low, high] = std::minmax_element(value + first, value + end);
      range = ZeroPointRange(*low, *high);
    }
    scales[g * pages.page_size + slot] = range.scale;
    mins[g * pages.page_size + slot] = range.min;
    for (int64_t c = first; c < std::min(padded, first + group); ++c) {
      const bool coded = finite && c < end;
      SetInt4(codes, static_cast<size_t>(slot), static_cast<size_t>(c), page_size,
              coded ? range.Code(value[c]) : uint8_t{0});
    }
  }
}

}  // namespace mha::internal
