// The layer's one pipeline: project -> write pages -> attention core -> output
// projection. Every forward (whole, chunked, cached, packed, cross-attention) checks
// its arguments, picks its pages (workspace or cache) and runs these two passes:
// ProjectKeys for keys and values projected apart from the queries, RunQueries for
// query rows (with their own keys and values under self-attention).
#include <algorithm>

#include "src/attention/layer_impl.h"
#include "src/kernels/rms_norm_rows.h"

namespace mha {

using internal::AttentionParams;
using internal::KvWrite;
using internal::PackedWeights;
using internal::Workspace;

KvWrite MultiheadAttention::Impl::LayerKvWrite(const internal::RotaryRows& rotary_rows,
                                               int64_t positions_per_sequence) const {
  KvWrite write;
  write.num_kv_heads = config.resolved_num_kv_heads();
  write.head_dim = config.head_dim;
  write.key_norm = qk_norm.KeyHeadNorm();
  write.value_norm = qk_norm.ValueHeadNorm();
  if (rotary) {
    write.rotary = rotary_rows.table;
    write.rotary_positions = rotary_rows.positions;
    write.positions_per_sequence = positions_per_sequence;
  }
  return write;
}

internal::KvStorage MultiheadAttention::Impl::WorkspaceStorage(
    const internal::Problem& problem) const {
  const bool bf16 = config.compute_dtype == DType::kBFloat16 ||
                    problem.key.dtype == DType::kBFloat16 ||
                    problem.value.dtype == DType::kBFloat16;
  return internal::AttentionStorage(bf16 ? DType::kBFloat16 : DType::kFloat32);
}

internal::ContiguousPages& MultiheadAttention::Impl::UseWorkspacePages(
    const internal::Problem& problem, int64_t key_len, AttentionParams& params,
    Workspace& workspace, uint8_t* values_at, int64_t sequence_value_bytes) const {
  internal::ContiguousPages& pages = workspace.core.kv_pages;
  params.page_size = internal::WorkspacePageSize(key_len);
  pages.Reset(internal::BlockLayout(params.page_size, config.resolved_num_kv_heads(),
                                    config.head_dim, WorkspaceStorage(problem)),
              problem.batch_size, key_len, values_at, sequence_value_bytes);
  params.pages = pages;
  return pages;
}

void MultiheadAttention::Impl::ProjectKeys(const KeyPass& pass,
                                           Workspace& workspace) const {
  const int64_t kv_dim = config.kv_dim(), head_dim = config.head_dim;
  float* keys = Workspace::Reserve(workspace.chunks, 2 * pass.chunk_rows * kv_dim);
  float* values = keys + pass.chunk_rows * kv_dim;
  KvWrite write = LayerKvWrite(pass.rotary_rows, pass.key_len);
  write.key = {keys, 0, head_dim, kv_dim};
  write.value = {values, 0, head_dim, kv_dim};
  write.pages = pass.pages;
  for (int64_t b = 0; b < pass.batch_size; ++b) {
    const int64_t count = pass.key_counts[b], input_row = b * pass.key_len;
    for (int64_t first = 0; first < count; first += pass.chunk_rows) {
      write.count = std::min(pass.chunk_rows, count - first);
      ProjectKeyRows(*pass.key, *pass.value, input_row + first, write.count, keys, values,
                     pass.tile_rule, workspace);
      write.batch_begin = b;
      write.batch_end = b + 1;
      write.first_position = first;
      write.zero_padding = pass.zero_padding && first + write.count == count;
      if (rotary) write.rotary_positions = pass.rotary_rows.positions + first;
      internal::WriteKvPages(write, workspace.core.rotation_scratch);
    }
  }
}

void MultiheadAttention::Impl::ProjectKeyRows(const TensorView& key,
                                              const TensorView& value, int64_t first_row,
                                              int64_t count, float* keys, float* values,
                                              internal::TileRule tile_rule,
                                              Workspace& workspace) const {
  Linear(kKeyLinear, key, first_row, count, keys, tile_rule, workspace);
  NormAcrossHeads(nullptr, keys, count, config.kv_dim());
  Linear(kValueLinear, value, first_row, count, values, tile_rule, workspace);
}

void MultiheadAttention::Impl::NormAcrossHeads(float* queries, float* keys, int64_t count,
                                               int64_t stride) const {
  if (!qk_norm.enabled() || !qk_norm.across_heads) return;
  if (queries) {
    internal::RmsNormRows(queries, count, stride, config.model_dim(),
                          qk_norm.query.data(), qk_norm.eps);
  }
  if (keys) {
    internal::RmsNormRows(keys, count, stride, config.kv_dim(), qk_norm.key.data(),
                          qk_norm.eps);
  }
}

void MultiheadAttention::Impl::RunQueries(const QueryPass& pass, AttentionParams params,
                                          const internal::MaskPlan& masks,
                                          Workspace& workspace) const {
  const int64_t model_dim = config.model_dim(), head_dim = config.head_dim;
  const bool fused = pass.kv != nullptr;
  const int64_t width = fused ? model_dim + 2 * config.kv_dim() : model_dim;
  float* rows = Workspace::Reserve(workspace.projections, pass.rows * width);
  Linear(fused ? kFusedLinear : kQueryLinear, *pass.input, pass.first_row, pass.rows,
         rows, pass.tile_rule, workspace);
  NormAcrossHeads(rows + (fused ? packed.FusedColumn(PackedWeights::kQuery) : 0),
                  fused ? rows + packed.FusedColumn(PackedWeights::kKey) : nullptr,
                  pass.rows, width);
  // Heads starting at `column` of the projected rows.
  const auto columns = [&](int64_t column) {
    return internal::HeadRows<const float>{rows + column, pass.rows_per_batch * width,
                                           head_dim, width, pass.batch_rows};
  };
  if (fused) {
    KvWrite write = *pass.kv;
    write.key = columns(packed.FusedColumn(PackedWeights::kKey));
    write.value = columns(packed.FusedColumn(PackedWeights::kValue));
    internal::WriteKvPages(write, workspace.core.rotation_scratch);
  }
  params.query = columns(fused ? packed.FusedColumn(PackedWeights::kQuery) : 0);
  // Without an output projection the heads merge straight into the output.
  const int64_t context_width = has_output ? model_dim : output_dim;
  float* context = has_output
                       ? Workspace::Reserve(workspace.merged_heads, pass.rows * model_dim)
                       : pass.output;
  // Padding rows are never attended: they start and stay zero.
  if (pass.padded) std::fill(context, context + pass.rows * context_width, 0.0f);
  params.context = {context, pass.rows_per_batch * context_width, head_dim, context_width,
                    pass.batch_rows};
  if (pass.plan) {
    internal::RunPlannedCore(params, masks, *pass.plan, workspace.core);
  } else {
    internal::RunAttentionCore(params, masks, workspace.core);
  }
  if (!has_output) return;
  Linear(kOutputLinear, context, pass.rows, pass.output, pass.tile_rule, workspace);
  if (!pass.padded) return;
  for (int64_t b = params.batch_begin; b < params.batch_end; ++b) {  // 0, not the bias
    std::fill(
        pass.output + (b * pass.rows_per_batch + params.query_counts[b]) * output_dim,
        pass.output + (b + 1) * pass.rows_per_batch * output_dim, 0.0f);
  }
}

}  // namespace mha
