// Layer::ForwardWithCache: decoding over a caller-owned contiguous KV cache. New
// tokens are projected (with their keys and values), appended to each sequence's
// pages, and attend causally (bottom-right aligned) over everything cached. A
// kv_shared layer projects queries only and reads what the layer it shares with
// appended.
#include <algorithm>

#include "src/base/check.h"
#include "src/base/parallel_for.h"
#include "src/layer/layer.h"

namespace mha::internal {

// Checks a cached call and fills workspace.positions (each sequence's cached length)
// and workspace.new_lengths; key_len of the result is the longest sequence after
// appending. Nothing is written before every check has passed.
Problem Layer::CheckCacheCall(const TensorView& input, const TensorView& new_lengths,
                              const KvCache::Impl& cache, const MutableTensorView& output,
                              const ForwardOptions& options, Workspace& workspace) const {
  CheckCacheLayout(cache.pages.layout());
  Problem problem = CheckInput(input, output, options);
  const int64_t batch = problem.batch_size;
  if (batch > cache.max_batch) {
    Fail(input_name, ": batch ", batch, " exceeds the cache's max_batch ",
         cache.max_batch);
  }
  if (new_lengths.present()) {
    if (new_lengths.dtype != DType::kInt32 && new_lengths.dtype != DType::kInt64) {
      Fail("new_lengths: expected dtype int32 or int64, got ",
           DTypeName(new_lengths.dtype));
    }
    CheckTensor("new_lengths", new_lengths, new_lengths.dtype, Shape{batch});
  }
  int64_t* counts = Workspace::Reserve(workspace.new_lengths, batch);
  int64_t* positions = Workspace::Reserve(workspace.positions, batch);
  problem.key_len = 0;
  for (int64_t b = 0; b < batch; ++b) {
    counts[b] = new_lengths.present() ? IntegerAt(new_lengths, b) : problem.query_len;
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

int Layer::ForwardWithCache(const TensorView& input, const TensorView& new_lengths,
                            KvCache::Impl& cache, const MutableTensorView& output,
                            const ForwardOptions& options) const {
  const WorkspacePool::Lease workspace = workspaces.Acquire();
  const Problem problem =
      CheckCacheCall(input, new_lengths, cache, output, options, *workspace);
  const TileRule tile_rule = TileRuleFor(options.batch_invariant);
  const int64_t* counts = workspace->new_lengths.data();
  const int64_t* first_positions = workspace->positions.data();
  const RotaryRows rotary_rows =
      RotaryPositions(problem, options.position_ids, first_positions, counts, *workspace);
  const MutableTensorView staged = StageOutput(output, *workspace);
  // Everything is checked: from here on the cache and output are written.
  const ScopedThreadCount thread_count(ThreadsFor(problem, options.num_threads));
  const int form = ChooseForm(first_positions, problem.batch_size);
  const int64_t sq = problem.query_len;
  const auto pages = [&cache](int64_t b, int64_t kv_head) {
    return cache.Pages(b, kv_head);
  };
  KvWrite write = KvWriteFor(rotary_rows, sq);
  write.batch_end = problem.batch_size;
  write.counts = counts;
  write.first_positions = first_positions;
  write.pages = pages;
  AttentionParams params = BaseParams(problem, rotary_rows, tile_rule, form);
  params.pages = pages;
  params.page_size = cache.page_size;
  params.query_counts = counts;
  const MaskPlan masks = MaskPlan::ForCache(first_positions, cache.capacity, features);
  RunQueries({tile_rule, &input, 0, problem.batch_size * sq, sq, nullptr,
              options.kv_shared ? nullptr : &write, staged.floats(),
              new_lengths.present(), nullptr, form},
             params, masks, *workspace);
  if (!options.kv_shared) {
    for (int64_t b = 0; b < problem.batch_size; ++b) cache.lengths[b] += counts[b];
  }
  FinishOutput(staged, output);
  return form;
}

}  // namespace mha::internal
