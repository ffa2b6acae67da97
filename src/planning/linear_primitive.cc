// LinearPrimitive on oneDNN 2.6's matmul (v2 desc API), executed through the C API
// with a fixed argument array: the C++ API builds a map per call.
#include "src/planning/linear_primitive.h"

#include "src/kernels/bf16_convert.h"
#include "src/platform/isa_cap.h"

namespace mha::internal {
namespace {

using dnnl::memory;

memory::desc Matrix(memory::dim rows, memory::dim cols, memory::dim stride,
                    memory::data_type type = memory::data_type::f32) {
  return memory::desc({rows, cols}, type, {stride, 1});
}

}  // namespace

bool LinearPrimitive::Bf16Supported(const dnnl::engine& engine) {
  try {
    const memory::desc bf16 = Matrix(16, 16, 16, memory::data_type::bf16);
    dnnl::matmul::primitive_desc(dnnl::matmul::desc(bf16, bf16, Matrix(16, 16, 16)),
                                 engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

LinearPrimitive::LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                                 const void* weights, const float* bias, bool bf16)
    : shape_(shape), bf16_(bf16), engine_(engine) {
  weights_ = memory(Matrix(shape.in_dim, shape.out_dim, shape.weight_stride,
                           bf16 ? memory::data_type::bf16 : memory::data_type::f32),
                    engine, const_cast<void*>(weights));
  if (bias)
    bias_ =
        memory(Matrix(1, shape.out_dim, shape.out_dim), engine, const_cast<float*>(bias));
  const dnnl::matmul::primitive_desc pd = Describe(DNNL_RUNTIME_DIM_VAL);
  runtime_rows_ = dnnl::matmul(pd);
  runtime_scratchpad_ = pd.scratchpad_desc();
}

dnnl::matmul::primitive_desc LinearPrimitive::Describe(memory::dim rows) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::desc bias = bias_ ? bias_.get_desc() : memory::desc();
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(Matrix(rows, shape_.in_dim, shape_.in_dim, InputType()),
                         weights_.get_desc(), bias,
                         Matrix(rows, shape_.out_dim, shape_.output_stride)),
      attr, engine_);
  RecordProjectionKernel(pd.impl_info_str());
  return pd;
}

LinearCall::Entry& LinearPrimitive::Prepare(LinearCall& call, int64_t rows) const {
  for (LinearCall::Entry& entry : call.entries) {
    if (entry.rows == rows) return entry;
  }
  LinearCall::Entry& entry = call.entries[call.next_victim];
  call.next_victim = (call.next_victim + 1) % LinearCall::kEntries;
  if (rows <= kFixedShapeRows) {
    const dnnl::matmul::primitive_desc pd = Describe(rows);
    entry.primitive = dnnl::matmul(pd);
    entry.scratchpad = memory(pd.scratchpad_desc(), engine_, nullptr);
  } else {
    entry.primitive = runtime_rows_;
    entry.scratchpad = memory(runtime_scratchpad_, engine_, nullptr);
  }
  entry.input =
      memory(Matrix(rows, shape_.in_dim, shape_.in_dim, InputType()), engine_, nullptr);
  entry.output =
      memory(Matrix(rows, shape_.out_dim, shape_.output_stride), engine_, nullptr);
  entry.rows = rows;
  return entry;
}

void LinearPrimitive::Execute(dnnl::stream& stream, const void* input, bool input_bf16,
                              int64_t rows, float* output, LinearCall& call,
                              std::vector<uint8_t>& scratchpad) const {
  LinearCall::Entry& entry = Prepare(call, rows);
  const size_t scratchpad_bytes = entry.scratchpad.get_desc().get_size();
  if (scratchpad.size() < scratchpad_bytes) scratchpad.resize(scratchpad_bytes);
  // The primitive reads the weights' type: convert the input only when they differ.
  const size_t count = static_cast<size_t>(rows * shape_.in_dim);
  if (bf16_ && !input_bf16) {
    if (call.bf16_input.size() < count) call.bf16_input.resize(count);
    FloatToBf16(static_cast<const float*>(input), count, call.bf16_input.data());
    input = call.bf16_input.data();
  } else if (!bf16_ && input_bf16) {
    if (call.float_input.size() < count) call.float_input.resize(count);
    Bf16ToFloat(static_cast<const uint16_t*>(input), count, call.float_input.data());
    input = call.float_input.data();
  }
  entry.input.set_data_handle(const_cast<void*>(input));
  entry.output.set_data_handle(output);
  entry.scratchpad.set_data_handle(scratchpad.data());
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, entry.input.get()},
                             {DNNL_ARG_WEIGHTS, weights_.get()},
                             {DNNL_ARG_DST, entry.output.get()},
                             {DNNL_ARG_SCRATCHPAD, entry.scratchpad.get()},
                             {DNNL_ARG_BIAS, bias_ ? bias_.get() : nullptr}};
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(entry.primitive.get(), stream.get(), bias_ ? 5 : 4, args),
      "mha: oneDNN matmul execution failed");
  stream.wait();
}

}  // namespace mha::internal
