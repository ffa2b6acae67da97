// mha_bench cases for multi-head latent attention (DeepSeek V2/V3): one absorbed
// decode step's attention over 32768 cached tokens of DeepSeek-V3's shape, 128 query
// heads on one latent of 512 + a 64-wide rotary part, values = the latent read from
// the key pages (kv_pages.h), in 16-token pages as a paged cache holds them; and the
// same with the latent stored again as V pages, the layout values-in-keys replaces.
// Counters: latent (and V) bytes read per second, against BM_StreamRead; cache bytes
// per token against the 2 x 128 heads x 128 that plain MHA would cache.
#include "benchmarks/latent_cases.h"

#include <string>

#include "benchmarks/bench_util.h"
#include "src/cache/contiguous_pages.h"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"

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

}  // namespace

void RegisterLatentCases() {
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
