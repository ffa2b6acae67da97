// Checks of the attention features, and the slopes and sinks they resolve to.
#include "src/features/logit_features.h"

#include <cmath>
#include <limits>

#include "src/base/check.h"

namespace mha::internal {
namespace {

// The largest factor a feature may multiply a logit's term by (temperature, ALiBi
// slope), leaving float32 headroom of 2^63 for what it multiplies.
constexpr double kMaxLogitFactor = 0x1p64;

}  // namespace

void ValidateFeatures(const AttentionFeatures& features, int64_t num_heads) {
  if (features.softcap && !(std::isfinite(*features.softcap) && *features.softcap > 0)) {
    Fail("features.softcap: must be finite and > 0, got ", *features.softcap);
  }
  if (features.sliding_window && *features.sliding_window < 1) {
    Fail("features.sliding_window: must be >= 1, got ", *features.sliding_window);
  }
  if (features.sliding_window_right && *features.sliding_window_right < 0) {
    Fail("features.sliding_window_right: must be >= 0, got ",
         *features.sliding_window_right);
  }
  if (features.attention_chunk_size && *features.attention_chunk_size < 1) {
    Fail("features.attention_chunk_size: must be >= 1, got ",
         *features.attention_chunk_size);
  }
  if (features.temperature_tuning) {
    // The kernel computes in float32: (p + 1) / floor_scale below FLT_MAX for any
    // int64 p, so its log is below 89; attn_scale times that log at most 2^64
    // (kMaxLogitFactor), so a scaled query's logits stay finite wherever the
    // unscaled ones are below 2^63 (a temperature near FLT_MAX made them infinite).
    const AttentionTemperature& t = *features.temperature_tuning;
    constexpr double kFloatMax = std::numeric_limits<float>::max();
    const double min_floor_scale = 0x1p63 / kFloatMax,
                 max_attn_scale = kMaxLogitFactor / 89;
    if (!(t.floor_scale >= min_floor_scale && t.floor_scale <= kFloatMax)) {
      Fail("features.temperature_tuning.floor_scale: must be in [", min_floor_scale, ", ",
           kFloatMax, "] (a finite temperature in float32), got ", t.floor_scale);
    }
    if (!(std::fabs(t.attn_scale) <= max_attn_scale)) {
      Fail("features.temperature_tuning.attn_scale: must be in [-", max_attn_scale, ", ",
           max_attn_scale, "] (2^64 / 89: finite logits in float32), got ", t.attn_scale);
    }
  }
  if (features.qk_norm &&
      !(std::isfinite(features.qk_norm->eps) && features.qk_norm->eps >= 0 &&
        features.qk_norm->eps <= std::numeric_limits<float>::max())) {
    Fail("features.qk_norm.eps: must be finite and >= 0, got ", features.qk_norm->eps);
  }
  if (!features.alibi_slopes.empty()) {
    if (!features.alibi) Fail("features.alibi_slopes: given while features.alibi is off");
    if (static_cast<int64_t>(features.alibi_slopes.size()) != num_heads) {
      Fail("features.alibi_slopes: expected num_heads = ", num_heads, " values, got ",
           features.alibi_slopes.size());
    }
    // slope x (j - i) for any int64 distance at most 2^127: finite, and a logit
    // plus it too (an infinite bias made NaN of the softmax).
    for (float slope : features.alibi_slopes) {
      if (!(std::fabs(slope) <= kMaxLogitFactor)) {
        Fail(
            "features.alibi_slopes: each must be in [-2^64, 2^64] (finite logits at "
            "any distance), got ",
            slope);
      }
    }
  }
}

LogitFeatures::LogitFeatures(const AttentionFeatures& features,
                             const TensorView& sinks_view, int64_t num_heads,
                             const char* sinks_name) {
  Set(features, sinks_view, num_heads, sinks_name);
}

void LogitFeatures::Set(const AttentionFeatures& features, const TensorView& sinks_view,
                        int64_t num_heads, const char* sinks_name) {
  softcap = features.softcap.value_or(0.0f);
  temperature_floor_scale = temperature_attn_scale = 0.0f;
  if (features.temperature_tuning) {
    temperature_floor_scale =
        static_cast<float>(features.temperature_tuning->floor_scale);
    temperature_attn_scale = static_cast<float>(features.temperature_tuning->attn_scale);
  }
  alibi_slopes.clear();
  sinks.clear();
  if (features.alibi) {
    if (features.alibi_slopes.empty()) {
      AlibiSlopesInto(num_heads, alibi_slopes);
    } else {
      alibi_slopes.assign(features.alibi_slopes.begin(), features.alibi_slopes.end());
    }
  }
  if (!sinks_view.present()) return;
  CheckTensor(sinks_name, sinks_view, DType::kFloat32, Shape{num_heads});
  sinks.assign(sinks_view.floats(), sinks_view.floats() + num_heads);
  for (int64_t h = 0; h < num_heads; ++h) {
    if (!std::isfinite(sinks[h]))
      Fail(sinks_name, "[", h, "]: must be finite, got ", sinks[h]);
  }
}

}  // namespace mha::internal
