// The one pipeline (RunQueries): project -> write pages -> attention core -> output
// projection, through the layer kind's hooks; and what every flow shares: the core's
// base params, rotary rows, staged bf16 outputs and the projections' calls.
#include <algorithm>

#include "src/base/check.h"
#include "src/layer/layer.h"
#include "src/simd/bf16_convert.h"

namespace mha::internal {

void Layer::RunQueries(const QueryPass& pass, AttentionParams params,
                       const MaskPlan& masks, Workspace& workspace) const {
  const Projected projected = Project(pass, params, workspace);
  const auto rows = [&pass](const float* data, int64_t stride, int64_t head_width) {
    return HeadRows<const float>{data, pass.rows_per_batch * stride, head_width, stride,
                                 pass.batch_rows};
  };
  if (pass.kv) {
    KvWrite write = *pass.kv;
    write.key = rows(projected.key, projected.kv_stride, write.head_dim);
    write.value = rows(projected.value, projected.kv_stride,
                       write.value_head_dim > 0 ? write.value_head_dim : write.head_dim);
    WriteKvPages(write, workspace.core.rotation_scratch);
  }
  params.query = rows(projected.query, projected.query_stride, params.head_dim);
  params.context = ContextRows(pass, workspace);
  if (pass.plan) {
    RunPlannedCore(params, masks, *pass.plan, workspace.core);
  } else {
    RunAttentionCore(params, masks, workspace.core);
  }
  ProjectOutput(params.context.data, pass, workspace);
  if (!pass.padded) return;
  for (int64_t b = params.batch_begin; b < params.batch_end; ++b) {  // 0, not the bias
    std::fill(
        pass.output + (b * pass.rows_per_batch + params.query_counts[b]) * output_dim,
        pass.output + (b + 1) * pass.rows_per_batch * output_dim, 0.0f);
  }
}

AttentionParams Layer::BaseParams(const Problem& problem, const RotaryRows& rotary_rows,
                                  TileRule tile_rule, int form) const {
  AttentionParams params;
  params.split_decode_keys = tile_rule != TileRule::kBatchInvariant;
  params.query_len = problem.query_len;
  params.key_len = problem.key_len;
  params.batch_end = problem.batch_size;
  params.query_count = problem.query_len;
  if (rotary) {
    params.rotary = rotary_rows.table;
    params.query_positions = rotary_rows.positions;
  }
  SetCoreParams(params, form);
  return params;
}

RotaryRows Layer::RotaryPositions(const Problem& problem, const TensorView& position_ids,
                                  const int64_t* offsets, const int64_t* counts,
                                  Workspace& workspace) const {
  if (!rotary) {
    if (position_ids.present()) {
      Fail("options.position_ids: given to a layer without rotary embeddings");
    }
    return {};
  }
  const int64_t batch = problem.batch_size, length = problem.query_len;
  int64_t* positions = Workspace::Reserve(workspace.rotary_positions, batch * length);
  ResolvePositions("options.position_ids", position_ids, batch, length, problem.batched,
                   offsets, *rotary, positions);
  int64_t* starts = Workspace::Reserve(workspace.rotary_starts, batch + 1);
  for (int64_t b = 0; b <= batch; ++b) starts[b] = b * length;
  return workspace.rotation.Resolve(*rotary, positions, batch * length, starts, counts,
                                    batch);
}

MutableTensorView Layer::StageOutput(const MutableTensorView& output,
                                     Workspace& workspace) const {
  if (output.dtype == DType::kFloat32) return output;
  const int64_t count = CheckedNumElements("output", output.shape, 4);
  return MutableTensorView(Workspace::Reserve(workspace.staged_output, count),
                           output.shape);
}

void Layer::FinishOutput(const MutableTensorView& staged,
                         const MutableTensorView& output) const {
  if (output.dtype == DType::kFloat32) return;
  FloatToBf16(staged.floats(), CheckedNumElements("output", output.shape, 4),
              static_cast<uint16_t*>(output.data));
}

void Layer::RunLinear(const LinearPrimitive& linear, size_t call, const float* input,
                      int64_t rows, float* output, TileRule tile_rule,
                      Workspace& workspace) {
  linear.Execute(input, /*input_bf16=*/false, rows, tile_rule, output,
                 workspace.Call(call), workspace.linear_threads);
}

void Layer::RunLinear(const LinearPrimitive& linear, size_t call, const TensorView& input,
                      int64_t first_row, int64_t rows, float* output, TileRule tile_rule,
                      Workspace& workspace) {
  const int64_t width = input.shape[input.shape.rank() - 1];
  const auto* bytes = static_cast<const uint8_t*>(input.data);
  linear.Execute(bytes + first_row * width * DTypeSize(input.dtype),
                 input.dtype == DType::kBFloat16, rows, tile_rule, output,
                 workspace.Call(call), workspace.linear_threads);
}

}  // namespace mha::internal
