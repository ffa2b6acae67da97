// MLA's expanded form, for a call with nothing cached: kv_b_proj turns each new
// token's latent into every head's k_nope and v; a head's key is [k_pe, k_nope] (the
// rotary part shared), its query [q_pe, q_nope]; written into workspace pages that
// the one attention core then reads (values narrower than keys).
#include <algorithm>

#include "src/core/write_kv_pages.h"
#include "src/layer/latent_attention_impl.h"

namespace mha {

using internal::Workspace;

void MultiheadLatentAttention::Impl::ExpandKeysAndValues(
    const float* latent_rows, const QueryPass& pass, internal::AttentionParams& params,
    Workspace& workspace) const {
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  const int64_t rope = config.qk_rope_head_dim, nope = config.qk_nope_head_dim;
  const int64_t v_dim = config.v_head_dim, width = nope + v_dim, rows = pass.rows;
  const int64_t batch = params.batch_end, seq = pass.rows_per_batch;
  float* latents = workspace.Buffer(kLatents, rows * rank);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(latent_rows + r * key_dim() + rope, rank, latents + r * rank);
  }
  float* expanded = workspace.Buffer(kExpanded, rows * heads * width);
  Run(expand, kExpand, latents, rows, expanded, pass, workspace);
  float* keys = workspace.Buffer(kExpandedKeys, rows * heads * query_dim());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* key_row = keys + (r * heads + h) * query_dim();
      std::copy_n(latent_rows + r * key_dim(), rope, key_row);
      std::copy_n(expanded + (r * heads + h) * width, nope, key_row + rope);
    }
  }
  params.page_size = internal::WorkspacePageSize(seq);
  internal::ContiguousPages& pages = workspace.core.kv_pages;
  pages.Reset(internal::BlockLayout(params.page_size, heads, query_dim(),
                                    internal::KvStorage::kFloat32, v_dim),
              batch, seq);
  params.pages = pages;
  internal::KvWrite write;
  write.key = {keys, seq * heads * query_dim(), query_dim(), heads * query_dim()};
  write.value = {expanded + nope, seq * heads * width, width, heads * width};
  write.batch_end = batch;
  write.num_kv_heads = heads;
  write.head_dim = query_dim();
  write.value_head_dim = v_dim;
  write.count = seq;
  write.zero_padding = true;
  write.pages = pages;
  if (expanded_rotary) {
    write.rotary = &*expanded_rotary;
    write.rotary_positions = params.query_positions;
    write.positions_per_sequence = seq;
  }
  internal::WriteKvPages(write, workspace.core.rotation_scratch);
}

}  // namespace mha
