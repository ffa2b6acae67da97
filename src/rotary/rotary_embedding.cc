// RotaryEmbedding: inverse frequencies (theta, linear and llama3 scaling, or the
// caller's) and the cos/sin table, following Hugging Face transformers'
// rope initialisation functions.
#include <cmath>

#include "mha/rotary.hpp"
#include "src/base/check.h"

namespace mha {
namespace {

using internal::Fail;

// Tables past this many floats (1 GiB for cos and sin together) are refused.
constexpr int64_t kMaxTableFloats = int64_t{1} << 28;

int64_t ResolvedRotaryDim(const RotaryConfig& config, int64_t head_dim) {
  const int64_t rotary_dim = config.rotary_dim ? config.rotary_dim : head_dim;
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    Fail("rotary.rotary_dim: must be even and in [2, head_dim ", head_dim, "], got ",
         rotary_dim);
  }
  return rotary_dim;
}

void CheckPositiveFinite(const char* name, double value) {
  if (!(std::isfinite(value) && value > 0.0)) {
    Fail("rotary.", name, ": must be finite and > 0, got ", value);
  }
}

// Llama 3.1: wavelengths longer than original/low_freq_factor are divided by factor,
// shorter than original/high_freq_factor kept, and those between interpolated. Each
// step in float32 as transformers' _compute_llama3_parameters takes it: its Python
// scalars meet float32 tensors rounded to float, and torch computes `scalar / tensor`
// as reciprocal(tensor) * scalar.
float Llama3(float inv_freq, const RopeScaling& s) {
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const float factor = static_cast<float>(s.factor);
  const float wavelen = (1.0f / inv_freq) * static_cast<float>(2.0 * M_PI);
  if (wavelen < static_cast<float>(original / s.high_freq_factor)) return inv_freq;
  if (wavelen > static_cast<float>(original / s.low_freq_factor))
    return inv_freq / factor;
  const float smooth = ((1.0f / wavelen) * static_cast<float>(original) -
                        static_cast<float>(s.low_freq_factor)) /
                       static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  return (1.0f - smooth) * inv_freq / factor + smooth * inv_freq;
}

// transformers' 1.0 / (base ** (arange(0, dim, 2).float() / dim)) in float32: the
// exponent, the power and the reciprocal each rounded to float (the power correctly
// rounded; torch's own pow may differ by an ulp, depending on its build).
float DefaultInverseFrequency(double theta, int64_t i, int64_t rotary_dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  const float base = static_cast<float>(theta);
  const float power = static_cast<float>(std::pow(static_cast<double>(base), exponent));
  return 1.0f / power;
}

void CheckScaling(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return;
  if (s.type != RopeScalingType::kLinear && s.type != RopeScalingType::kLlama3) {
    Fail("rotary.scaling.type: unknown value ", static_cast<int>(s.type));
  }
  CheckPositiveFinite("scaling.factor", s.factor);
  if (s.type != RopeScalingType::kLlama3) return;
  CheckPositiveFinite("scaling.low_freq_factor", s.low_freq_factor);
  CheckPositiveFinite("scaling.high_freq_factor", s.high_freq_factor);
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    Fail("rotary.scaling: high_freq_factor must exceed low_freq_factor, got ",
         s.high_freq_factor, " and ", s.low_freq_factor);
  }
  if (s.original_max_position_embeddings < 1) {
    Fail("rotary.scaling.original_max_position_embeddings: must be >= 1, got ",
         s.original_max_position_embeddings);
  }
}

}  // namespace

std::vector<float> RotaryInverseFrequencies(const RotaryConfig& config,
                                            int64_t head_dim) {
  const int64_t rotary_dim = ResolvedRotaryDim(config, head_dim), half = rotary_dim / 2;
  if (!config.inv_freq.empty()) {
    if (static_cast<int64_t>(config.inv_freq.size()) != half) {
      Fail("rotary.inv_freq: expected rotary_dim / 2 = ", half, " values, got ",
           config.inv_freq.size());
    }
    for (float f : config.inv_freq) {
      if (!std::isfinite(f)) Fail("rotary.inv_freq: values must be finite, got ", f);
    }
    return config.inv_freq;
  }
  CheckPositiveFinite("theta", config.theta);
  CheckScaling(config.scaling);
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    float f = DefaultInverseFrequency(config.theta, i, rotary_dim);
    if (config.scaling.type == RopeScalingType::kLinear) {
      f /= static_cast<float>(config.scaling.factor);
    }
    if (config.scaling.type == RopeScalingType::kLlama3) f = Llama3(f, config.scaling);
    if (!(std::isfinite(f) && f > 0.0f)) {
      Fail("rotary: theta ", config.theta, " with its scaling gives inv_freq[", i,
           "] = ", f, " (must be finite and > 0 in float32)");
    }
    inv_freq[i] = f;
  }
  return inv_freq;
}

RotaryEmbedding::RotaryEmbedding(const RotaryConfig& config, int64_t head_dim)
    : pairing_(config.pairing), head_dim_(head_dim) {
  if (pairing_ != RotaryPairing::kHalfSplit && pairing_ != RotaryPairing::kInterleaved) {
    Fail("rotary.pairing: must be kHalfSplit or kInterleaved, got ",
         static_cast<int>(pairing_));
  }
  if (head_dim < 1) Fail("rotary: head_dim must be >= 1, got ", head_dim);
  rotary_dim_ = ResolvedRotaryDim(config, head_dim);
  CheckPositiveFinite("attention_factor", config.attention_factor);
  if (!std::isfinite(static_cast<float>(config.attention_factor))) {
    Fail(
        "rotary.attention_factor: must be finite as a float (the table's cos and sin "
        "are float), got ",
        config.attention_factor);
  }
  if (config.max_positions < 1 || config.max_positions > kMaxTableFloats / rotary_dim_) {
    Fail("rotary.max_positions: must be in [1, ", kMaxTableFloats / rotary_dim_,
         "] for rotary_dim ", rotary_dim_, ", got ", config.max_positions);
  }
  max_positions_ = config.max_positions;
  attention_factor_ = config.attention_factor;
  inv_freq_ = RotaryInverseFrequencies(config, head_dim);
  cos_.resize(max_positions_ * half());
  sin_.resize(max_positions_ * half());
  for (int64_t position = 0; position < max_positions_; ++position) {
    for (int64_t i = 0; i < half(); ++i) {
      const double angle = static_cast<double>(position) * inv_freq_[i];
      cos_[position * half() + i] =
          static_cast<float>(std::cos(angle) * config.attention_factor);
      sin_[position * half() + i] =
          static_cast<float>(std::sin(angle) * config.attention_factor);
    }
  }
}

}  // namespace mha
