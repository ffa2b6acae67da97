// MultiHeadLatentAttention::ForwardPacked: a continuous-batching step over a paged
// latent cache. The packed rows of every sequence are projected at once, their
// cached rows written into the cache's blocks, and the absorbed attention reads each
// sequence's latent pages in place.
#include <algorithm>

#include "src/attention/latent_attention_impl.h"
#include "src/attention/packed_batch.h"
#include "src/base/check.h"
#include "src/platform/isa_cap.h"

namespace mha {

using internal::Fail;
using internal::Workspace;

void MultiHeadLatentAttention::Impl::CheckPacked(const TensorView& hidden,
                                                 const PagedKvCache::Impl& cache,
                                                 int64_t layer,
                                                 const MutableTensorView& output) const {
  if (hidden.dtype != DType::kFloat32 || hidden.shape.rank() != 2 ||
      hidden.shape[1] != config.hidden_size) {
    Fail("hidden_states: expected float32 [T, hidden_size=", config.hidden_size,
         "], got ", DTypeName(hidden.dtype), " ", hidden.shape.ToString());
  }
  internal::CheckData("hidden_states", hidden.data, hidden.shape, sizeof(float));
  internal::CheckOutput("output", output, hidden.shape);
  if (!cache.latent || cache.head_dim != key_dim() ||
      cache.layout.value_head_dim != config.kv_lora_rank) {
    Fail("cache: must be a latent PagedKvCache of this layer's kv_lora_rank ",
         config.kv_lora_rank, " and qk_rope_head_dim ", config.qk_rope_head_dim);
  }
  if (layer < 0 || layer >= cache.options.num_layers) {
    Fail("layer: must be in [0, ", cache.options.num_layers, "), got ", layer);
  }
}

LatentForm MultiHeadLatentAttention::Impl::ForwardPacked(
    const TensorView& hidden, const PackedBatch& batch, PagedKvCache::Impl& cache,
    int64_t layer, const MutableTensorView& output_view,
    const ForwardOptions& options) const {
  CheckPacked(hidden, cache, layer, output_view);
  return WithCall(options, [&](const internal::LatentCall& call) {
    internal::LatentWorkspace& workspace = call.workspace;
    return ForwardPacked(call, workspace, hidden, batch, cache, layer, output_view);
  });
}

LatentForm MultiHeadLatentAttention::Impl::ForwardPacked(
    const internal::LatentCall& call, internal::LatentWorkspace& workspace,
    const TensorView& hidden, const PackedBatch& batch, PagedKvCache::Impl& cache,
    int64_t layer, const MutableTensorView& output_view) const {
  const int64_t tokens = hidden.shape[0];
  const internal::PackedSequences sequences = internal::CheckPackedBatch(
      batch, tokens, cache, workspace.sequence_ids, workspace.batch_rows,
      workspace.counts, workspace.first_positions);
  const int64_t* rows = workspace.batch_rows.data();
  const internal::TokenTree tree =
      batch.tree_parents.present()
          ? internal::BuildTokenTree(batch.tree_parents, tokens, sequences.count, rows,
                                     workspace.tree_depths, workspace.tree_intervals)
          : internal::TokenTree{};
  // A token's position: its sequence's cached length + its slot (in a tree, its depth).
  int64_t* positions = Workspace::Reserve(workspace.positions, tokens);
  for (int64_t b = 0; b < sequences.count; ++b) {
    for (int64_t row = rows[b]; row < rows[b + 1]; ++row) {
      positions[row] = workspace.first_positions[b] +
                       (tree.present() ? workspace.tree_depths[row] : row - rows[b]);
    }
  }
  if (rotary && sequences.key_len > rotary->max_positions()) {
    Fail("batch: positions up to ", sequences.key_len - 1,
         " exceed config.rotary.max_positions ", rotary->max_positions());
  }
  if (tokens == 0) return LatentForm::kAbsorbed;
  // Everything is checked: from here on the cache and output are written.
  internal::ApplyIsaCap();
  const int64_t* ids = workspace.sequence_ids.data();
  const auto pages = [&cache, ids, layer](int64_t b, int64_t kv_head) {
    return cache.Pages(ids[b], layer, kv_head);
  };
  internal::LatentStep step;
  step.sequences = sequences.count;
  step.query_len = sequences.query_len;
  step.key_len = sequences.key_len;
  step.rows = tokens;
  step.batch_rows = rows;
  step.counts = workspace.counts.data();
  step.tree = tree;
  step.pages = pages;
  step.page_size = cache.options.block_size;
  const float* queries = ProjectQueries(call, hidden.floats(), tokens);
  AppendToCache(call, ProjectKeys(call, hidden.floats(), tokens), step);
  Run(output, kOutput, AttendAbsorbed(call, queries, step), tokens, output_view.floats(),
      call);
  return LatentForm::kAbsorbed;
}

LatentForm MultiHeadLatentAttention::ForwardPacked(const TensorView& hidden_states,
                                                   const PackedBatch& batch,
                                                   PagedKvCache& cache, int64_t layer,
                                                   const MutableTensorView& output,
                                                   const ForwardOptions& options) const {
  return impl_->ForwardPacked(hidden_states, batch, *cache.impl_, layer, output, options);
}

}  // namespace mha
