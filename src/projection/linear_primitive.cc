// LinearPrimitive: creation (the run-time-M row-tile primitives, the matmul
// descriptors and their attributes), what this CPU supports, and Execute. oneDNN
// 2.6's matmul (v2 desc API), executed through the C API with a fixed argument
// array: the C++ API builds a map per call.
#include "src/projection/linear_primitive.h"

#include <algorithm>

#include "src/base/isa_cap.h"
#include "src/base/onednn_errors.h"
#include "src/base/parallel_for.h"
#include "src/projection/onednn_memory.h"

namespace mha::internal {

using dnnl::memory;

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
      weights_(weights),
      scales_(scales),
      bias_(bias),
      engine_(engine),
      columns_(PlanLinearTiles(kSplitDepthRows + 1, shape.in_dim, shape.out_dim,
                               TileRule::kByRows)
                   .columns) {
  TranslateOneDnnErrors([&] {
    for (int slot = 0; slot < (columns_.HasShortLast() ? 2 : 1); ++slot) {
      const int64_t columns = slot ? columns_.Size(columns_.count - 1) : columns_.size;
      row_tiles_[slot] = MakeMatmul(DNNL_RUNTIME_DIM_VAL, shape.in_dim, columns, false);
      row_tile_scratchpad_bytes_ =
          std::max(row_tile_scratchpad_bytes_, ScratchpadBytes(row_tiles_[slot]));
    }
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

dnnl::matmul LinearPrimitive::MakeMatmul(memory::dim rows, int64_t depth, int64_t columns,
                                         bool partial) const {
  // oneDNN 2.6 keeps the thread count it sees at creation and forks that many
  // threads at execution unless called inside a parallel region.
  const ScopedThreadCount single(1);
  dnnl::matmul::primitive_desc pd(Describe(rows, depth, columns, partial));
  return dnnl::matmul(pd);
}

dnnl::matmul::primitive_desc LinearPrimitive::Describe(memory::dim rows, int64_t depth,
                                                       int64_t columns,
                                                       bool partial) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Per output column, given at execution: input scale x weight column scale.
  if (storage_ == WeightStorage::kInt8) attr.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
  const memory::desc bias =
      bias_ && !partial ? Matrix(1, columns, columns) : memory::desc();
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(
          Matrix(rows, depth, shape_.in_dim, InputType()),
          Matrix(depth, columns, shape_.weight_stride, InputType()), bias,
          Matrix(rows, columns, partial ? shape_.out_dim : shape_.output_stride)),
      attr, engine_);
  RecordProjectionKernel(pd.impl_info_str());
  return pd;
}

void LinearPrimitive::Execute(const void* input, bool input_bf16, int64_t rows,
                              TileRule rule, float* output, LinearCall& call,
                              LinearThreads& threads) const {
  TranslateOneDnnErrors(
      [&] { Run(input, input_bf16, rows, rule, output, call, threads); });
}

}  // namespace mha::internal
