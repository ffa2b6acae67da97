// LatentWeights: transposes, reorders and splits (see the header).
#include "src/projection/latent_weights.h"

#include <algorithm>

namespace mha::internal {
namespace {

// nn.Linear's [out, in] as [in, out].
std::vector<float> Transposed(const TensorView& weight) {
  const int64_t out = weight.shape[0], in = weight.shape[1];
  std::vector<float> packed(out * in);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) packed[i * out + o] = weight.floats()[o * in + i];
  }
  return packed;
}

std::vector<float> Copy(const TensorView& vector) {
  if (!vector.present()) return {};
  return std::vector<float>(vector.floats(), vector.floats() + vector.shape[0]);
}

}  // namespace

LatentWeights::LatentWeights(const LatentAttentionConfig& c,
                             const LatentAttentionWeights& w)
    : query_a(c.q_lora_rank > 0 ? Transposed(w.q_a_proj) : std::vector<float>()),
      query_a_norm(Copy(w.q_a_layernorm)),
      latent_norm(Copy(w.kv_a_layernorm)),
      expand(Transposed(w.kv_b_proj)),
      output(Transposed(w.o_proj)) {
  // q's columns per head: nope, then rope (DeepSeek's split).
  const std::vector<float> q = Transposed(c.q_lora_rank > 0 ? w.q_b_proj : w.q_proj);
  const int64_t q_nope = c.qk_nope_head_dim, q_rope = c.qk_rope_head_dim;
  const int64_t q_dim = q_nope + q_rope, q_width = c.num_heads * q_dim;
  query.resize(q.size());
  for (size_t row = 0; row < q.size() / q_width; ++row) {
    for (int64_t h = 0; h < c.num_heads; ++h) {
      const float* from = q.data() + row * q_width + h * q_dim;
      float* to = query.data() + row * q_width + h * q_dim;
      std::copy(from + q_nope, from + q_dim, to);
      std::copy(from, from + q_nope, to + q_rope);
    }
  }
  // kv_a_proj_with_mqa's rows: the latent's, then the rotary part's.
  const int64_t rank = c.kv_lora_rank, rope = c.qk_rope_head_dim;
  const int64_t key_dim = rope + rank, hidden = c.hidden_size;
  const std::vector<float> kv_a = Transposed(w.kv_a_proj_with_mqa);
  key.resize(hidden * key_dim);
  for (int64_t i = 0; i < hidden; ++i) {
    const float* from = kv_a.data() + i * key_dim;
    float* to = key.data() + i * key_dim;
    std::copy(from + rank, from + key_dim, to);
    std::copy(from, from + rank, to + rope);
  }
  // kv_b_proj's rows per head: k_nope's (nope of them), then v's.
  const int64_t nope = c.qk_nope_head_dim, v_dim = c.v_head_dim;
  const float* kv_b = w.kv_b_proj.floats();
  key_absorb.resize(c.num_heads * nope * rank);
  value_up.resize(c.num_heads * rank * v_dim);
  for (int64_t h = 0; h < c.num_heads; ++h) {
    const float* head = kv_b + h * (nope + v_dim) * rank;
    std::copy(head, head + nope * rank, key_absorb.data() + h * nope * rank);
    float* up = value_up.data() + h * rank * v_dim;
    for (int64_t i = 0; i < v_dim; ++i) {
      for (int64_t r = 0; r < rank; ++r) up[r * v_dim + i] = head[(nope + i) * rank + r];
    }
  }
}

}  // namespace mha::internal
