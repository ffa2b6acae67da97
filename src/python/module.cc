// The Python module `mha`: fast CPU attention for numpy arrays (and torch tensors).
// mha::Error (std::invalid_argument) reaches Python as ValueError with its message,
// std::bad_alloc as MemoryError.
#include <pybind11/pybind11.h>

#include "src/io/array.h"
#include "src/python/bindings.h"

PYBIND11_MODULE(mha, m) {
  m.doc() = "mha: fast multi-head attention for CPUs";
  pybind11::register_exception<mha::io::FileError>(m, "FileError", PyExc_ValueError);
  mha::python::BindConfig(m);
  mha::python::BindLayer(m);
  mha::python::BindCore(m);
  mha::python::BindPagedCache(m);
}
