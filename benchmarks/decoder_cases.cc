// Decoder cases of mha_bench. GFLOPS counts the score and context FLOPs of the
// (query, key) pairs the masks and window leave open, plus projections for layers.
#include "benchmarks/decoder_cases.h"

#include <algorithm>
#include <string>

#include "benchmarks/bench_util.h"
#include "benchmarks/busy_thread.h"

namespace mha::bench {
namespace {

struct CoreCase {
  const char* name;
  int64_t heads, kv_heads, seq, head_dim;
  bool causal;
  int64_t window;  // 0: none
  bool rope;
  int64_t chunk = 0;     // attention chunk (Llama 4); 0: none
  bool qk_norm = false;  // per head (Qwen 3)
};

// Open (query, key) pairs of one head: causal, windowed and chunked rows see fewer
// keys (chunks: causal ones).
double OpenPairs(int64_t seq, bool causal, int64_t window, int64_t chunk = 0) {
  double pairs = 0.0;
  for (int64_t i = 0; i < seq; ++i) {
    int64_t keys = causal ? i + 1 : seq;
    if (window) keys = std::min(keys, window);
    if (chunk) keys = std::min(keys, i % chunk + 1);
    pairs += static_cast<double>(keys);
  }
  return pairs;
}

RotaryConfig Llama3Rotary() {
  RotaryConfig rotary;
  rotary.pairing = RotaryPairing::kHalfSplit;
  rotary.theta = 500000.0;
  rotary.scaling.type = RopeScalingType::kLlama3;
  rotary.scaling.factor = 8.0;
  rotary.max_positions = 8192;
  return rotary;
}

// ScaledDotProductAttention on [1, H, S, D] tensors, in fp32 or with bf16 compute
// (CoreOptions::compute_dtype).
void BM_Core(benchmark::State& state, const CoreCase& c, DType compute_dtype) {
  const std::vector<float> q = Random(c.heads * c.seq * c.head_dim, 1, 1.0f),
                           k = Random(c.kv_heads * c.seq * c.head_dim, 2, 1.0f),
                           v = Random(c.kv_heads * c.seq * c.head_dim, 3, 1.0f);
  std::vector<float> out(q.size());
  const TensorView query(q.data(), Shape{1, c.heads, c.seq, c.head_dim});
  const TensorView key(k.data(), Shape{1, c.kv_heads, c.seq, c.head_dim});
  const TensorView value(v.data(), key.shape);
  const MutableTensorView output(out.data(), query.shape);
  AttentionMasks masks;
  masks.is_causal = c.causal;
  CoreOptions options;
  options.compute_dtype = compute_dtype;
  if (c.window) options.features.sliding_window = c.window;
  if (c.chunk) options.features.attention_chunk_size = c.chunk;
  RotaryConfig rotary_config = Llama3Rotary();
  rotary_config.max_positions = std::max<int64_t>(c.seq, 1);
  const RotaryEmbedding rotary(rotary_config, c.head_dim);
  if (c.rope) options.rotary = &rotary;
  const std::vector<float> norm_weights = Random(2 * c.head_dim, 4, 1.0f);
  if (c.qk_norm) {
    options.features.qk_norm = QkNorm{};
    options.query_norm_weight = {norm_weights.data(), Shape{c.head_dim}};
    options.key_norm_weight = {norm_weights.data() + c.head_dim, Shape{c.head_dim}};
  }
  for (auto _ : state) {
    ScaledDotProductAttention(query, key, value, masks, output, options);
  }
  SetGflops(state,
            4.0 * c.heads * c.head_dim * OpenPairs(c.seq, c.causal, c.window, c.chunk));
}

// One Llama 3 8B attention layer (E=4096, 32 query / 8 KV heads of 128, RoPE llama3,
// causal) prefilling 1024 tokens, with or without its rotary embedding.
void BM_Llama3Prefill(benchmark::State& state, bool rope) {
  constexpr int64_t kEmbed = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kSeq = 1024;
  AttentionConfig config = MakeConfig(kHeads, kHeadDim, kEmbed);
  config.num_kv_heads = kKvHeads;
  if (rope) config.rotary = Llama3Rotary();
  const int64_t kv = kKvHeads * kHeadDim;
  const float scale = 0.02f;
  const std::vector<float> wq = Random(kEmbed * kEmbed, 1, scale),
                           wk = Random(kv * kEmbed, 2, scale),
                           wv = Random(kv * kEmbed, 3, scale),
                           wo = Random(kEmbed * kEmbed, 4, scale),
                           x = Random(kSeq * kEmbed, 5, 1.0f);
  AttentionWeights weights;
  weights.query.weight = {wq.data(), Shape{kEmbed, kEmbed}};
  weights.key.weight = {wk.data(), Shape{kv, kEmbed}};
  weights.value.weight = {wv.data(), Shape{kv, kEmbed}};
  weights.output.weight = {wo.data(), Shape{kEmbed, kEmbed}};
  const MultiheadAttention attention(config, weights);
  std::vector<float> out(kSeq * kEmbed);
  AttentionMasks masks;
  masks.is_causal = true;
  const AttentionInputs inputs{{x.data(), Shape{1, kSeq, kEmbed}}, {}, {}};
  const AttentionOutputs outputs{{out.data(), Shape{1, kSeq, kEmbed}}, {}};
  attention.Forward(inputs, masks, outputs);  // sizes the workspaces
  for (auto _ : state) attention.Forward(inputs, masks, outputs);
  const double projections = 2.0 * kSeq * kEmbed * (2.0 * kEmbed + 2.0 * kv);
  SetGflops(state, projections + 4.0 * kHeads * kHeadDim * OpenPairs(kSeq, true, 0));
}

constexpr CoreCase kCoreCases[] = {
    {"core_d64_h12_s512", 12, 12, 512, 64, false, 0, false},
    {"core_d64_h12_s512_causal", 12, 12, 512, 64, true, 0, false},
    {"core_d64_h12_s1024_causal", 12, 12, 1024, 64, true, 0, false},
    {"core_d128_h32_kv8_s1024_causal", 32, 8, 1024, 128, true, 0, false},
    {"core_d128_h32_kv8_s1024_causal_rope", 32, 8, 1024, 128, true, 0, true},
    // Qwen 3 8B's shape with its QK-norm: the norm's cost over the RoPE case above.
    {"qwen3_qk_norm_d128_h32_kv8_s1024_causal_rope", 32, 8, 1024, 128, true, 0, true, 0,
     true},
    {"mistral_window4096_s8192", 32, 8, 8192, 128, true, 4096, false},
    {"mistral_window4096_s16384", 32, 8, 16384, 128, true, 4096, false},
    // Llama 4's chunked layers (chunks of 8192): prefill time linear in S past a chunk.
    {"llama4_chunk8192_s16384", 32, 8, 16384, 128, true, 0, false, 8192},
    {"llama4_chunk8192_s32768", 32, 8, 32768, 128, true, 0, false, 8192},
};

}  // namespace

void RegisterDecoderCases() {
  for (const CoreCase& c : kCoreCases) {
    benchmark::RegisterBenchmark((std::string("BM_Core/") + c.name).c_str(), BM_Core, c,
                                 DType::kFloat32)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  // The D64 cores beside one busy thread (busy_thread.h).
  for (const CoreCase* c : {&kCoreCases[0], &kCoreCases[1]}) {
    benchmark::RegisterBenchmark(
        (std::string("BM_Core/") + c->name + "/busy_thread").c_str(),
        BesideBusyThread(
            [c](benchmark::State& state) { BM_Core(state, *c, DType::kFloat32); }))
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  // The bf16 compute path on the cases of the targets (not the long windows
  // and chunks).
  for (const CoreCase& c : kCoreCases) {
    if (c.window || c.chunk || c.qk_norm) continue;
    benchmark::RegisterBenchmark(
        (std::string("BM_Core/") + c.name + "/bf16_compute").c_str(), BM_Core, c,
        DType::kBFloat16)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const bool rope : {true, false}) {
    benchmark::RegisterBenchmark(rope ? "BM_Layer/llama3_8b_prefill_s1024"
                                      : "BM_Layer/llama3_8b_prefill_s1024_norope",
                                 BM_Llama3Prefill, rope)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace mha::bench
