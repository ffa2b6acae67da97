// The naive baseline: textbook multi-head attention in plain loops with double
// accumulation, reading weights and masks element by element. Deliberately shares
// no arithmetic with the fast path: only argument checks and element addressing.
#include <cmath>
#include <limits>
#include <vector>

#include "mha/reference.hpp"
#include "src/api/problem.h"
#include "src/kernels/bf16_convert.h"
#include "src/masks/mask_plan.h"
#include "src/planning/weight_layout.h"

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

int64_t KeyLength(const TensorView& key_lengths, int64_t batch, int64_t key_len) {
  if (!key_lengths.present()) return key_len;
  return key_lengths.dtype == DType::kInt32
             ? static_cast<const int32_t*>(key_lengths.data)[batch]
             : static_cast<const int64_t*>(key_lengths.data)[batch];
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

double Dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Softmax of scores in place; a row that is -inf everywhere becomes zeros.
void Softmax(std::vector<double>& scores) {
  double max = -std::numeric_limits<double>::infinity();
  for (double s : scores) max = std::max(max, s);
  if (std::isinf(max) && max < 0) {
    std::fill(scores.begin(), scores.end(), 0.0);
    return;
  }
  double sum = 0.0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  for (double& s : scores) s /= sum;
}

// Scores of query i against every key of head h, masked, then softmaxed.
struct HeadRowInputs {
  const std::vector<double>& q;
  const std::vector<double>& k;
  const internal::MaskPlan& tensor_masks;
  const AttentionMasks& masks;
  const Problem& p;
  int64_t model, kv_dim, head_dim, group_size;
  double scale;
};

void AttentionRow(const HeadRowInputs& in, int64_t b, int64_t h, int64_t i,
                  std::vector<double>& scores) {
  const Problem& p = in.p;
  const int64_t length = KeyLength(in.masks.key_lengths, b, p.key_len);
  const double* qi = &in.q[(b * p.query_len + i) * in.model + h * in.head_dim];
  for (int64_t j = 0; j < p.key_len; ++j) {
    const double* kj =
        &in.k[(b * p.key_len + j) * in.kv_dim + h / in.group_size * in.head_dim];
    const bool masked = (in.masks.is_causal && j > i) || j >= length;
    scores[j] = masked ? -std::numeric_limits<double>::infinity()
                       : Dot(qi, kj, in.head_dim) * in.scale +
                             in.tensor_masks.TensorMaskAt(b, h, i, j);
  }
  Softmax(scores);
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
  const internal::MaskPlan tensor_masks(masks, p, config.num_heads);
  const int64_t heads = config.num_heads, head_dim = config.head_dim;
  const int64_t model = config.model_dim(), kv_dim = config.kv_dim();
  const int64_t group_size = config.group_size();
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
  const std::vector<double> q =
      project(p.query, p.query_len, config.query_dim, model, weights.query);
  const std::vector<double> k =
      project(p.key, p.key_len, config.resolved_key_dim(), kv_dim, weights.key);
  const std::vector<double> v =
      project(p.value, p.key_len, config.resolved_value_dim(), kv_dim, weights.value);
  const HeadRowInputs row_inputs{
      q,
      k,
      tensor_masks,
      masks,
      p,
      model,
      kv_dim,
      head_dim,
      group_size,
      config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(head_dim))};

  std::vector<double> context(p.batch_size * p.query_len * model);
  std::vector<double> weights_out(p.batch_size * heads * p.query_len * p.key_len);
  std::vector<double> scores(p.key_len);
  for (int64_t b = 0; b < p.batch_size; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < p.query_len; ++i) {
        AttentionRow(row_inputs, b, h, i, scores);
        for (int64_t d = 0; d < head_dim; ++d) {
          double sum = 0.0;
          for (int64_t j = 0; j < p.key_len; ++j) {
            sum += scores[j] *
                   v[(b * p.key_len + j) * kv_dim + h / group_size * head_dim + d];
          }
          context[(b * p.query_len + i) * model + h * head_dim + d] = sum;
        }
        std::copy(scores.begin(), scores.end(),
                  &weights_out[((b * heads + h) * p.query_len + i) * p.key_len]);
      }
    }
  }
  WriteAttnWeights(weights_out, p, heads, options.average_attn_weights,
                   outputs.attn_weights);
  WriteOutput(context, p.batch_size * p.query_len, model, weights.output, output_dim,
              outputs.output);
}

}  // namespace mha
