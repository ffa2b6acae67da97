// Head sharding: slices a full layer's weights into the part that owns a range of
// heads (column-parallel input projections, row-parallel output projection).
#include "mha/head_shard.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "src/base/check.h"
#include "src/features/qk_norm.h"
#include "src/projection/weight_layout.h"

namespace mha {
namespace {

using internal::Fail;
using internal::WeightReader;

// The copied weights, in kOutIn layout, that an AttentionShard's views point into.
struct ShardStorage {
  std::vector<float> weight[4];  // query, key, value, output
  std::vector<float> bias[4];
  std::vector<float> sinks;
  std::vector<float> query_norm, key_norm;
};

void CheckShard(const AttentionConfig& config, const HeadShard& heads) {
  const int64_t group = config.group_size();
  if (heads.first_head < 0 || heads.end_head > config.num_heads ||
      heads.first_head >= heads.end_head) {
    Fail("heads: expected 0 <= first_head < end_head <= num_heads (", config.num_heads,
         "), got [", heads.first_head, ", ", heads.end_head, ")");
  }
  if (heads.first_head % group != 0 || heads.end_head % group != 0) {
    Fail("heads: [", heads.first_head, ", ", heads.end_head,
         ") splits a key/value group: both ends must be multiples of the group size ",
         group, " (num_heads ", config.num_heads, ", num_kv_heads ",
         config.resolved_num_kv_heads(), ")");
  }
}

// Rows [first_row, end_row) of an input projection mapping in_dim to out_dim.
void CopyRows(const Projection& source, int64_t in_dim, int64_t out_dim, int64_t head_dim,
              int64_t first_row, int64_t end_row, std::vector<float>& weight,
              std::vector<float>& bias) {
  const WeightReader reader(source, in_dim, out_dim, head_dim);
  weight.resize((end_row - first_row) * in_dim);
  for (int64_t row = first_row; row < end_row; ++row) {
    for (int64_t in = 0; in < in_dim; ++in) {
      weight[(row - first_row) * in_dim + in] = reader.At(row, in);
    }
  }
  if (!source.bias.present()) return;
  bias.assign(source.bias.floats() + first_row, source.bias.floats() + end_row);
}

// Columns [first_column, end_column) of the output projection, out_dim rows.
void CopyColumns(const Projection& source, int64_t model_dim, int64_t out_dim,
                 int64_t first_column, int64_t end_column, std::vector<float>& weight) {
  const WeightReader reader(source, model_dim, out_dim, model_dim);
  const int64_t width = end_column - first_column;
  weight.resize(out_dim * width);
  for (int64_t row = 0; row < out_dim; ++row) {
    for (int64_t column = first_column; column < end_column; ++column) {
      weight[row * width + column - first_column] = reader.At(row, column);
    }
  }
}

Projection View(const std::vector<float>& weight, const std::vector<float>& bias,
                int64_t rows, int64_t columns) {
  Projection projection;
  projection.weight = TensorView(weight.data(), Shape{rows, columns});
  if (!bias.empty()) projection.bias = TensorView(bias.data(), Shape{rows});
  return projection;
}

// ALiBi slopes depend on a head's index in the full layer: resolve, then slice.
void ShardFeatures(const AttentionConfig& config, const HeadShard& heads,
                   AttentionFeatures& features) {
  if (!features.alibi) return;
  std::vector<float> slopes = features.alibi_slopes.empty()
                                  ? AlibiSlopes(config.num_heads)
                                  : features.alibi_slopes;
  if (static_cast<int64_t>(slopes.size()) != config.num_heads) {
    Fail("config.features.alibi_slopes: expected ", config.num_heads, " slopes, got ",
         slopes.size());
  }
  features.alibi_slopes.assign(slopes.begin() + heads.first_head,
                               slopes.begin() + heads.end_head);
}

}  // namespace

HeadShard EvenHeadShard(const AttentionConfig& config, int64_t rank, int64_t world_size) {
  const int64_t kv_heads = config.resolved_num_kv_heads();
  if (world_size < 1 || world_size > kv_heads || rank < 0 || rank >= world_size) {
    Fail("EvenHeadShard: expected 0 <= rank < world_size <= num_kv_heads (", kv_heads,
         "), got rank ", rank, ", world_size ", world_size);
  }
  const int64_t base = kv_heads / world_size, extra = kv_heads % world_size;
  const int64_t first_kv = rank * base + std::min(rank, extra);
  const int64_t end_kv = first_kv + base + (rank < extra ? 1 : 0);
  return {first_kv * config.group_size(), end_kv * config.group_size()};
}

AttentionShard ShardHeads(const AttentionConfig& config, const AttentionWeights& weights,
                          const HeadShard& heads) {
  const int64_t output_dim = internal::ValidateLayer(config, weights);
  CheckShard(config, heads);
  if (config.features.qk_norm &&
      config.features.qk_norm->scope == QkNormScope::kAcrossHeads) {
    Fail(
        "ShardHeads: features.qk_norm.scope kAcrossHeads normalises over every head "
        "of a token, and a shard holds heads [",
        heads.first_head, ", ", heads.end_head, ") of ", config.num_heads);
  }
  if (weights.sinks.present()) {
    internal::CheckTensor("weights.sinks", weights.sinks, DType::kFloat32,
                          Shape{config.num_heads});
  }
  const int64_t head_dim = config.head_dim, group = config.group_size();
  const int64_t num_heads = heads.end_head - heads.first_head;
  const int64_t num_kv_heads = num_heads / group;
  const int64_t first_kv = heads.first_head / group;

  AttentionShard shard;
  shard.heads = heads;
  shard.config = config;
  shard.config.num_heads = num_heads;
  shard.config.num_kv_heads = config.num_kv_heads ? num_kv_heads : 0;
  ShardFeatures(config, heads, shard.config.features);

  auto storage = std::make_shared<ShardStorage>();
  const Projection* inputs[3] = {&weights.query, &weights.key, &weights.value};
  const int64_t in_dims[3] = {config.query_dim, config.resolved_key_dim(),
                              config.resolved_value_dim()};
  const int64_t first_rows[3] = {heads.first_head * head_dim, first_kv * head_dim,
                                 first_kv * head_dim};
  const int64_t full_rows[3] = {config.model_dim(), config.kv_dim(), config.kv_dim()};
  const int64_t rows[3] = {num_heads * head_dim, num_kv_heads * head_dim,
                           num_kv_heads * head_dim};
  Projection* outputs[3] = {&shard.weights.query, &shard.weights.key,
                            &shard.weights.value};
  for (int i = 0; i < 3; ++i) {
    CopyRows(*inputs[i], in_dims[i], full_rows[i], head_dim, first_rows[i],
             first_rows[i] + rows[i], storage->weight[i], storage->bias[i]);
    *outputs[i] = View(storage->weight[i], storage->bias[i], rows[i], in_dims[i]);
  }
  if (weights.output.present()) {
    CopyColumns(weights.output, config.model_dim(), output_dim, first_rows[0],
                first_rows[0] + rows[0], storage->weight[3]);
    if (heads.first_head == 0 && weights.output.bias.present()) {
      const float* bias = weights.output.bias.floats();
      storage->bias[3].assign(bias, bias + output_dim);
    }
    shard.weights.output =
        View(storage->weight[3], storage->bias[3], output_dim, rows[0]);
  }
  if (weights.sinks.present()) {
    const float* sinks = weights.sinks.floats();
    storage->sinks.assign(sinks + heads.first_head, sinks + heads.end_head);
    shard.weights.sinks = TensorView(storage->sinks.data(), Shape{num_heads});
  }
  internal::QkNormWeights checked;  // every shard normalises with all of them
  checked.Set(config.features.qk_norm, weights.query_norm_weight, weights.key_norm_weight,
              config.num_heads, config.resolved_num_kv_heads(), head_dim, "weights.");
  const auto keep = [&](const TensorView& view, std::vector<float>& copy) {
    if (!view.present()) return TensorView();
    copy.assign(view.floats(), view.floats() + head_dim);
    return TensorView(copy.data(), Shape{head_dim});
  };
  shard.weights.query_norm_weight = keep(weights.query_norm_weight, storage->query_norm);
  shard.weights.key_norm_weight = keep(weights.key_norm_weight, storage->key_norm);
  shard.storage = std::move(storage);
  return shard;
}

}  // namespace mha
