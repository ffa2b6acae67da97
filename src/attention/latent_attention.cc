// MultiHeadLatentAttention: DeepSeek's MLA as a few named ops over one workspace:
// project the queries and the cached rows ([rotary part, latent], the latent
// RMS-normalised), append the rows to the cache (rotated on the way in), attend in
// the form the call's cost picks, the output projection. The absorbed form lives
// here: W_UK into each head's query, MQA over the latent pages (values in keys),
// W_UV per head.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/attention/latent_attention_impl.h"
#include "src/base/check.h"
#include "src/core/write_kv_pages.h"
#include "src/kernels/rms_norm_rows.h"
#include "src/platform/isa_cap.h"

namespace mha {

using internal::Workspace;

double DeepSeekYarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

namespace {

internal::LinearPrimitive Linear(const dnnl::engine& engine, const float* weights,
                                 int64_t in, int64_t out, int64_t output_stride) {
  return internal::LinearPrimitive(engine, {in, out, out, output_stride}, weights,
                                   nullptr, internal::WeightStorage::kFloat32, nullptr);
}

}  // namespace

MultiHeadLatentAttention::Impl::Impl(const LatentAttentionConfig& c,
                                     const LatentAttentionWeights& w)
    : config(c),
      softmax_scale(c.softmax_scale
                        ? *c.softmax_scale
                        : 1.0f / std::sqrt(static_cast<float>(c.qk_nope_head_dim +
                                                              c.qk_rope_head_dim))),
      weights(c, w),
      engine(internal::CpuEngine()) {
  const int64_t heads = c.num_heads, rank = c.kv_lora_rank, nope = c.qk_nope_head_dim;
  const int64_t query_in = c.q_lora_rank > 0 ? c.q_lora_rank : c.hidden_size;
  if (c.q_lora_rank > 0) {
    query_a = Linear(engine, weights.query_a.data(), c.hidden_size, c.q_lora_rank,
                     c.q_lora_rank);
  }
  query = Linear(engine, weights.query.data(), query_in, heads * query_dim(),
                 heads * query_dim());
  key = Linear(engine, weights.key.data(), c.hidden_size, key_dim(), key_dim());
  output = Linear(engine, weights.output.data(), heads * c.v_head_dim, c.hidden_size,
                  c.hidden_size);
  const int64_t expanded_width = heads * (nope + c.v_head_dim);
  expand = Linear(engine, weights.expand.data(), rank, expanded_width, expanded_width);
  for (int64_t h = 0; h < heads; ++h) {
    key_absorb.push_back(Linear(engine, weights.key_absorb.data() + h * nope * rank, nope,
                                rank, heads * key_dim()));
    value_up.push_back(Linear(engine, weights.value_up.data() + h * rank * c.v_head_dim,
                              rank, c.v_head_dim, heads * c.v_head_dim));
  }
  if (c.rotary.enabled()) {
    RotaryConfig rotation = c.rotary;
    rotation.rotary_dim = c.qk_rope_head_dim;
    rotary.emplace(rotation, key_dim());
    expanded_rotary.emplace(rotation, query_dim());
  }
}

const float* MultiHeadLatentAttention::Impl::ProjectQueries(
    const internal::LatentCall& call, const float* hidden, int64_t rows) const {
  internal::LatentWorkspace& workspace = call.workspace;
  float* queries =
      Workspace::Reserve(workspace.queries, rows * config.num_heads * query_dim());
  if (config.q_lora_rank == 0) {
    Run(query, kQuery, hidden, rows, queries, call);
    return queries;
  }
  float* query_a_rows = Workspace::Reserve(workspace.query_a, rows * config.q_lora_rank);
  Run(query_a, kQueryA, hidden, rows, query_a_rows, call);
  internal::RmsNormRows(query_a_rows, rows, config.q_lora_rank, config.q_lora_rank,
                        weights.query_a_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  Run(query, kQuery, query_a_rows, rows, queries, call);
  return queries;
}

float* MultiHeadLatentAttention::Impl::ProjectKeys(const internal::LatentCall& call,
                                                   const float* hidden,
                                                   int64_t rows) const {
  internal::LatentWorkspace& workspace = call.workspace;
  float* keys = Workspace::Reserve(workspace.keys, rows * key_dim());
  Run(key, kKey, hidden, rows, keys, call);
  internal::RmsNormRows(keys + config.qk_rope_head_dim, rows, key_dim(),
                        config.kv_lora_rank, weights.latent_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  return keys;
}

void MultiHeadLatentAttention::Impl::AppendToCache(
    const internal::LatentCall& call, const float* keys,
    const internal::LatentSequences& step) const {
  internal::LatentWorkspace& workspace = call.workspace;
  internal::KvWrite write;
  write.key =
      write.value = {keys, step.query_len * key_dim(), 0, key_dim(), step.batch_rows};
  write.batch_end = step.sequences;
  write.num_kv_heads = 1;
  write.head_dim = key_dim();
  write.value_head_dim = config.kv_lora_rank;
  write.counts = step.counts;
  write.count = step.query_len;
  write.first_positions = step.first_positions;
  if (rotary) {
    write.rotary = &*rotary;
    write.rotary_positions = step.positions;
    write.positions_per_sequence = step.query_len;
  }
  write.pages = step.pages;
  internal::WriteKvPages(write, workspace.rotation_scratch);
}

float* MultiHeadLatentAttention::Impl::AttendAbsorbed(
    const internal::LatentCall& call, const float* queries,
    const internal::LatentSequences& step) const {
  return ValueUp(call, AttendLatent(call, AbsorbQueries(call, queries, step.rows), step),
                 step.rows);
}

// Absorbed queries [rows, heads, rope + latent]: each head's q_pe, then q_nope W_UK_h
// (written by its projection in place, a row stride of heads x key_dim apart).
float* MultiHeadLatentAttention::Impl::AbsorbQueries(const internal::LatentCall& call,
                                                     const float* queries,
                                                     int64_t rows) const {
  internal::LatentWorkspace& workspace = call.workspace;
  const int64_t heads = config.num_heads, nope = config.qk_nope_head_dim;
  const int64_t rope = config.qk_rope_head_dim;
  float* absorbed =
      Workspace::Reserve(workspace.absorbed_queries, rows * heads * key_dim());
  float* nope_rows = Workspace::Reserve(workspace.nope_rows, rows * nope);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* head = queries + (r * heads + h) * query_dim();
      std::copy(head, head + rope, absorbed + (r * heads + h) * key_dim());
      std::copy(head + rope, head + rope + nope, nope_rows + r * nope);
    }
    Run(key_absorb[h], kKeyAbsorb + h, nope_rows, rows, absorbed + h * key_dim() + rope,
        call);
  }
  return absorbed;
}

// Latent contexts [heads, rows, kv_lora_rank]: each head's rows in one run, the
// input of its W_UV.
float* MultiHeadLatentAttention::Impl::AttendLatent(
    const internal::LatentCall& call, const float* absorbed,
    const internal::LatentSequences& step) const {
  internal::LatentWorkspace& workspace = call.workspace;
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  const int64_t rows = step.rows, seq = step.query_len;
  float* contexts = Workspace::Reserve(workspace.contexts, heads * rows * rank);
  internal::AttentionParams params;
  params.num_heads = heads;
  params.num_kv_heads = 1;
  params.head_dim = key_dim();
  params.value_head_dim = rank;
  params.values_in_keys = true;
  params.value_offset = config.qk_rope_head_dim;
  params.query_len = params.query_count = seq;
  params.key_len = step.key_len;
  params.batch_end = step.sequences;
  params.query = {absorbed, seq * heads * key_dim(), key_dim(), heads * key_dim(),
                  step.batch_rows};
  params.context = {contexts, seq * rank, rows * rank, rank, step.batch_rows};
  params.query_counts = step.counts;
  params.query_scale = softmax_scale;
  params.split_decode_keys = call.split_decode_keys;
  params.pages = step.pages;
  params.page_size = step.page_size;
  if (rotary) {
    params.rotary = &*rotary;
    params.query_positions = step.positions;
  }
  if (step.plans) {
    const PackedStep::Impl::FormPlan& plan = step.plans->PlanFor(params, {});
    internal::RunPlannedCore(params, plan.masks, plan.tasks, workspace.core);
    return contexts;
  }
  const internal::MaskPlan masks = internal::MaskPlan::ForCache(
      step.first_positions, step.key_len, AttentionFeatures{}, step.tree);
  internal::RunAttentionCore(params, masks, workspace.core);
  return contexts;
}

// Head outputs [rows, heads * v_head_dim]: W_UV_h of each head's latent context.
float* MultiHeadLatentAttention::Impl::ValueUp(const internal::LatentCall& call,
                                               const float* contexts,
                                               int64_t rows) const {
  internal::LatentWorkspace& workspace = call.workspace;
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  float* outputs =
      Workspace::Reserve(workspace.head_outputs, rows * heads * config.v_head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    Run(value_up[h], kKeyAbsorb + heads + h, contexts + h * rows * rank, rows,
        outputs + h * config.v_head_dim, call);
  }
  return outputs;
}

void MultiHeadLatentAttention::Impl::Check(const TensorView& hidden,
                                           const KvCache::Impl& cache,
                                           const MutableTensorView& output) const {
  if (hidden.dtype != DType::kFloat32 || hidden.shape.rank() != 3 ||
      hidden.shape[2] != config.hidden_size || hidden.shape[0] < 1 ||
      hidden.shape[1] < 1) {
    internal::Fail("hidden_states: expected float32 [B >= 1, S >= 1, hidden_size=",
                   config.hidden_size, "], got ", DTypeName(hidden.dtype), " ",
                   hidden.shape.ToString());
  }
  internal::CheckData("hidden_states", hidden.data, hidden.shape, sizeof(float));
  internal::CheckOutput("output", output, hidden.shape);
  if (!cache.latent) {
    internal::Fail("cache: must be a KvCache made from a LatentAttentionConfig, got one ",
                   "of ", cache.num_kv_heads, " KV heads of ", cache.head_dim);
  }
  if (cache.rope_dim != config.qk_rope_head_dim ||
      cache.latent_dim != config.kv_lora_rank) {
    internal::Fail("cache: made for kv_lora_rank ", cache.latent_dim,
                   " and qk_rope_head_dim ", cache.rope_dim, ", the layer has ",
                   config.kv_lora_rank, " and ", config.qk_rope_head_dim);
  }
  const int64_t batch = hidden.shape[0], seq = hidden.shape[1];
  if (batch > cache.max_batch) {
    internal::Fail("hidden_states: batch ", batch, " exceeds the cache's max_batch ",
                   cache.max_batch);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t end = cache.lengths[b] + seq;
    if (end > cache.max_seq_len) {
      internal::Fail("cache: sequence ", b, " holds ", cache.lengths[b],
                     " tokens; appending ", seq, " exceeds max_seq_len ",
                     cache.max_seq_len);
    }
    if (rotary && end > rotary->max_positions()) {
      internal::Fail("hidden_states: positions up to ", end - 1, " of sequence ", b,
                     " exceed config.rotary.max_positions ", rotary->max_positions());
    }
  }
}

// Expanded only where nothing is cached (LatentForm's costs).
LatentForm MultiHeadLatentAttention::Impl::Choose(const KvCache::Impl& cache,
                                                  int64_t batch) const {
  if (config.form == LatentForm::kAbsorbed) return LatentForm::kAbsorbed;
  for (int64_t b = 0; b < batch; ++b) {
    if (cache.lengths[b] > 0) return LatentForm::kAbsorbed;
  }
  return LatentForm::kExpanded;
}

LatentForm MultiHeadLatentAttention::Impl::ForwardWithCache(
    const TensorView& hidden, KvCache::Impl& cache, const MutableTensorView& output_view,
    const ForwardOptions& options) const {
  Check(hidden, cache, output_view);
  return WithCall(options, [&](const internal::LatentCall& call) {
    return ForwardWithCache(call, hidden, cache, output_view);
  });
}

LatentForm MultiHeadLatentAttention::Impl::ForwardWithCache(
    const internal::LatentCall& call, const TensorView& hidden, KvCache::Impl& cache,
    const MutableTensorView& output_view) const {
  internal::LatentWorkspace& workspace = call.workspace;
  internal::ApplyIsaCap();
  const int64_t batch = hidden.shape[0], seq = hidden.shape[1], rows = batch * seq;
  int64_t* first = Workspace::Reserve(workspace.first_positions, batch);
  int64_t* positions = Workspace::Reserve(workspace.positions, rows);
  for (int64_t b = 0; b < batch; ++b) {
    first[b] = cache.lengths[b];
    for (int64_t i = 0; i < seq; ++i) positions[b * seq + i] = first[b] + i;
  }
  internal::LatentSequences step;
  step.sequences = batch;
  step.query_len = seq;
  step.rows = rows;
  for (int64_t b = 0; b < batch; ++b)
    step.key_len = std::max(step.key_len, first[b] + seq);
  step.first_positions = first;
  step.positions = positions;
  step.pages = cache.pages;
  step.page_size = cache.page_size;
  const LatentForm form = Choose(cache, batch);
  const float* queries = ProjectQueries(call, hidden.floats(), rows);
  const float* keys = ProjectKeys(call, hidden.floats(), rows);
  AppendToCache(call, keys, step);
  const float* head_outputs = form == LatentForm::kExpanded
                                  ? AttendExpanded(call, queries, keys, batch, seq)
                                  : AttendAbsorbed(call, queries, step);
  Run(output, kOutput, head_outputs, rows, output_view.floats(), call);
  for (int64_t b = 0; b < batch; ++b) cache.lengths[b] += seq;  // only on success
  return form;
}

MultiHeadLatentAttention::MultiHeadLatentAttention(
    const LatentAttentionConfig& config, const LatentAttentionWeights& weights) {
  internal::ValidateLatentConfig(config);
  internal::ValidateLatentWeights(config, weights);
  impl_ = std::make_unique<Impl>(config, weights);
}

MultiHeadLatentAttention::~MultiHeadLatentAttention() = default;
MultiHeadLatentAttention::MultiHeadLatentAttention(MultiHeadLatentAttention&&) noexcept =
    default;
MultiHeadLatentAttention& MultiHeadLatentAttention::operator=(
    MultiHeadLatentAttention&&) noexcept = default;

const LatentAttentionConfig& MultiHeadLatentAttention::config() const {
  return impl_->config;
}

LatentForm MultiHeadLatentAttention::ForwardWithCache(
    const TensorView& hidden_states, KvCache& cache, const MutableTensorView& output,
    const ForwardOptions& options) const {
  return impl_->ForwardWithCache(hidden_states, *cache.impl_, output, options);
}

}  // namespace mha
