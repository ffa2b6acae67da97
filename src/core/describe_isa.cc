// DescribeIsa: what the ISA cap leaves to run, from the SIMD target to the bf16
// product path (AMX tiles, bf16 dot products or fp32) and the projections' kernels.
#include "mha/isa.hpp"
#include "src/base/isa_cap.h"
#include "src/kernel/bf16_tile_matmul.h"

namespace mha {

IsaReport DescribeIsa() {
  internal::ApplyIsaCap();
  IsaReport report;
  report.simd_target = internal::SimdTargetName();
  report.bf16_dot_products = internal::Bf16DotProductsRun();
  report.amx_tiles = report.bf16_dot_products && internal::AmxTileProducts();
  report.onednn_isa = internal::OnednnIsaName();
  report.projection_kernels = internal::ProjectionKernels();
  return report;
}

}  // namespace mha
