// ValidateLatentConfig and ValidateLatentWeights.
#include "src/validation/latent_config.h"

#include <cmath>

#include "src/base/check.h"

namespace mha::internal {
namespace {

// Widest cached token the kernel stages (as AttentionConfig's head_dim).
constexpr int64_t kMaxKeyDim = 4096;

// Bounds each size before any sum of them: the product check below then refuses what
// no machine can hold, without overflowing first.
constexpr int64_t kMaxSize = int64_t{1} << 45;

void CheckSize(const char* name, int64_t value, int64_t min = 1) {
  if (value < min || value > kMaxSize) {
    Fail("config.", name, ": must be in [", min, ", 2^45], got ", value);
  }
}

}  // namespace

void ValidateLatentConfig(const LatentAttentionConfig& c) {
  CheckSize("hidden_size", c.hidden_size);
  CheckSize("num_heads", c.num_heads);
  CheckSize("kv_lora_rank", c.kv_lora_rank);
  CheckSize("qk_nope_head_dim", c.qk_nope_head_dim);
  CheckSize("v_head_dim", c.v_head_dim);
  CheckSize("q_lora_rank", c.q_lora_rank, 0);
  CheckSize("qk_rope_head_dim", c.qk_rope_head_dim, 0);
  if (c.qk_rope_head_dim % 16 != 0) {
    Fail(
        "config.qk_rope_head_dim: must be a multiple of 16 (the latent after it starts "
        "on a panel), got ",
        c.qk_rope_head_dim);
  }
  if (LatentKeyDim(c) > kMaxKeyDim) {
    Fail("config: kv_lora_rank + qk_rope_head_dim must be <= ", kMaxKeyDim, ", got ",
         LatentKeyDim(c));
  }
  int64_t product = 0;
  if (!AddressableProduct(
          {c.num_heads,
           c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim + LatentKeyDim(c),
           c.hidden_size + c.kv_lora_rank + c.q_lora_rank, 4},
          &product)) {
    Fail("config: the weights of num_heads ", c.num_heads, " x hidden_size ",
         c.hidden_size, " need more than 2^47 bytes");
  }
  // The norms add it in float32.
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (!(eps > 0.0f && std::isfinite(eps))) {
    Fail("config.rms_norm_eps: must be finite and > 0 as a float, got ", c.rms_norm_eps);
  }
  if (c.rotary.enabled()) {
    if (c.qk_rope_head_dim == 0) {
      Fail("config.rotary: given with qk_rope_head_dim 0 (nothing to rotate)");
    }
    if (c.rotary.rotary_dim != 0 && c.rotary.rotary_dim != c.qk_rope_head_dim) {
      Fail("config.rotary.rotary_dim: must be 0 or qk_rope_head_dim (",
           c.qk_rope_head_dim, "), got ", c.rotary.rotary_dim);
    }
    if (c.rotary.scaling.type == RopeScalingType::kDynamic ||
        c.rotary.scaling.type == RopeScalingType::kLongRope) {
      Fail(
          "config.rotary.scaling: dynamic and longrope scaling are not supported by "
          "the latent layer (DeepSeek uses YaRN: give its inv_freq)");
    }
  }
  if (c.softmax_scale && (!std::isfinite(*c.softmax_scale) || *c.softmax_scale == 0.0f)) {
    Fail("config.softmax_scale: must be finite and non-zero, got ", *c.softmax_scale);
  }
}

void ValidateLatentWeights(const LatentAttentionConfig& c,
                           const LatentAttentionWeights& w) {
  const int64_t query_dim = c.num_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
  if (c.q_lora_rank == 0) {
    CheckTensor("weights.q_proj", w.q_proj, DType::kFloat32,
                Shape{query_dim, c.hidden_size});
    if (w.q_a_proj.present() || w.q_b_proj.present() || w.q_a_layernorm.present()) {
      Fail(
          "weights.q_a_proj/q_a_layernorm/q_b_proj: given with config.q_lora_rank 0 "
          "(queries through q_proj)");
    }
  } else {
    CheckTensor("weights.q_a_proj", w.q_a_proj, DType::kFloat32,
                Shape{c.q_lora_rank, c.hidden_size});
    CheckTensor("weights.q_a_layernorm", w.q_a_layernorm, DType::kFloat32,
                Shape{c.q_lora_rank});
    CheckTensor("weights.q_b_proj", w.q_b_proj, DType::kFloat32,
                Shape{query_dim, c.q_lora_rank});
    if (w.q_proj.present()) {
      Fail("weights.q_proj: given with config.q_lora_rank ", c.q_lora_rank,
           " (queries through q_a_proj and q_b_proj)");
    }
  }
  CheckTensor("weights.kv_a_proj_with_mqa", w.kv_a_proj_with_mqa, DType::kFloat32,
              Shape{LatentKeyDim(c), c.hidden_size});
  CheckTensor("weights.kv_a_layernorm", w.kv_a_layernorm, DType::kFloat32,
              Shape{c.kv_lora_rank});
  CheckTensor("weights.kv_b_proj", w.kv_b_proj, DType::kFloat32,
              Shape{c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank});
  CheckTensor("weights.o_proj", w.o_proj, DType::kFloat32,
              Shape{c.hidden_size, c.num_heads * c.v_head_dim});
}

}  // namespace mha::internal
