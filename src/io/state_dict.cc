// Maps PyTorch state_dict names onto mha::AttentionWeights.
#include "src/io/state_dict.h"

#include "mha/error.hpp"
#include "src/io/array.h"

namespace mha::io {
namespace {

// A lookup with the source's name, for messages.
struct Lookup {
  const TensorLookup& find;
  const std::string& source;

  TensorView Find(const std::string& name) const { return find(name); }
  bool Has(const std::string& name) const { return find(name).present(); }
  const std::string& path() const { return source; }
};

// Splits in_proj_bias [3 * model] into views for query, key and value.
void AttachPackedBias(const Lookup& file, int64_t model_dim, AttentionWeights& weights) {
  const TensorView bias = file.Find("in_proj_bias");
  if (!bias.present()) return;
  if (bias.dtype != DType::kFloat32 || bias.shape != Shape{3 * model_dim}) {
    throw FileError(file.path() + ": in_proj_bias must be float32 [" +
                    std::to_string(3 * model_dim) + "], got " + DTypeName(bias.dtype) +
                    " " + bias.shape.ToString());
  }
  Projection* parts[3] = {&weights.query, &weights.key, &weights.value};
  for (int i = 0; i < 3; ++i) {
    parts[i]->bias = TensorView(bias.floats() + i * model_dim, Shape{model_dim});
  }
}

AttentionWeights FindInputWeights(const Lookup& file) {
  AttentionWeights weights;
  if (file.Has("in_proj_weight")) {
    return FromPackedInProjection(file.Find("in_proj_weight"), file.Find("in_proj_bias"),
                                  {}, {});
  }
  if (file.Has("q_proj_weight")) {
    weights.query.weight = file.Find("q_proj_weight");
    weights.key.weight = file.Find("k_proj_weight");
    weights.value.weight = file.Find("v_proj_weight");
    if (weights.query.weight.shape.rank() == 2) {
      AttachPackedBias(file, weights.query.weight.shape[0], weights);
    }
    return weights;
  }
  if (file.Has("q_proj.weight")) {
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    Projection* parts[3] = {&weights.query, &weights.key, &weights.value};
    for (int i = 0; i < 3; ++i) {
      parts[i]->weight = file.Find(std::string(names[i]) + ".weight");
      parts[i]->bias = file.Find(std::string(names[i]) + ".bias");
    }
    return weights;
  }
  throw FileError(file.path() +
                  ": no in_proj_weight, q_proj_weight or q_proj.weight tensor found");
}

// Every name the layer reads: nn.MultiheadAttention's, nn.Linear's (out_proj, or
// Hugging Face's o_proj), sinks and the QK-norm weights.
constexpr const char* kKnownNames[] = {
    "in_proj_weight", "in_proj_bias",  "q_proj_weight", "k_proj_weight",
    "v_proj_weight",  "q_proj.weight", "q_proj.bias",   "k_proj.weight",
    "k_proj.bias",    "v_proj.weight", "v_proj.bias",   "out_proj.weight",
    "out_proj.bias",  "o_proj.weight", "o_proj.bias",   "sinks",
    "q_norm.weight",  "k_norm.weight"};

// A checkpoint's name for a known one ("model.layers.0.self_attn.q_proj.weight"):
// the prefix to take off, or "" when the name ends in no known name.
std::string PrefixOf(const std::string& name) {
  for (const char* accepted : kKnownNames) {
    const std::string suffix = std::string(".") + accepted;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return name.substr(0, name.size() - suffix.size() + 1);
    }
  }
  return "";
}

void CheckNamesKnown(const std::vector<std::string>& names, const std::string& source) {
  for (const std::string& name : names) {
    bool known = false;
    for (const char* accepted : kKnownNames) known = known || name == accepted;
    if (known) continue;
    const std::string prefix = PrefixOf(name);
    if (!prefix.empty()) {
      throw FileError(
          source + ": tensor '" + Printable(name) +
          "' is a checkpoint's name: give its prefix '" + Printable(prefix) +
          "' (mha-run --prefix, from_state_dict's prefix=) to read one layer");
    }
    std::string list;
    for (const char* accepted : kKnownNames)
      list += (list.empty() ? "" : ", ") + std::string(accepted);
    throw FileError(source + ": unknown tensor '" + Printable(name) +
                    "' (a layer's tensors are " + list + ")");
  }
}

// The output projection: out_proj (PyTorch) or o_proj (Llama, Mistral, Qwen).
Projection FindOutput(const Lookup& file) {
  const bool out = file.Has("out_proj.weight") || file.Has("out_proj.bias");
  const bool o = file.Has("o_proj.weight") || file.Has("o_proj.bias");
  if (out && o) {
    throw FileError(file.path() +
                    ": both out_proj and o_proj tensors given; which is "
                    "the output projection is ambiguous");
  }
  const std::string name = o ? "o_proj" : "out_proj";
  Projection output;
  output.weight = file.Find(name + ".weight");
  output.bias = file.Find(name + ".bias");
  return output;
}

int64_t Columns(const Lookup& file, const char* what, const TensorView& weight) {
  if (!weight.present()) throw FileError(file.path() + ": missing " + what + " weight");
  if (weight.shape.rank() != 2) {
    throw FileError(file.path() + ": " + what + " weight must be 2-D [out, in], got " +
                    weight.shape.ToString());
  }
  return weight.shape[1];
}

}  // namespace

LayerFromNames LayerFromStateDict(const TensorLookup& find,
                                  const std::vector<std::string>& names,
                                  const std::string& source, int64_t num_heads,
                                  int64_t num_kv_heads) {
  CheckNamesKnown(names, source);
  const Lookup file{find, source};
  LayerFromNames layer;
  layer.weights = FindInputWeights(file);
  layer.weights.output = FindOutput(file);
  layer.weights.sinks = file.Find("sinks");
  layer.weights.query_norm_weight = file.Find("q_norm.weight");
  layer.weights.key_norm_weight = file.Find("k_norm.weight");

  AttentionConfig& config = layer.config;
  config.query_dim = Columns(file, "query", layer.weights.query.weight);
  config.key_dim = Columns(file, "key", layer.weights.key.weight);
  config.value_dim = Columns(file, "value", layer.weights.value.weight);
  const int64_t model_dim = layer.weights.query.weight.shape[0];
  // An argument's error, not the file's: mha::Error (Python's ValueError, not FileError).
  if (num_heads < 1 || model_dim % num_heads != 0) {
    throw Error("num_heads: expected a divisor of the query projection's " +
                std::to_string(model_dim) + " rows (" + source + "), got " +
                std::to_string(num_heads));
  }
  config.num_heads = num_heads;
  config.head_dim = model_dim / num_heads;
  config.num_kv_heads = num_kv_heads;
  return layer;
}

}  // namespace mha::io
