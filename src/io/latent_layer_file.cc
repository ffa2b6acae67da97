// LoadLatentLayer: names to weights, shapes to sizes (the layer checks the rest).
#include "src/io/latent_layer_file.h"

namespace mha::io {
namespace {

TensorView Need(const LoadedLatentLayer& layer, const std::string& name, int rank) {
  const TensorView tensor = layer.file.Find(name);
  if (!tensor.present()) {
    throw FileError(layer.file.path() + ": no tensor '" + name + "'");
  }
  if (tensor.shape.rank() != rank) {
    throw FileError(layer.file.path() + ": '" + name + "' must have rank " +
                    std::to_string(rank) + ", got " + tensor.shape.ToString());
  }
  return tensor;
}

// rows / num_heads, or FileError when it does not divide.
int64_t PerHead(const LoadedLatentLayer& layer, const std::string& name, int64_t rows,
                int64_t num_heads) {
  if (rows % num_heads != 0) {
    throw FileError(layer.file.path() + ": '" + name + "' has " + std::to_string(rows) +
                    " rows, not a multiple of num_heads " + std::to_string(num_heads));
  }
  return rows / num_heads;
}

}  // namespace

LoadedLatentLayer LoadLatentLayer(const std::string& path, int64_t num_heads) {
  if (num_heads < 1) {
    throw FileError(path + ": num_heads must be >= 1, got " + std::to_string(num_heads));
  }
  LoadedLatentLayer layer{Safetensors::Read(path), {}, {}};
  LatentAttentionConfig& c = layer.config;
  LatentAttentionWeights& w = layer.weights;
  c.num_heads = num_heads;
  w.kv_a_layernorm = Need(layer, "kv_a_layernorm.weight", 1);
  w.kv_a_proj_with_mqa = Need(layer, "kv_a_proj_with_mqa.weight", 2);
  w.kv_b_proj = Need(layer, "kv_b_proj.weight", 2);
  w.o_proj = Need(layer, "o_proj.weight", 2);
  c.kv_lora_rank = w.kv_a_layernorm.shape[0];
  c.hidden_size = w.kv_a_proj_with_mqa.shape[1];
  c.qk_rope_head_dim = w.kv_a_proj_with_mqa.shape[0] - c.kv_lora_rank;
  if (layer.file.Has("q_proj.weight")) {
    w.q_proj = Need(layer, "q_proj.weight", 2);
  } else {
    w.q_a_proj = Need(layer, "q_a_proj.weight", 2);
    w.q_a_layernorm = Need(layer, "q_a_layernorm.weight", 1);
    w.q_b_proj = Need(layer, "q_b_proj.weight", 2);
    c.q_lora_rank = w.q_a_proj.shape[0];
  }
  const std::string query_name = c.q_lora_rank > 0 ? "q_b_proj.weight" : "q_proj.weight";
  const TensorView& query = c.q_lora_rank > 0 ? w.q_b_proj : w.q_proj;
  c.qk_nope_head_dim =
      PerHead(layer, query_name, query.shape[0], num_heads) - c.qk_rope_head_dim;
  c.v_head_dim = PerHead(layer, "kv_b_proj.weight", w.kv_b_proj.shape[0], num_heads) -
                 c.qk_nope_head_dim;
  return layer;
}

}  // namespace mha::io
