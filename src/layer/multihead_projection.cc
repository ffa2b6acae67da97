// MultiheadAttention's projection strategy in the one pipeline: one fused QKV GEMM
// whose key and value columns the pipeline writes into the pages, or queries alone
// beside keys and values projected apart (ProjectKeys: cross-attention, the chunked
// flow); QK-norm across heads on the projected rows; the output projection.
#include <algorithm>

#include "src/base/check.h"
#include "src/kv/kv_storage.h"
#include "src/layer/multihead_attention_impl.h"
#include "src/simd/rms_norm_rows.h"

namespace mha {

using internal::AttentionParams;
using internal::KvWrite;
using internal::PackedWeights;
using internal::Workspace;

void MultiheadAttention::Impl::SetCoreParams(AttentionParams& params, int) const {
  params.num_heads = config.num_heads;
  params.num_kv_heads = config.resolved_num_kv_heads();
  params.head_dim = config.head_dim;
  internal::SetLogits(logits, params);
  params.query_scale = packed.unfolded_query_scale();
  params.query_norm = qk_norm.QueryHeadNorm();
}

KvWrite MultiheadAttention::Impl::KvWriteFor(const internal::RotaryRows& rotary_rows,
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

internal::Layer::Projected MultiheadAttention::Impl::Project(const QueryPass& pass,
                                                             AttentionParams&,
                                                             Workspace& workspace) const {
  const bool fused = pass.kv != nullptr;
  const int64_t width =
      fused ? config.model_dim() + 2 * config.kv_dim() : config.model_dim();
  float* rows = workspace.Buffer(kProjectedRows, pass.rows * width);
  Linear(fused ? kFusedLinear : kQueryLinear, *pass.input, pass.first_row, pass.rows,
         rows, pass.tile_rule, workspace);
  if (!fused) {
    NormAcrossHeads(rows, nullptr, pass.rows, width);
    return {rows, width};
  }
  const auto column = [&](PackedWeights::Input input) {
    return rows + packed.FusedColumn(input);
  };
  NormAcrossHeads(column(PackedWeights::kQuery), column(PackedWeights::kKey), pass.rows,
                  width);
  return {column(PackedWeights::kQuery), width, column(PackedWeights::kKey),
          column(PackedWeights::kValue), width};
}

internal::HeadRows<float> MultiheadAttention::Impl::ContextRows(
    const QueryPass& pass, Workspace& workspace) const {
  const int64_t width = has_output ? config.model_dim() : output_dim;
  float* context =
      has_output ? workspace.Buffer(kMergedHeads, pass.rows * width) : pass.output;
  // Padding rows are never attended: they start and stay zero.
  if (pass.padded) std::fill(context, context + pass.rows * width, 0.0f);
  return {context, pass.rows_per_batch * width, config.head_dim, width, pass.batch_rows};
}

void MultiheadAttention::Impl::ProjectOutput(const float* context, const QueryPass& pass,
                                             Workspace& workspace) const {
  if (has_output) {
    Linear(kOutputLinear, context, pass.rows, pass.output, pass.tile_rule, workspace);
  }
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
  float* keys = workspace.Buffer(kKeyChunks, 2 * pass.chunk_rows * kv_dim);
  float* values = keys + pass.chunk_rows * kv_dim;
  KvWrite write = KvWriteFor(pass.rotary_rows, pass.key_len);
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

}  // namespace mha
