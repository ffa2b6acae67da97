// Serving cases of mha_bench, on Llama 3 8B's attention shape (32 query heads on 8
// KV heads of 128) with embed 64, so that the step is the attention over the cache
// rather than the projections. Caches are filled through the same weights with a
// 16-token window (cheap to prefill, the same keys and values), then timed steps
// attend over everything. kv_GBps: K/V bytes the step reads per second.
#include "benchmarks/serving_cases.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>

#include <unistd.h>

#include "benchmarks/bench_util.h"

namespace mha::bench {
namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kEmbed = 64;
constexpr int64_t kBlock = 16;

// One layer and its weights; `window` > 0 gives the cheap filling layer.
struct ServeLayer {
  explicit ServeLayer(int64_t window) {
    config = MakeConfig(kHeads, kHeadDim, kEmbed);
    config.num_kv_heads = kKvHeads;
    config.rotary.pairing = RotaryPairing::kHalfSplit;
    config.rotary.max_positions = 40000;
    if (window > 0) config.features.sliding_window = window;
    const int64_t model = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
    wq = Random(model * kEmbed, 1, 0.125f);
    wk = Random(kv * kEmbed, 2, 0.125f);
    wv = Random(kv * kEmbed, 3, 0.125f);
    wo = Random(kEmbed * model, 4, 0.01f);
    weights.query.weight = {wq.data(), Shape{model, kEmbed}};
    weights.key.weight = {wk.data(), Shape{kv, kEmbed}};
    weights.value.weight = {wv.data(), Shape{kv, kEmbed}};
    weights.output.weight = {wo.data(), Shape{kEmbed, model}};
    layer = std::make_unique<MultiheadAttention>(config, weights);
  }
  AttentionConfig config;
  std::vector<float> wq, wk, wv, wo;
  AttentionWeights weights;
  std::unique_ptr<MultiheadAttention> layer;
};

// Packed steps over a set of sequences: appends counts[i] tokens to ids[i], then
// attends them with `layer`.
struct Step {
  std::vector<int64_t> ids, counts, starts{0};
  std::vector<int64_t> tree_parents;  // empty: chains
  std::vector<float> tokens, output;
  explicit Step(const std::vector<std::pair<int64_t, int64_t>>& work) {
    for (const auto& [id, count] : work) {
      ids.push_back(id);
      counts.push_back(count);
      starts.push_back(starts.back() + count);
    }
    tokens = Random(starts.back() * kEmbed, 7, 1.0f);
    output.resize(tokens.size());
  }
  void Run(const MultiheadAttention& layer, PagedKvCache& cache) {
    const int64_t n = static_cast<int64_t>(ids.size()), total = starts.back();
    cache.AppendSlots(ids.data(), counts.data(), n);
    PackedBatch batch{TensorView(ids.data(), DType::kInt64, Shape{n}),
                      TensorView(starts.data(), DType::kInt64, Shape{n + 1})};
    if (!tree_parents.empty()) {
      batch.tree_parents = TensorView(tree_parents.data(), DType::kInt64, Shape{total});
    }
    layer.ForwardPacked(TensorView(tokens.data(), Shape{total, kEmbed}), batch, cache, 0,
                        MutableTensorView(output.data(), Shape{total, kEmbed}));
  }
  // Undoes Run's append, so every iteration sees the same cache.
  void Undo(PagedKvCache& cache) {
    for (size_t i = 0; i < ids.size(); ++i) {
      cache.Truncate(ids[i], cache.length(ids[i]) - counts[i]);
    }
  }
  // The benchmark's loop: each iteration times Run, then undoes it untimed.
  void Time(benchmark::State& state, const MultiheadAttention& layer,
            PagedKvCache& cache) {
    for (auto _ : state) {
      Run(layer, cache);
      state.PauseTiming();
      Undo(cache);
      state.ResumeTiming();
    }
  }
};

// Fills sequence `id` with `length` tokens through the windowed layer.
void Fill(const ServeLayer& filler, PagedKvCache& cache, int64_t id, int64_t length) {
  cache.AddSequence(id);
  for (int64_t done = 0; done < length; done += 2048) {
    Step step({{id, std::min<int64_t>(2048, length - done)}});
    step.Run(*filler.layer, cache);
  }
}

enum class MixedPart { kWhole, kPrefill, kDecode };

// 32 sequences: 4 prefilling 512-token chunks (after 0, 512, 1024 and 1536 cached
// tokens) and 28 decoding with cached lengths spread over 100..4000; one packed call.
void BM_ServeMixed(benchmark::State& state, MixedPart part, DType storage) {
  const ServeLayer layer(0), filler(16);
  PagedKvCacheOptions options;
  options.num_blocks = 8000;
  options.block_size = kBlock;
  options.max_sequences = 32;
  options.storage = storage;
  PagedKvCache cache(layer.config, options);
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int64_t i = 0; i < 32; ++i) {
    const bool prefill = i < 4;
    Fill(filler, cache, i, prefill ? 512 * i : 100 + (4000 - 100) * (i - 4) / 27);
    if ((prefill && part != MixedPart::kDecode) ||
        (!prefill && part != MixedPart::kPrefill)) {
      work.emplace_back(i, prefill ? 512 : 1);
    }
  }
  Step step(work);
  int64_t kv_tokens = 0;  // keys each step reads: a query block reads its sequence
  for (const auto& [id, count] : work) kv_tokens += cache.length(id) + count;
  step.Time(state, *layer.layer, cache);
  const double kv_bytes = 2.0 * kv_tokens * kKvHeads * kHeadDim * DTypeSize(storage);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(step.starts.back()),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_GBps"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// A speculative draft of 64 tokens as a tree: 4 roots, 4 children each, and 44
// grandchildren spread over the children.
std::vector<int64_t> DraftTree() {
  std::vector<int64_t> parents(64);
  for (int64_t i = 0; i < 64; ++i) {
    parents[i] = i < 4 ? -1 : i < 20 ? (i - 4) / 4 : 4 + (i - 20) % 16;
  }
  return parents;
}

// The last-level cache's bytes, as the C library reports them (0 if it does not).
int64_t LastLevelCacheBytes() {
#ifdef _SC_LEVEL3_CACHE_SIZE
  return std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#else
  return 0;
#endif
}

// Sequences of `cached` tokens whose K/V (block_bytes per kBlock tokens) pass twice
// the last-level cache, or 4 where its size is unknown.
int64_t SequencesPastLastLevelCache(int64_t cached, int64_t block_bytes) {
  const int64_t llc = LastLevelCacheBytes(), bytes = cached / kBlock * block_bytes;
  return llc > 0 ? std::max<int64_t>(1, (2 * llc + bytes - 1) / bytes) : 4;
}

// `sequences` sequences after `cached` tokens each (0: as many as every kind runs
// with, past the last-level cache: the int8 K/V pass twice its size, int4's pass it,
// bf16's and fp32's are 2x and 4x int8's): a decode step of each (draft false) or the
// verification of a 64-token draft tree (one sequence). Every core must stream the K/V.
// bytes_per_token: what the cache stores per token (every KV head's K, V and
// scales), as its stats() say.
void BM_OverCache(benchmark::State& state, DType storage, KvScales scales, int64_t cached,
                  bool draft, int64_t sequences) {
  const ServeLayer layer(0), filler(16);
  const int64_t count = draft ? 64 : 1;
  PagedKvCacheOptions options;
  options.block_size = kBlock;
  options.storage = storage;
  options.scales = scales;
  if (sequences == 0) {
    PagedKvCacheOptions int8 = options;
    int8.num_blocks = int8.max_sequences = 1;
    int8.storage = DType::kInt8;
    int8.scales = KvScales::kPerToken;
    const int64_t block_bytes = PagedKvCache(layer.config, int8).stats().bytes_per_block;
    sequences = SequencesPastLastLevelCache(cached, block_bytes);
  }
  options.num_blocks = sequences * ((cached + count) / kBlock + 1);
  options.max_sequences = sequences;
  PagedKvCache cache(layer.config, options);
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int64_t i = 0; i < sequences; ++i) {
    Fill(filler, cache, i, cached);
    work.emplace_back(i, count);
  }
  Step step(work);
  if (draft) step.tree_parents = DraftTree();
  step.Time(state, *layer.layer, cache);
  const double token_bytes = static_cast<double>(cache.stats().bytes_per_block) / kBlock;
  const double kv_bytes = static_cast<double>(sequences * (cached + count)) * token_bytes;
  state.counters["sequences"] = static_cast<double>(sequences);
  state.counters["bytes_per_token"] = token_bytes;
  state.counters["kv_GBps"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// 16 sequences forked from one 2000-token prompt, each decoding: the time of one
// packed step, and the memory against 16 private copies of the prompt.
void BM_PrefixShared(benchmark::State& state) {
  const ServeLayer layer(0), filler(16);
  PagedKvCacheOptions options;
  options.num_blocks = 16 * (2000 / kBlock + 2);
  options.block_size = kBlock;
  options.max_sequences = 17;
  PagedKvCache cache(layer.config, options);
  Fill(filler, cache, 16, 2000);
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int64_t i = 0; i < 16; ++i) {
    cache.Fork(16, i);
    work.emplace_back(i, 1);
  }
  cache.RemoveSequence(16);
  Step step(work);
  step.Run(*layer.layer, cache);  // each fork copies its partial last block once
  const PagedKvCacheStats stats = cache.stats();
  step.Time(state, *layer.layer, cache);
  const double block_mb = stats.bytes_per_block / 1e6;
  state.counters["shared_MB"] = stats.used_blocks * block_mb;
  state.counters["private_MB"] = 16.0 * ((2001 + kBlock - 1) / kBlock) * block_mb;
  state.counters["memory_ratio"] =
      state.counters["private_MB"] / state.counters["shared_MB"];
}

// 64 sequences of 512 cached tokens, each decoding one token: one packed step (the
// C++ side of benchmarks/python_overhead.py, which times the same step from Python).
void BM_Decode64(benchmark::State& state) {
  const ServeLayer layer(0), filler(16);
  PagedKvCacheOptions options;
  options.num_blocks = 64 * (512 / kBlock + 1);
  options.block_size = kBlock;
  options.max_sequences = 64;
  PagedKvCache cache(layer.config, options);
  std::vector<std::pair<int64_t, int64_t>> work;
  for (int64_t i = 0; i < 64; ++i) {
    Fill(filler, cache, i, 512);
    work.emplace_back(i, 1);
  }
  Step step(work);
  step.Time(state, *layer.layer, cache);
}

// A model's decode step: 64 sequences of 512 cached tokens each decode one token
// through 32 layers sharing one packed batch (16 query heads on 4 KV heads of 64,
// embed 1024: a 1B-parameter model's attention). The time outside the projections
// and the attention core (checks, planning) is what the step should not repeat per
// layer.
void BM_Step32Layers(benchmark::State& state, bool planned_once) {
  constexpr int64_t kLayers = 32, kSequences = 64, kCached = 512, kModelEmbed = 1024;
  AttentionConfig config = MakeConfig(16, 64, kModelEmbed);
  config.num_kv_heads = 4;
  config.rotary.pairing = RotaryPairing::kHalfSplit;
  AttentionConfig fill_config = MakeConfig(16, 64, kEmbed);
  fill_config.num_kv_heads = 4;
  fill_config.rotary.pairing = RotaryPairing::kHalfSplit;
  fill_config.features.sliding_window = 16;
  // A layer of `c` with random weights (the layer copies them).
  const auto make = [](const AttentionConfig& c, uint32_t seed) {
    const int64_t model = 16 * 64, kv = 4 * 64, embed = c.query_dim;
    const std::vector<float> wq = Random(model * embed, seed, 0.03f),
                             wk = Random(kv * embed, seed + 1, 0.03f),
                             wv = Random(kv * embed, seed + 2, 0.03f),
                             wo = Random(embed * model, seed + 3, 0.03f);
    AttentionWeights w;
    w.query.weight = {wq.data(), Shape{model, embed}};
    w.key.weight = {wk.data(), Shape{kv, embed}};
    w.value.weight = {wv.data(), Shape{kv, embed}};
    w.output.weight = {wo.data(), Shape{embed, model}};
    return std::make_unique<MultiheadAttention>(c, w);
  };
  std::vector<std::unique_ptr<MultiheadAttention>> layers;
  for (int64_t l = 0; l < kLayers; ++l) layers.push_back(make(config, 10 + 4 * l));
  const std::unique_ptr<MultiheadAttention> filler = make(fill_config, 1);
  PagedKvCacheOptions options;
  options.num_blocks = kSequences * (kCached / kBlock + 1);
  options.block_size = kBlock;
  options.max_sequences = kSequences;
  options.num_layers = kLayers;
  PagedKvCache cache(config, options);
  std::vector<int64_t> ids(kSequences), prompt(kSequences, kCached), ones(kSequences, 1);
  std::vector<int64_t> prompt_starts(kSequences + 1), starts(kSequences + 1);
  for (int64_t i = 0; i < kSequences; ++i) {
    ids[i] = i, prompt_starts[i + 1] = (i + 1) * kCached, starts[i + 1] = i + 1;
    cache.AddSequence(i);
  }
  cache.AppendSlots(ids.data(), prompt.data(), kSequences);
  const std::vector<float> prompt_rows = Random(kSequences * kCached * kEmbed, 5, 1.0f);
  std::vector<float> prompt_out(prompt_rows.size());
  const PackedBatch prompt_batch{
      TensorView(ids.data(), DType::kInt64, Shape{kSequences}),
      TensorView(prompt_starts.data(), DType::kInt64, Shape{kSequences + 1})};
  for (int64_t l = 0; l < kLayers; ++l) {
    filler->ForwardPacked(
        TensorView(prompt_rows.data(), Shape{kSequences * kCached, kEmbed}), prompt_batch,
        cache, l,
        MutableTensorView(prompt_out.data(), Shape{kSequences * kCached, kEmbed}));
  }
  std::vector<float> hidden = Random(kSequences * kModelEmbed, 6, 1.0f);
  std::vector<float> out(hidden.size());
  const PackedBatch batch{
      TensorView(ids.data(), DType::kInt64, Shape{kSequences}),
      TensorView(starts.data(), DType::kInt64, Shape{kSequences + 1})};
  const TensorView query(hidden.data(), Shape{kSequences, kModelEmbed});
  const MutableTensorView output(out.data(), Shape{kSequences, kModelEmbed});
  PackedStep step;
  for (auto _ : state) {
    cache.AppendSlots(ids.data(), ones.data(), kSequences);
    if (planned_once) step.Plan(cache, batch);
    for (int64_t l = 0; l < kLayers; ++l) {
      if (planned_once) {
        layers[l]->ForwardPacked(query, step, l, output);
      } else {
        layers[l]->ForwardPacked(query, batch, cache, l, output);
      }
    }
    state.PauseTiming();
    for (int64_t i = 0; i < kSequences; ++i) cache.Truncate(i, kCached);
    state.ResumeTiming();
  }
  state.counters["layers_per_s"] =
      benchmark::Counter(double{kLayers}, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void RegisterServingCases() {
  // A PackedStep planned once, and each layer checking and planning the batch.
  for (const bool planned_once : {true, false}) {
    benchmark::RegisterBenchmark(planned_once ? "BM_Serve/step_32_layers"
                                              : "BM_Serve/step_32_layers_per_layer_plan",
                                 BM_Step32Layers, planned_once)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const std::pair<const char*, MixedPart> parts[] = {
      {"", MixedPart::kWhole},
      {"/prefill_part", MixedPart::kPrefill},
      {"/decode_part", MixedPart::kDecode}};
  for (const auto& [suffix, part] : parts) {
    benchmark::RegisterBenchmark((std::string("BM_Serve/serve_mixed") + suffix).c_str(),
                                 BM_ServeMixed, part, DType::kFloat32)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  // Prefill over bf16 pages: the bf16 tile products on 16-token pages.
  benchmark::RegisterBenchmark("BM_Serve/serve_mixed/prefill_part/bfloat16",
                               BM_ServeMixed, MixedPart::kPrefill, DType::kBFloat16)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  // Every storage kind of the list, named by dtype and scales; ggml's kinds by their
  // own names: a narrower kind should decode faster by its bytes.
  struct Kind {
    const char* name;
    DType storage;
    KvScales scales;
  };
  const Kind kinds[] = {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) \
  {#Name, DType::dtype, KvScales::scales},
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
  };
  // One sequence (its K/V may fit the last-level cache: 67 MB of int8 at 32k tokens),
  // as many as pass twice that cache, which a decode streams from memory (0: counted
  // from the cache's size), and a batch of 8 shorter ones.
  struct Decode {
    const char* name;
    int64_t cached, sequences;
  };
  const Decode decodes[] = {{"decode_long_b1", 32768, 1},
                            {"decode_past_llc", 32768, 0},
                            {"decode_b8_s2048", 2048, 8}};
  for (const Kind& kind : kinds) {
    std::string kind_name =
        std::string(DTypeName(kind.storage)) +
        (kind.scales == KvScales::kNone ? "_scale_free"
         : kind.scales == KvScales::kPerChannelKeys && kind.storage == DType::kInt8
             ? "_channel_keys"
             : "");
    if (kind.scales == KvScales::kPerGroup) {
      kind_name = std::string(1, static_cast<char>(kind.name[0] + 32)) +
                  (kind.name + 1);  // Q8_0: q8_0
    }
    for (const Decode& decode : decodes) {
      const std::string name = std::string("BM_Serve/") + decode.name + "/" + kind_name;
      benchmark::RegisterBenchmark(name.c_str(), BM_OverCache, kind.storage, kind.scales,
                                   decode.cached, false, decode.sequences)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  // Speculative decoding: verifying a 64-token tree against one decode step, both
  // over 8192 cached tokens.
  for (DType storage : {DType::kFloat32, DType::kBFloat16}) {
    for (const bool draft : {false, true}) {
      const std::string name = std::string("BM_Serve/") +
                               (draft ? "tree_verify_64_s8192/" : "decode_b1_s8192/") +
                               DTypeName(storage);
      benchmark::RegisterBenchmark(name.c_str(), BM_OverCache, storage,
                                   KvScales::kPerToken, int64_t{8192}, draft, int64_t{1})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("BM_Serve/decode_64x512", BM_Decode64)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_Serve/prefix_shared", BM_PrefixShared)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace mha::bench
