// Rotary position embeddings (RoPE): configuration and the cos/sin table built once
// from it. Used by the layer (AttentionConfig::rotary) and the attention-core API.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mha {

// How a head's dimensions pair up for rotation.
enum class RotaryPairing {
  kNone,         // no rotary embedding
  kHalfSplit,    // (x[i], x[i + rotary_dim/2]): GPT-NeoX, Hugging Face Llama/Mistral/Qwen
  kInterleaved,  // (x[2i], x[2i+1]): GPT-J, Meta's original Llama code
};

// Frequency scaling for contexts longer than the model was trained on.
enum class RopeScalingType {
  kNone,
  kLinear,  // inv_freq / factor (position interpolation)
  kLlama3,  // Llama 3.1: low frequencies / factor, high kept, smooth in between
  // By the length L of the sequence a token's call sees (transformers'
  // dynamic_rope_update, L = the sequence's largest position + 1), so the frequencies
  // change as a sequence grows; a cache keeps each key as it was rotated:
  kDynamic,   // dynamic NTK: past original_max_position_embeddings, theta becomes
              // theta * (factor * L / original - (factor - 1))^(r / (r - 2))
  kLongRope,  // LongRoPE (Phi-3): inv_freq / short_factor while L <= original,
              // / long_factor past it; cos and sin times its attention factor
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, dynamic, longrope
  std::vector<float> short_factor, long_factor;     // longrope: [rotary_dim / 2] each
  // longrope's cos/sin scale; 0: sqrt(1 + ln(factor) / ln(original)) for factor > 1
  // (else 1), factor being max_position_embeddings / original as Phi-3 sets it.
  double attention_factor = 0.0;
};

struct RotaryConfig {
  RotaryPairing pairing = RotaryPairing::kNone;
  int64_t rotary_dim = 0;  // dimensions rotated (even, <= head_dim); 0: head_dim
  double theta = 10000.0;  // rope_theta: inv_freq[i] = theta^(-2i / rotary_dim)
  RopeScaling scaling;
  // [rotary_dim / 2] inverse frequencies supplied by the caller (YaRN, NTK, LongRoPE):
  // replaces theta and scaling when not empty.
  std::vector<float> inv_freq;
  // Multiplies cos and sin (Hugging Face's attention_scaling, e.g. YaRN's mscale).
  double attention_factor = 1.0;
  // Positions must lie in [0, max_positions): the table's rows.
  int64_t max_positions = 8192;

  bool enabled() const { return pairing != RotaryPairing::kNone; }
};

// The table cos/sin(position * inv_freq[i]) * attention_factor for every position
// below max_positions, computed once in double and stored as float.
class RotaryEmbedding {
 public:
  // Throws mha::Error for an invalid config (odd or too large rotary_dim, ...).
  RotaryEmbedding(const RotaryConfig& config, int64_t head_dim);

  RotaryPairing pairing() const { return pairing_; }
  int64_t rotary_dim() const { return rotary_dim_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_positions_; }
  double attention_factor() const { return attention_factor_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // rotary_dim / 2 values for one position (0 <= position < max_positions).
  const float* Cos(int64_t position) const { return &cos_[position * half()]; }
  const float* Sin(int64_t position) const { return &sin_[position * half()]; }

  // kDynamic and kLongRope: frequencies depend on each sequence's length, so a call
  // rotates by a table of its own rows, made by CallTable (the layer and the
  // attention-core API do this for every call). Cos/Sin above then
  // hold the frequencies of sequences up to original_max_position_embeddings only.
  bool dynamic() const {
    return scaling_.type == RopeScalingType::kDynamic ||
           scaling_.type == RopeScalingType::kLongRope;
  }
  // The inverse frequencies of a sequence `length` tokens long (inv_freq() for
  // tables that are not dynamic).
  std::vector<float> InverseFrequenciesAt(int64_t length) const;
  // Fills *call (made on first use, its memory reused) with `rows` rows: row r is
  // position positions[r] of a sequence lengths[r] tokens long, so that Cos(r) and
  // Sin(r) of *call rotate it. Positions must lie in [0, max_positions()).
  void CallTable(const int64_t* positions, const int64_t* lengths, int64_t rows,
                 std::optional<RotaryEmbedding>& call) const;

 private:
  int64_t half() const { return rotary_dim_ / 2; }
  // Row `row` of cos_/sin_: `position` at `inv_freq`, times attention_factor_.
  void FillRow(int64_t row, int64_t position, const std::vector<float>& inv_freq);

  RotaryPairing pairing_;
  int64_t head_dim_, rotary_dim_, max_positions_;
  double attention_factor_, theta_;
  RopeScaling scaling_;
  std::vector<float> inv_freq_, cos_, sin_;
  std::vector<float> long_inv_freq_;  // kLongRope
};

// The inverse frequencies a config gives (theta with its scaling, or the caller's).
std::vector<float> RotaryInverseFrequencies(const RotaryConfig& config, int64_t head_dim);

}  // namespace mha
