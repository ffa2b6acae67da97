// LayerFile: a layer's weights read from a safetensors file of PyTorch state_dict
// names, for a C++ server that loads its own checkpoints (mha-run's --weights and the
// Python module's from_state_dict read the same names; C: mha_layer_create_from_file).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mha/config.hpp"
#include "mha/weights.hpp"

namespace mha {

class LayerFile {
 public:
  // Reads `path`: nn.MultiheadAttention's names (in_proj_weight, ... out_proj.*) or
  // separate q_proj/k_proj/v_proj and out_proj or o_proj (.weight, .bias), optional
  // sinks, q_norm.weight and k_norm.weight; F32, BF16 or F16 tensors, widened to
  // float32. With a prefix ("model.layers.0.self_attn."), only the tensors named with
  // it are read, the prefix taken off: one layer of a whole model's shard. The header
  // is checked whole before any tensor is read, and only this layer's tensors are.
  // Throws mha::Error naming the file and what is wrong with it (a name the layer
  // does not read, a bad shape, a malformed file).
  static LayerFile Read(const std::string& path, int64_t num_heads,
                        int64_t num_kv_heads = 0, const std::string& prefix = "");

  // num_heads, head_dim, query/key/value dims and num_kv_heads from the weights;
  // every other field its default: copy it and set the features, rotary embedding and
  // dtypes the model uses before building a layer.
  const AttentionConfig& config() const;
  // Views of the file's tensors (float32, [out, in]), valid while this object lives;
  // a MultiheadAttention built from them copies them.
  const AttentionWeights& weights() const;

  ~LayerFile();
  LayerFile(LayerFile&&) noexcept;
  LayerFile& operator=(LayerFile&&) noexcept;

  struct Impl;

 private:
  explicit LayerFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha
