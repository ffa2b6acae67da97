// LinearPrimitive on oneDNN 2.6's matmul (v2 desc API), executed through the C API
// with a fixed argument array: the C++ API builds a map per call.
#include "src/planning/linear_primitive.h"

#include "src/kernels/bf16_convert.h"
#include "src/kernels/int8_quantize.h"
#include "src/platform/isa_cap.h"
#include "src/platform/onednn_errors.h"

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
    TranslateOneDnnErrors([&] {
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(bf16, bf16, Matrix(16, 16, 16)),
                                   engine);
    });
    return true;
  } catch (const dnnl::error&) {  // unimplemented; out of memory is bad_alloc
    return false;
  }
}

int LinearPrimitive::Int8WeightLevels() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto vnni = [&](dnnl::cpu_isa with) {
    const auto bits = static_cast<unsigned>(with);
    return (isa & bits) == bits;
  };
  return vnni(dnnl::cpu_isa::avx512_core_vnni) || vnni(dnnl::cpu_isa::avx2_vnni) ? 127
                                                                                 : 63;
}

LinearPrimitive::LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                                 const void* weights, const float* bias,
                                 WeightStorage storage, const float* scales)
    : shape_(shape),
      storage_(storage),
      scales_(scales),
      bias_values_(bias),
      engine_(engine) {
  TranslateOneDnnErrors([&] {
    weights_ =
        memory(Matrix(shape.in_dim, shape.out_dim, shape.weight_stride, InputType()),
               engine, const_cast<void*>(weights));
    if (bias)
      bias_ = memory(Matrix(1, shape.out_dim, shape.out_dim), engine,
                     const_cast<float*>(bias));
    const dnnl::matmul::primitive_desc pd = Describe(DNNL_RUNTIME_DIM_VAL);
    runtime_rows_ = dnnl::matmul(pd);
    runtime_scratchpad_ = pd.scratchpad_desc();
  });
}

memory::data_type LinearPrimitive::InputType() const {
  switch (storage_) {
    case WeightStorage::kBFloat16:
      return memory::data_type::bf16;
    case WeightStorage::kInt8:
      return memory::data_type::s8;
    case WeightStorage::kFloat32:
      break;
  }
  return memory::data_type::f32;
}

dnnl::matmul::primitive_desc LinearPrimitive::Describe(memory::dim rows) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Per output column, given at execution: input scale x weight column scale.
  if (storage_ == WeightStorage::kInt8) attr.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
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
  entry.rows = -1;  // until every object below is made: any of them may fail
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
  if (storage_ == WeightStorage::kInt8) {
    const memory::desc column({shape_.out_dim}, memory::data_type::f32,
                              memory::format_tag::a);
    entry.output_scales = memory(column, engine_, nullptr);
    if (bias_) entry.scaled_bias = memory(bias_.get_desc(), engine_, nullptr);
  }
  entry.rows = rows;
  return entry;
}

const void* LinearPrimitive::PrepareInput(const void* input, bool input_bf16,
                                          int64_t rows, LinearCall& call) const {
  const size_t count = static_cast<size_t>(rows * shape_.in_dim);
  if (input_bf16 && storage_ != WeightStorage::kBFloat16) {
    if (call.float_input.size() < count) call.float_input.resize(count);
    Bf16ToFloat(static_cast<const uint16_t*>(input), count, call.float_input.data());
    input = call.float_input.data();
  }
  if (storage_ == WeightStorage::kBFloat16 && !input_bf16) {
    if (call.bf16_input.size() < count) call.bf16_input.resize(count);
    FloatToBf16(static_cast<const float*>(input), count, call.bf16_input.data());
    return call.bf16_input.data();
  }
  if (storage_ != WeightStorage::kInt8) return input;
  const float* values = static_cast<const float*>(input);
  const float max_abs = MaxAbs(values, count);
  // An all-zero input quantises to zeros whatever the scale: keep 1.
  const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  if (call.int8_input.size() < count) call.int8_input.resize(count);
  QuantizeInt8(values, count, 1.0f / scale, call.int8_input.data());
  const size_t columns = static_cast<size_t>(shape_.out_dim);
  call.output_scales.resize(columns);
  call.scaled_bias.resize(bias_values_ ? columns : 0);
  for (size_t n = 0; n < columns; ++n) {
    call.output_scales[n] = scale * scales_[n];
    if (bias_values_) call.scaled_bias[n] = bias_values_[n] / call.output_scales[n];
  }
  return call.int8_input.data();
}

void LinearPrimitive::Execute(dnnl::stream& stream, const void* input, bool input_bf16,
                              int64_t rows, float* output, LinearCall& call,
                              std::vector<uint8_t>& scratchpad) const {
  TranslateOneDnnErrors(
      [&] { Run(stream, input, input_bf16, rows, output, call, scratchpad); });
}

void LinearPrimitive::Run(dnnl::stream& stream, const void* input, bool input_bf16,
                          int64_t rows, float* output, LinearCall& call,
                          std::vector<uint8_t>& scratchpad) const {
  LinearCall::Entry& entry = Prepare(call, rows);
  const size_t scratchpad_bytes = entry.scratchpad.get_desc().get_size();
  if (scratchpad.size() < scratchpad_bytes) scratchpad.resize(scratchpad_bytes);
  entry.input.set_data_handle(
      const_cast<void*>(PrepareInput(input, input_bf16, rows, call)));
  entry.output.set_data_handle(output);
  entry.scratchpad.set_data_handle(scratchpad.data());
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, entry.input.get()},
                             {DNNL_ARG_WEIGHTS, weights_.get()},
                             {DNNL_ARG_DST, entry.output.get()},
                             {DNNL_ARG_SCRATCHPAD, entry.scratchpad.get()}};
  int count = 4;
  if (storage_ == WeightStorage::kInt8) {
    entry.output_scales.set_data_handle(call.output_scales.data());
    args[count++] = {DNNL_ARG_ATTR_OUTPUT_SCALES, entry.output_scales.get()};
    if (bias_) {
      entry.scaled_bias.set_data_handle(call.scaled_bias.data());
      args[count++] = {DNNL_ARG_BIAS, entry.scaled_bias.get()};
    }
  } else if (bias_) {
    args[count++] = {DNNL_ARG_BIAS, bias_.get()};
  }
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(entry.primitive.get(), stream.get(), count, args),
      "mha: oneDNN matmul execution failed");
  stream.wait();
}

}  // namespace mha::internal
