// The Python module `mha`: fast CPU attention for numpy arrays (and torch tensors).
// mha::Error (std::invalid_argument) reaches Python as ValueError with its message,
// std::bad_alloc as MemoryError. Its pure-Python submodules (mha.torch) live in the
// folder `mha` beside this file: __path__ names it, which makes `import mha.torch`
// find them while `import mha` still loads this extension (a module file wins over a
// folder without __init__.py).
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/io/array.h"
#include "src/io/safetensors.h"
#include "src/python/arrays.h"
#include "src/python/bindings.h"

namespace {

// The folder of this extension's own file: __file__ is set only after the module's
// init function returns.
std::string ExtensionFolder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ExtensionFolder), &info) == 0 || !info.dli_fname) {
    return ".";
  }
  const std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

}  // namespace

PYBIND11_MODULE(mha, m) {
  m.doc() = "mha: fast multi-head attention for CPUs";
  pybind11::list submodule_folders;
  submodule_folders.append(ExtensionFolder() + "/mha");
  m.attr("__path__") = submodule_folders;
  m.attr("__version__") = MHA_VERSION;  // CMakeLists.txt's project(VERSION)
  pybind11::register_exception<mha::io::FileError>(m, "FileError", PyExc_ValueError);
  mha::python::BindConfig(m);
  mha::python::BindLayer(m);
  mha::python::BindCore(m);
  mha::python::BindPagedCache(m);
  mha::python::BindLatent(m);
  mha::python::BindIsa(m);
  mha::python::BindThreads(m);
  mha::python::RegisterErrorNames();
  m.def(
      "save_safetensors",
      [](const std::string& path, const pybind11::dict& tensors) {
        std::vector<mha::python::Input> inputs;
        inputs.reserve(tensors.size());  // the views point into these
        std::vector<std::pair<std::string, mha::TensorView>> named;
        for (const auto& [key, value] : tensors) {
          if (!pybind11::isinstance<pybind11::str>(key)) {
            throw pybind11::type_error(
                "mha: save_safetensors: tensors: names must be str, got " +
                std::string(pybind11::str(pybind11::type::of(key))));
          }
          const std::string name = pybind11::str(key);
          // None and other non-arrays are refused by name (None would read as absent).
          if (!pybind11::isinstance<pybind11::array>(value) &&
              !mha::python::IsTorchTensor(value)) {
            throw pybind11::type_error(
                "mha: save_safetensors: tensors['" + name +
                "']: expected a numpy array or torch tensor, got " +
                std::string(pybind11::str(pybind11::type::of(value))));
          }
          inputs.push_back(mha::python::FloatInput(value, name.c_str()));
          named.emplace_back(name, inputs.back().view);
        }
        mha::io::WriteSafetensors(path, named);
      },
      pybind11::arg("path"), pybind11::arg("tensors"),
      "Writes tensors (a dict of name to numpy array or torch tensor, e.g. a module's "
      "state_dict()) to a .safetensors file as float32: the weights file mha-run's "
      "--weights reads. The file is written whole or not at all.");
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
