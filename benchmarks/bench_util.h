// Helpers shared by mha_bench's case files: deterministic data, a timed loop and
// the GFLOP/s counter that bench_report.py reads.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "mha/mha.hpp"

namespace mha::bench {

inline std::vector<float> Random(size_t count, uint32_t seed, float scale) {
  std::vector<float> values(count);
  uint32_t state = seed * 2654435761u + 1;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return values;
}

inline mha::AttentionConfig MakeConfig(int64_t heads, int64_t head_dim, int64_t embed) {
  mha::AttentionConfig config;
  config.num_heads = heads;
  config.head_dim = head_dim;
  config.query_dim = embed;
  return config;
}

template <class F>
double TimedLoop(benchmark::State& state, const F& run) {
  double seconds = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return seconds / static_cast<double>(state.iterations());
}

inline void SetGflops(benchmark::State& state, double flops) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace mha::bench
