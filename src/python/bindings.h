// The parts of the Python module `mha`, each defined in its own file.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace mha::python {

namespace py = pybind11;

// DType, WeightLayout, RotaryPairing, RopeScalingType, AttentionConfig,
// AttentionFeatures, RotaryConfig, RopeScaling, RotaryEmbedding, HeadShard
// (config_bindings.cc).
void BindConfig(py::module_& module);
// MultiheadAttention, NaiveMultiheadAttention, KvCache (layer_bindings.cc).
void BindLayer(py::module_& module);
// scaled_dot_product_attention (core_bindings.cc).
void BindCore(py::module_& module);
// PagedKvCache, OutOfBlocksError and MultiheadAttention.forward_packed, after
// BindLayer (paged_bindings.cc).
void BindPagedCache(py::module_& module);
// MultiheadLatentAttention, its naive twin, LatentAttentionConfig, LatentForm
// (latent_bindings.cc).
void BindLatent(py::module_& module);
// IsaReport, set_max_isa, describe_isa (isa_bindings.cc).
void BindIsa(py::module_& module);
// set_thread_placement, thread_placement (thread_bindings.cc).
void BindThreads(py::module_& module);
// mha::Error as ValueError (OutOfBlocksError as itself), its message in Python's
// names (error_names.cc); after BindPagedCache.
void RegisterErrorNames();

// A class whose keyword constructor sets the fields of the same names.
template <class Class>
Class FromKeywords(const py::kwargs& keywords) {
  py::object object = py::cast(Class());
  for (const auto& [key, value] : keywords) {
    const std::string name = py::str(key);
    if (!py::hasattr(object, name.c_str())) {
      throw py::type_error(
          "mha: " + std::string(py::str(object.get_type().attr("__name__"))) +
          " has no field '" + name + "'");
    }
    object.attr(name.c_str()) = value;
  }
  return object.cast<Class>();
}

// "Class(field=value, ...)": a config's fields that differ from its default
// (config_bindings.cc), every config class's __repr__.
std::string FieldsRepr(py::handle self);

}  // namespace mha::python
