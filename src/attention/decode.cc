// MultiheadAttention::ForwardWithCache: decoding over a caller-owned KV cache. New
// tokens are projected with the fused QKV GEMM, appended to the cache's panels, and
// attend causally (bottom-right aligned) over everything cached. A kv_shared layer
// projects queries only and reads what the layer it shares with appended.
#include <algorithm>

#include "src/attention/layer_impl.h"
#include "src/base/check.h"
#include "src/threading/parallel_for.h"

namespace mha {

using internal::AttentionParams;
using internal::PackedWeights;
using internal::Problem;
using internal::Workspace;

// Checks a decoding call and fills workspace.positions (each sequence's cached
// length) and workspace.new_lengths; key_len of the result is the longest sequence
// after appending. Nothing is written before every check has passed.
Problem MultiheadAttention::Impl::ValidateCacheCall(const TensorView& query,
                                                    const TensorView& new_lengths,
                                                    const KvCache::Impl& cache,
                                                    const MutableTensorView& output,
                                                    const ForwardOptions& options,
                                                    Workspace& workspace) const {
  using internal::Fail;
  CheckCacheShape(cache.num_kv_heads, cache.head_dim, cache.latent);
  Problem problem = internal::ValidateForward(config, output_dim, {query, query, query},
                                              {output, {}}, options);
  const int64_t batch = problem.batch_size;
  if (batch > cache.max_batch) {
    Fail("query: batch ", batch, " exceeds the cache's max_batch ", cache.max_batch);
  }
  if (new_lengths.present()) {
    if (new_lengths.dtype != DType::kInt32 && new_lengths.dtype != DType::kInt64) {
      Fail("new_lengths: expected dtype int32 or int64, got ",
           DTypeName(new_lengths.dtype));
    }
    internal::CheckTensor("new_lengths", new_lengths, new_lengths.dtype, Shape{batch});
  }
  int64_t* counts = Workspace::Reserve(workspace.new_lengths, batch);
  int64_t* positions = Workspace::Reserve(workspace.positions, batch);
  problem.key_len = 0;
  for (int64_t b = 0; b < batch; ++b) {
    counts[b] = problem.query_len;
    if (new_lengths.present()) {
      counts[b] = new_lengths.dtype == DType::kInt32
                      ? static_cast<const int32_t*>(new_lengths.data)[b]
                      : static_cast<const int64_t*>(new_lengths.data)[b];
    }
    if (counts[b] < 0 || counts[b] > problem.query_len) {
      Fail("new_lengths[", b, "]: must be in [0, ", problem.query_len, "], got ",
           counts[b]);
    }
    positions[b] = options.kv_shared ? cache.lengths[b] - counts[b] : cache.lengths[b];
    if (positions[b] < 0) {
      Fail("cache: sequence ", b, " holds ", cache.lengths[b], " tokens, fewer than the ",
           counts[b],
           " new ones a kv_shared layer reads (the layer it shares with "
           "writes them first)");
    }
    if (positions[b] + counts[b] > cache.max_seq_len) {
      Fail("cache: sequence ", b, " holds ", positions[b], " tokens; appending ",
           counts[b], " exceeds max_seq_len ", cache.max_seq_len);
    }
    problem.key_len = std::max(problem.key_len, positions[b] + counts[b]);
  }
  return problem;
}

void MultiheadAttention::Impl::ForwardWithCache(const TensorView& query,
                                                const TensorView& new_lengths,
                                                KvCache::Impl& cache,
                                                const MutableTensorView& output,
                                                const ForwardOptions& options) const {
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  const Problem problem =
      ValidateCacheCall(query, new_lengths, cache, output, options, *workspace);
  const internal::TileRule tile_rule = TileRuleFor(options.batch_invariant);
  const internal::RotaryRows rotary_rows =
      RotaryPositions(problem, options.position_ids, workspace->positions.data(),
                      workspace->new_lengths.data(), *workspace);
  const MutableTensorView staged = StageOutput(output, *workspace);
  // Everything is checked: from here on the cache and output are written.
  const internal::ScopedThreadCount thread_count(
      ThreadsFor(problem, options.num_threads));
  const int64_t sq = problem.query_len;
  const int64_t* counts = workspace->new_lengths.data();
  const auto pages = [&cache](int64_t b, int64_t kv_head) {
    return cache.Pages(b, kv_head);
  };
  internal::KvWrite write = LayerKvWrite(rotary_rows, sq);
  write.batch_end = problem.batch_size;
  write.counts = counts;
  write.first_positions = workspace->positions.data();
  write.pages = pages;
  AttentionParams params = BaseParams(problem, rotary_rows, tile_rule);
  params.pages = pages;
  params.page_size = cache.page_size;
  params.query_counts = counts;
  const internal::MaskPlan masks = internal::MaskPlan::ForCache(
      workspace->positions.data(), cache.capacity, config.features);
  RunQueries({tile_rule, &query, 0, problem.batch_size * sq, sq, nullptr,
              options.kv_shared ? nullptr : &write, staged.floats(), /*padded=*/true},
             params, masks, *workspace);
  if (options.kv_shared) return FinishOutput(staged, output);
  for (int64_t b = 0; b < problem.batch_size; ++b) cache.lengths[b] += counts[b];
  FinishOutput(staged, output);
}

void MultiheadAttention::ForwardWithCache(const TensorView& query,
                                          const TensorView& new_lengths, KvCache& cache,
                                          const MutableTensorView& output,
                                          const ForwardOptions& options) const {
  impl_->ForwardWithCache(query, new_lengths, *cache.impl_, output, options);
}

}  // namespace mha
