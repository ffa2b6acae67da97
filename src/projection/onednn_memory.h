// oneDNN memory helpers shared by LinearPrimitive's files: a strided matrix
// descriptor and a primitive's scratchpad size.
#pragma once

#include <cstddef>

#include "oneapi/dnnl/dnnl.hpp"

namespace mha::internal {

inline dnnl::memory::desc Matrix(
    dnnl::memory::dim rows, dnnl::memory::dim cols, dnnl::memory::dim stride,
    dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc({rows, cols}, type, {stride, 1});
}

inline size_t ScratchpadBytes(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_get_primitive_desc(primitive.get(), &pd),
                          "mha: oneDNN primitive query failed");
  return dnnl_memory_desc_get_size(
      dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
}

}  // namespace mha::internal
