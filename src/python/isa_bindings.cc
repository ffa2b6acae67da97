// mha.set_max_isa and mha.describe_isa: the ISA cap and what it leaves to run
// (mha/isa.hpp), down to which bf16 product path attention takes.
#include <pybind11/stl.h>

#include "mha/isa.hpp"
#include "src/python/bindings.h"

namespace mha::python {

void BindIsa(py::module_& m) {
  py::class_<IsaReport>(m, "IsaReport", "What runs here after the ISA cap.")
      .def(py::init<>())
      .def_readonly("simd_target", &IsaReport::simd_target,
                    "Highway's dispatched target, e.g. 'AVX3'")
      .def_readonly("onednn_isa", &IsaReport::onednn_isa,
                    "oneDNN's effective ISA, e.g. 'avx512_core_amx'")
      .def_readonly("bf16_dot_products", &IsaReport::bf16_dot_products,
                    "attention over bf16 K/V runs AVX512_BF16 dot products (else fp32 "
                    "on the widened values)")
      .def_readonly("amx_tiles", &IsaReport::amx_tiles,
                    "those products run on AMX tiles for blocks of 16 query rows or more")
      .def_readonly("projection_kernels", &IsaReport::projection_kernels,
                    "oneDNN implementations of the projections created so far")
      .def("__repr__", [](const IsaReport& report) {
        return "IsaReport(simd_target='" + report.simd_target + "', onednn_isa='" +
               report.onednn_isa +
               "', bf16_dot_products=" + (report.bf16_dot_products ? "True" : "False") +
               ", amx_tiles=" + (report.amx_tiles ? "True" : "False") + ")";
      });
  m.def(
      "set_max_isa", [](const std::string& name) { SetMaxIsa(ParseIsa(name, "name")); },
      py::arg("name"),
      "Caps mha's SIMD kernels and projections at 'sse4', 'avx2', 'avx512' or 'native' "
      "(as MHA_MAX_ISA); call before the first layer or attention call.");
  m.def("describe_isa", &DescribeIsa,
        "Applies the cap (as the first call would) and says what runs: the SIMD target, "
        "oneDNN's ISA, and the bf16 product path (amx_tiles, bf16_dot_products or "
        "neither: fp32).");
}

}  // namespace mha::python
