// LinearPrimitive on oneDNN 2.6's matmul (v2 desc API) with run-time M and a
// user-managed scratchpad, which makes concurrent Execute calls safe.
#include "src/planning/linear_primitive.h"

namespace mha::internal {
namespace {

using dnnl::memory;
constexpr memory::dim kRuntime = DNNL_RUNTIME_DIM_VAL;

memory::desc Matrix(memory::dim rows, memory::dim cols, memory::dim stride) {
  return memory::desc({rows, cols}, memory::data_type::f32, {stride, 1});
}

}  // namespace

LinearPrimitive::LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                                 const float* weights, const float* bias)
    : shape_(shape), engine_(engine) {
  const memory::desc src = Matrix(kRuntime, shape.in_dim, shape.in_dim);
  const memory::desc wei = Matrix(shape.in_dim, shape.out_dim, shape.weight_stride);
  const memory::desc dst = Matrix(kRuntime, shape.out_dim, shape.output_stride);
  const memory::desc bias_desc =
      bias ? Matrix(1, shape.out_dim, shape.out_dim) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, bias_desc, dst),
                                        attr, engine);
  primitive_ = dnnl::matmul(pd);
  scratchpad_desc_ = pd.scratchpad_desc();
  scratchpad_bytes_ = scratchpad_desc_.get_size();
  weights_ = memory(wei, engine, const_cast<float*>(weights));
  if (bias) bias_ = memory(bias_desc, engine, const_cast<float*>(bias));
}

void LinearPrimitive::Execute(dnnl::stream& stream, const float* input, int64_t rows,
                              float* output, void* scratchpad) const {
  memory src(Matrix(rows, shape_.in_dim, shape_.in_dim), engine_,
             const_cast<float*>(input));
  memory dst(Matrix(rows, shape_.out_dim, shape_.output_stride), engine_, output);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst}};
  if (bias_) args.emplace(DNNL_ARG_BIAS, bias_);
  if (scratchpad_bytes_) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad_desc_, engine_, scratchpad));
  }
  primitive_.execute(stream, args);
  stream.wait();
}

}  // namespace mha::internal
