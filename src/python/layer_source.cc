// Building layers from Python arrays and state_dicts.
#include "src/python/layer_source.h"

#include <map>
#include <string>
#include <utility>

#include "src/io/array.h"
#include "src/io/state_dict.h"

namespace mha::python {
namespace {

TensorView Keep(LayerSource& source, py::handle object, const char* name) {
  source.arrays.push_back(FloatInput(object, name));
  return source.arrays.back().view;
}

}  // namespace

LayerSource FromArrays(const AttentionConfig& config, const ProjectionArrays& arrays) {
  LayerSource source;
  source.config = config;
  AttentionWeights& weights = source.weights;
  weights.query = {Keep(source, arrays.q_proj_weight, "q_proj_weight"), arrays.layout,
                   Keep(source, arrays.q_proj_bias, "q_proj_bias")};
  weights.key = {Keep(source, arrays.k_proj_weight, "k_proj_weight"), arrays.layout,
                 Keep(source, arrays.k_proj_bias, "k_proj_bias")};
  weights.value = {Keep(source, arrays.v_proj_weight, "v_proj_weight"), arrays.layout,
                   Keep(source, arrays.v_proj_bias, "v_proj_bias")};
  const WeightLayout output_layout =
      arrays.layout == WeightLayout::kInOut ? WeightLayout::kInOut : WeightLayout::kOutIn;
  weights.output = {Keep(source, arrays.out_proj_weight, "out_proj_weight"),
                    output_layout, Keep(source, arrays.out_proj_bias, "out_proj_bias")};
  weights.sinks = Keep(source, arrays.sinks, "sinks");
  weights.query_norm_weight = Keep(source, arrays.q_norm_weight, "q_norm_weight");
  weights.key_norm_weight = Keep(source, arrays.k_norm_weight, "k_norm_weight");
  return source;
}

LayerSource FromStateDict(const py::dict& state_dict, int64_t num_heads,
                          int64_t num_kv_heads, const AttentionConfig& config,
                          const std::string& prefix) {
  LayerSource source;
  std::map<std::string, TensorView> views;
  std::vector<std::string> names;
  for (const auto& [key, value] : state_dict) {
    const std::string full_name = py::str(key);
    if (full_name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = full_name.substr(prefix.size());
    source.arrays.push_back(FloatInput(value, full_name.c_str()));
    views[name] = source.arrays.back().view;
    names.push_back(name);
  }
  if (!prefix.empty() && names.empty()) {
    throw py::value_error("mha: prefix: no state_dict name starts with '" + prefix + "'");
  }
  // A dict is no file: what the names' reader says of it is a ValueError.
  const io::LayerFromNames named = [&] {
    try {
      return io::LayerFromStateDict(
          [&views](const std::string& name) {
            const auto found = views.find(name);
            return found == views.end() ? TensorView() : found->second;
          },
          names, "state_dict", num_heads, num_kv_heads);
    } catch (const io::FileError& e) {
      throw Error(e.what());
    }
  }();
  source.config = config;
  for (auto size : {&AttentionConfig::num_heads, &AttentionConfig::head_dim,
                    &AttentionConfig::query_dim, &AttentionConfig::key_dim,
                    &AttentionConfig::value_dim, &AttentionConfig::num_kv_heads}) {
    source.config.*size = named.config.*size;
  }
  source.weights = named.weights;
  return source;
}

void Shard(LayerSource& source, const std::optional<HeadShard>& heads) {
  if (!heads) return;
  source.shard = ShardHeads(source.config, source.weights, *heads);
  source.config = source.shard.config;
  source.weights = source.shard.weights;
}

}  // namespace mha::python
