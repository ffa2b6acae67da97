// Python classes for the layer's configuration, with the C++ field names.
#include <pybind11/stl.h>

#include "mha/mha.hpp"
#include "src/python/bindings.h"

namespace mha::python {

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
      .value("zero_means_masked", MaskConvention::kZeroMeansMasked);
  py::enum_<CausalAlignment>(m, "CausalAlignment")
      .value("top_left", CausalAlignment::kTopLeft)
      .value("bottom_right", CausalAlignment::kBottomRight);
  py::enum_<QkNormScope>(m, "QkNormScope", "Which values one QK-norm RMSNorm spans.")
      .value("per_head", QkNormScope::kPerHead)
      .value("across_heads", QkNormScope::kAcrossHeads);
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
      .def_readwrite("attention_factor", &RopeScaling::attention_factor);
  py::class_<RotaryConfig>(m, "RotaryConfig")
      .def(py::init(&FromKeywords<RotaryConfig>))
      .def_readwrite("pairing", &RotaryConfig::pairing)
      .def_readwrite("rotary_dim", &RotaryConfig::rotary_dim)
      .def_readwrite("theta", &RotaryConfig::theta)
      .def_readwrite("scaling", &RotaryConfig::scaling)
      .def_readwrite("inv_freq", &RotaryConfig::inv_freq)
      .def_readwrite("attention_factor", &RotaryConfig::attention_factor)
      .def_readwrite("max_positions", &RotaryConfig::max_positions);
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

void BindFeatures(py::module_& m) {
  py::class_<AttentionTemperature>(m, "AttentionTemperature",
                                   "Llama 4's query temperature by position.")
      .def(py::init(&FromKeywords<AttentionTemperature>))
      .def_readwrite("floor_scale", &AttentionTemperature::floor_scale)
      .def_readwrite("attn_scale", &AttentionTemperature::attn_scale);
  py::class_<QkNorm>(m, "QkNorm",
                     "RMSNorm of queries and keys before rotation (Qwen 3, Gemma 3 with "
                     "unit_offset, OLMo 2 across heads); weights are the layer's "
                     "q_norm_weight and k_norm_weight.")
      .def(py::init(&FromKeywords<QkNorm>))
      .def_readwrite("eps", &QkNorm::eps)
      .def_readwrite("unit_offset", &QkNorm::unit_offset)
      .def_readwrite("scope", &QkNorm::scope)
      .def_readwrite("value_norm", &QkNorm::value_norm);
  py::class_<AttentionFeatures>(m, "AttentionFeatures")
      .def(py::init(&FromKeywords<AttentionFeatures>))
      .def_readwrite("softcap", &AttentionFeatures::softcap)
      .def_readwrite("alibi", &AttentionFeatures::alibi)
      .def_readwrite("alibi_slopes", &AttentionFeatures::alibi_slopes)
      .def_readwrite("sliding_window", &AttentionFeatures::sliding_window)
      .def_readwrite("sliding_window_right", &AttentionFeatures::sliding_window_right)
      .def_readwrite("attention_chunk_size", &AttentionFeatures::attention_chunk_size)
      .def_readwrite("temperature_tuning", &AttentionFeatures::temperature_tuning)
      .def_readwrite("qk_norm", &AttentionFeatures::qk_norm);
}

}  // namespace

void BindConfig(py::module_& m) {
  BindEnums(m);
  BindRotary(m);
  BindFeatures(m);
  py::class_<AttentionConfig>(m, "AttentionConfig",
                              "The sizes and features of a layer (mha/config.hpp).")
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
      .def_readwrite("rotary", &AttentionConfig::rotary);
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
