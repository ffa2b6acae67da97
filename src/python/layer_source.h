// A layer's config and weights from Python: separate weight arrays or a PyTorch
// state_dict, optionally narrowed to a head shard. Owns (or keeps alive) every array
// its weights view.
#pragma once

#include <optional>
#include <vector>

#include "src/python/arrays.h"

namespace mha::python {

struct LayerSource {
  AttentionConfig config;
  AttentionWeights weights;
  std::vector<Input> arrays;
  AttentionShard shard;  // owns the weights when sharded
};

struct ProjectionArrays {
  py::object q_proj_weight, k_proj_weight, v_proj_weight, out_proj_weight;
  py::object q_proj_bias, k_proj_bias, v_proj_bias, out_proj_bias, sinks;
  py::object q_norm_weight, k_norm_weight;
  WeightLayout layout = WeightLayout::kOutIn;
};

LayerSource FromArrays(const AttentionConfig& config, const ProjectionArrays& arrays);

// The names mha-run reads (src/io/state_dict.h); with a prefix, only the entries
// named with it, taken off (a whole model's state_dict, one layer read). The sizes
// (num_heads, head_dim, query/key/value dims, num_kv_heads) come from the weights;
// `config` gives the rest.
LayerSource FromStateDict(const py::dict& state_dict, int64_t num_heads,
                          int64_t num_kv_heads, const AttentionConfig& config,
                          const std::string& prefix);

// Narrows `source` to heads [first_head, end_head) (mha::ShardHeads).
void Shard(LayerSource& source, const std::optional<HeadShard>& heads);

}  // namespace mha::python
