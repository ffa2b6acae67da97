// mha.MultiheadAttention, its double-precision twin mha.NaiveMultiheadAttention, and
// mha.KvCache: PyTorch's argument names, numpy in and out, the GIL released while
// computing.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "src/projection/weight_layout.h"
#include "src/python/bindings.h"
#include "src/python/docstrings.h"
#include "src/python/layer_source.h"
#include "src/python/layer_types.h"

namespace mha::python {
namespace {

// The double-precision baseline behind the layer's interface; keeps its weights.
class NaiveLayer {
 public:
  explicit NaiveLayer(LayerSource source)
      : source_(std::move(source)),
        output_dim_(internal::ValidateLayer(source_.config, source_.weights)) {}

  void Forward(const AttentionInputs& inputs, const AttentionMasks& masks,
               const AttentionOutputs& outputs, const ForwardOptions& options) const {
    NaiveMultiheadAttention(source_.config, source_.weights, inputs, masks, outputs,
                            options);
  }
  const AttentionConfig& config() const { return source_.config; }
  int64_t output_dim() const { return output_dim_; }

 private:
  LayerSource source_;
  int64_t output_dim_;
};

template <class Engine>
std::unique_ptr<PyLayer<Engine>> Build(LayerSource source,
                                       const std::optional<HeadShard>& head_shard,
                                       bool batch_first) {
  Shard(source, head_shard);
  if constexpr (std::is_same_v<Engine, NaiveLayer>) {
    return std::make_unique<PyLayer<Engine>>(
        PyLayer<Engine>{NaiveLayer(std::move(source)), head_shard, batch_first});
  } else {
    return std::make_unique<PyLayer<Engine>>(PyLayer<Engine>{
        MultiheadAttention(source.config, source.weights), head_shard, batch_first});
  }
}

using PyKvCache = Guarded<KvCache>;

// A [B, S, dim] input, turned from PyTorch's default [S, B, dim] when !batch_first.
Input SequenceInput(py::handle object, const char* name, bool batch_first) {
  Input input = ActivationInput(object, name);
  if (batch_first || !input.array || input.array.ndim() != 3) return input;
  return SwappedFirstAxes(input, name);
}

// Where the [B, S, output_dim] (or [S, output_dim]) output goes: the caller's out=
// (batch-first layers only: a sequence-first output is a transposed view of what
// mha writes) or a new array or tensor of the query's kind.
Output LayerOutput(bool batch_first, const Shape& shape, const Input& query,
                   py::handle out) {
  if (out.is_none()) return NewOutput(shape, query);
  if (!batch_first && shape.rank() == 3) {
    throw py::value_error(
        "mha: out: needs a layer built with batch_first=True (a sequence-first "
        "output is returned as a transposed view)");
  }
  return CallerOutput(out, shape);
}

// numpy arrays and torch tensors both have swapaxes; torch's is a view, as
// nn.MultiheadAttention's sequence-first output is.
py::object SequenceOutput(py::object output, bool batch_first, int rank) {
  if (batch_first || rank != 3) return output;
  return output.attr("swapaxes")(0, 1);
}

// query [B, Sq, query_dim] or [S, query_dim]: B (0 unbatched) and Sq.
std::pair<int64_t, int64_t> BatchAndLength(const Shape& query) {
  if (query.rank() != 2 && query.rank() != 3) {
    throw py::value_error(
        "mha: query: expected [B, S, query_dim] or [S, query_dim], got " +
        query.ToString());
  }
  return {query.rank() == 3 ? query[0] : 0, query[query.rank() - 2]};
}

Shape Batched(int64_t batch, Shape shape) {
  return batch ? shape.Prepended(batch) : shape;
}

// The attention weights are sized from the key's shape: it is checked first, so a
// wrong one is a shape error, not an allocation of its claimed size.
void CheckKeyBeforeWeights(const AttentionConfig& config, const Input& query,
                           const Input& key) {
  if (!key.view.present()) return;
  const Shape& q = query.view.shape;
  const Shape& k = key.view.shape;
  const int64_t key_dim = config.resolved_key_dim();
  if (k.rank() != q.rank() || k[k.rank() - 1] != key_dim ||
      (q.rank() == 3 && k[0] != q[0])) {
    throw py::value_error("mha: key: expected " +
                          std::string(q.rank() == 3 ? "[B, S_k, " : "[S_k, ") +
                          std::to_string(key_dim) + "]" +
                          (q.rank() == 3 ? " with B = " + std::to_string(q[0]) : "") +
                          " for query " + q.ToString() + ", got " + k.ToString());
  }
}

struct ForwardArgs {
  py::handle query, key, value, key_padding_mask, attn_mask, position_ids, key_lengths,
      out;
  bool is_causal, need_weights, average_attn_weights, batch_invariant;
  MaskConvention mask_convention;
  CausalAlignment causal_alignment;
  int num_threads;
};

template <class Engine>
py::tuple Forward(const PyLayer<Engine>& self, const ForwardArgs& args) {
  const Input query = SequenceInput(args.query, "query", self.batch_first);
  const Input key = SequenceInput(args.key, "key", self.batch_first);
  const Input value = SequenceInput(args.value, "value", self.batch_first);
  const Input key_padding_mask = MaskInput(args.key_padding_mask, "key_padding_mask");
  const Input attn_mask = MaskInput(args.attn_mask, "attn_mask");
  const Input position_ids = IndexInput(args.position_ids, "position_ids");
  const Input key_lengths = IndexInput(args.key_lengths, "key_lengths");
  const auto [batch, query_len] = BatchAndLength(query.view.shape);
  const Shape& key_shape = key.view.present() ? key.view.shape : query.view.shape;
  const int64_t key_len = key_shape.rank() >= 2 ? key_shape[key_shape.rank() - 2] : 0;

  const Shape output_shape = Batched(batch, Shape{query_len, self.engine.output_dim()});
  const Output output = LayerOutput(self.batch_first, output_shape, query, args.out);
  py::object weights = py::none();
  if (args.need_weights) CheckKeyBeforeWeights(self.engine.config(), query, key);
  AttentionOutputs outputs{output.view, {}};
  if (args.need_weights) {
    const Shape per_query{query_len, key_len};
    auto array = NewFloats(
        Batched(batch, args.average_attn_weights
                           ? per_query
                           : per_query.Prepended(self.engine.config().num_heads)));
    outputs.attn_weights = ViewOf(array);
    weights = query.torch ? py::module_::import("torch").attr("from_numpy")(array)
                          : py::object(std::move(array));
  }
  AttentionMasks masks;
  masks.is_causal = args.is_causal;
  masks.causal_alignment = args.causal_alignment;
  masks.key_padding_mask = key_padding_mask.view;
  masks.key_lengths = key_lengths.view;
  masks.attn_mask = attn_mask.view;
  masks.convention = args.mask_convention;
  ForwardOptions options;
  options.average_attn_weights = args.average_attn_weights;
  options.num_threads = args.num_threads;
  options.position_ids = position_ids.view;
  options.batch_invariant = args.batch_invariant;
  {
    py::gil_scoped_release release;
    self.engine.Forward({query.view, key.view, value.view}, masks, outputs, options);
  }
  return py::make_tuple(
      SequenceOutput(output.Result(), self.batch_first, output_shape.rank()), weights);
}

py::object ForwardWithCache(const PyLayer<MultiheadAttention>& self,
                            py::handle query_object, PyKvCache& cache,
                            py::handle new_lengths_object, py::handle position_ids_object,
                            int num_threads, bool kv_shared, bool batch_invariant,
                            py::handle out) {
  const Input query = SequenceInput(query_object, "query", self.batch_first);
  const Input new_lengths = IndexInput(new_lengths_object, "new_lengths");
  const Input position_ids = IndexInput(position_ids_object, "position_ids");
  const auto [batch, query_len] = BatchAndLength(query.view.shape);
  const Shape output_shape = Batched(batch, Shape{query_len, self.engine.output_dim()});
  const Output output = LayerOutput(self.batch_first, output_shape, query, out);
  ForwardOptions options;
  options.num_threads = num_threads;
  options.position_ids = position_ids.view;
  options.kv_shared = kv_shared;
  options.batch_invariant = batch_invariant;
  cache.Locked([&](KvCache& locked) {
    self.engine.ForwardWithCache(query.view, new_lengths.view, locked, output.view,
                                 options);
  });
  return SequenceOutput(output.Result(), self.batch_first, output_shape.rank());
}

void ProjectMemory(const PyLayer<MultiheadAttention>& self, py::handle memory_object,
                   PyKvCache& cache, py::handle memory_lengths_object) {
  const Input memory = SequenceInput(memory_object, "memory", self.batch_first);
  const Input memory_lengths = IndexInput(memory_lengths_object, "memory_lengths");
  cache.Locked([&](KvCache& locked) {
    self.engine.ProjectMemory(memory.view, memory_lengths.view, locked);
  });
}

py::object ForwardCrossAttention(const PyLayer<MultiheadAttention>& self,
                                 py::handle query_object, PyKvCache& cache,
                                 int num_threads, bool batch_invariant, py::handle out) {
  const Input query = SequenceInput(query_object, "query", self.batch_first);
  const Shape& shape = query.view.shape;
  if (shape.rank() != 3) {
    throw py::value_error("mha: query: expected [B, Sq, query_dim], got " +
                          shape.ToString());
  }
  const Shape output_shape{shape[0], shape[1], self.engine.output_dim()};
  const Output output = LayerOutput(self.batch_first, output_shape, query, out);
  ForwardOptions options;
  options.num_threads = num_threads;
  options.batch_invariant = batch_invariant;
  cache.Locked([&](KvCache& locked) {
    self.engine.ForwardCrossAttention(query.view, locked, output.view, options);
  });
  return SequenceOutput(output.Result(), self.batch_first, output_shape.rank());
}

template <class Engine>
py::class_<PyLayer<Engine>> BindEngine(py::module_& m, const char* name,
                                       const char* doc) {
  using Layer = PyLayer<Engine>;
  py::class_<Layer> layer(m, name, doc);
  layer
      .def(py::init([](const AttentionConfig& config, py::object q_proj_weight,
                       py::object k_proj_weight, py::object v_proj_weight,
                       py::object out_proj_weight, py::object q_proj_bias,
                       py::object k_proj_bias, py::object v_proj_bias,
                       py::object out_proj_bias, py::object sinks,
                       py::object q_norm_weight, py::object k_norm_weight,
                       WeightLayout layout, std::optional<HeadShard> head_shard,
                       bool batch_first) {
             const ProjectionArrays arrays{q_proj_weight,   k_proj_weight, v_proj_weight,
                                           out_proj_weight, q_proj_bias,   k_proj_bias,
                                           v_proj_bias,     out_proj_bias, sinks,
                                           q_norm_weight,   k_norm_weight, layout};
             return Build<Engine>(FromArrays(config, arrays), head_shard, batch_first);
           }),
           py::arg("config"), py::arg("q_proj_weight"), py::arg("k_proj_weight"),
           py::arg("v_proj_weight"), py::arg("out_proj_weight") = py::none(),
           py::kw_only(), py::arg("q_proj_bias") = py::none(),
           py::arg("k_proj_bias") = py::none(), py::arg("v_proj_bias") = py::none(),
           py::arg("out_proj_bias") = py::none(), py::arg("sinks") = py::none(),
           py::arg("q_norm_weight") = py::none(), py::arg("k_norm_weight") = py::none(),
           py::arg("layout") = WeightLayout::kOutIn, py::arg("head_shard") = py::none(),
           py::arg("batch_first") = true, docs::kLayerInit)
      .def_static(
          "from_state_dict",
          [](const py::dict& state_dict, int64_t num_heads, int64_t num_kv_heads,
             std::optional<AttentionConfig> config, std::optional<HeadShard> head_shard,
             std::optional<bool> batch_first, const std::string& prefix) {
            // PyTorch's default for its own names: nn.MultiheadAttention is
            // sequence-first; Hugging Face's layers are batch-first.
            const bool torch_names = state_dict.contains(prefix + "in_proj_weight") ||
                                     state_dict.contains(prefix + "q_proj_weight");
            return Build<Engine>(
                FromStateDict(state_dict, num_heads, num_kv_heads,
                              config.value_or(AttentionConfig()), prefix),
                head_shard, batch_first.value_or(!torch_names));
          },
          py::arg("state_dict"), py::arg("num_heads"), py::arg("num_kv_heads") = 0,
          py::kw_only(), py::arg("config") = py::none(),
          py::arg("head_shard") = py::none(), py::arg("batch_first") = py::none(),
          py::arg("prefix") = "", docs::kFromStateDict)
      .def_property_readonly("config",
                             [](const Layer& self) { return self.engine.config(); })
      .def_property_readonly("output_dim",
                             [](const Layer& self) { return self.engine.output_dim(); })
      .def_readonly("head_shard", &Layer::head_shard)
      .def_readonly("batch_first", &Layer::batch_first);
  for (const char* method : {"forward", "__call__"}) {
    layer.def(
        method,
        [](const Layer& self, py::handle query, py::handle key, py::handle value,
           py::handle key_padding_mask, py::handle attn_mask, bool is_causal,
           bool need_weights, bool average_attn_weights, py::handle position_ids,
           py::handle key_lengths, MaskConvention mask_convention,
           CausalAlignment causal_alignment, int num_threads, bool batch_invariant,
           py::handle out) {
          return Forward(
              self, {query, key, value, key_padding_mask, attn_mask, position_ids,
                     key_lengths, out, is_causal, need_weights, average_attn_weights,
                     batch_invariant, mask_convention, causal_alignment, num_threads});
        },
        py::arg("query"), py::arg("key") = py::none(), py::arg("value") = py::none(),
        py::kw_only(), py::arg("key_padding_mask") = py::none(),
        py::arg("attn_mask") = py::none(), py::arg("is_causal") = false,
        py::arg("need_weights") = false, py::arg("average_attn_weights") = true,
        py::arg("position_ids") = py::none(), py::arg("key_lengths") = py::none(),
        py::arg("mask_convention") = MaskConvention::kTorch,
        py::arg("causal_alignment") = CausalAlignment::kTopLeft,
        py::arg("num_threads") = 0, py::arg("batch_invariant") = false,
        py::arg("out") = py::none(), docs::kForward);
  }
  return layer;
}

}  // namespace

void BindLayer(py::module_& m) {
  // Both classes are registered before either's methods, so that every signature
  // names the other by its Python name.
  py::class_<PyKvCache> kv_cache(
      m, "KvCache",
      "A contiguous KV cache: one layer's keys and values for each of max_batch "
      "sequences (docs/serving.md).");
  py::class_<PyLayer<MultiheadAttention>> layer = BindEngine<MultiheadAttention>(
      m, "MultiheadAttention", "The attention layer: built once, run many times.");
  kv_cache
      .def(py::init([](py::handle layer, int64_t max_batch, int64_t max_seq_len,
                       DType storage, KvScales scales) {
             return WithCacheConfig(layer, [&](const auto& config) {
               return std::make_unique<PyKvCache>(config, max_batch, max_seq_len, storage,
                                                  scales);
             });
           }),
           py::arg("layer"), py::arg("max_batch"), py::arg("max_seq_len"),
           py::arg("storage") = DType::kFloat32, py::arg("scales") = KvScales::kPerToken,
           docs::kKvCache)
      .def("__repr__",
           [](PyKvCache& c) {
             return c.Locked([](KvCache& k) {
               return "KvCache(max_batch=" + std::to_string(k.max_batch()) +
                      ", max_seq_len=" + std::to_string(k.max_seq_len()) +
                      ", bytes_per_token=" + std::to_string(k.bytes_per_token()) + ")";
             });
           })
      .def_property_readonly(
          "bytes_per_token",
          [](PyKvCache& c) {
            return c.Locked([](KvCache& k) { return k.bytes_per_token(); });
          })
      .def_property_readonly(
          "max_batch",
          [](PyKvCache& c) { return c.Locked([](KvCache& k) { return k.max_batch(); }); })
      .def_property_readonly(
          "max_seq_len",
          [](PyKvCache& c) {
            return c.Locked([](KvCache& k) { return k.max_seq_len(); });
          })
      .def(
          "length",
          [](PyKvCache& c, int64_t sequence) {
            return c.Locked([&](KvCache& k) { return k.length(sequence); });
          },
          py::arg("sequence"))
      .def("reset", [](PyKvCache& c) { c.Locked([](KvCache& k) { k.Reset(); }); })
      .def(
          "reset",
          [](PyKvCache& c, int64_t sequence) {
            c.Locked([&](KvCache& k) { k.Reset(sequence); });
          },
          py::arg("sequence"))
      .def(
          "truncate",
          [](PyKvCache& c, int64_t sequence, int64_t length) {
            c.Locked([&](KvCache& k) { k.Truncate(sequence, length); });
          },
          py::arg("sequence"), py::arg("length"));
  layer
      .def("forward_with_cache", &ForwardWithCache, py::arg("query"), py::arg("cache"),
           py::kw_only(), py::arg("new_lengths") = py::none(),
           py::arg("position_ids") = py::none(), py::arg("num_threads") = 0,
           py::arg("kv_shared") = false, py::arg("batch_invariant") = false,
           py::arg("out") = py::none(), docs::kForwardWithCache)
      .def("project_memory", &ProjectMemory, py::arg("memory"), py::arg("cache"),
           py::kw_only(), py::arg("memory_lengths") = py::none(), docs::kProjectMemory)
      .def("forward_cross_attention", &ForwardCrossAttention, py::arg("query"),
           py::arg("cache"), py::kw_only(), py::arg("num_threads") = 0,
           py::arg("batch_invariant") = false, py::arg("out") = py::none(),
           docs::kForwardCrossAttention);
  BindEngine<NaiveLayer>(m, "NaiveMultiheadAttention",
                         "The double-precision loop baseline, for checking.");
}

}  // namespace mha::python
