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

// A size derived from tensor shapes: refused naming the tensor and its shape when it
// falls below `min`, before the layer would blame the derived field.
int64_t Derived(const LoadedLatentLayer& layer, const std::string& name,
                const TensorView& tensor, const std::string& field, int64_t value,
                int64_t min, const std::string& how) {
  if (value < min) {
    throw FileError(layer.file.path() + ": '" + name + "' of shape " +
                    tensor.shape.ToString() + " gives " + field + " = " + how + " = " +
                    std::to_string(value) + ", must be >= " + std::to_string(min));
  }
  return value;
}

void RefuseTwoQueryForms(const LoadedLatentLayer& layer) {
  for (const char* low_rank :
       {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"}) {
    if (layer.file.Has(low_rank)) {
      throw FileError(layer.file.path() + ": both 'q_proj.weight' and '" + low_rank +
                      "' (one query projection: q_proj, or q_a_proj, q_a_layernorm and "
                      "q_b_proj)");
    }
  }
}

}  // namespace

LoadedLatentLayer LoadLatentLayer(const std::string& path, int64_t num_heads,
                                  const std::string& prefix) {
  if (num_heads < 1) {
    throw FileError(path + ": num_heads must be >= 1, got " + std::to_string(num_heads));
  }
  LoadedLatentLayer layer{Safetensors::Read(path, prefix), {}, {}};
  LatentAttentionConfig& c = layer.config;
  LatentAttentionWeights& w = layer.weights;
  c.num_heads = num_heads;
  w.kv_a_layernorm = Need(layer, "kv_a_layernorm.weight", 1);
  w.kv_a_proj_with_mqa = Need(layer, "kv_a_proj_with_mqa.weight", 2);
  w.kv_b_proj = Need(layer, "kv_b_proj.weight", 2);
  w.o_proj = Need(layer, "o_proj.weight", 2);
  c.kv_lora_rank = w.kv_a_layernorm.shape[0];
  c.hidden_size = w.kv_a_proj_with_mqa.shape[1];
  const int64_t kv_a_rows = w.kv_a_proj_with_mqa.shape[0];
  c.qk_rope_head_dim =
      Derived(layer, "kv_a_proj_with_mqa.weight", w.kv_a_proj_with_mqa,
              "qk_rope_head_dim", kv_a_rows - c.kv_lora_rank, 0,
              "its rows " + std::to_string(kv_a_rows) + " - kv_lora_rank " +
                  std::to_string(c.kv_lora_rank) + " (kv_a_layernorm.weight's length)");
  if (layer.file.Has("q_proj.weight")) {
    RefuseTwoQueryForms(layer);
    w.q_proj = Need(layer, "q_proj.weight", 2);
  } else {
    w.q_a_proj = Need(layer, "q_a_proj.weight", 2);
    w.q_a_layernorm = Need(layer, "q_a_layernorm.weight", 1);
    w.q_b_proj = Need(layer, "q_b_proj.weight", 2);
    c.q_lora_rank = w.q_a_proj.shape[0];
  }
  const std::string query_name = c.q_lora_rank > 0 ? "q_b_proj.weight" : "q_proj.weight";
  const TensorView& query = c.q_lora_rank > 0 ? w.q_b_proj : w.q_proj;
  const int64_t query_per_head = PerHead(layer, query_name, query.shape[0], num_heads);
  c.qk_nope_head_dim =
      Derived(layer, query_name, query, "qk_nope_head_dim",
              query_per_head - c.qk_rope_head_dim, 1,
              "its rows per head " + std::to_string(query_per_head) +
                  " - qk_rope_head_dim " + std::to_string(c.qk_rope_head_dim));
  const int64_t kv_b_per_head =
      PerHead(layer, "kv_b_proj.weight", w.kv_b_proj.shape[0], num_heads);
  c.v_head_dim = Derived(layer, "kv_b_proj.weight", w.kv_b_proj, "v_head_dim",
                         kv_b_per_head - c.qk_nope_head_dim, 1,
                         "its rows per head " + std::to_string(kv_b_per_head) +
                             " - qk_nope_head_dim " + std::to_string(c.qk_nope_head_dim));
  return layer;
}

}  // namespace mha::io
