// BM_GemmPeak, BM_AmxPeak, BM_StreamCopy and BM_StreamRead (machine_peaks.h).
#include "benchmarks/machine_peaks.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "benchmarks/bench_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mha::bench {
namespace {

// The reachable fp32 peak: one oneDNN matmul, M = N = K = 2048, created once.
void BM_GemmPeak(benchmark::State& state) {
  constexpr int64_t n = 2048;
  using dnnl::memory;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc desc({n, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul gemm(
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(desc, desc, desc), engine));
  std::vector<float> a = Random(n * n, 8, 1.0f), b = Random(n * n, 9, 1.0f), c(n * n);
  memory ma(desc, engine, a.data()), mb(desc, engine, b.data()),
      mc(desc, engine, c.data());
  for (auto _ : state) {
    gemm.execute(stream,
                 {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
  }
  SetGflops(state, 2.0 * n * n * n);
}

// The AMX tile rate on every core: what the bf16 paths on AMX are rated against.
void BM_AmxPeak(benchmark::State& state) {
  if (!DescribeIsa().amx_tiles) {
    state.SkipWithError("no AMX tiles here (or the ISA cap is below native)");
    return;
  }
  constexpr int64_t kSteps = 1 << 16;
  int threads = 1;
  for (auto _ : state) {
#pragma omp parallel
    {
      float sink = 0.0f;
      AmxTileLoop(kSteps, &sink);
      benchmark::DoNotOptimize(sink);
#pragma omp single
      threads = omp_get_num_threads();
    }
  }
  SetGflops(state, threads * kSteps * 4 * (2.0 * 16 * 16 * 32));
}

// STREAM-like copy on every core.
void BM_StreamCopy(benchmark::State& state) {
  const size_t count = size_t{64} << 20;  // 256 MiB per array, far beyond the caches
  std::vector<float> source(count, 1.0f), destination(count);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) destination[i] = source[i];
    benchmark::DoNotOptimize(destination.data());
  }
  state.counters["GBps"] = benchmark::Counter(
      2.0 * count * sizeof(float) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Read-only stream on every core: the bandwidth a decode step, which only reads its
// K/V, can reach (BM_StreamCopy counts writes too).
void BM_StreamRead(benchmark::State& state) {
  const int64_t count = int64_t{64} << 20;  // 256 MiB, far beyond the caches
  std::vector<float> source(count, 1.0f);
  for (auto _ : state) {
    float sum = 0.0f;
#pragma omp parallel reduction(+ : sum)
    {
      const int64_t share = count / omp_get_num_threads();
      sum += SumFloats(source.data() + omp_get_thread_num() * share, share);
    }
    benchmark::DoNotOptimize(sum);
  }
  state.counters["GBps"] = benchmark::Counter(
      count * sizeof(float) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void RegisterMachinePeaks() {
  benchmark::RegisterBenchmark("BM_GemmPeak", BM_GemmPeak)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_AmxPeak", BM_AmxPeak)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_StreamCopy", BM_StreamCopy)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_StreamRead", BM_StreamRead)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace mha::bench
