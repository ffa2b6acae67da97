// TranslateOneDnnErrors: every oneDNN call of the library goes through it, so that a
// failed allocation oneDNN reports (status dnnl_out_of_memory) reaches callers as
// std::bad_alloc, as mha's own do (MHA_OUT_OF_MEMORY in the C API).
#pragma once

#include <new>

#include "oneapi/dnnl/dnnl.hpp"

namespace mha::internal {

template <class Function>
decltype(auto) TranslateOneDnnErrors(const Function& function) {
  try {
    return function();
  } catch (const dnnl::error& error) {
    if (error.status == dnnl_out_of_memory) throw std::bad_alloc();
    throw;
  }
}

}  // namespace mha::internal
