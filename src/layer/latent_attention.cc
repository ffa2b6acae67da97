// MultiheadLatentAttention: DeepSeek's MLA as a projection strategy of the one
// pipeline (latent_attention_impl.h): project the queries and the cached rows
// ([rotary part, latent], the latent RMS-normalised), which the pipeline writes into
// the cache (rotated on the way in); attend in the form the call's cost picks; the
// output projection. The absorbed form lives here: W_UK into each head's query, MQA
// over the latent pages (values in keys), W_UV per head.
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/base/check.h"
#include "src/base/isa_cap.h"
#include "src/layer/latent_attention_impl.h"
#include "src/simd/rms_norm_rows.h"

namespace mha {

using internal::AttentionParams;
using internal::Fail;
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

MultiheadLatentAttention::Impl::Impl(const LatentAttentionConfig& c,
                                     const LatentAttentionWeights& w)
    : Layer(c.hidden_size, c.hidden_size, "hidden_states"),
      config(c),
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

internal::Problem MultiheadLatentAttention::Impl::CheckInput(
    const TensorView& hidden, const MutableTensorView& output,
    const ForwardOptions& options) const {
  internal::CheckThreadCount("options.num_threads", options.num_threads);
  if (options.kv_shared) {
    Fail("options.kv_shared: MultiheadLatentAttention layers write their own cache");
  }
  if ((hidden.dtype != DType::kFloat32 && hidden.dtype != DType::kBFloat16) ||
      hidden.shape.rank() != 3 || hidden.shape[2] != config.hidden_size ||
      hidden.shape[0] < 1 || hidden.shape[1] < 1) {
    Fail("hidden_states: expected float32 or bfloat16 [B >= 1, S >= 1, hidden_size=",
         config.hidden_size, "], got ", DTypeName(hidden.dtype), " ",
         hidden.shape.ToString());
  }
  internal::CheckTensor("hidden_states", hidden, hidden.dtype, hidden.shape);
  internal::CheckOutput("output", output, hidden.shape, /*bf16_allowed=*/true);
  internal::Problem problem;
  problem.batch_size = hidden.shape[0];
  problem.query_len = hidden.shape[1];
  return problem;
}

void MultiheadLatentAttention::Impl::CheckCacheLayout(
    const internal::BlockLayout& layout) const {
  if (!layout.values_in_keys) {
    Fail("cache: must be made from a LatentAttentionConfig (KvCache or PagedKvCache), ",
         "got one of ", layout.num_kv_heads, " KV heads of ", layout.head_dim);
  }
  if (layout.head_dim != key_dim() || layout.value_head_dim != config.kv_lora_rank) {
    Fail("cache: made for kv_lora_rank ", layout.value_head_dim, " and qk_rope_head_dim ",
         layout.head_dim - layout.value_head_dim, ", the layer has ", config.kv_lora_rank,
         " and ", config.qk_rope_head_dim);
  }
}

int MultiheadLatentAttention::Impl::ChooseForm(const int64_t* first_positions,
                                               int64_t sequences) const {
  if (config.form == LatentForm::kAbsorbed) return kAbsorbedForm;
  for (int64_t b = 0; b < sequences; ++b) {
    if (first_positions[b] > 0) return kAbsorbedForm;
  }
  return kExpandedForm;
}

void MultiheadLatentAttention::Impl::SetCoreParams(AttentionParams& params,
                                                   int form) const {
  params.num_heads = config.num_heads;
  params.query_scale = softmax_scale;
  if (form == kExpandedForm) {
    params.num_kv_heads = config.num_heads;
    params.head_dim = query_dim();
    params.value_head_dim = config.v_head_dim;
    if (expanded_rotary) params.rotary = &*expanded_rotary;
    return;
  }
  params.num_kv_heads = 1;
  params.head_dim = key_dim();
  params.value_head_dim = config.kv_lora_rank;
  params.values_in_keys = true;
  params.value_offset = config.qk_rope_head_dim;
}

internal::KvWrite MultiheadLatentAttention::Impl::KvWriteFor(
    const internal::RotaryRows& rotary_rows, int64_t positions_per_sequence) const {
  internal::KvWrite write;
  write.num_kv_heads = 1;
  write.head_dim = key_dim();
  write.value_head_dim = config.kv_lora_rank;
  if (rotary) {
    write.rotary = rotary_rows.table;
    write.rotary_positions = rotary_rows.positions;
    write.positions_per_sequence = positions_per_sequence;
  }
  return write;
}

internal::Layer::Projected MultiheadLatentAttention::Impl::Project(
    const QueryPass& pass, AttentionParams& params, Workspace& workspace) const {
  const float* queries = ProjectQueries(pass, workspace);
  const bool expanded = pass.form == kExpandedForm;
  const float* latent_rows =
      pass.kv || expanded ? ProjectLatentRows(pass, workspace) : nullptr;
  const int64_t heads = config.num_heads;
  if (!expanded) {
    return {AbsorbQueries(queries, pass, workspace), heads * key_dim(), latent_rows,
            latent_rows, key_dim()};
  }
  ExpandKeysAndValues(latent_rows, pass, params, workspace);
  return {queries, heads * query_dim(), latent_rows, latent_rows, key_dim()};
}

internal::HeadRows<float> MultiheadLatentAttention::Impl::ContextRows(
    const QueryPass& pass, Workspace& workspace) const {
  const int64_t heads = config.num_heads, rows = pass.rows;
  if (pass.form == kExpandedForm) {
    const int64_t width = heads * config.v_head_dim;
    float* outputs = workspace.Buffer(kHeadOutputs, rows * width);
    if (pass.padded) std::fill(outputs, outputs + rows * width, 0.0f);
    return {outputs, pass.rows_per_batch * width, config.v_head_dim, width,
            pass.batch_rows};
  }
  const int64_t rank = config.kv_lora_rank;
  float* contexts = workspace.Buffer(kContexts, heads * rows * rank);
  if (pass.padded) std::fill(contexts, contexts + heads * rows * rank, 0.0f);
  return {contexts, pass.rows_per_batch * rank, rows * rank, rank, pass.batch_rows};
}

void MultiheadLatentAttention::Impl::ProjectOutput(const float* context,
                                                   const QueryPass& pass,
                                                   Workspace& workspace) const {
  const float* head_outputs =
      pass.form == kExpandedForm ? context : ValueUp(context, pass, workspace);
  Run(output, kOutput, head_outputs, pass.rows, pass.output, pass, workspace);
}

const float* MultiheadLatentAttention::Impl::ProjectQueries(const QueryPass& pass,
                                                            Workspace& workspace) const {
  const int64_t rows = pass.rows;
  float* queries = workspace.Buffer(kQueries, rows * config.num_heads * query_dim());
  if (config.q_lora_rank == 0) {
    RunLinear(query, kQuery, *pass.input, pass.first_row, rows, queries, pass.tile_rule,
              workspace);
    return queries;
  }
  float* query_a_rows = workspace.Buffer(kQueryARows, rows * config.q_lora_rank);
  RunLinear(query_a, kQueryA, *pass.input, pass.first_row, rows, query_a_rows,
            pass.tile_rule, workspace);
  internal::RmsNormRows(query_a_rows, rows, config.q_lora_rank, config.q_lora_rank,
                        weights.query_a_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  Run(query, kQuery, query_a_rows, rows, queries, pass, workspace);
  return queries;
}

float* MultiheadLatentAttention::Impl::ProjectLatentRows(const QueryPass& pass,
                                                         Workspace& workspace) const {
  float* rows = workspace.Buffer(kLatentRows, pass.rows * key_dim());
  RunLinear(key, kKey, *pass.input, pass.first_row, pass.rows, rows, pass.tile_rule,
            workspace);
  internal::RmsNormRows(rows + config.qk_rope_head_dim, pass.rows, key_dim(),
                        config.kv_lora_rank, weights.latent_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  return rows;
}

// Absorbed queries [rows, heads, rope + latent]: each head's q_pe, then q_nope W_UK_h
// (written by its projection in place, a row stride of heads x key_dim apart).
float* MultiheadLatentAttention::Impl::AbsorbQueries(const float* queries,
                                                     const QueryPass& pass,
                                                     Workspace& workspace) const {
  const int64_t heads = config.num_heads, nope = config.qk_nope_head_dim;
  const int64_t rope = config.qk_rope_head_dim, rows = pass.rows;
  float* absorbed = workspace.Buffer(kAbsorbedQueries, rows * heads * key_dim());
  float* nope_rows = workspace.Buffer(kNopeRows, rows * nope);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* head = queries + (r * heads + h) * query_dim();
      std::copy(head, head + rope, absorbed + (r * heads + h) * key_dim());
      std::copy(head + rope, head + rope + nope, nope_rows + r * nope);
    }
    Run(key_absorb[h], kKeyAbsorb + h, nope_rows, rows, absorbed + h * key_dim() + rope,
        pass, workspace);
  }
  return absorbed;
}

// Head outputs [rows, heads * v_head_dim]: W_UV_h of each head's latent context.
float* MultiheadLatentAttention::Impl::ValueUp(const float* contexts,
                                               const QueryPass& pass,
                                               Workspace& workspace) const {
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank, rows = pass.rows;
  float* outputs = workspace.Buffer(kHeadOutputs, rows * heads * config.v_head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    Run(value_up[h], kKeyAbsorb + heads + h, contexts + h * rows * rank, rows,
        outputs + h * config.v_head_dim, pass, workspace);
  }
  return outputs;
}

MultiheadLatentAttention::MultiheadLatentAttention(
    const LatentAttentionConfig& config, const LatentAttentionWeights& weights) {
  internal::ValidateLatentConfig(config);
  internal::ValidateLatentWeights(config, weights);
  impl_ = std::make_unique<Impl>(config, weights);
}

MultiheadLatentAttention::~MultiheadLatentAttention() = default;
MultiheadLatentAttention::MultiheadLatentAttention(MultiheadLatentAttention&&) noexcept =
    default;
MultiheadLatentAttention& MultiheadLatentAttention::operator=(
    MultiheadLatentAttention&&) noexcept = default;

const LatentAttentionConfig& MultiheadLatentAttention::config() const {
  return impl_->config;
}

LatentForm MultiheadLatentAttention::ForwardWithCache(
    const TensorView& hidden_states, KvCache& cache, const MutableTensorView& output,
    const ForwardOptions& options) const {
  return impl_->ForwardWithCache(hidden_states, {}, *cache.impl_, output, options) ==
                 Impl::kExpandedForm
             ? LatentForm::kExpanded
             : LatentForm::kAbsorbed;
}

LatentForm MultiheadLatentAttention::ForwardPacked(const TensorView& hidden_states,
                                                   const PackedBatch& batch,
                                                   PagedKvCache& cache, int64_t layer,
                                                   const MutableTensorView& output,
                                                   const ForwardOptions& options) const {
  if (options.kv_shared) {
    Fail("options.kv_shared: MultiheadLatentAttention layers write their own cache");
  }
  impl_->ForwardPacked(hidden_states, batch, *cache.impl_, layer, output, options);
  return LatentForm::kAbsorbed;
}

LatentForm MultiheadLatentAttention::ForwardPacked(
    const TensorView& hidden_states, const PackedStep& step, int64_t layer,
    const MutableTensorView& output) const {
  const internal::WorkspacePool::Lease workspace = impl_->workspaces.Acquire();
  impl_->ForwardPacked(hidden_states, step.impl(), layer, output, /*kv_shared=*/false,
                       *workspace);
  return LatentForm::kAbsorbed;
}

}  // namespace mha
