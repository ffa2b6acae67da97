// MLA's expanded form, for a call with nothing cached: kv_b_proj turns each new
// token's latent into every head's k_nope and v; a head's key is [k_pe, k_nope] (the
// rotary part shared), its query [q_pe, q_nope]; then the one attention core over
// workspace pages, causal, values narrower than keys, into the head outputs.
#include <algorithm>

#include "src/attention/latent_attention_impl.h"
#include "src/core/write_kv_pages.h"

namespace mha {

using internal::Workspace;

// Keys [rows, heads, rope + nope] in workspace.expanded_keys; returns the expansion
// [rows, heads, nope + v] whose v parts are the values.
const float* MultiHeadLatentAttention::Impl::ExpandKeysAndValues(
    const internal::LatentCall& call, const float* keys, int64_t rows) const {
  internal::LatentWorkspace& workspace = call.workspace;
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  const int64_t rope = config.qk_rope_head_dim, nope = config.qk_nope_head_dim;
  const int64_t width = nope + config.v_head_dim;
  float* latents = Workspace::Reserve(workspace.latents, rows * rank);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(keys + r * key_dim() + rope, rank, latents + r * rank);
  }
  float* expanded = Workspace::Reserve(workspace.expanded, rows * heads * width);
  Run(expand, kExpand, latents, rows, expanded, call);
  float* head_keys =
      Workspace::Reserve(workspace.expanded_keys, rows * heads * query_dim());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* key_row = head_keys + (r * heads + h) * query_dim();
      std::copy_n(keys + r * key_dim(), rope, key_row);
      std::copy_n(expanded + (r * heads + h) * width, nope, key_row + rope);
    }
  }
  return expanded;
}

float* MultiHeadLatentAttention::Impl::AttendExpanded(const internal::LatentCall& call,
                                                      const float* queries,
                                                      const float* keys, int64_t batch,
                                                      int64_t seq) const {
  internal::LatentWorkspace& workspace = call.workspace;
  const int64_t heads = config.num_heads, nope = config.qk_nope_head_dim;
  const int64_t v_dim = config.v_head_dim, width = nope + v_dim, rows = batch * seq;
  const float* expanded = ExpandKeysAndValues(call, keys, rows);
  const int64_t page_size = internal::WorkspacePageSize(seq);
  internal::ContiguousPages& pages = workspace.expanded_pages;
  pages.Reset(internal::BlockLayout(page_size, heads, query_dim(),
                                    internal::KvStorage::kFloat32, v_dim),
              batch, seq);
  internal::KvWrite write;
  write.key = {workspace.expanded_keys.data(), seq * heads * query_dim(), query_dim(),
               heads * query_dim()};
  write.value = {expanded + nope, seq * heads * width, width, heads * width};
  write.batch_end = batch;
  write.num_kv_heads = heads;
  write.head_dim = query_dim();
  write.value_head_dim = v_dim;
  write.count = seq;
  write.zero_padding = true;
  write.pages = pages;
  internal::AttentionParams params;
  params.num_heads = params.num_kv_heads = heads;
  params.head_dim = query_dim();
  params.value_head_dim = v_dim;
  params.query_len = params.query_count = params.key_len = seq;
  params.batch_end = batch;
  params.query = {queries, seq * heads * query_dim(), query_dim(), heads * query_dim()};
  float* outputs = Workspace::Reserve(workspace.head_outputs, rows * heads * v_dim);
  params.context = {outputs, seq * heads * v_dim, v_dim, heads * v_dim};
  params.query_scale = softmax_scale;
  params.split_decode_keys = call.split_decode_keys;
  params.pages = pages;
  params.page_size = page_size;
  if (expanded_rotary) {
    write.rotary = params.rotary = &*expanded_rotary;
    write.rotary_positions = params.query_positions = workspace.positions.data();
    write.positions_per_sequence = seq;
  }
  internal::WriteKvPages(write, workspace.rotation_scratch);
  AttentionMasks causal;
  causal.is_causal = true;
  const internal::MaskPlan masks(causal, {}, internal::CallSizes{batch, seq, seq}, heads);
  internal::RunAttentionCore(params, masks, workspace.core);
  return outputs;
}

}  // namespace mha
