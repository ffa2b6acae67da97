// MultiheadAttention: packs weights and creates primitives once; each Forward leases
// a workspace, runs the projections (oneDNN), per-(batch, head) attention (Highway,
// OpenMP) and the output projection (oneDNN).
#include "mha/attention.hpp"

#include <algorithm>

#include "src/base/check.h"
#include "src/base/isa_cap.h"
#include "src/base/parallel_for.h"
#include "src/features/call_rotation.h"
#include "src/layer/multihead_attention_impl.h"
#include "src/projection/weight_layout.h"

namespace mha {

using internal::AttentionParams;
using internal::LinearPrimitive;
using internal::PackedProjection;
using internal::PackedWeights;
using internal::Problem;
using internal::Workspace;

namespace {

// Below about this many multiply-adds (projections plus attention) a forward runs on
// one thread: waking a second costs more than it saves. The measured crossover lies
// between 0.8e5 and 3e5 (docs/fast_path.md, "Tiny shapes").
constexpr double kSingleThreadBelow = 1 << 17;

// Query rows per chunk in the chunked flow: at least one attention tile, at most
// what keeps the chunk's GEMMs efficient without growing memory further.
constexpr int64_t kMinQueryChunk = 48;
constexpr int64_t kMaxQueryChunk = 512;

LinearPrimitive MakeLinear(const dnnl::engine& engine, const PackedProjection& packed,
                           int64_t output_stride) {
  return LinearPrimitive(engine,
                         {packed.in_dim, packed.out_dim, packed.stride, output_stride},
                         packed.weights, packed.bias, packed.storage, packed.scales);
}

// averaged[b, i] = mean over heads of per_head[b, h, i], i < plane.
void AverageHeads(const float* per_head, int64_t batch_size, int64_t num_heads,
                  int64_t plane, float* averaged) {
  const float inverse = 1.0f / static_cast<float>(num_heads);
  for (int64_t b = 0; b < batch_size; ++b) {
    float* out = averaged + b * plane;
    std::fill(out, out + plane, 0.0f);
    for (int64_t h = 0; h < num_heads; ++h) {
      const float* in = per_head + (b * num_heads + h) * plane;
      for (int64_t i = 0; i < plane; ++i) out[i] += in[i];
    }
    for (int64_t i = 0; i < plane; ++i) out[i] *= inverse;
  }
}

}  // namespace

MultiheadAttention::Impl::Impl(const AttentionConfig& layer_config,
                               const AttentionWeights& weights)
    : Layer(layer_config.query_dim, internal::ValidateLayer(layer_config, weights),
            "query"),
      config(layer_config),
      engine(internal::CpuEngine()),
      packed(layer_config, weights, output_dim, LinearPrimitive::Bf16Supported(engine),
             LinearPrimitive::Int8WeightLevels()),
      logits(layer_config.features, weights.sinks, layer_config.num_heads,
             "weights.sinks") {
  features = config.features;
  if (config.rotary.enabled()) rotary.emplace(config.rotary, config.head_dim);
  qk_norm.Set(config.features.qk_norm, weights.query_norm_weight, weights.key_norm_weight,
              config.num_heads, config.resolved_num_kv_heads(), config.head_dim,
              "weights.");
  for (int input = PackedWeights::kQuery; input <= PackedWeights::kValue; ++input) {
    const PackedProjection projection =
        packed.InputProjection(static_cast<PackedWeights::Input>(input));
    linears[input] = MakeLinear(engine, projection, projection.out_dim);
  }
  if (packed.qkv_fused()) {
    const PackedProjection fused = packed.FusedQkv();
    linears[kFusedLinear] = MakeLinear(engine, fused, fused.out_dim);
  }
  has_output = packed.OutputProjection().weights != nullptr;
  if (has_output) {
    linears[kOutputLinear] = MakeLinear(engine, packed.OutputProjection(), output_dim);
  }
}

// All queries at once: self-attention projects Q, K and V in one fused GEMM and
// writes K/V into the pages on the way; other shapes project K/V first.
void MultiheadAttention::Impl::ForwardWhole(const Problem& problem,
                                            const internal::MaskPlan& masks,
                                            const AttentionParams& base,
                                            const AttentionOutputs& outputs, bool average,
                                            internal::TileRule tile_rule,
                                            Workspace& workspace) const {
  const int64_t sq = problem.query_len, sk = problem.key_len;
  AttentionParams params = base;
  params.probabilities = outputs.attn_weights.floats();
  if (average) {
    params.probabilities = Workspace::Reserve(
        workspace.per_head_weights, problem.batch_size * config.num_heads * sq * sk);
  }
  const internal::RotaryRows rotary_rows{params.query_positions, params.rotary};
  internal::KvWrite write = KvWriteFor(rotary_rows, sk);
  write.pages = UseWorkspacePages(problem, sk, params, workspace);
  write.batch_end = problem.batch_size;
  write.counts = internal::VisibleKeyCounts(masks, problem.batch_size, sq,
                                            workspace.core.key_counts);
  write.zero_padding = true;
  const bool fused = problem.self_attention && packed.qkv_fused();
  if (!fused) {
    ProjectKeys({tile_rule, &problem.key, &problem.value, problem.batch_size, sk, sk,
                 write.counts, rotary_rows, true, write.pages},
                workspace);
  }
  RunQueries({tile_rule, &problem.query, 0, problem.batch_size * sq, sq, nullptr,
              fused ? &write : nullptr, outputs.output.floats()},
             params, masks, workspace);
  if (average) {
    AverageHeads(params.probabilities, problem.batch_size, config.num_heads, sq * sk,
                 outputs.attn_weights.floats());
  }
}

// Bounded memory for long sequences: K and V projected chunk_rows rows at a time
// into the workspace pages, then queries in chunks of chunk_rows. For causal
// self-attention shapes the V pages can live in the output buffer (see RunFlow):
// chunks then run last to first over all (batch, row) positions, so every output row
// written covers only values that no query still to come can see.
void MultiheadAttention::Impl::ForwardInChunks(
    const Problem& problem, const internal::MaskPlan& masks, const AttentionParams& base,
    bool values_in_output, int64_t chunk_rows, const AttentionOutputs& outputs,
    internal::TileRule tile_rule, Workspace& workspace) const {
  const int64_t sq = problem.query_len;
  AttentionParams params = base;
  internal::ContiguousPages& pages = UseWorkspacePages(
      problem, problem.key_len, params, workspace,
      values_in_output ? static_cast<uint8_t*>(outputs.output.data) : nullptr,
      sq * output_dim * static_cast<int64_t>(sizeof(float)));
  ProjectKeys({tile_rule,
               &problem.key,
               &problem.value,
               problem.batch_size,
               problem.key_len,
               chunk_rows,
               internal::VisibleKeyCounts(masks, problem.batch_size, sq,
                                          workspace.core.key_counts),
               {base.query_positions, base.rotary},
               true,
               pages},
              workspace);
  const int64_t per_batch = (sq + chunk_rows - 1) / chunk_rows;
  const int64_t chunks = problem.batch_size * per_batch;
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t index = values_in_output ? chunks - 1 - n : n;
    const int64_t b = index / per_batch, first = index % per_batch * chunk_rows;
    params.batch_begin = b;
    params.batch_end = b + 1;
    params.first_query = first;
    params.query_count = std::min(chunk_rows, sq - first);
    RunQueries({tile_rule, &problem.query, b * sq + first, params.query_count, 0, nullptr,
                nullptr, outputs.output.floats() + (b * sq + first) * output_dim},
               params, masks, workspace);
  }
}

int MultiheadAttention::Impl::ThreadsFor(const Problem& problem, int num_threads) const {
  if (num_threads > 0) return num_threads;
  const double rows = double(problem.batch_size) * (problem.query_len + problem.key_len);
  const double work = rows * config.model_dim() *
                      (double(config.query_dim) + double(problem.key_len) + output_dim);
  return work < kSingleThreadBelow ? 1 : 0;
}

internal::Problem MultiheadAttention::Impl::CheckInput(
    const TensorView& input, const MutableTensorView& output,
    const ForwardOptions& options) const {
  return internal::ValidateForward(config, output_dim, {input, input, input},
                                   {output, {}}, options);
}

void MultiheadAttention::Impl::CheckCacheLayout(
    const internal::BlockLayout& layout) const {
  if (!layout.values_in_keys && !packed.qkv_fused()) {
    internal::Fail(
        "a KV cache needs a self-attention layer (key_dim = value_dim = query_dim), "
        "got query_dim=",
        config.query_dim, " key_dim=", config.resolved_key_dim(),
        " value_dim=", config.resolved_value_dim());
  }
  CheckCacheHeads(layout);
}

void MultiheadAttention::Impl::CheckCacheHeads(
    const internal::BlockLayout& layout) const {
  if (layout.values_in_keys) {
    internal::Fail(
        "cache: made for multi-head latent attention layers (latents, no keys and "
        "values of their own)");
  }
  if (layout.num_kv_heads != config.resolved_num_kv_heads() ||
      layout.head_dim != config.head_dim) {
    internal::Fail("cache: made for num_kv_heads=", layout.num_kv_heads,
                   " head_dim=", layout.head_dim,
                   ", this layer has num_kv_heads=", config.resolved_num_kv_heads(),
                   " head_dim=", config.head_dim);
  }
}

internal::TileRule MultiheadAttention::Impl::TileRuleFor(bool batch_invariant) const {
  if (!batch_invariant) return internal::TileRule::kByRows;
  if (config.weight_dtype == DType::kInt8) {
    internal::Fail(
        "options.batch_invariant: needs float32 or bfloat16 weights, got ",
        "weight_dtype int8 (its calls quantise their whole input with one scale)");
  }
  return internal::TileRule::kBatchInvariant;
}

void MultiheadAttention::Impl::Forward(const AttentionInputs& inputs,
                                       const AttentionMasks& masks,
                                       const AttentionOutputs& outputs,
                                       const ForwardOptions& options) const {
  if (options.kv_shared) {
    internal::Fail(
        "options.kv_shared: applies to a layer reading a cache "
        "(ForwardWithCache, ForwardPacked), not to Forward");
  }
  const Problem problem =
      internal::ValidateForward(config, output_dim, inputs, outputs, options);
  const internal::MaskPlan mask_plan(masks, config.features, problem, config.num_heads);
  if (rotary && problem.query_len != problem.key_len) {
    internal::Fail("rotary embeddings: need keys as long as the queries (self-attention)",
                   ", got query length ", problem.query_len, " and key length ",
                   problem.key_len);
  }
  const internal::TileRule tile_rule = TileRuleFor(options.batch_invariant);
  const internal::WorkspacePool::Lease workspace = workspaces.Acquire();
  const AttentionParams base = BaseParams(
      problem,
      RotaryPositions(problem, options.position_ids, nullptr, nullptr, *workspace),
      tile_rule, /*form=*/0);
  // Everything is checked: from here on outputs are written.
  const internal::ScopedThreadCount thread_count(
      ThreadsFor(problem, options.num_threads));
  AttentionOutputs fp32_outputs = outputs;
  const MutableTensorView staged = StageOutput(outputs.output, *workspace);
  fp32_outputs.output = staged;
  RunFlow(problem, mask_plan, base, masks.is_causal, fp32_outputs, options, *workspace);
  FinishOutput(staged, outputs.output);
}

// Picks the whole or the chunked flow for the workspace budget.
void MultiheadAttention::Impl::RunFlow(const Problem& problem,
                                       const internal::MaskPlan& mask_plan,
                                       const AttentionParams& base, bool is_causal,
                                       const AttentionOutputs& outputs,
                                       const ForwardOptions& options,
                                       Workspace& workspace) const {
  const internal::TileRule tile_rule = TileRuleFor(options.batch_invariant);
  const double row_bytes = 4.0 * config.model_dim(), kv_row_bytes = 4.0 * config.kv_dim();
  // K/V pages: whole pages of K^T and of V rows padded to panels.
  const int64_t page_size = internal::WorkspacePageSize(problem.key_len);
  const internal::BlockLayout block(page_size, config.resolved_num_kv_heads(),
                                    config.head_dim, WorkspaceStorage(problem));
  const double page_bytes =
      double(problem.batch_size) * double((problem.key_len + page_size - 1) / page_size);
  const double key_page_bytes = page_bytes * block.block_key_bytes(),
               value_page_bytes = page_bytes * block.block_value_bytes();
  // The budget bounds the projections (as documented); the whole flow's pages add
  // about the K/V projections' size again.
  const double whole_bytes = problem.batch_size * (2.0 * row_bytes * problem.query_len +
                                                   2.0 * kv_row_bytes * problem.key_len);
  if (whole_bytes <= options.workspace_budget_bytes || outputs.attn_weights.present()) {
    const bool average = outputs.attn_weights.present() && options.average_attn_weights;
    ForwardWhole(problem, mask_plan, base, outputs, average, tile_rule, workspace);
    return;
  }
  // Causal self-attention can keep the V pages in the output buffer (see
  // ForwardInChunks): sequence b's pages from output row b * S on, a page of tokens
  // no wider than the output rows of those tokens.
  const double output_rows_bytes = 4.0 * problem.query_len * output_dim;
  const bool values_in_output =
      is_causal && has_output && problem.query_len == problem.key_len &&
      block.block_value_bytes() <= 4 * page_size * output_dim &&
      value_page_bytes / problem.batch_size <= output_rows_bytes;
  // Q and context rows of one chunk share what the budget leaves beside the pages.
  const double kv_bytes = key_page_bytes + (values_in_output ? 0.0 : value_page_bytes);
  const double rows = (options.workspace_budget_bytes - kv_bytes) / (2.0 * row_bytes);
  int64_t chunk_rows = static_cast<int64_t>(
      std::clamp(rows, double(kMinQueryChunk), double(kMaxQueryChunk)));
  // Chunks start on page boundaries: a chunk's output rows then never cover a page
  // an earlier query reads.
  if (values_in_output)
    chunk_rows = std::max(page_size, chunk_rows / page_size * page_size);
  ForwardInChunks(problem, mask_plan, base, values_in_output, chunk_rows, outputs,
                  tile_rule, workspace);
}

void MultiheadAttention::Forward(const AttentionInputs& inputs,
                                 const AttentionMasks& masks,
                                 const AttentionOutputs& outputs,
                                 const ForwardOptions& options) const {
  impl_->Forward(inputs, masks, outputs, options);
}

void MultiheadAttention::ForwardWithCache(const TensorView& query,
                                          const TensorView& new_lengths, KvCache& cache,
                                          const MutableTensorView& output,
                                          const ForwardOptions& options) const {
  impl_->ForwardWithCache(query, new_lengths, *cache.impl_, output, options);
}

void MultiheadAttention::ForwardPacked(const TensorView& query, const PackedBatch& batch,
                                       PagedKvCache& cache, int64_t layer,
                                       const MutableTensorView& output,
                                       const ForwardOptions& options) const {
  impl_->ForwardPacked(query, batch, *cache.impl_, layer, output, options);
}

void MultiheadAttention::ForwardPacked(const TensorView& query, const PackedStep& step,
                                       int64_t layer, const MutableTensorView& output,
                                       const PackedLayerOptions& options) const {
  const internal::WorkspacePool::Lease workspace = impl_->workspaces.Acquire();
  impl_->ForwardPacked(query, step.impl(), layer, output, options.kv_shared, *workspace);
}

MultiheadAttention::MultiheadAttention(const AttentionConfig& config,
                                       const AttentionWeights& weights)
    : impl_(std::make_unique<Impl>(config, weights)) {}
MultiheadAttention::~MultiheadAttention() = default;
MultiheadAttention::MultiheadAttention(MultiheadAttention&&) noexcept = default;
MultiheadAttention& MultiheadAttention::operator=(MultiheadAttention&&) noexcept =
    default;

const AttentionConfig& MultiheadAttention::config() const { return impl_->config; }
int64_t MultiheadAttention::output_dim() const { return impl_->output_dim; }
size_t MultiheadAttention::workspace_bytes() const {
  return impl_->workspaces.idle_bytes();
}

}  // namespace mha
