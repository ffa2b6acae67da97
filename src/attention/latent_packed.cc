// MultiHeadLatentAttention::ForwardPacked: a continuous-batching step over a paged
// latent cache, planned once (PackedStep). The packed rows of every sequence are
// projected at once, their cached rows written into the cache's blocks, and the
// absorbed attention reads each sequence's latent pages in place.
#include "src/attention/latent_attention_impl.h"
#include "src/attention/packed_step.h"
#include "src/base/check.h"
#include "src/platform/isa_cap.h"

namespace mha {

using internal::Fail;

void MultiHeadLatentAttention::Impl::CheckPacked(const TensorView& hidden,
                                                 const PackedStep::Impl& step,
                                                 int64_t layer,
                                                 const MutableTensorView& output) const {
  step.CheckCurrent(layer);
  const PagedKvCache::Impl& cache = *step.cache;
  const int64_t tokens = step.rows.tokens;
  if (hidden.dtype != DType::kFloat32 ||
      hidden.shape != Shape{tokens, config.hidden_size}) {
    Fail("hidden_states: expected float32 [T=", tokens,
         " (the step's packed rows), hidden_size=", config.hidden_size, "], got ",
         DTypeName(hidden.dtype), " ", hidden.shape.ToString());
  }
  internal::CheckData("hidden_states", hidden.data, hidden.shape, sizeof(float));
  internal::CheckOutput("output", output, hidden.shape);
  if (!cache.latent || cache.head_dim != key_dim() ||
      cache.layout.value_head_dim != config.kv_lora_rank) {
    Fail("cache: must be a latent PagedKvCache of this layer's kv_lora_rank ",
         config.kv_lora_rank, " and qk_rope_head_dim ", config.qk_rope_head_dim);
  }
  if (step.rows.has_position_ids) {
    Fail("options.position_ids: MultiHeadLatentAttention places tokens itself (unset)");
  }
  if (rotary && step.rows.max_position >= rotary->max_positions()) {
    Fail("batch: positions up to ", step.rows.max_position,
         " exceed config.rotary.max_positions ", rotary->max_positions());
  }
}

LatentForm MultiHeadLatentAttention::Impl::ForwardPacked(
    const internal::LatentCall& call, const TensorView& hidden,
    const PackedStep::Impl& step, int64_t layer,
    const MutableTensorView& output_view) const {
  CheckPacked(hidden, step, layer, output_view);
  const PackedStep::Impl::Rows& rows = step.rows;
  if (rows.tokens == 0) return LatentForm::kAbsorbed;
  // Everything is checked: from here on the cache and output are written.
  internal::ApplyIsaCap();
  internal::LatentSequences sequences;
  sequences.sequences = rows.sequences;
  sequences.query_len = rows.query_len;
  sequences.key_len = rows.key_len;
  sequences.rows = rows.tokens;
  sequences.batch_rows = rows.rows.data();
  sequences.counts = rows.counts.data();
  sequences.first_positions = rows.first_positions.data();
  sequences.positions = rows.positions.data();
  sequences.tree = step.tree();
  const PackedStep::Impl::LayerPages pages{&step, layer};
  sequences.pages = pages;
  sequences.page_size = step.cache->options.block_size;
  sequences.plans = &step;
  const float* queries = ProjectQueries(call, hidden.floats(), rows.tokens);
  AppendToCache(call, ProjectKeys(call, hidden.floats(), rows.tokens), sequences);
  Run(output, kOutput, AttendAbsorbed(call, queries, sequences), rows.tokens,
      output_view.floats(), call);
  return LatentForm::kAbsorbed;
}

LatentForm MultiHeadLatentAttention::ForwardPacked(const TensorView& hidden_states,
                                                   const PackedBatch& batch,
                                                   PagedKvCache& cache, int64_t layer,
                                                   const MutableTensorView& output,
                                                   const ForwardOptions& options) const {
  return impl_->WithCall(options, [&](const internal::LatentCall& call) {
    PackedStep::Impl& step = *call.workspace.step.impl_;
    step.Plan(*cache.impl_, batch, options,
              hidden_states.shape.rank() == 2 ? hidden_states.shape[0] : -1);
    return impl_->ForwardPacked(call, hidden_states, step, layer, output);
  });
}

LatentForm MultiHeadLatentAttention::ForwardPacked(
    const TensorView& hidden_states, const PackedStep& step, int64_t layer,
    const MutableTensorView& output) const {
  const auto workspace = impl_->workspaces.Acquire();
  const PackedStep::Impl& planned = *step.impl_;
  return impl_->RunCall(*workspace, planned.num_threads, planned.batch_invariant,
                        [&](const internal::LatentCall& call) {
                          return impl_->ForwardPacked(call, hidden_states, planned, layer,
                                                      output);
                        });
}

}  // namespace mha
