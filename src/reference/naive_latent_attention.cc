// NaiveMultiheadLatentAttention: DeepSeek's expanded MLA in double precision, line by
// line as modeling_deepseek.py computes it (kv_b_proj gives every head's k_nope and
// v; the rotary parts rotated as DeepSeek does, de-interleaved then rotate_half),
// sharing no code with the absorbed fast path it checks.
#include <cmath>
#include <limits>
#include <vector>

#include "mha/latent_attention.hpp"
#include "src/base/check.h"
#include "src/validation/latent_config.h"

namespace mha {
namespace {

using Matrix = std::vector<double>;  // row-major

// x [rows, in] times nn.Linear weight [out, in]^T.
Matrix Project(const Matrix& x, int64_t rows, const TensorView& weight) {
  const int64_t out = weight.shape[0], in = weight.shape[1];
  Matrix y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0.0;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * weight.floats()[o * in + i];
      y[r * out + o] = sum;
    }
  return y;
}

// RMSNorm of columns [first, first + width) of each row of x (row length `stride`).
void RmsNorm(Matrix& x, int64_t rows, int64_t stride, int64_t first, int64_t width,
             const TensorView& weight, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double* row = &x[r * stride + first];
    double squares = 0.0;
    for (int64_t k = 0; k < width; ++k) squares += row[k] * row[k];
    const double inverse = 1.0 / std::sqrt(squares / double(width) + eps);
    for (int64_t k = 0; k < width; ++k) row[k] *= inverse * weight.floats()[k];
  }
}

// DeepSeek's apply_rotary_pos_emb on one rotary part x[d] at `position`:
// de-interleave (x[2i], x[2i+1] -> x'[i], x'[i + d/2]), then rotate_half with
// cos/sin(position * inv_freq[i]) * attention_factor.
void Rotate(double* x, int64_t d, int64_t position, const std::vector<float>& inv_freq,
            double factor) {
  std::vector<double> y(d);
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = double(position) * double(inv_freq[i]);
    const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
    const double a = x[2 * i], b = x[2 * i + 1];
    y[i] = a * c - b * s;
    y[i + half] = b * c + a * s;
  }
  for (int64_t i = 0; i < d; ++i) x[i] = y[i];
}

}  // namespace

void NaiveMultiheadLatentAttention(const LatentAttentionConfig& c,
                                   const LatentAttentionWeights& w,
                                   const TensorView& hidden,
                                   const MutableTensorView& output) {
  internal::ValidateLatentConfig(c);
  internal::ValidateLatentWeights(c, w);
  const int64_t batch = hidden.shape[0], seq = hidden.shape[1], rows = batch * seq;
  const int64_t heads = c.num_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim,
                rank = c.kv_lora_rank, v_dim = c.v_head_dim;
  internal::CheckTensor("hidden_states", hidden, DType::kFloat32,
                        Shape{batch, seq, c.hidden_size});
  internal::CheckOutput("output", output, hidden.shape);
  Matrix x(hidden.floats(), hidden.floats() + rows * c.hidden_size);
  Matrix q;
  if (c.q_lora_rank > 0) {
    Matrix q_a = Project(x, rows, w.q_a_proj);
    RmsNorm(q_a, rows, c.q_lora_rank, 0, c.q_lora_rank, w.q_a_layernorm, c.rms_norm_eps);
    q = Project(q_a, rows, w.q_b_proj);  // [rows, heads, nope + rope]
  } else {
    q = Project(x, rows, w.q_proj);
  }
  Matrix compressed = Project(x, rows, w.kv_a_proj_with_mqa);  // [rows, rank + rope]
  RmsNorm(compressed, rows, rank + rope, 0, rank, w.kv_a_layernorm, c.rms_norm_eps);
  Matrix latent(rows * rank);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < rank; ++k)
      latent[r * rank + k] = compressed[r * (rank + rope) + k];
  const Matrix kv = Project(latent, rows, w.kv_b_proj);  // [rows, heads, nope + v]
  if (c.rotary.enabled()) {
    RotaryConfig rotation = c.rotary;
    rotation.rotary_dim = rope;
    const std::vector<float> inv_freq = RotaryInverseFrequencies(rotation, rope);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t position = r % seq;
      Rotate(&compressed[r * (rank + rope) + rank], rope, position, inv_freq,
             c.rotary.attention_factor);
      for (int64_t h = 0; h < heads; ++h)
        Rotate(&q[(r * heads + h) * (nope + rope) + nope], rope, position, inv_freq,
               c.rotary.attention_factor);
    }
  }
  const double scale =
      c.softmax_scale ? double{*c.softmax_scale} : 1.0 / std::sqrt(double(nope + rope));
  Matrix attended(rows * heads * v_dim, 0.0);
  std::vector<double> logits(seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        const double* qi = &q[((b * seq + i) * heads + h) * (nope + rope)];
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {  // causal
          const double* kv_j = &kv[((b * seq + j) * heads + h) * (nope + v_dim)];
          const double* pe_j = &compressed[(b * seq + j) * (rank + rope) + rank];
          double dot = 0.0;
          for (int64_t k = 0; k < nope; ++k) dot += qi[k] * kv_j[k];
          for (int64_t k = 0; k < rope; ++k) dot += qi[nope + k] * pe_j[k];
          logits[j] = dot * scale;
          max = std::max(max, logits[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += (logits[j] = std::exp(logits[j] - max));
        double* out = &attended[((b * seq + i) * heads + h) * v_dim];
        for (int64_t j = 0; j <= i; ++j) {
          const double* v_j = &kv[((b * seq + j) * heads + h) * (nope + v_dim) + nope];
          for (int64_t k = 0; k < v_dim; ++k) out[k] += logits[j] / sum * v_j[k];
        }
      }
  const Matrix y = Project(attended, rows, w.o_proj);
  for (int64_t k = 0; k < rows * c.hidden_size; ++k)
    output.floats()[k] = static_cast<float>(y[k]);
}

}  // namespace mha
