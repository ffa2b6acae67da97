// tile_product_bench: the measurement behind the attention core's tile GEMMs. Both
// tile products of one flash step (scores = Q K^T: 48 x 128 x 64; context += P V:
// 48 x 64 x 128) on one thread, as oneDNN matmul primitives on strided views
// (created once, executed through the C API) and as mha's Highway tile kernel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "benchmarks/tile_product_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "src/kernel/tile_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// b: a [depth, n] tile in column panels, as KV pages are.
void TileProduct(size_t rows, size_t n, size_t depth, const float* a, size_t lda,
                 const float* b, float* c, size_t ldc) {
  TileMatMul(hwy::HWY_NAMESPACE::ScalableTag<float>(), rows, n, depth, a, lda, b, depth,
             c, ldc,
             /*accumulate=*/true);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace mha {
HWY_EXPORT(TileProduct);
}  // namespace mha

namespace {

// {rows, n, depth}: the two products of one 48-query x 128-key step, head_dim 64.
constexpr int64_t kShapes[2][3] = {{48, 128, 64}, {48, 64, 128}};

void SetFlops(benchmark::State& state, const int64_t* shape) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2e-9 * shape[0] * shape[1] * shape[2],
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TileHighway(benchmark::State& state) {
  const int64_t* shape = kShapes[state.range(0)];
  const size_t rows = shape[0], n = shape[1], depth = shape[2];
  // Strided like the real operands: Q rows inside a [S, 3 * 768] projection.
  const size_t lda = state.range(0) == 0 ? 2304 : 128;
  std::vector<float> a(rows * lda, 0.5f), b(depth * n, 0.25f), c(rows * n);
  for (auto _ : state) {
    HWY_DYNAMIC_DISPATCH(mha::TileProduct)
    (rows, n, depth, a.data(), lda, b.data(), c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  SetFlops(state, shape);
}

void BM_TileOneDnn(benchmark::State& state) {
  using dnnl::memory;
  const int64_t* shape = kShapes[state.range(0)];
  const int64_t rows = shape[0], n = shape[1], depth = shape[2];
  const int64_t lda = state.range(0) == 0 ? 2304 : 128;
  omp_set_num_threads(1);  // as inside mha's own parallel region
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_desc({rows, depth}, memory::data_type::f32, {lda, 1});
  const memory::desc b_desc({depth, n}, memory::data_type::f32, {n, 1});
  const memory::desc c_desc({rows, n}, memory::data_type::f32, {n, 1});
  dnnl::primitive_attr attr;
  dnnl::post_ops sum;
  sum.append_sum(1.0f);  // accumulate, like the P V product
  attr.set_post_ops(sum);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr,
                                        engine);
  const dnnl::matmul matmul(pd);
  std::vector<float> a(rows * lda, 0.5f), b(depth * n, 0.25f), c(rows * n);
  memory ma(a_desc, engine, a.data()), mb(b_desc, engine, b.data()),
      mc(c_desc, engine, c.data());
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_SRC, ma.get()}, {DNNL_ARG_WEIGHTS, mb.get()}, {DNNL_ARG_DST, mc.get()}};
  for (auto _ : state) {
    dnnl_primitive_execute(matmul.get(), stream.get(), 3, args);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(pd.impl_info_str());
  SetFlops(state, shape);
  omp_set_num_threads(omp_get_num_procs());
}

BENCHMARK(BM_TileHighway)->Arg(0)->Arg(1)->ArgName("qk0_pv1");
BENCHMARK(BM_TileOneDnn)->Arg(0)->Arg(1)->ArgName("qk0_pv1");

}  // namespace

BENCHMARK_MAIN();
#endif  // HWY_ONCE
