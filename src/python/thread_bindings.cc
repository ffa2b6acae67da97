// mha.set_thread_placement and mha.thread_placement: where the threads of mha's
// parallel loops run (mha/threads.hpp).
#include "mha/threads.hpp"
#include "src/python/bindings.h"

namespace mha::python {

void BindThreads(py::module_& m) {
  m.def(
      "set_thread_placement",
      [](const std::string& name) {
        SetThreadPlacement(ParseThreadPlacement(name, "name"));
      },
      py::arg("name"),
      "'spread' (the default): each thread of a call's team but the caller keeps a CPU "
      "of its own, so a neighbouring process cannot leave two of them on one core; "
      "'unbound': the OS places them. For every later call of the process.");
  m.def(
      "thread_placement",
      [] {
        return GetThreadPlacement() == ThreadPlacement::kSpread ? "spread" : "unbound";
      },
      "The placement set by set_thread_placement: 'spread' or 'unbound'.");
}

}  // namespace mha::python
