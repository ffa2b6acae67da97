// The Python module `mha`: fast CPU attention for numpy arrays (and torch tensors).
// mha::Error (std::invalid_argument) reaches Python as ValueError with its message,
// std::bad_alloc as MemoryError.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "src/io/array.h"
#include "src/python/arrays.h"
#include "src/python/bindings.h"

PYBIND11_MODULE(mha, m) {
  m.doc() = "mha: fast multi-head attention for CPUs";
  pybind11::register_exception<mha::io::FileError>(m, "FileError", PyExc_ValueError);
  mha::python::BindConfig(m);
  mha::python::BindLayer(m);
  mha::python::BindCore(m);
  mha::python::BindPagedCache(m);
  mha::python::BindLatent(m);
  mha::python::BindIsa(m);
  m.def(
      "_activation_view",
      [](pybind11::handle activation) {
        const mha::python::Input input =
            mha::python::ActivationInput(activation, "activation");
        return pybind11::make_tuple(reinterpret_cast<uintptr_t>(input.view.data),
                                    mha::DTypeName(input.view.dtype));
      },
      pybind11::arg("activation"),
      "(address, dtype) mha reads a query, key or value from: the tensor's own "
      "data_ptr() when it is read in place (how the tests check that nothing is "
      "copied).");
}
