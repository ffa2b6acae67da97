// mha.MultiheadLatentAttention (DeepSeek V2/V3's MLA, latent_attention.hpp) and its
// double-precision twin. Its caches are mha.KvCache and mha.PagedKvCache made from it
// (per token the latent and the rotary key part: layer_types.h's CacheConfig).
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "src/python/arrays.h"
#include "src/python/bindings.h"
#include "src/python/docstrings.h"
#include "src/python/layer_types.h"

namespace mha::python {
namespace {

// The weights as nn.Linear arrays [out, in] (float32 copies kept while they are
// viewed; the layer copies them again into its packed form).
struct LatentArrays {
  std::vector<Input> arrays;
  LatentAttentionWeights weights;
};

LatentArrays ReadWeights(const py::dict& weights) {
  static const std::pair<const char*, TensorView LatentAttentionWeights::*> kNames[] = {
      {"q_proj", &LatentAttentionWeights::q_proj},
      {"q_a_proj", &LatentAttentionWeights::q_a_proj},
      {"q_a_layernorm", &LatentAttentionWeights::q_a_layernorm},
      {"q_b_proj", &LatentAttentionWeights::q_b_proj},
      {"kv_a_proj_with_mqa", &LatentAttentionWeights::kv_a_proj_with_mqa},
      {"kv_a_layernorm", &LatentAttentionWeights::kv_a_layernorm},
      {"kv_b_proj", &LatentAttentionWeights::kv_b_proj},
      {"o_proj", &LatentAttentionWeights::o_proj}};
  LatentArrays read;
  for (const auto& [key, value] : weights) {
    const std::string name = py::str(key);
    const auto* known =
        std::find_if(std::begin(kNames), std::end(kNames),
                     [&](const auto& entry) { return name == entry.first; });
    if (known == std::end(kNames)) {
      throw py::type_error("mha: MultiheadLatentAttention: no weight '" + name + "'");
    }
    read.arrays.push_back(FloatInput(value, known->first));
    read.weights.*(known->second) = read.arrays.back().view;
  }
  return read;
}

// The double-precision expanded form, for checking: keeps its weights.
struct NaiveLatentLayer {
  LatentAttentionConfig config;
  LatentArrays weights;
};

// What both latent calls read: the hidden states, where their output goes, and the
// options.
struct LatentCall {
  LatentCall(py::handle hidden_object, py::handle position_ids_object, int num_threads,
             bool batch_invariant, py::handle out)
      : hidden(ActivationInput(hidden_object, "hidden_states")),
        position_ids(IndexInput(position_ids_object, "position_ids")),
        output(out.is_none() ? NewOutput(hidden.view.shape, hidden)
                             : CallerOutput(out, hidden.view.shape)) {
    options.num_threads = num_threads;
    options.position_ids = position_ids.view;
    options.batch_invariant = batch_invariant;
  }
  Input hidden, position_ids;
  Output output;
  ForwardOptions options;
};

py::object ForwardWithCache(const LatentLayer& self, py::handle hidden_states,
                            Guarded<KvCache>& cache, py::handle position_ids,
                            int num_threads, bool batch_invariant, py::handle out) {
  const LatentCall call(hidden_states, position_ids, num_threads, batch_invariant, out);
  cache.Locked([&](KvCache& locked) {
    self.engine.ForwardWithCache(call.hidden.view, locked, call.output.view,
                                 call.options);
  });
  return call.output.Result();
}

py::object ForwardPacked(const LatentLayer& self, py::handle hidden_states,
                         py::handle sequence_ids_object,
                         py::handle query_start_loc_object, Guarded<PagedKvCache>& cache,
                         int64_t layer, py::handle position_ids,
                         py::handle tree_parents_object, int num_threads,
                         bool batch_invariant, py::handle out) {
  const LatentCall call(hidden_states, position_ids, num_threads, batch_invariant, out);
  const Input sequence_ids = IndexInput(sequence_ids_object, "sequence_ids");
  const Input query_start_loc = IndexInput(query_start_loc_object, "query_start_loc");
  const Input tree_parents = IndexInput(tree_parents_object, "tree_parents");
  const PackedBatch batch{sequence_ids.view, query_start_loc.view, tree_parents.view};
  cache.Locked([&](PagedKvCache& locked) {
    self.engine.ForwardPacked(call.hidden.view, batch, locked, layer, call.output.view,
                              call.options);
  });
  return call.output.Result();
}

py::array_t<float> NaiveForward(const NaiveLatentLayer& self, py::handle hidden_object) {
  const Input hidden = FloatInput(hidden_object, "hidden_states");
  py::array_t<float> output = NewFloats(hidden.view.shape);
  NaiveMultiheadLatentAttention(self.config, self.weights.weights, hidden.view,
                                ViewOf(output));
  return output;
}

void BindLatentConfig(py::module_& m) {
  py::enum_<LatentForm>(
      m, "LatentForm",
      "How an MLA call attends (docs/api.md, \"Multi-head latent attention\").")
      .value("auto", LatentForm::kAuto)
      .value("absorbed", LatentForm::kAbsorbed)
      .value("expanded", LatentForm::kExpanded);
  py::class_<LatentAttentionConfig>(
      m, "LatentAttentionConfig", "The sizes of an MLA layer (DeepSeek's config names).")
      .def(py::init(&FromKeywords<LatentAttentionConfig>))
      .def_readwrite("hidden_size", &LatentAttentionConfig::hidden_size)
      .def_readwrite("num_heads", &LatentAttentionConfig::num_heads)
      .def_readwrite("q_lora_rank", &LatentAttentionConfig::q_lora_rank)
      .def_readwrite("kv_lora_rank", &LatentAttentionConfig::kv_lora_rank)
      .def_readwrite("qk_nope_head_dim", &LatentAttentionConfig::qk_nope_head_dim)
      .def_readwrite("qk_rope_head_dim", &LatentAttentionConfig::qk_rope_head_dim)
      .def_readwrite("v_head_dim", &LatentAttentionConfig::v_head_dim)
      .def_readwrite("rms_norm_eps", &LatentAttentionConfig::rms_norm_eps)
      .def_readwrite("rotary", &LatentAttentionConfig::rotary)
      .def_readwrite("softmax_scale", &LatentAttentionConfig::softmax_scale)
      .def_readwrite("form", &LatentAttentionConfig::form)
      .def("__repr__", &FieldsRepr);
}

}  // namespace

void BindLatent(py::module_& m) {
  BindLatentConfig(m);
  py::class_<LatentLayer>(m, "MultiheadLatentAttention", docs::kLatentInit)
      .def(py::init([](const LatentAttentionConfig& config, const py::kwargs& weights) {
             const LatentArrays read = ReadWeights(weights);
             return std::make_unique<LatentLayer>(
                 LatentLayer{MultiheadLatentAttention(config, read.weights)});
           }),
           py::arg("config"))
      .def_property_readonly("config",
                             [](const LatentLayer& self) { return self.engine.config(); })
      .def("forward_with_cache", &ForwardWithCache, py::arg("hidden_states"),
           py::arg("cache"), py::kw_only(), py::arg("position_ids") = py::none(),
           py::arg("num_threads") = 0, py::arg("batch_invariant") = false,
           py::arg("out") = py::none(), docs::kLatentForwardWithCache)
      .def("forward_packed", &ForwardPacked, py::arg("hidden_states"),
           py::arg("sequence_ids"), py::arg("query_start_loc"), py::arg("cache"),
           py::arg("layer_index") = 0, py::kw_only(),
           py::arg("position_ids") = py::none(), py::arg("tree_parents") = py::none(),
           py::arg("num_threads") = 0, py::arg("batch_invariant") = false,
           py::arg("out") = py::none(), docs::kLatentForwardPacked);
  py::class_<NaiveLatentLayer>(
      m, "NaiveMultiheadLatentAttention",
      "The double-precision expanded MLA baseline, for checking: "
      "causal self-attention of [B, S, hidden] at 0 .. S - 1.")
      .def(py::init([](const LatentAttentionConfig& config, const py::kwargs& weights) {
             return std::make_unique<NaiveLatentLayer>(
                 NaiveLatentLayer{config, ReadWeights(weights)});
           }),
           py::arg("config"))
      .def("forward", &NaiveForward, py::arg("hidden_states"));
}

}  // namespace mha::python
