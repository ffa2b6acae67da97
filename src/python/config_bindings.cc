// Python classes for the layer's configuration, with the C++ field names.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mha/mha.hpp"
#include "src/features/feature_options.h"
#include "src/python/bindings.h"

namespace mha::python {

namespace {

// A field's text: an enum as its name (DType.bfloat16), anything else as its repr.
std::string FieldText(py::handle value) {
  if (py::hasattr(py::type::of(value), "__members__")) return py::str(value);
  return py::repr(value);
}

}  // namespace

// "Class(field=value, ...)": the fields (the class's properties, in the order they
// are bound) that differ from a default-constructed instance, so that a config shows
// what was set; a nested config shows itself the same way.
std::string FieldsRepr(py::handle self) {
  const py::handle type = py::type::of(self);
  const py::object defaults = type();
  const py::handle property = reinterpret_cast<PyObject*>(&PyProperty_Type);
  std::string text = py::str(type.attr("__name__")).cast<std::string>() + "(";
  bool first = true;
  for (const auto& [name, member] : py::dict(type.attr("__dict__"))) {
    if (!py::isinstance(member, property)) continue;
    const std::string value = FieldText(self.attr(name));
    if (value == FieldText(defaults.attr(name))) continue;
    text += (first ? "" : ", ") + py::str(name).cast<std::string>() + "=" + value;
    first = false;
  }
  return text + ")";
}

namespace {

void BindEnums(py::module_& m) {
  py::enum_<DType>(m, "DType")
      .value("float32", DType::kFloat32)
      .value("bfloat16", DType::kBFloat16)
      .value("int8", DType::kInt8)
      .value("float8_e4m3fn", DType::kFloat8E4M3)
      .value("float8_e5m2", DType::kFloat8E5M2)
      .value("int4", DType::kInt4);
  py::enum_<KvScales>(m, "KvScales", "How a quantised KV cache scales what it stores.")
      .value("per_token", KvScales::kPerToken)
      .value("none", KvScales::kNone)
      .value("per_channel_keys", KvScales::kPerChannelKeys)
      .value("per_group", KvScales::kPerGroup);
  py::enum_<WeightLayout>(m, "WeightLayout", "How a projection weight is laid out.")
      .value("out_in", WeightLayout::kOutIn)
      .value("in_out", WeightLayout::kInOut)
      .value("heads_in_head_dim", WeightLayout::kHeadsInHeadDim);
  py::enum_<RotaryPairing>(m, "RotaryPairing")
      .value("none", RotaryPairing::kNone)
      .value("half_split", RotaryPairing::kHalfSplit)
      .value("interleaved", RotaryPairing::kInterleaved);
  py::enum_<RopeScalingType>(m, "RopeScalingType")
      .value("none", RopeScalingType::kNone)
      .value("linear", RopeScalingType::kLinear)
      .value("llama3", RopeScalingType::kLlama3)
      .value("dynamic", RopeScalingType::kDynamic)
      .value("longrope", RopeScalingType::kLongRope);
  py::enum_<MaskConvention>(m, "MaskConvention")
      .value("torch", MaskConvention::kTorch)
      .value("zero_means_masked", MaskConvention::kZeroMeansMasked)
      .value("sdpa", MaskConvention::kSdpa);
  py::enum_<CausalAlignment>(m, "CausalAlignment")
      .value("top_left", CausalAlignment::kTopLeft)
      .value("bottom_right", CausalAlignment::kBottomRight);
  py::enum_<QkNormScope> scope(m, "QkNormScope",
                               "Which values one QK-norm RMSNorm spans.");
  for (QkNormScope value : {QkNormScope::kPerHead, QkNormScope::kAcrossHeads}) {
    scope.value(internal::QkNormScopeName(value), value);
  }
}

void BindRotary(py::module_& m) {
  py::class_<RopeScaling>(m, "RopeScaling")
      .def(py::init(&FromKeywords<RopeScaling>))
      .def_readwrite("type", &RopeScaling::type)
      .def_readwrite("factor", &RopeScaling::factor)
      .def_readwrite("low_freq_factor", &RopeScaling::low_freq_factor)
      .def_readwrite("high_freq_factor", &RopeScaling::high_freq_factor)
      .def_readwrite("original_max_position_embeddings",
                     &RopeScaling::original_max_position_embeddings)
      .def_readwrite("short_factor", &RopeScaling::short_factor)
      .def_readwrite("long_factor", &RopeScaling::long_factor)
      .def_readwrite("attention_factor", &RopeScaling::attention_factor)
      .def("__repr__", &FieldsRepr);
  py::class_<RotaryConfig>(m, "RotaryConfig")
      .def(py::init(&FromKeywords<RotaryConfig>))
      .def_readwrite("pairing", &RotaryConfig::pairing)
      .def_readwrite("rotary_dim", &RotaryConfig::rotary_dim)
      .def_readwrite("theta", &RotaryConfig::theta)
      .def_readwrite("scaling", &RotaryConfig::scaling)
      .def_readwrite("inv_freq", &RotaryConfig::inv_freq)
      .def_readwrite("attention_factor", &RotaryConfig::attention_factor)
      .def_readwrite("max_positions", &RotaryConfig::max_positions)
      .def("__repr__", &FieldsRepr);
  py::class_<RotaryEmbedding>(m, "RotaryEmbedding",
                              "The cos/sin table of a RotaryConfig for head_dim, built "
                              "once: pass it as rotary= to reuse it across calls.")
      .def(py::init<const RotaryConfig&, int64_t>(), py::arg("config"),
           py::arg("head_dim"))
      .def_property_readonly("head_dim", &RotaryEmbedding::head_dim)
      .def_property_readonly("rotary_dim", &RotaryEmbedding::rotary_dim)
      .def_property_readonly("max_positions", &RotaryEmbedding::max_positions)
      .def_property_readonly("inv_freq", &RotaryEmbedding::inv_freq);
}

template <class Class, class Pointer>
void BindMember(Class& python_class, Pointer member,
                const internal::FeatureOptionInfo& info) {
  const std::string doc = std::string(info.doc) + " (default " + info.default_text +
                          (*info.range ? std::string("; ") + info.range : "") + ")";
  python_class.def_readwrite(info.member, member, doc.c_str());
}

template <class Classes, auto Member>
void BindField(Classes& classes, const internal::FeatureOptionInfo& info,
               internal::FeatureField<Member>) {
  BindMember(std::get<py::class_<AttentionFeatures>&>(classes), Member, info);
}

template <class Classes, auto Group, auto Member>
void BindField(Classes& classes, const internal::FeatureOptionInfo& info,
               internal::GroupField<Group, Member>) {
  using GroupType =
      typename std::remove_reference_t<decltype(std::declval<AttentionFeatures>().*
                                                Group)>::value_type;
  BindMember(std::get<py::class_<GroupType>&>(classes), Member, info);
}

// Every field of the three feature classes, with its help, from the option table.
template <class... Class>
void BindFeatureFields(Class&... classes) {
  auto bound = std::tie(classes...);
  internal::ForEachFeatureOption(
      [&](const internal::FeatureOptionInfo& info, auto field) {
        BindField(bound, info, decltype(field){});
      });
}

void BindFeatures(py::module_& m) {
  py::class_<AttentionTemperature> temperature(
      m, "AttentionTemperature", "Llama 4's query temperature by position.");
  py::class_<QkNorm> qk_norm(m, "QkNorm",
                             "RMSNorm of queries and keys before rotation (Qwen 3, Gemma "
                             "3 with unit_offset, OLMo 2 across heads); weights are the "
                             "layer's q_norm_weight and k_norm_weight.");
  py::class_<AttentionFeatures> features(
      m, "AttentionFeatures",
      "What a layer or a core call does besides Q K^T: soft-cap, ALiBi, windows, "
      "chunks, query temperature, QK-norm (docs/api.md, \"Feature options\").");
  temperature.def(py::init(&FromKeywords<AttentionTemperature>));
  qk_norm.def(py::init(&FromKeywords<QkNorm>));
  features.def(py::init(&FromKeywords<AttentionFeatures>));
  BindFeatureFields(temperature, qk_norm, features);
  temperature.def("__repr__", &FieldsRepr);
  qk_norm.def("__repr__", &FieldsRepr);
  features.def("__repr__", &FieldsRepr);
  m.def(
      "feature_options",
      [] {
        py::list options;
        internal::ForEachFeatureOption(
            [&](const internal::FeatureOptionInfo& info, auto) {
              options.append(py::dict(
                  py::arg("name") = info.name, py::arg("path") = info.path(),
                  py::arg("flag") = info.flag(), py::arg("default") = info.default_text,
                  py::arg("range") = info.range, py::arg("doc") = info.doc));
            });
        return options;
      },
      "The feature options, one dict each (name: the C field; path: the field from "
      "AttentionFeatures; flag: mha-run's; default, range, doc), as "
      "the one option table declares them (docs/api.md, \"Feature options\").");
}

}  // namespace

void BindConfig(py::module_& m) {
  BindEnums(m);
  BindRotary(m);
  BindFeatures(m);
  py::class_<AttentionConfig>(m, "AttentionConfig",
                              "The sizes and features of a layer (docs/api.md).")
      .def(py::init(&FromKeywords<AttentionConfig>))
      .def_readwrite("num_heads", &AttentionConfig::num_heads)
      .def_readwrite("head_dim", &AttentionConfig::head_dim)
      .def_readwrite("query_dim", &AttentionConfig::query_dim)
      .def_readwrite("key_dim", &AttentionConfig::key_dim)
      .def_readwrite("value_dim", &AttentionConfig::value_dim)
      .def_readwrite("scale", &AttentionConfig::scale)
      .def_readwrite("num_kv_heads", &AttentionConfig::num_kv_heads)
      .def_readwrite("weight_dtype", &AttentionConfig::weight_dtype)
      .def_readwrite("compute_dtype", &AttentionConfig::compute_dtype)
      .def_readwrite("features", &AttentionConfig::features)
      .def_readwrite("rotary", &AttentionConfig::rotary)
      .def("__repr__", &FieldsRepr);
  py::class_<HeadShard>(m, "HeadShard", "Query heads [first_head, end_head) of a layer.")
      .def(py::init([](int64_t first_head, int64_t end_head) {
             return HeadShard{first_head, end_head};
           }),
           py::arg("first_head"), py::arg("end_head"))
      .def_readwrite("first_head", &HeadShard::first_head)
      .def_readwrite("end_head", &HeadShard::end_head)
      .def("__repr__", [](const HeadShard& shard) {
        return "HeadShard(" + std::to_string(shard.first_head) + ", " +
               std::to_string(shard.end_head) + ")";
      });
  m.def(
      "even_head_shard", &EvenHeadShard, py::arg("config"), py::arg("rank"),
      py::arg("world_size"),
      "Shard `rank` of `world_size`: the key/value groups split as evenly as possible.");
}

}  // namespace mha::python
