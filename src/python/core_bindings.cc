// mha.scaled_dot_product_attention: the attention core on already-projected numpy
// arrays or torch tensors, PyTorch's F.scaled_dot_product_attention names.
#include <pybind11/stl.h>

#include <optional>

#include "src/python/arrays.h"
#include "src/python/bindings.h"
#include "src/python/docstrings.h"

namespace mha::python {
namespace {

// A float32 array whose last dimension is contiguous and whose rows do not overlap
// is viewed in place with its strides (a slice of a fused QKV buffer, a transposed
// view); others, broadcast (stride 0) and reversed (negative) views among them, are
// converted.
struct CoreInput {
  Input input;
  TensorView tensor;
};

bool ViewableInPlace(const py::array& array) {
  if (!array.dtype().is(py::dtype::of<float>()) || array.ndim() != 4) return false;
  if (array.strides(3) != sizeof(float)) return false;
  const py::ssize_t row_bytes = array.shape(3) * py::ssize_t(sizeof(float));
  for (int axis = 0; axis < 3; ++axis) {
    if (array.strides(axis) % py::ssize_t(sizeof(float)) != 0) return false;
    if (array.shape(axis) > 1 && array.strides(axis) < row_bytes) return false;
  }
  return true;
}

CoreInput CoreTensor(py::handle object, const char* name) {
  if (object.is_none()) {
    throw py::value_error(std::string("mha: ") + name +
                          ": expected a float array of 4 dimensions, got None");
  }
  CoreInput core;
  const py::array array = py::array::ensure(object);
  if (array && ViewableInPlace(array)) {
    core.input.array = array;
    core.tensor.data = array.data();
    for (int axis = 0; axis < 3; ++axis) {
      core.tensor.strides[axis] = array.strides(axis) / py::ssize_t(sizeof(float));
    }
  } else {
    core.input = FloatInput(object, name);
    core.tensor.data = core.input.view.floats();
  }
  core.tensor.shape = ShapeOf(core.input.array, name);
  return core;
}

// rotary=: a RotaryEmbedding is used as it is; a RotaryConfig gets a table for this
// call, of only the positions the default ones reach (below S_k, or the config's
// max_positions if fewer), not of every position the config allows.
const RotaryEmbedding* RotaryTable(py::handle rotary, int64_t head_dim,
                                   const TensorView& key, HeadLayout layout,
                                   std::optional<RotaryEmbedding>& table) {
  if (rotary.is_none()) return nullptr;
  if (py::isinstance<RotaryEmbedding>(rotary))
    return &rotary.cast<const RotaryEmbedding&>();
  RotaryConfig config = rotary.cast<RotaryConfig>();
  if (key.shape.rank() == 4) {
    const int64_t key_len = key.shape[layout == HeadLayout::kBHSD ? 2 : 1];
    config.max_positions = std::min(config.max_positions, std::max<int64_t>(key_len, 1));
  }
  table.emplace(config, head_dim);
  return &*table;
}

// Outputs follow the query, as the layer calls' do: a torch tensor for a torch query
// (of its dtype, or float32 for the log-sum-exp, as PyTorch keeps it; the core
// computes into float32 arrays, converted once), numpy float32 otherwise.
py::object LikeQuery(py::array_t<float> array, py::handle query, bool query_dtype) {
  if (!IsTorchTensor(query)) return std::move(array);
  const py::object tensor = py::module_::import("torch").attr("from_numpy")(array);
  return query_dtype ? tensor.attr("to")(query.attr("dtype")) : tensor;
}

py::object Attend(py::handle query_object, py::handle key_object, py::handle value_object,
                  py::handle attn_mask_object, bool is_causal, std::optional<float> scale,
                  HeadLayout layout, const AttentionFeatures& features,
                  py::handle sinks_object, py::handle q_norm_weight_object,
                  py::handle k_norm_weight_object, py::handle rotary,
                  py::handle key_padding_mask_object, MaskConvention mask_convention,
                  CausalAlignment causal_alignment, bool return_logsumexp,
                  int num_threads, DType compute_dtype) {
  const CoreInput query = CoreTensor(query_object, "query");
  const CoreInput key = CoreTensor(key_object, "key");
  const CoreInput value = CoreTensor(value_object, "value");
  const Input attn_mask = MaskInput(attn_mask_object, "attn_mask");
  const Input key_padding_mask = MaskInput(key_padding_mask_object, "key_padding_mask");
  const Input sinks = FloatInput(sinks_object, "sinks");
  const Input q_norm_weight = FloatInput(q_norm_weight_object, "q_norm_weight");
  const Input k_norm_weight = FloatInput(k_norm_weight_object, "k_norm_weight");
  const Shape& shape = query.tensor.shape;
  if (shape.rank() != 4) {
    throw py::value_error("mha: query: expected 4 dimensions, got " + shape.ToString());
  }
  // The output has the values' width (which may differ from the keys', as in PyTorch).
  const Shape& value_shape = value.tensor.shape;
  const Shape output_shape{shape[0], shape[1], shape[2],
                           value_shape.rank() == 4 ? value_shape[3] : shape[3]};
  py::array_t<float> output = NewFloats(output_shape);
  const MutableTensorView output_tensor(output.mutable_data(), output_shape);
  const int head_axis = layout == HeadLayout::kBHSD ? 1 : 2;
  py::array_t<float> logsumexp =
      NewFloats(return_logsumexp ? Shape{shape[0], shape[head_axis], shape[3 - head_axis]}
                                 : Shape{0});
  AttentionMasks masks;
  masks.is_causal = is_causal;
  masks.convention = mask_convention;
  masks.causal_alignment = causal_alignment;
  masks.attn_mask = attn_mask.view;
  masks.key_padding_mask = key_padding_mask.view;
  CoreOptions options;
  options.layout = layout;
  options.scale = scale;
  options.features = features;
  options.sinks = sinks.view;
  options.query_norm_weight = q_norm_weight.view;
  options.key_norm_weight = k_norm_weight.view;
  options.num_threads = num_threads;
  options.compute_dtype = compute_dtype;
  std::optional<RotaryEmbedding> rotary_table;
  options.rotary = RotaryTable(rotary, shape[3], key.tensor, layout, rotary_table);
  const MutableTensorView logsumexp_view =
      return_logsumexp ? ViewOf(logsumexp) : MutableTensorView();
  {
    py::gil_scoped_release release;
    ScaledDotProductAttention(query.tensor, key.tensor, value.tensor, masks,
                              output_tensor, options, logsumexp_view);
  }
  py::object result = LikeQuery(std::move(output), query_object, true);
  if (return_logsumexp) {
    return py::make_tuple(result, LikeQuery(std::move(logsumexp), query_object, false));
  }
  return result;
}

}  // namespace

void BindCore(py::module_& m) {
  py::enum_<HeadLayout>(m, "HeadLayout")
      .value("bhsd", HeadLayout::kBHSD)
      .value("bshd", HeadLayout::kBSHD);
  m.def("scaled_dot_product_attention", &Attend, py::arg("query"), py::arg("key"),
        py::arg("value"), py::arg("attn_mask") = py::none(), py::arg("is_causal") = false,
        py::arg("scale") = py::none(), py::kw_only(),
        py::arg("layout") = HeadLayout::kBHSD, py::arg("features") = AttentionFeatures(),
        py::arg("sinks") = py::none(), py::arg("q_norm_weight") = py::none(),
        py::arg("k_norm_weight") = py::none(), py::arg("rotary") = py::none(),
        py::arg("key_padding_mask") = py::none(),
        py::arg("mask_convention") = MaskConvention::kSdpa,
        py::arg("causal_alignment") = CausalAlignment::kTopLeft,
        py::arg("return_logsumexp") = false, py::arg("num_threads") = 0,
        py::arg("compute_dtype") = DType::kFloat32, docs::kScaledDotProductAttention);
}

}  // namespace mha::python
