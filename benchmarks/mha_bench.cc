// mha_bench: the library's forward against the naive baseline and against the
// machine's reachable peaks (machine_peaks.h), on the shapes users run. GFLOPS counts
// useful FLOPs: projections plus the attention scores and context the masks leave open.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks/bench_util.h"
#include "benchmarks/busy_thread.h"
#include "benchmarks/decoder_cases.h"
#include "benchmarks/latent_cases.h"
#include "benchmarks/machine_peaks.h"
#include "benchmarks/serving_cases.h"
#include "mha/mha.hpp"
#include "oneapi/dnnl/dnnl.hpp"

namespace {

using mha::bench::MakeConfig;
using mha::bench::Random;
using mha::bench::SetGflops;
using mha::bench::TimedLoop;

enum class Mask { kNone, kCausal, kKeyPadding20 };

struct BenchCase {
  const char* name;
  int64_t batch, query_len, key_len, embed, heads;
  Mask mask;
  bool run_naive;  // false where the naive loops would take over a minute
};

constexpr BenchCase kCases[] = {
    {"seed_tiny", 3, 6, 6, 8, 4, Mask::kNone, true},
    {"bert_base_s128", 1, 128, 128, 768, 12, Mask::kKeyPadding20, true},
    {"bert_base_s512_b8", 8, 512, 512, 768, 12, Mask::kNone, true},
    {"gpt2_causal_s1024", 1, 1024, 1024, 768, 12, Mask::kCausal, true},
    {"long_causal_s8192", 1, 8192, 8192, 1024, 16, Mask::kCausal, false},
    {"cross_q128_k1024", 4, 128, 1024, 512, 8, Mask::kNone, true},
};

// One case's layer, inputs, masks and outputs, built outside the timed loop.
struct Problem {
  explicit Problem(const BenchCase& c)
      : config(MakeConfig(c.heads, c.embed / c.heads, c.embed)),
        in_proj(Random(3 * c.embed * c.embed, 1, 0.03f)),
        in_bias(Random(3 * c.embed, 2, 0.1f)),
        out_proj(Random(c.embed * c.embed, 3, 0.03f)),
        out_bias(Random(c.embed, 4, 0.1f)),
        query(Random(c.batch * c.query_len * c.embed, 5, 1.0f)),
        key(Random(c.batch * c.key_len * c.embed, 6, 1.0f)),
        value(Random(c.batch * c.key_len * c.embed, 7, 1.0f)),
        lengths(c.batch, c.key_len - c.key_len / 5),
        output(c.batch * c.query_len * c.embed) {
    const int64_t e = c.embed;
    weights = mha::FromPackedInProjection(
        {in_proj.data(), mha::Shape{3 * e, e}}, {in_bias.data(), mha::Shape{3 * e}},
        {out_proj.data(), mha::Shape{e, e}}, {out_bias.data(), mha::Shape{e}});
    inputs.query = {query.data(), mha::Shape{c.batch, c.query_len, e}};
    if (c.key_len != c.query_len) {  // cross-attention
      inputs.key = {key.data(), mha::Shape{c.batch, c.key_len, e}};
      inputs.value = {value.data(), mha::Shape{c.batch, c.key_len, e}};
    }
    masks.is_causal = c.mask == Mask::kCausal;
    if (c.mask == Mask::kKeyPadding20) {
      masks.key_lengths = {lengths.data(), mha::DType::kInt64, mha::Shape{c.batch}};
    }
    outputs.output = {output.data(), mha::Shape{c.batch, c.query_len, e}};
  }

  mha::AttentionConfig config;
  std::vector<float> in_proj, in_bias, out_proj, out_bias, query, key, value;
  std::vector<int64_t> lengths;
  std::vector<float> output;
  mha::AttentionWeights weights;
  mha::AttentionInputs inputs;
  mha::AttentionMasks masks;
  mha::AttentionOutputs outputs;
};

double UsefulFlops(const BenchCase& c) {
  const double e = double(c.embed), b = double(c.batch);
  const double projections = 2.0 * e * e * b * (2.0 * c.query_len + 2.0 * c.key_len);
  double scores = b * double(c.query_len) * double(c.key_len);  // open (query, key) pairs
  if (c.mask == Mask::kCausal) scores = b * double(c.query_len) * (c.query_len + 1) / 2.0;
  if (c.mask == Mask::kKeyPadding20)
    scores = b * c.query_len * double(c.key_len - c.key_len / 5);
  return projections + 4.0 * scores * e;  // Q.K^T and P.V: 2 FLOPs each per head_dim
}

std::map<std::string, double>& NaiveSeconds() {
  static std::map<std::string, double> seconds;
  return seconds;
}

void BM_Naive(benchmark::State& state, const BenchCase& c) {
  Problem p(c);
  const double seconds = TimedLoop(state, [&] {
    mha::NaiveMultiheadAttention(p.config, p.weights, p.inputs, p.masks, p.outputs);
  });
  NaiveSeconds()[c.name] = seconds;
  SetGflops(state, UsefulFlops(c));
}

void BM_Mha(benchmark::State& state, const BenchCase& c, int num_threads,
            mha::DType weight_dtype) {
  Problem p(c);
  p.config.weight_dtype = weight_dtype;
  const mha::MultiheadAttention attention(p.config, p.weights);
  mha::ForwardOptions options;
  options.num_threads = num_threads;
  attention.Forward(p.inputs, p.masks, p.outputs,
                    options);  // first call sizes workspaces
  const double seconds =
      TimedLoop(state, [&] { attention.Forward(p.inputs, p.masks, p.outputs, options); });
  SetGflops(state, UsefulFlops(c));
  state.counters["workspace_MiB"] = double(attention.workspace_bytes()) / (1 << 20);
  const auto naive = NaiveSeconds().find(c.name);
  if (naive != NaiveSeconds().end() && num_threads == 0) {
    state.counters["speedup_vs_naive"] = naive->second / seconds;
  }
}

// The floor oneDNN sets under a tiny forward: the layer's two projection matmuls
// alone (packed Q/K/V in, output out, with bias), fixed-shape primitives executed
// through the C API on one thread, as the layer runs a problem this small.
void BM_ProjectionFloor(benchmark::State& state, const BenchCase& c) {
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const int64_t rows = c.batch * c.query_len, e = c.embed;
  const auto matrix = [](int64_t r, int64_t n) {
    return memory::desc({r, n}, memory::data_type::f32, memory::format_tag::ab);
  };
  std::vector<float> x = Random(rows * e, 1, 1.0f), w_in = Random(e * 3 * e, 2, 0.1f),
                     b_in = Random(3 * e, 3, 0.1f), w_out = Random(e * e, 4, 0.1f),
                     b_out = Random(e, 5, 0.1f), y_in(rows * 3 * e), y_out(rows * e);
  struct Matmul {
    dnnl::matmul primitive;
    memory src, weights, bias, dst, scratchpad;
  };
  // oneDNN fixes a primitive's threads when it is created.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl::primitive_attr attr;  // the layer's setting: no allocation inside execute
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  std::vector<uint8_t> scratchpad(1 << 20);
  const auto make = [&](float* src, float* weights, float* bias, float* dst, int64_t n) {
    const memory::desc s = matrix(rows, e), w = matrix(e, n), b = matrix(1, n),
                       d = matrix(rows, n);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s, w, b, d), attr, engine);
    return Matmul{dnnl::matmul(pd),
                  memory(s, engine, src),
                  memory(w, engine, weights),
                  memory(b, engine, bias),
                  memory(d, engine, dst),
                  memory(pd.scratchpad_desc(), engine, scratchpad.data())};
  };
  const Matmul in = make(x.data(), w_in.data(), b_in.data(), y_in.data(), 3 * e);
  const Matmul out = make(x.data(), w_out.data(), b_out.data(), y_out.data(), e);
  const auto execute = [&](const Matmul& m) {
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m.src.get()},
                               {DNNL_ARG_WEIGHTS, m.weights.get()},
                               {DNNL_ARG_BIAS, m.bias.get()},
                               {DNNL_ARG_DST, m.dst.get()},
                               {DNNL_ARG_SCRATCHPAD, m.scratchpad.get()}};
    dnnl_primitive_execute(m.primitive.get(), stream.get(), 5, args);
    stream.wait();
  };
  for (auto _ : state) {
    execute(in);
    execute(out);
  }
  omp_set_num_threads(threads);
}

// One decode step at cached length 2048: 32 query heads on 8 KV heads of 128 (a
// Llama-style layer), batch 1 or 8. embed 4096 is the whole layer, whose weights
// (168 MB) dominate the bytes read; embed 64 shrinks the projections so the step is
// the attention over the cache. GBps counters: K/V bytes, and K/V plus weights.
void BM_Decode(benchmark::State& state, int64_t batch, int64_t embed,
               mha::DType storage) {
  constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kCached = 2048;
  const int64_t model = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  mha::AttentionConfig config = MakeConfig(kHeads, kHeadDim, embed);
  config.num_kv_heads = kKvHeads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(embed));
  const std::vector<float> wq = Random(model * embed, 1, scale),
                           wk = Random(kv * embed, 2, scale),
                           wv = Random(kv * embed, 3, scale),
                           wo = Random(embed * model, 4, 0.01f);
  mha::AttentionWeights weights;
  weights.query.weight = {wq.data(), mha::Shape{model, embed}};
  weights.key.weight = {wk.data(), mha::Shape{kv, embed}};
  weights.value.weight = {wv.data(), mha::Shape{kv, embed}};
  weights.output.weight = {wo.data(), mha::Shape{embed, model}};
  const mha::MultiheadAttention attention(config, weights);
  mha::KvCache cache(config, batch, kCached + 1, storage);
  constexpr int64_t kChunk = 256;
  const std::vector<float> prefill = Random(batch * kChunk * embed, 5, 1.0f);
  std::vector<float> out(batch * kChunk * embed);
  for (int64_t filled = 0; filled < kCached; filled += kChunk) {
    attention.ForwardWithCache({prefill.data(), mha::Shape{batch, kChunk, embed}}, {},
                               cache, {out.data(), mha::Shape{batch, kChunk, embed}});
  }
  const std::vector<float> token = Random(batch * embed, 6, 1.0f);
  for (auto _ : state) {
    for (int64_t b = 0; b < batch; ++b) cache.Truncate(b, kCached);
    attention.ForwardWithCache({token.data(), mha::Shape{batch, 1, embed}}, {}, cache,
                               {out.data(), mha::Shape{batch, 1, embed}});
  }
  const double kv_bytes = 2.0 * batch * kCached * kv * mha::DTypeSize(storage);
  const double weight_bytes = (2.0 * model + 2.0 * kv) * embed * sizeof(float);
  state.counters["kv_GBps"] =
      benchmark::Counter(kv_bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["total_GBps"] = benchmark::Counter(
      (kv_bytes + weight_bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterAll() {
  benchmark::RegisterBenchmark("BM_ProjectionFloor/seed_tiny", BM_ProjectionFloor,
                               kCases[0])
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  for (const BenchCase& c : kCases) {
    if (c.run_naive) {
      // Naive first, so that BM_Mha can report its speedup from the same run.
      benchmark::RegisterBenchmark((std::string("BM_Naive/") + c.name).c_str(), BM_Naive,
                                   c)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(c.embed > 64 ? 1 : 1000)
          ->Repetitions(1);
    }
    benchmark::RegisterBenchmark((std::string("BM_Mha/") + c.name).c_str(), BM_Mha, c, 0,
                                 mha::DType::kFloat32)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // bf16 and int8 weights against fp32 on BERT-base-sized prefill.
  for (const BenchCase* c : {&kCases[1], &kCases[2]}) {
    for (const mha::DType weights : {mha::DType::kBFloat16, mha::DType::kInt8}) {
      const std::string suffix = weights == mha::DType::kInt8 ? "/int8" : "/bf16";
      benchmark::RegisterBenchmark((std::string("BM_Mha/") + c->name + suffix).c_str(),
                                   BM_Mha, *c, 0, weights)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  // The layers beside one busy thread: against the cases above, what a shared CPU costs.
  for (const BenchCase* c : {&kCases[1], &kCases[2], &kCases[3]}) {
    benchmark::RegisterBenchmark(
        (std::string("BM_Mha/") + c->name + "/busy_thread").c_str(),
        mha::bench::BesideBusyThread(
            [c](benchmark::State& state) { BM_Mha(state, *c, 0, mha::DType::kFloat32); }))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // Thread scaling on the largest dense case.
  benchmark::RegisterBenchmark("BM_Mha/bert_base_s512_b8/threads:1", BM_Mha, kCases[2], 1,
                               mha::DType::kFloat32)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // Decoding over a KV cache, against the memory bandwidth.
  for (int64_t batch : {1, 8}) {
    for (int64_t embed : {64, 4096}) {
      const std::string name = std::string("BM_Decode/") +
                               (embed == 64 ? "attention" : "layer") + "_b" +
                               std::to_string(batch);
      benchmark::RegisterBenchmark(name.c_str(), BM_Decode, batch, embed,
                                   mha::DType::kFloat32)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  // bf16 and int8 KV caches halve and quarter the bytes each decode step streams.
  benchmark::RegisterBenchmark("BM_Decode/attention_b8/bf16_cache", BM_Decode, 8, 64,
                               mha::DType::kBFloat16)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Decode/attention_b8/int8_cache", BM_Decode, 8, 64,
                               mha::DType::kInt8)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // Causal attention across sequence lengths (GPT-2 width).
  for (int64_t s : {256, 512, 1024, 2048, 4096}) {
    static std::vector<std::string> names;
    names.push_back("causal_s" + std::to_string(s));
    const BenchCase c{names.back().c_str(), 1, s, s, 768, 12, Mask::kCausal, false};
    benchmark::RegisterBenchmark(("BM_MhaCausalSweep/" + names.back()).c_str(), BM_Mha, c,
                                 0, mha::DType::kFloat32)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

// Applies --isa=NAME (removed from argv) or MHA_MAX_ISA, and records the result in
// the benchmark context, before anything creates a primitive.
bool ApplyIsaFlag(int& argc, char** argv) {
  constexpr std::string_view kFlag = "--isa=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, kFlag.size()) == kFlag) {
      try {
        mha::SetMaxIsa(mha::ParseIsa(arg.substr(kFlag.size()), "--isa"));
      } catch (const mha::Error& e) {
        std::fprintf(stderr, "mha_bench: %s\n", e.what());
        return false;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  const mha::IsaReport isa = mha::DescribeIsa();
  benchmark::AddCustomContext("mha_simd_target", isa.simd_target);
  benchmark::AddCustomContext("mha_onednn_isa", isa.onednn_isa);
  benchmark::AddCustomContext("mha_bf16_attention", isa.amx_tiles ? "amx"
                                                    : isa.bf16_dot_products
                                                        ? "avx512_bf16"
                                                        : "widened");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!ApplyIsaFlag(argc, argv)) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  mha::bench::RegisterMachinePeaks();
  RegisterAll();
  mha::bench::RegisterDecoderCases();
  mha::bench::RegisterServingCases();
  mha::bench::RegisterLatentCases();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // stderr, so that --benchmark_format=json on stdout stays valid.
  std::string kernels;
  for (const std::string& kernel : mha::DescribeIsa().projection_kernels) {
    kernels += " " + kernel;
  }
  std::fprintf(stderr, "mha projection kernels (oneDNN):%s\n", kernels.c_str());
  return 0;
}
