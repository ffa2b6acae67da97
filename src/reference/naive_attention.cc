// The naive baseline: textbook multi-head attention in plain loops with double
// accumulation, reading weights and masks element by element. Deliberately shares
// no arithmetic with the fast path: only argument checks and element addressing.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "mha/reference.hpp"
#include "src/base/check.h"
#include "src/features/call_rotation.h"
#include "src/features/logit_features.h"
#include "src/features/mask_plan.h"
#include "src/features/qk_norm.h"
#include "src/projection/weight_layout.h"
#include "src/reference/naive_core.h"
#include "src/simd/bf16_convert.h"
#include "src/validation/problem.h"

namespace mha {
namespace {

using internal::Problem;
using internal::WeightReader;

// y[r, o] = sum_i x[r, i] W[o, i] + b[o], in double.
template <class T>
std::vector<double> Linear(const T* x, int64_t rows, int64_t in_dim,
                           const WeightReader& weight, int64_t out_dim) {
  std::vector<double> y(rows * out_dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_dim; ++o) {
      double sum = weight.BiasAt(o);
      for (int64_t i = 0; i < in_dim; ++i)
        sum += double{x[r * in_dim + i]} * weight.At(o, i);
      y[r * out_dim + o] = sum;
    }
  }
  return y;
}

// attn_weights = per-head probabilities, or their mean over heads.
void WriteAttnWeights(const std::vector<double>& per_head, const Problem& p,
                      int64_t heads, bool average,
                      const MutableTensorView& attn_weights) {
  if (!attn_weights.present()) return;
  const int64_t plane = p.query_len * p.key_len;
  for (int64_t b = 0; b < p.batch_size; ++b) {
    for (int64_t i = 0; i < plane; ++i) {
      double sum = 0.0;
      for (int64_t h = 0; h < heads; ++h) {
        const double value = per_head[(b * heads + h) * plane + i];
        sum += value;
        if (!average) attn_weights.floats()[(b * heads + h) * plane + i] = float(value);
      }
      if (average) attn_weights.floats()[b * plane + i] = float(sum / double(heads));
    }
  }
}

// output = context W_o^T + b_o, or the context itself without an output projection.
void Store(const std::vector<double>& values, const MutableTensorView& output) {
  for (size_t i = 0; i < values.size(); ++i) {
    const float value = static_cast<float>(values[i]);
    if (output.dtype == DType::kBFloat16) {
      static_cast<uint16_t*>(output.data)[i] = internal::RoundToBf16Bits(value);
    } else {
      output.floats()[i] = value;
    }
  }
}

void WriteOutput(const std::vector<double>& context, int64_t rows, int64_t model,
                 const Projection& projection, int64_t output_dim,
                 const MutableTensorView& output) {
  if (!projection.present()) return Store(context, output);
  Store(Linear(context.data(), rows, model,
               WeightReader(projection, model, output_dim, model), output_dim),
        output);
}

// [B, S, heads * head_dim] rows to [B, heads, S, head_dim], or back (to_heads false).
std::vector<double> Transpose(const std::vector<double>& x, int64_t batch, int64_t len,
                              int64_t heads, int64_t head_dim, bool to_heads) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < len; ++i)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t rows = ((b * len + i) * heads + h) * head_dim + d;
          const int64_t split = ((b * heads + h) * len + i) * head_dim + d;
          if (to_heads) {
            y[split] = x[rows];
          } else {
            y[rows] = x[split];
          }
        }
  return y;
}

}  // namespace

void NaiveMultiheadAttention(const AttentionConfig& config,
                             const AttentionWeights& weights,
                             const AttentionInputs& inputs, const AttentionMasks& masks,
                             const AttentionOutputs& outputs,
                             const ForwardOptions& options) {
  const int64_t output_dim = internal::ValidateLayer(config, weights);
  const Problem p =
      internal::ValidateForward(config, output_dim, inputs, outputs, options);
  internal::MaskPlan(masks, config.features, p, config.num_heads);  // checks the masks
  const internal::LogitFeatures logits(config.features, weights.sinks, config.num_heads,
                                       "weights.sinks");
  const int64_t heads = config.num_heads, head_dim = config.head_dim;
  const int64_t model = config.model_dim(), kv_dim = config.kv_dim();
  const int64_t kv_heads = config.resolved_num_kv_heads();
  const auto project = [&](const TensorView& x, int64_t len, int64_t dim, int64_t width,
                           const Projection& w) {
    const int64_t rows = p.batch_size * len;
    const WeightReader weight(w, dim, width, head_dim);
    if (x.dtype == DType::kFloat32) return Linear(x.floats(), rows, dim, weight, width);
    std::vector<float> widened(rows * dim);  // bf16 input
    internal::Bf16ToFloat(static_cast<const uint16_t*>(x.data), widened.size(),
                          widened.data());
    return Linear(widened.data(), rows, dim, weight, width);
  };
  internal::NaiveCoreInputs in;
  in.batch = p.batch_size;
  in.num_heads = heads;
  in.num_kv_heads = kv_heads;
  in.query_len = p.query_len;
  in.key_len = p.key_len;
  in.head_dim = head_dim;
  std::vector<double> query =
      project(p.query, p.query_len, config.query_dim, model, weights.query);
  std::vector<double> key =
      project(p.key, p.key_len, config.resolved_key_dim(), kv_dim, weights.key);
  internal::QkNormWeights qk_norm;  // per head or across heads: runs of the rows
  qk_norm.Set(config.features.qk_norm, weights.query_norm_weight, weights.key_norm_weight,
              heads, kv_heads, head_dim, "weights.");
  if (qk_norm.enabled()) {
    internal::NaiveRmsNorm(qk_norm.query, config.features.qk_norm->eps, query);
    internal::NaiveRmsNorm(qk_norm.key, config.features.qk_norm->eps, key);
  }
  in.query = Transpose(query, p.batch_size, p.query_len, heads, head_dim, true);
  in.key = Transpose(key, p.batch_size, p.key_len, kv_heads, head_dim, true);
  std::vector<double> value =
      project(p.value, p.key_len, config.resolved_value_dim(), kv_dim, weights.value);
  if (!qk_norm.value_ones.empty()) {  // Gemma 3n's v_norm: per head, no weight
    internal::NaiveRmsNorm(qk_norm.value_ones, config.features.qk_norm->eps, value);
  }
  in.value = Transpose(value, p.batch_size, p.key_len, kv_heads, head_dim, true);
  in.scale =
      config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  in.masks = &masks;
  in.features = config.features;
  in.sinks = &logits.sinks;
  std::optional<RotaryEmbedding> rotary;
  std::vector<int64_t> positions(p.batch_size * p.query_len), lengths(p.batch_size);
  if (config.rotary.enabled()) {
    if (p.query_len != p.key_len) {
      internal::Fail("rotary embeddings: need keys as long as the queries");
    }
    rotary.emplace(config.rotary, head_dim);
    internal::ResolvePositions("options.position_ids", options.position_ids, p.batch_size,
                               p.query_len, p.batched, nullptr, *rotary,
                               positions.data());
    in.rotary = &*rotary;
    if (rotary->dynamic()) {  // each sequence at its length: its largest position + 1
      for (int64_t b = 0; b < p.batch_size; ++b) {
        const auto first = positions.begin() + b * p.query_len;
        lengths[b] = *std::max_element(first, first + p.query_len) + 1;
      }
      in.sequence_lengths = lengths.data();
    }
    in.query_positions = in.key_positions = positions.data();
  }
  const internal::NaiveCoreOutputs out = internal::NaiveAttentionCore(in);
  const std::vector<double> context =
      Transpose(out.context, p.batch_size, p.query_len, heads, head_dim, false);
  const std::vector<double>& weights_out = out.probabilities;
  WriteAttnWeights(weights_out, p, heads, options.average_attn_weights,
                   outputs.attn_weights);
  WriteOutput(context, p.batch_size * p.query_len, model, weights.output, output_dim,
              outputs.output);
}

}  // namespace mha
