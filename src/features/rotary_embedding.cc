// RotaryEmbedding: inverse frequencies (theta, linear, llama3, dynamic NTK and
// LongRoPE scaling, or the caller's) and the cos/sin table, following Hugging Face
// transformers' rope initialisation functions and dynamic_rope_update.
#include <algorithm>
#include <cmath>
#include <limits>

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

// transformers' base ** (arange(0, dim, 2).float() / dim) in float32: the exponent
// and the power each rounded to float (the power correctly rounded; torch's own pow
// may differ by an ulp, depending on its build).
float RopePower(float base, int64_t i, int64_t rotary_dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  return static_cast<float>(std::pow(static_cast<double>(base), exponent));
}

float DefaultInverseFrequency(double theta, int64_t i, int64_t rotary_dim) {
  return 1.0f / RopePower(static_cast<float>(theta), i, rotary_dim);
}

// _compute_dynamic_ntk_parameters for a sequence `length` tokens long, in float32 as
// dynamic_rope_update's tensor seq_len makes it: theta * (factor * L / original -
// (factor - 1)) ** (r / (r - 2)), L at least original, each step rounded to float.
std::vector<float> NtkInverseFrequencies(double theta, const RopeScaling& s,
                                         int64_t length, int64_t rotary_dim) {
  const int64_t original = s.original_max_position_embeddings;
  const float factor = static_cast<float>(s.factor);
  const float scaled = factor * static_cast<float>(std::max(length, original)) /
                           static_cast<float>(original) -
                       static_cast<float>(s.factor - 1.0);
  // The exponent stays a double: torch's pow takes the Python scalar unrounded.
  const double exponent =
      static_cast<double>(rotary_dim) / static_cast<double>(rotary_dim - 2);
  const float base = static_cast<float>(theta) *
                     static_cast<float>(std::pow(static_cast<double>(scaled), exponent));
  std::vector<float> inv_freq(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] = 1.0f / RopePower(base, i, rotary_dim);
  }
  return inv_freq;
}

// _compute_longrope_parameters: 1.0 / (ext_factors * base ** (arange / dim)).
std::vector<float> LongRopeInverseFrequencies(double theta,
                                              const std::vector<float>& factors,
                                              int64_t rotary_dim) {
  std::vector<float> inv_freq(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    inv_freq[i] =
        1.0f / (factors[i] * RopePower(static_cast<float>(theta), i, rotary_dim));
  }
  return inv_freq;
}

// LongRoPE's cos/sin scale: the given one, or sqrt(1 + ln(factor) / ln(original)).
double LongRopeAttentionFactor(const RopeScaling& s) {
  if (s.attention_factor > 0.0) return s.attention_factor;
  if (s.factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(s.factor) / std::log(static_cast<double>(
                                                  s.original_max_position_embeddings)));
}

void CheckLongRopeFactors(const char* name, const std::vector<float>& factors,
                          int64_t half) {
  if (static_cast<int64_t>(factors.size()) != half) {
    Fail("rotary.scaling.", name, ": expected rotary_dim / 2 = ", half, " values, got ",
         factors.size());
  }
  for (const float f : factors) {
    if (!(std::isfinite(f) && f > 0.0f)) {
      Fail("rotary.scaling.", name, ": values must be finite and > 0, got ", f);
    }
  }
}

void CheckScaling(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return;
  if (s.type != RopeScalingType::kLinear && s.type != RopeScalingType::kLlama3 &&
      s.type != RopeScalingType::kDynamic && s.type != RopeScalingType::kLongRope) {
    Fail("rotary.scaling.type: unknown value ", static_cast<int>(s.type));
  }
  CheckPositiveFinite("scaling.factor", s.factor);
  if (s.type != RopeScalingType::kLinear && s.original_max_position_embeddings < 1) {
    Fail("rotary.scaling.original_max_position_embeddings: must be >= 1, got ",
         s.original_max_position_embeddings);
  }
  if (s.type == RopeScalingType::kLongRope &&
      !(std::isfinite(s.attention_factor) && s.attention_factor >= 0.0)) {
    Fail("rotary.scaling.attention_factor: must be finite and >= 0, got ",
         s.attention_factor);
  }
  // LongRoPE's derived attention factor divides by ln(original): transformers fails
  // there too (ZeroDivisionError).
  if (s.type == RopeScalingType::kLongRope && s.attention_factor == 0.0 &&
      s.factor > 1.0 && s.original_max_position_embeddings < 2) {
    Fail(
        "rotary.scaling.original_max_position_embeddings: must be >= 2 for LongRoPE "
        "with factor ",
        s.factor,
        " > 1 and no attention_factor (its scale divides by "
        "ln of it), got ",
        s.original_max_position_embeddings);
  }
  if (s.type != RopeScalingType::kLlama3) return;
  CheckPositiveFinite("scaling.low_freq_factor", s.low_freq_factor);
  CheckPositiveFinite("scaling.high_freq_factor", s.high_freq_factor);
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    Fail("rotary.scaling: high_freq_factor must exceed low_freq_factor, got ",
         s.high_freq_factor, " and ", s.low_freq_factor);
  }
}

void CheckFrequencies(const std::vector<float>& inv_freq, double theta) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (!(std::isfinite(inv_freq[i]) && inv_freq[i] > 0.0f)) {
      Fail("rotary: theta ", theta, " with its scaling gives inv_freq[", i,
           "] = ", inv_freq[i], " (must be finite and > 0 in float32)");
    }
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
  if (config.scaling.type == RopeScalingType::kLongRope) {  // the short factors
    CheckLongRopeFactors("short_factor", config.scaling.short_factor, half);
    CheckLongRopeFactors("long_factor", config.scaling.long_factor, half);
    const std::vector<float> inv_freq =
        LongRopeInverseFrequencies(config.theta, config.scaling.short_factor, rotary_dim);
    CheckFrequencies(inv_freq, config.theta);
    return inv_freq;
  }
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    float f = DefaultInverseFrequency(config.theta, i, rotary_dim);
    if (config.scaling.type == RopeScalingType::kLinear) {
      f /= static_cast<float>(config.scaling.factor);
    }
    if (config.scaling.type == RopeScalingType::kLlama3) f = Llama3(f, config.scaling);
    inv_freq[i] = f;
  }
  CheckFrequencies(inv_freq, config.theta);
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
  theta_ = config.theta;
  inv_freq_ = RotaryInverseFrequencies(config, head_dim);
  // The caller's inv_freq replaces theta and scaling: such a table is never dynamic.
  if (config.inv_freq.empty()) scaling_ = config.scaling;
  attention_factor_ = config.attention_factor;
  int64_t rows = max_positions_;
  if (scaling_.type == RopeScalingType::kLongRope) {
    attention_factor_ *= LongRopeAttentionFactor(scaling_);
    if (!(attention_factor_ <= std::numeric_limits<float>::max())) {
      Fail("rotary.attention_factor: ", config.attention_factor,
           " times LongRoPE's scaling attention factor ",
           LongRopeAttentionFactor(scaling_),
           " must be finite as a float (the table's cos and sin are float), got ",
           attention_factor_);
    }
    long_inv_freq_ =
        LongRopeInverseFrequencies(theta_, scaling_.long_factor, rotary_dim_);
    CheckFrequencies(long_inv_freq_, theta_);
  }
  if (dynamic()) {
    CheckFrequencies(InverseFrequenciesAt(max_positions_), theta_);
    rows = std::min(rows, scaling_.original_max_position_embeddings);
  }
  cos_.resize(rows * half());
  sin_.resize(rows * half());
  for (int64_t position = 0; position < rows; ++position) {
    FillRow(position, position, inv_freq_);
  }
}

void RotaryEmbedding::FillRow(int64_t row, int64_t position,
                              const std::vector<float>& inv_freq) {
  for (int64_t i = 0; i < half(); ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    cos_[row * half() + i] = static_cast<float>(std::cos(angle) * attention_factor_);
    sin_[row * half() + i] = static_cast<float>(std::sin(angle) * attention_factor_);
  }
}

std::vector<float> RotaryEmbedding::InverseFrequenciesAt(int64_t length) const {
  if (!dynamic() || length <= scaling_.original_max_position_embeddings) {
    return inv_freq_;
  }
  if (scaling_.type == RopeScalingType::kLongRope) return long_inv_freq_;
  return NtkInverseFrequencies(theta_, scaling_, length, rotary_dim_);
}

void RotaryEmbedding::CallTable(const int64_t* positions, const int64_t* lengths,
                                int64_t rows,
                                std::optional<RotaryEmbedding>& call) const {
  if (!call) call.emplace(*this);
  RotaryEmbedding& table = *call;  // perhaps made by another table: all set again
  table.pairing_ = pairing_;
  table.head_dim_ = head_dim_;
  table.rotary_dim_ = rotary_dim_;
  table.attention_factor_ = attention_factor_;
  table.theta_ = theta_;
  table.scaling_ = RopeScaling{};  // a call's rows are final: not dynamic
  table.max_positions_ = rows;
  table.cos_.resize(rows * half());
  table.sin_.resize(rows * half());
  const int64_t own_rows = static_cast<int64_t>(cos_.size()) / half();
  int64_t frequencies_length = -1;  // the length table.inv_freq_ is for
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = positions[r], length = lengths[r];
    if (length <= scaling_.original_max_position_embeddings && position < own_rows) {
      std::copy_n(Cos(position), half(), table.cos_.begin() + r * half());
      std::copy_n(Sin(position), half(), table.sin_.begin() + r * half());
      continue;
    }
    if (length != frequencies_length) {
      table.inv_freq_ = InverseFrequenciesAt(length);
      frequencies_length = length;
    }
    table.FillRow(r, position, table.inv_freq_);
  }
}

}  // namespace mha
