// MultiheadAttention::ForwardPacked: one continuous-batching step over a paged KV
// cache. The packed tokens of every sequence are projected by one fused QKV GEMM
// (no padding rows), their keys and values written into the cache's blocks, and the
// attention core attends each sequence's queries over its blocks in place (a
// kv_shared layer projects queries only, over blocks another layer wrote).
#include <algorithm>

#include "src/attention/layer_impl.h"
#include "src/attention/packed_batch.h"
#include "src/base/check.h"
#include "src/cache/paged_kv_cache_storage.h"
#include "src/threading/parallel_for.h"

namespace mha {

using internal::AttentionParams;
using internal::Fail;
using internal::Problem;
using internal::Workspace;

using internal::CheckIndexTensor;

void MultiheadAttention::Impl::CheckCacheShape(int64_t num_kv_heads, int64_t head_dim,
                                               bool latent) const {
  if (latent) {
    Fail(
        "cache: made for multi-head latent attention layers (latents, no keys and "
        "values of their own)");
  }
  if (!packed.qkv_fused()) {
    Fail(
        "a KV cache needs a self-attention layer (key_dim = value_dim = query_dim), "
        "got query_dim=",
        config.query_dim, " key_dim=", config.resolved_key_dim(),
        " value_dim=", config.resolved_value_dim());
  }
  if (num_kv_heads != config.resolved_num_kv_heads() || head_dim != config.head_dim) {
    Fail("cache: made for num_kv_heads=", num_kv_heads, " head_dim=", head_dim,
         ", this layer has num_kv_heads=", config.resolved_num_kv_heads(),
         " head_dim=", config.head_dim);
  }
}

// Checks a packed step and fills the workspace's per-sequence ids, row offsets,
// counts and first positions. Nothing is written before every check has passed.
Problem MultiheadAttention::Impl::ValidatePackedCall(
    const TensorView& query, const PackedBatch& batch, const PagedKvCache::Impl& cache,
    int64_t layer, const MutableTensorView& output, const ForwardOptions& options,
    Workspace& workspace) const {
  internal::CheckThreadCount("options.num_threads", options.num_threads);
  CheckCacheShape(cache.num_kv_heads, cache.head_dim, cache.latent);
  if (layer < 0 || layer >= cache.options.num_layers) {
    Fail("layer: must be in [0, ", cache.options.num_layers, "), got ", layer);
  }
  const int64_t window = config.features.sliding_window.value_or(0);
  if (cache.options.sliding_window > 0 &&
      (window <= 0 || window > cache.options.sliding_window)) {
    Fail("cache: keeps a sliding window of ", cache.options.sliding_window,
         " tokens, this layer's sliding_window is ", window,
         " (must be in [1, the cache's])");
  }
  const int64_t chunk = config.features.attention_chunk_size.value_or(0);
  if (cache.options.attention_chunk_size > 0 &&
      (chunk <= 0 || cache.options.attention_chunk_size % chunk != 0)) {
    Fail("cache: keeps attention chunks of ", cache.options.attention_chunk_size,
         " tokens, this layer's attention_chunk_size is ", chunk,
         " (must be > 0 and divide the cache's)");
  }
  if (query.shape.rank() != 2 || query.shape[1] != config.query_dim) {
    Fail("query: expected shape [T, ", config.query_dim, "], got ",
         query.shape.ToString());
  }
  const int64_t tokens = query.shape[0];
  if (query.dtype != DType::kFloat32 && query.dtype != DType::kBFloat16) {
    Fail("query: expected dtype float32 or bfloat16, got ", DTypeName(query.dtype));
  }
  internal::CheckTensor("query", query, query.dtype, query.shape);
  internal::CheckOutput("output", output, Shape{tokens, output_dim},
                        /*bf16_allowed=*/true);
  if (options.position_ids.present()) {
    CheckIndexTensor("options.position_ids", options.position_ids, tokens);
  }
  const internal::PackedSequences sequences = internal::CheckPackedBatch(
      batch, tokens, cache, workspace.sequence_ids, workspace.batch_rows,
      workspace.new_lengths, workspace.positions);
  Problem problem;
  problem.batch_size = sequences.count;
  problem.query_len = sequences.query_len;
  problem.key_len = sequences.key_len;
  return problem;
}

internal::TokenTree MultiheadAttention::Impl::PackedTree(const Problem& problem,
                                                         const TensorView& tree_parents,
                                                         int64_t tokens,
                                                         Workspace& workspace) const {
  if (!tree_parents.present()) return {};
  const AttentionFeatures& f = config.features;
  if (f.sliding_window || f.attention_chunk_size || f.alibi || f.temperature_tuning) {
    Fail(
        "batch.tree_parents: token trees place tokens by depth, and this layer's "
        "sliding window, attention chunk, ALiBi or query temperature by slot");
  }
  return internal::BuildTokenTree(tree_parents, tokens, problem.batch_size,
                                  workspace.batch_rows.data(), workspace.tree_depths,
                                  workspace.tree_intervals);
}

// Rotary positions of the packed rows: options.position_ids, or each sequence's
// first position + j (+ the token's depth in a tree).
MultiheadAttention::Impl::RotaryRows MultiheadAttention::Impl::PackedRotaryPositions(
    const Problem& problem, int64_t tokens, const TensorView& position_ids,
    const int64_t* depths, Workspace& workspace) const {
  if (!rotary) {
    if (position_ids.present()) {
      Fail("options.position_ids: given to a layer without rotary embeddings");
    }
    return {};
  }
  int64_t* positions = Workspace::Reserve(workspace.rotary_positions, tokens);
  const int64_t* rows = workspace.batch_rows.data();
  for (int64_t i = 0; i < problem.batch_size; ++i) {
    for (int64_t row = rows[i]; row < rows[i + 1]; ++row) {
      const int64_t offset = depths ? depths[row] : row - rows[i];
      positions[row] = position_ids.present() ? internal::IntegerAt(position_ids, row)
                                              : workspace.positions[i] + offset;
      if (positions[row] < 0 || positions[row] >= rotary->max_positions()) {
        Fail("rotary position of row ", row, ": must be in [0, ", rotary->max_positions(),
             "), got ", positions[row]);
      }
    }
  }
  if (rotary->dynamic()) {
    return CallTable(positions, tokens, rows, nullptr, problem.batch_size, workspace);
  }
  return {positions, &*rotary};
}

void MultiheadAttention::Impl::ForwardPacked(const TensorView& query,
                                             const PackedBatch& batch,
                                             PagedKvCache::Impl& cache, int64_t layer,
                                             const MutableTensorView& output,
                                             const ForwardOptions& options) const {
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  const Problem problem =
      ValidatePackedCall(query, batch, cache, layer, output, options, *workspace);
  workspace->tile_rule = TileRuleFor(options);
  const int64_t tokens = query.shape[0];
  const internal::TokenTree tree =
      PackedTree(problem, batch.tree_parents, tokens, *workspace);
  const RotaryRows rotary_rows = PackedRotaryPositions(
      problem, tokens, options.position_ids,
      tree.present() ? workspace->tree_depths.data() : nullptr, *workspace);
  const MutableTensorView staged = StageOutput(output, *workspace);
  if (tokens == 0) return;
  // Everything is checked: from here on the cache and output are written.
  Problem sizes = problem;
  sizes.batch_size = 1;  // the thread heuristic sees T rows against the longest keys
  sizes.query_len = tokens;
  const internal::ScopedThreadCount thread_count(ThreadsFor(sizes, options));
  const int64_t* rows = workspace->batch_rows.data();
  const int64_t* ids = workspace->sequence_ids.data();
  const auto pages = [&cache, ids, layer](int64_t b, int64_t kv_head) {
    return cache.Pages(ids[b], layer, kv_head);
  };
  internal::KvWrite write = LayerKvWrite(rotary_rows, 0);
  write.batch_end = problem.batch_size;
  write.counts = workspace->new_lengths.data();
  write.first_positions = workspace->positions.data();
  write.pages = pages;
  AttentionParams params = BaseParams(problem, rotary_rows, options);
  params.pages = pages;
  params.page_size = cache.options.block_size;
  params.query_counts = workspace->new_lengths.data();
  const internal::MaskPlan masks = internal::MaskPlan::ForCache(
      workspace->positions.data(), problem.key_len, config.features, tree);
  RunQueries(
      {&query, 0, tokens, 0, rows, options.kv_shared ? nullptr : &write, staged.floats()},
      params, masks, *workspace);
  FinishOutput(staged, output);
}

void MultiheadAttention::ForwardPacked(const TensorView& query, const PackedBatch& batch,
                                       PagedKvCache& cache, int64_t layer,
                                       const MutableTensorView& output,
                                       const ForwardOptions& options) const {
  impl_->ForwardPacked(query, batch, *cache.impl_, layer, output, options);
}

}  // namespace mha
