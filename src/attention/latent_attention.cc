// MultiHeadLatentAttention: DeepSeek's MLA in the absorbed form, as a few named ops
// over one workspace: project the queries and the cached rows ([rotary part, latent],
// the latent RMS-normalised), absorb W_UK into each head's query, append the rows to
// the cache (rotated on the way in), attend (MQA over the latent pages, values in
// keys), W_UV per head, the output projection.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "mha/latent_attention.hpp"
#include "src/base/check.h"
#include "src/cache/latent_kv_cache_storage.h"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"
#include "src/kernels/rms_norm_rows.h"
#include "src/platform/isa_cap.h"
#include "src/projection/latent_weights.h"
#include "src/projection/linear_primitive.h"
#include "src/validation/latent_config.h"

namespace mha {

double DeepSeekYarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

namespace {

// Buffers and oneDNN call state of one forward, kept between calls.
struct LatentWorkspace {
  internal::LinearThreads threads;
  std::vector<internal::LinearCall> calls;  // one per primitive (Linears' order)
  std::vector<float> query_a, queries, keys, absorbed_queries, nope_rows, contexts,
      head_outputs, rotation_scratch;
  std::vector<int64_t> positions, first_positions;
  internal::CoreWorkspace core;
};

template <class T>
T* Reserve(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

}  // namespace

struct MultiHeadLatentAttention::Impl {
  Impl(const LatentAttentionConfig& config, const LatentAttentionWeights& weights);

  void ForwardWithCache(const TensorView& hidden, LatentKvCache::Impl& cache,
                        const MutableTensorView& output) const;
  void Check(const TensorView& hidden, const LatentKvCache::Impl& cache,
             const MutableTensorView& output) const;
  // Each step of a forward over `rows` token rows, B sequences of S.
  const float* ProjectQueries(const float* hidden, int64_t rows) const;
  float* ProjectKeys(const float* hidden, int64_t rows) const;
  float* AbsorbQueries(const float* queries, int64_t rows) const;
  void AppendToCache(const float* keys, int64_t batch, int64_t seq,
                     LatentKvCache::Impl& cache) const;
  float* Attend(const float* absorbed, int64_t batch, int64_t seq,
                const LatentKvCache::Impl& cache) const;
  float* ValueUp(const float* contexts, int64_t rows) const;

  int64_t query_dim() const { return config.qk_nope_head_dim + config.qk_rope_head_dim; }
  int64_t key_dim() const { return internal::LatentKeyDim(config); }
  void Run(const internal::LinearPrimitive& linear, int call, const float* input,
           int64_t rows, float* output) const {
    linear.Execute(input, /*input_bf16=*/false, rows, output, workspace.calls[call],
                   workspace.threads);
  }

  LatentAttentionConfig config;
  float softmax_scale;
  internal::LatentWeights weights;
  dnnl::engine engine;
  // Calls 0-3: query_a, query, key, output; 4 + h: key_absorb[h]; 4 + H + h:
  // value_up[h].
  internal::LinearPrimitive query_a, query, key, output;
  std::vector<internal::LinearPrimitive> key_absorb, value_up;
  std::optional<RotaryEmbedding> rotary;  // over the cached row's first dimensions
  mutable std::mutex mutex;               // calls take turns with the workspace
  mutable LatentWorkspace workspace;
};

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
  const int64_t heads = c.num_heads, rank = c.kv_lora_rank;
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
  for (int64_t h = 0; h < heads; ++h) {
    key_absorb.push_back(Linear(engine,
                                weights.key_absorb.data() + h * c.qk_nope_head_dim * rank,
                                c.qk_nope_head_dim, rank, heads * key_dim()));
    value_up.push_back(Linear(engine, weights.value_up.data() + h * rank * c.v_head_dim,
                              rank, c.v_head_dim, heads * c.v_head_dim));
  }
  workspace.calls.resize(4 + 2 * heads);
  if (c.rotary.enabled()) {
    RotaryConfig rotation = c.rotary;
    rotation.rotary_dim = c.qk_rope_head_dim;
    rotary.emplace(rotation, key_dim());
  }
}

const float* MultiHeadLatentAttention::Impl::ProjectQueries(const float* hidden,
                                                            int64_t rows) const {
  float* queries = Reserve(workspace.queries, rows * config.num_heads * query_dim());
  if (config.q_lora_rank == 0) {
    Run(query, 1, hidden, rows, queries);
    return queries;
  }
  float* query_a_rows = Reserve(workspace.query_a, rows * config.q_lora_rank);
  Run(query_a, 0, hidden, rows, query_a_rows);
  internal::RmsNormRows(query_a_rows, rows, config.q_lora_rank, config.q_lora_rank,
                        weights.query_a_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  Run(query, 1, query_a_rows, rows, queries);
  return queries;
}

float* MultiHeadLatentAttention::Impl::ProjectKeys(const float* hidden,
                                                   int64_t rows) const {
  float* keys = Reserve(workspace.keys, rows * key_dim());
  Run(key, 2, hidden, rows, keys);
  internal::RmsNormRows(keys + config.qk_rope_head_dim, rows, key_dim(),
                        config.kv_lora_rank, weights.latent_norm.data(),
                        static_cast<float>(config.rms_norm_eps));
  return keys;
}

// Absorbed queries [rows, heads, rope + latent]: each head's q_pe, then q_nope W_UK_h
// (written by its projection in place, a row stride of heads x key_dim apart).
float* MultiHeadLatentAttention::Impl::AbsorbQueries(const float* queries,
                                                     int64_t rows) const {
  const int64_t heads = config.num_heads, nope = config.qk_nope_head_dim;
  const int64_t rope = config.qk_rope_head_dim;
  float* absorbed = Reserve(workspace.absorbed_queries, rows * heads * key_dim());
  float* nope_rows = Reserve(workspace.nope_rows, rows * nope);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* head = queries + (r * heads + h) * query_dim();
      std::copy(head, head + nope, nope_rows + r * nope);
      std::copy(head + nope, head + nope + rope, absorbed + (r * heads + h) * key_dim());
    }
    Run(key_absorb[h], 4 + static_cast<int>(h), nope_rows, rows,
        absorbed + h * key_dim() + rope);
  }
  return absorbed;
}

void MultiHeadLatentAttention::Impl::AppendToCache(const float* keys, int64_t batch,
                                                   int64_t seq,
                                                   LatentKvCache::Impl& cache) const {
  internal::KvWrite write;
  write.key = write.value = {keys, seq * key_dim(), 0, key_dim()};
  write.batch_end = batch;
  write.num_kv_heads = 1;
  write.head_dim = key_dim();
  write.value_head_dim = config.kv_lora_rank;
  write.count = seq;
  write.first_positions = workspace.first_positions.data();
  if (rotary) {
    write.rotary = &*rotary;
    write.rotary_positions = workspace.positions.data();
    write.positions_per_sequence = seq;
  }
  write.pages = cache.pages;
  internal::WriteKvPages(write, workspace.rotation_scratch);
}

// Latent contexts [heads, rows, kv_lora_rank]: each head's rows in one run, the
// input of its W_UV.
float* MultiHeadLatentAttention::Impl::Attend(const float* absorbed, int64_t batch,
                                              int64_t seq,
                                              const LatentKvCache::Impl& cache) const {
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  const int64_t rows = batch * seq;
  float* contexts = Reserve(workspace.contexts, heads * rows * rank);
  internal::AttentionParams params;
  params.num_heads = heads;
  params.num_kv_heads = 1;
  params.head_dim = key_dim();
  params.value_head_dim = rank;
  params.values_in_keys = true;
  params.value_offset = config.qk_rope_head_dim;
  params.query_len = params.query_count = seq;
  for (int64_t b = 0; b < batch; ++b) {
    params.key_len = std::max(params.key_len, workspace.first_positions[b] + seq);
  }
  params.batch_end = batch;
  params.query = {absorbed, seq * heads * key_dim(), key_dim(), heads * key_dim()};
  params.context = {contexts, seq * rank, rows * rank, rank};
  params.query_scale = softmax_scale;
  params.pages = cache.pages;
  params.page_size = cache.page_size;
  if (rotary) {
    params.rotary = &*rotary;
    params.query_positions = workspace.positions.data();
  }
  const internal::MaskPlan masks = internal::MaskPlan::ForCache(
      workspace.first_positions.data(), cache.capacity, AttentionFeatures{});
  internal::RunAttentionCore(params, masks, workspace.core);
  return contexts;
}

// Head outputs [rows, heads * v_head_dim]: W_UV_h of each head's latent context.
float* MultiHeadLatentAttention::Impl::ValueUp(const float* contexts,
                                               int64_t rows) const {
  const int64_t heads = config.num_heads, rank = config.kv_lora_rank;
  float* outputs = Reserve(workspace.head_outputs, rows * heads * config.v_head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    Run(value_up[h], 4 + static_cast<int>(heads + h), contexts + h * rows * rank, rows,
        outputs + h * config.v_head_dim);
  }
  return outputs;
}

void MultiHeadLatentAttention::Impl::Check(const TensorView& hidden,
                                           const LatentKvCache::Impl& cache,
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

void MultiHeadLatentAttention::Impl::ForwardWithCache(
    const TensorView& hidden, LatentKvCache::Impl& cache,
    const MutableTensorView& output_view) const {
  Check(hidden, cache, output_view);
  const std::lock_guard<std::mutex> lock(mutex);
  internal::ApplyIsaCap();
  const int64_t batch = hidden.shape[0], seq = hidden.shape[1], rows = batch * seq;
  int64_t* first = Reserve(workspace.first_positions, batch);
  int64_t* positions = Reserve(workspace.positions, rows);
  for (int64_t b = 0; b < batch; ++b) {
    first[b] = cache.lengths[b];
    for (int64_t i = 0; i < seq; ++i) positions[b * seq + i] = first[b] + i;
  }
  const float* queries = ProjectQueries(hidden.floats(), rows);
  const float* keys = ProjectKeys(hidden.floats(), rows);
  const float* absorbed = AbsorbQueries(queries, rows);
  AppendToCache(keys, batch, seq, cache);
  const float* contexts = Attend(absorbed, batch, seq, cache);
  Run(output, 3, ValueUp(contexts, rows), rows, output_view.floats());
  for (int64_t b = 0; b < batch; ++b) cache.lengths[b] += seq;  // only on success
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

void MultiHeadLatentAttention::ForwardWithCache(const TensorView& hidden_states,
                                                LatentKvCache& cache,
                                                const MutableTensorView& output) const {
  impl_->ForwardWithCache(hidden_states, *cache.impl_, output);
}

}  // namespace mha
