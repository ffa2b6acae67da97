// mha_bench cases for multi-head latent attention (DeepSeek V2/V3): one absorbed
// decode step's attention over 32768 cached tokens of DeepSeek-V3's shape, 128 query
// heads on one latent of 512 + a 64-wide rotary part, values = the latent read from
// the key pages (kv_pages.h), in 16-token pages as a paged cache holds them; and the
// same with the latent stored again as V pages, the layout values-in-keys replaces.
// Counters: latent (and V) bytes read per second, against BM_StreamRead; cache bytes
// per token against the 2 x 128 heads x 128 that plain MHA would cache. Then the
// whole layer (DeepSeek-V2-Lite's shape): a prompt in either form, and decode steps.
#include "benchmarks/latent_cases.h"

#include <cmath>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"
#include "src/kv/contiguous_pages.h"

namespace mha::bench {
namespace {

constexpr int64_t kHeads = 128, kLatent = 512, kRopeDim = 64, kCached = 32768;
constexpr int64_t kKeyDim = kLatent + kRopeDim, kPageSize = 16;

internal::KvStorage StorageOf(DType dtype) {
  return dtype == DType::kBFloat16 ? internal::KvStorage::kBFloat16
         : dtype == DType::kInt8   ? internal::KvStorage::kInt8
                                   : internal::KvStorage::kFloat32;
}

void BM_MlaDecode(benchmark::State& state, DType storage, bool values_in_keys) {
  const internal::BlockLayout layout(kPageSize, 1, kKeyDim, StorageOf(storage), kLatent,
                                     values_in_keys);
  internal::ContiguousPages pages;
  pages.Reset(layout, 1, kCached);
  const std::vector<float> keys = Random(kCached * kKeyDim, 1, 1.0f);
  internal::KvWrite write;
  write.key = write.value = {keys.data(), 0, kKeyDim, kKeyDim};
  write.batch_end = 1;
  write.num_kv_heads = 1;
  write.head_dim = kKeyDim;
  write.value_head_dim = kLatent;
  write.count = kCached;
  write.pages = pages;
  std::vector<float> rotation_scratch;
  internal::WriteKvPages(write, rotation_scratch);

  const std::vector<float> query = Random(kHeads * kKeyDim, 2, 1.0f);
  std::vector<float> context(kHeads * kLatent);
  internal::AttentionParams params;
  params.num_heads = kHeads;
  params.num_kv_heads = 1;
  params.head_dim = kKeyDim;
  params.value_head_dim = kLatent;
  params.values_in_keys = values_in_keys;
  params.query_len = params.query_count = 1;
  params.key_len = kCached;
  params.batch_end = 1;
  params.query = {query.data(), kHeads * kKeyDim, kKeyDim, kKeyDim};
  params.context = {context.data(), kHeads * kLatent, kLatent, kLatent};
  params.query_scale = 0.04f;
  params.pages = pages;
  params.page_size = kPageSize;
  const internal::MaskPlan masks({}, {}, internal::CallSizes{1, 1, kCached}, kHeads);
  internal::CoreWorkspace workspace;
  for (auto _ : state) internal::RunAttentionCore(params, masks, workspace);

  const double element = static_cast<double>(DTypeSize(storage));
  const double token_bytes =
      (kKeyDim + (values_in_keys ? 0 : kLatent)) * element +
      (storage == DType::kInt8 ? (values_in_keys ? 1 : 2) * sizeof(float) : 0);
  state.counters["kv_GBps"] = benchmark::Counter(
      kCached * token_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes_per_token"] = token_bytes;
  state.counters["mha_bytes_per_token"] = 2.0 * kHeads * 128 * element;
  SetGflops(state, 2.0 * kHeads * kCached * (kKeyDim + kLatent));
}

// DeepSeek-V2-Lite's attention layer (hidden 2048, 16 heads, no q LoRA, latent 512,
// nope 128, rope 64, v 128), random weights.
struct V2LiteLayer {
  static constexpr int64_t kHidden = 2048, kLayerHeads = 16;
  explicit V2LiteLayer(LatentForm form) {
    config.hidden_size = kHidden;
    config.num_heads = kLayerHeads;
    config.rotary.pairing = RotaryPairing::kInterleaved;
    config.rotary.max_positions = 8192;
    config.form = form;
    const int64_t q_dim = kLayerHeads * 192, kv_b_rows = kLayerHeads * 256;
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHidden));
    q = Random(q_dim * kHidden, 1, scale);
    kv_a = Random(kKeyDim * kHidden, 2, scale);
    norm.assign(kLatent, 1.0f);
    kv_b = Random(kv_b_rows * kLatent, 3, 0.05f);
    o = Random(kHidden * kLayerHeads * 128, 4, 0.02f);
    weights.q_proj = TensorView(q.data(), Shape{q_dim, kHidden});
    weights.kv_a_proj_with_mqa = TensorView(kv_a.data(), Shape{kKeyDim, kHidden});
    weights.kv_a_layernorm = TensorView(norm.data(), Shape{kLatent});
    weights.kv_b_proj = TensorView(kv_b.data(), Shape{kv_b_rows, kLatent});
    weights.o_proj = TensorView(o.data(), Shape{kHidden, kLayerHeads * 128});
  }
  LatentAttentionConfig config;
  std::vector<float> q, kv_a, norm, kv_b, o;
  LatentAttentionWeights weights;
};

// A prompt of 512 tokens from an empty cache, in the form the layer picks (by cost:
// expanded) or absorbed; the "expanded" counter says which ran.
void BM_MlaLayerPrefill(benchmark::State& state, LatentForm form) {
  constexpr int64_t kTokens = 512;
  const V2LiteLayer model(form);
  const MultiheadLatentAttention layer(model.config, model.weights);
  KvCache cache(model.config, 1, kTokens);
  const std::vector<float> x = Random(kTokens * V2LiteLayer::kHidden, 5, 1.0f);
  std::vector<float> out(x.size());
  const Shape shape{1, kTokens, V2LiteLayer::kHidden};
  LatentForm ran = LatentForm::kAuto;
  for (auto _ : state) {
    cache.Reset();
    ran = layer.ForwardWithCache(TensorView(x.data(), shape), cache,
                                 MutableTensorView(out.data(), shape));
  }
  state.counters["expanded"] = ran == LatentForm::kExpanded ? 1.0 : 0.0;
}

// One decode step over 4096 cached tokens (the prompt prefilled once): the layer's
// projections, W_UK and W_UV for 16 heads, and the latent pages read once.
void BM_MlaLayerDecode(benchmark::State& state, DType storage) {
  constexpr int64_t kPrompt = 4096;
  const V2LiteLayer model(LatentForm::kAuto);
  const MultiheadLatentAttention layer(model.config, model.weights);
  KvCache cache(model.config, 1, kPrompt + 1, storage);
  const int64_t hidden = V2LiteLayer::kHidden;
  const std::vector<float> prompt = Random(kPrompt * hidden, 6, 1.0f);
  std::vector<float> out(prompt.size());
  layer.ForwardWithCache(TensorView(prompt.data(), Shape{1, kPrompt, hidden}), cache,
                         MutableTensorView(out.data(), Shape{1, kPrompt, hidden}));
  for (auto _ : state) {
    cache.Truncate(0, kPrompt);
    layer.ForwardWithCache(TensorView(prompt.data(), Shape{1, 1, hidden}), cache,
                           MutableTensorView(out.data(), Shape{1, 1, hidden}));
  }
  state.counters["bytes_per_token"] = static_cast<double>(cache.bytes_per_token());
  state.counters["kv_GBps"] =
      benchmark::Counter(kPrompt * static_cast<double>(cache.bytes_per_token()) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void RegisterLatentCases() {
  for (const LatentForm form : {LatentForm::kAuto, LatentForm::kAbsorbed}) {
    benchmark::RegisterBenchmark(form == LatentForm::kAuto
                                     ? "BM_Latent/mla_layer_prefill_s512/by_cost"
                                     : "BM_Latent/mla_layer_prefill_s512/absorbed",
                                 BM_MlaLayerPrefill, form)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const DType storage : {DType::kFloat32, DType::kBFloat16}) {
    benchmark::RegisterBenchmark(
        (std::string("BM_Latent/mla_layer_decode_b1_s4096/") + DTypeName(storage))
            .c_str(),
        BM_MlaLayerDecode, storage)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const DType storage : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    const std::string name =
        std::string("BM_Latent/mla_decode_b1_s32768/") + DTypeName(storage);
    benchmark::RegisterBenchmark(name.c_str(), BM_MlaDecode, storage, true)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    if (storage == DType::kInt8) continue;  // separate V pages: for the comparison
    benchmark::RegisterBenchmark((name + "/separate_values").c_str(), BM_MlaDecode,
                                 storage, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace mha::bench
