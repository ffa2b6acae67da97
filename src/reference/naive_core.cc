// The naive attention core, and NaiveScaledDotProductAttention on top of it.
#include "src/reference/naive_core.h"

#include <cmath>
#include <limits>

#include "mha/scaled_dot_product_attention.hpp"
#include "src/core/core_arguments.h"
#include "src/features/temperature.h"

namespace mha::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rotates one [D] row in place to `position` at the frequencies `inv_freq` (Hugging
// Face's apply_rotary_pos_emb).
void Rotate(const RotaryEmbedding& rotary, const std::vector<float>& inv_freq,
            int64_t position, double* row) {
  const int64_t half = rotary.rotary_dim() / 2;
  const bool interleaved = rotary.pairing() == RotaryPairing::kInterleaved;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    const double c = std::cos(angle) * rotary.attention_factor();
    const double s = std::sin(angle) * rotary.attention_factor();
    double& x1 = row[interleaved ? 2 * i : i];
    double& x2 = row[interleaved ? 2 * i + 1 : i + half];
    const double a = x1, b = x2;
    x1 = a * c - b * s;
    x2 = b * c + a * s;
  }
}

// Dynamic scaling: sequence b at the frequencies of its length, lengths[b].
void RotateAll(const RotaryEmbedding& rotary, const int64_t* positions,
               const int64_t* lengths, int64_t batch, int64_t heads, int64_t len,
               int64_t head_dim, std::vector<double>& x) {
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> inv_freq =
        lengths ? rotary.InverseFrequenciesAt(lengths[b]) : rotary.inv_freq();
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i)
        Rotate(rotary, inv_freq, positions[b * len + i],
               &x[((b * heads + h) * len + i) * head_dim]);
  }
}

// One element of a bool or float mask as an additive value, read as masks.hpp
// states the conventions (not through MaskPlan, which the fast path uses).
double MaskValue(const TensorView& mask, int64_t offset, MaskConvention convention,
                 bool attn_mask) {
  const bool added = convention != MaskConvention::kZeroMeansMasked;
  const bool true_masks = convention == MaskConvention::kTorch ||
                          (convention == MaskConvention::kSdpa && !attn_mask);
  if (mask.dtype == DType::kBool) {
    const bool value = static_cast<const uint8_t*>(mask.data)[offset] != 0;
    return value == true_masks ? -kInf : 0.0;
  }
  const double value = mask.floats()[offset];
  if (added) return value;
  return value == 0.0 ? -kInf : 0.0;
}

// attn_mask's element for (b, h, i, j): [Sq, Sk], [B * H, Sq, Sk], or 4-D with
// size-1 axes broadcast.
int64_t AttnMaskOffset(const NaiveCoreInputs& in, const Shape& shape, int64_t b,
                       int64_t h, int64_t i, int64_t j) {
  if (shape.rank() == 2) return i * in.key_len + j;
  if (shape.rank() == 3)
    return ((b * in.num_heads + h) * in.query_len + i) * in.key_len + j;
  const int64_t index[4] = {b, h, i, j};
  int64_t offset = 0;
  for (int axis = 0; axis < 4; ++axis) {
    offset = offset * shape[axis] + (shape[axis] == 1 ? 0 : index[axis]);
  }
  return offset;
}

// attn_mask plus key_padding_mask ([B, Sk], or [Sk] unbatched) for one score.
double TensorMasks(const NaiveCoreInputs& in, int64_t b, int64_t h, int64_t i,
                   int64_t j) {
  const AttentionMasks& m = *in.masks;
  double value = 0.0;
  if (m.attn_mask.present()) {
    value += MaskValue(m.attn_mask, AttnMaskOffset(in, m.attn_mask.shape, b, h, i, j),
                       m.convention, true);
  }
  if (m.key_padding_mask.present()) {
    value += MaskValue(m.key_padding_mask, b * in.key_len + j, m.convention, false);
  }
  return value;
}

bool KeyMasked(const NaiveCoreInputs& in, int64_t b, int64_t position, int64_t j) {
  const AttentionMasks& m = *in.masks;
  if (m.key_lengths.present()) {
    const int64_t length = m.key_lengths.dtype == DType::kInt32
                               ? static_cast<const int32_t*>(m.key_lengths.data)[b]
                               : static_cast<const int64_t*>(m.key_lengths.data)[b];
    if (j >= length) return true;
  }
  if (m.is_causal && j > position) return true;
  // As differences: position +- a window near INT64_MAX would overflow.
  if (in.features.sliding_window && position - j >= *in.features.sliding_window)
    return true;
  // Llama 4's chunked overlay: kv_idx // C == q_idx // C (floor division).
  if (in.features.attention_chunk_size) {
    const auto chunk = [&](int64_t p) {
      return static_cast<int64_t>(
          std::floor(static_cast<double>(p) / *in.features.attention_chunk_size));
    };
    if (chunk(j) != chunk(position)) return true;
  }
  return in.features.sliding_window_right &&
         j - position > *in.features.sliding_window_right;
}

// Logits of one query row: scaled, soft-capped, ALiBi, masks.
void Logits(const NaiveCoreInputs& in, const std::vector<double>& q,
            const std::vector<double>& k, int64_t b, int64_t h, int64_t i,
            const std::vector<float>& slopes, std::vector<double>& row) {
  const int64_t d = in.head_dim, kv_head = h / (in.num_heads / in.num_kv_heads);
  const int64_t offset = in.masks->causal_alignment == CausalAlignment::kBottomRight
                             ? in.key_len - in.query_len
                             : 0;
  const int64_t position = i + offset;
  const double* qi = &q[((b * in.num_heads + h) * in.query_len + i) * d];
  for (int64_t j = 0; j < in.key_len; ++j) {
    if (KeyMasked(in, b, position, j)) {
      row[j] = -kInf;
      continue;
    }
    const double* kj = &k[((b * in.num_kv_heads + kv_head) * in.key_len + j) * d];
    double logit = 0.0;
    for (int64_t x = 0; x < d; ++x) logit += qi[x] * kj[x];
    logit *= in.scale;
    if (in.features.temperature_tuning) {  // scales q: the logit, before the soft-cap
      const AttentionTemperature& t = *in.features.temperature_tuning;
      logit *= QueryTemperature(static_cast<float>(t.floor_scale),
                                static_cast<float>(t.attn_scale), position);
    }
    if (in.features.softcap) {
      const double cap = *in.features.softcap;
      logit = cap * std::tanh(logit / cap);
    }
    if (in.features.alibi) logit += double{slopes[h]} * double(j - position);
    row[j] = logit + TensorMasks(in, b, h, i, j);
  }
}

}  // namespace

void NaiveRmsNorm(const std::vector<float>& weight, double eps, std::vector<double>& x) {
  const size_t n = weight.size();
  for (size_t first = 0; first < x.size(); first += n) {
    double squares = 0.0;
    for (size_t k = 0; k < n; ++k) squares += x[first + k] * x[first + k];
    const double inverse_rms = 1.0 / std::sqrt(squares / double(n) + eps);
    for (size_t k = 0; k < n; ++k) x[first + k] *= inverse_rms * weight[k];
  }
}

NaiveCoreOutputs NaiveAttentionCore(const NaiveCoreInputs& in) {
  const int64_t sq = in.query_len, sk = in.key_len;
  const int64_t d = in.head_dim, dv = in.value_head_dim > 0 ? in.value_head_dim : d;
  std::vector<double> q = in.query, k = in.key, v = in.value;
  if (in.query_norm_weight) {
    const double eps = in.features.qk_norm->eps;
    NaiveRmsNorm(*in.query_norm_weight, eps, q);
    NaiveRmsNorm(*in.key_norm_weight, eps, k);
    if (in.value_norm_weight) NaiveRmsNorm(*in.value_norm_weight, eps, v);
  }
  if (in.rotary) {
    RotateAll(*in.rotary, in.query_positions, in.sequence_lengths, in.batch, in.num_heads,
              sq, d, q);
    RotateAll(*in.rotary, in.key_positions, in.sequence_lengths, in.batch,
              in.num_kv_heads, sk, d, k);
  }
  std::vector<float> slopes = in.features.alibi_slopes;
  if (in.features.alibi && slopes.empty()) slopes = AlibiSlopes(in.num_heads);
  NaiveCoreOutputs out;
  out.context.assign(in.batch * in.num_heads * sq * dv, 0.0);
  out.probabilities.assign(in.batch * in.num_heads * sq * sk, 0.0);
  out.logsumexp.assign(in.batch * in.num_heads * sq, -kInf);
  std::vector<double> row(sk);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t h = 0; h < in.num_heads; ++h) {
      const int64_t kv_head = h / (in.num_heads / in.num_kv_heads);
      const bool has_sink = in.sinks && !in.sinks->empty();
      const double sink = has_sink ? double{(*in.sinks)[h]} : -kInf;
      for (int64_t i = 0; i < sq; ++i) {
        Logits(in, q, k, b, h, i, slopes, row);
        double max = sink;
        for (double x : row) max = std::max(max, x);
        const int64_t index = (b * in.num_heads + h) * sq + i;
        if (max == -kInf) continue;  // fully masked, no sink: zeros
        double sum = has_sink ? std::exp(sink - max) : 0.0;
        for (double& x : row) sum += (x = std::exp(x - max));
        out.logsumexp[index] = max + std::log(sum);
        for (int64_t j = 0; j < sk; ++j) {
          const double p = row[j] / sum;
          out.probabilities[index * sk + j] = p;
          const double* vj = &v[((b * in.num_kv_heads + kv_head) * sk + j) * dv];
          for (int64_t x = 0; x < dv; ++x) out.context[index * dv + x] += p * vj[x];
        }
      }
    }
  }
  return out;
}

}  // namespace mha::internal

namespace mha {
namespace {

// A strided view widened to dense [B, H, S, D] doubles.
std::vector<double> Widen(const internal::HeadRows<const float>& rows, int64_t batch,
                          int64_t heads, int64_t len, int64_t head_dim) {
  std::vector<double> dense(batch * heads * len * head_dim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i)
        for (int64_t x = 0; x < head_dim; ++x)
          dense[((b * heads + h) * len + i) * head_dim + x] = rows.Row(b, h, i)[x];
  return dense;
}

}  // namespace

void NaiveScaledDotProductAttention(const TensorView& query, const TensorView& key,
                                    const TensorView& value, const AttentionMasks& masks,
                                    const MutableTensorView& output,
                                    const CoreOptions& options,
                                    const MutableTensorView& logsumexp) {
  const internal::CoreArguments args(query, key, value, masks, output, options,
                                     logsumexp);
  internal::NaiveCoreInputs in;
  in.batch = args.batch;
  in.num_heads = args.num_heads;
  in.num_kv_heads = args.num_kv_heads;
  in.query_len = args.query_len;
  in.key_len = args.key_len;
  in.head_dim = args.head_dim;
  in.value_head_dim = args.value_head_dim;
  in.query = Widen(args.query, in.batch, in.num_heads, in.query_len, in.head_dim);
  in.key = Widen(args.key, in.batch, in.num_kv_heads, in.key_len, in.head_dim);
  in.value = Widen(args.value, in.batch, in.num_kv_heads, in.key_len, in.value_head_dim);
  in.scale =
      options.scale ? double{*options.scale} : 1.0 / std::sqrt(double(in.head_dim));
  in.masks = &masks;
  in.features = options.features;
  in.sinks = &args.logits.sinks;
  in.rotary = options.rotary;
  in.query_positions = args.query_positions.data();
  in.key_positions = args.key_positions.data();
  if (options.rotary && options.rotary->dynamic()) {
    in.sequence_lengths = args.sequence_lengths.data();
  }
  if (args.qk_norm.enabled()) {
    in.query_norm_weight = &args.qk_norm.query;
    in.key_norm_weight = &args.qk_norm.key;
    if (!args.qk_norm.value_ones.empty()) in.value_norm_weight = &args.qk_norm.value_ones;
  }
  const internal::NaiveCoreOutputs out = internal::NaiveAttentionCore(in);
  for (int64_t b = 0; b < in.batch; ++b)
    for (int64_t h = 0; h < in.num_heads; ++h)
      for (int64_t i = 0; i < in.query_len; ++i) {
        const int64_t index = (b * in.num_heads + h) * in.query_len + i;
        for (int64_t x = 0; x < in.value_head_dim; ++x) {
          args.output.Row(b, h, i)[x] =
              static_cast<float>(out.context[index * in.value_head_dim + x]);
        }
        if (logsumexp.present()) logsumexp.floats()[index] = float(out.logsumexp[index]);
      }
}

}  // namespace mha
