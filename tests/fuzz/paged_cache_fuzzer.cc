// libFuzzer target: a paged KV cache and packed steps as a hostile caller drives
// them. The input picks the cache's options and then a run of operations (add,
// remove, fork, truncate, append slots, a packed forward whose ids, offsets and
// shapes need not agree) with sizes that are sometimes any int64. Every call must
// either work or throw mha::Error; the pool must always account for every block.
#include <cstdlib>
#include <memory>
#include <vector>

#include "mha/mha.hpp"
#include "tests/fuzz/fuzz_input.h"

namespace {

using mha::fuzz::FuzzInput;

constexpr int64_t kEmbed = 16, kMaxTokens = 64;

mha::AttentionConfig Config(FuzzInput& input) {
  mha::AttentionConfig config;
  config.num_heads = 2;
  config.num_kv_heads = 1 + input.Byte() % 2;
  config.head_dim = 8;
  config.query_dim = kEmbed;
  if (input.Byte() % 2) config.rotary.pairing = mha::RotaryPairing::kHalfSplit;
  return config;
}

mha::PagedKvCacheOptions Options(FuzzInput& input) {
  mha::PagedKvCacheOptions options;
  options.num_blocks = input.Size(8);
  options.block_size = 16 * (1 + input.Byte() % 2);
  options.max_sequences = input.Size(4);
  options.num_layers = 1 + input.Byte() % 2;
  const mha::DType storages[] = {mha::DType::kFloat32,    mha::DType::kBFloat16,
                                 mha::DType::kInt8,       mha::DType::kFloat8E4M3,
                                 mha::DType::kFloat8E5M2, mha::DType::kInt4};
  options.storage = storages[input.Byte() % 6];
  if (options.storage == mha::DType::kFloat8E4M3 ||
      options.storage == mha::DType::kFloat8E5M2) {
    options.scales = input.Byte() % 2 ? mha::KvScales::kNone : mha::KvScales::kPerToken;
  }
  if ((options.storage == mha::DType::kInt8 && input.Byte() % 2) ||
      options.storage == mha::DType::kInt4) {
    options.scales = mha::KvScales::kPerChannelKeys;
  }
  options.sliding_window = input.Byte() % 3 == 0 ? input.Size(48) : 0;
  return options;
}

// A packed forward: n sequences with ids and token counts from the input, T rows of
// query that may disagree with them, int32 or int64 metadata.
void ForwardPacked(FuzzInput& input, const mha::MultiheadAttention& attention,
                   mha::PagedKvCache& cache) {
  const int64_t n = input.Byte() % 4;
  std::vector<int64_t> ids(n), starts(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = input.Size(4);
    // Wrapping, so that any int64 a caller might pass can appear.
    const uint64_t next =
        static_cast<uint64_t>(starts[i]) + static_cast<uint64_t>(input.Size(4));
    starts[i + 1] =
        input.Byte() % 8 == 0 ? input.Size(kMaxTokens) : static_cast<int64_t>(next);
  }
  if (input.Byte() % 8 == 0 && n > 0) starts[0] = input.Size(4);
  const int64_t rows = input.Byte() % 4 == 0 ? input.Size(kMaxTokens) : starts[n];
  if (rows < 0 || rows > kMaxTokens) return;  // not a buffer this process can pass
  std::vector<float> query(rows * kEmbed), output(rows * kEmbed);
  for (float& v : query) v = (input.Byte() % 16) * 0.125f - 1.0f;
  const bool int32 = input.Byte() % 2;
  std::vector<int32_t> ids32(ids.begin(), ids.end()),
      starts32(starts.begin(), starts.end());
  mha::PackedBatch batch;
  batch.sequence_ids =
      int32 ? mha::TensorView(ids32.data(), mha::DType::kInt32, mha::Shape{n})
            : mha::TensorView(ids.data(), mha::DType::kInt64, mha::Shape{n});
  batch.query_start_loc =
      int32 ? mha::TensorView(starts32.data(), mha::DType::kInt32, mha::Shape{n + 1})
            : mha::TensorView(starts.data(), mha::DType::kInt64, mha::Shape{n + 1});
  attention.ForwardPacked(
      mha::TensorView(query.data(), mha::Shape{rows, kEmbed}), batch, cache,
      input.Size(2), mha::MutableTensorView(output.data(), mha::Shape{rows, kEmbed}));
}

void AppendSlots(FuzzInput& input, mha::PagedKvCache& cache) {
  const int64_t n = input.Byte() % 4;
  std::vector<int64_t> ids(n), counts(n);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = input.Size(4);
    counts[i] = input.Size(20);
  }
  cache.AppendSlots(ids.data(), counts.data(), n);
}

void Operate(FuzzInput& input, const mha::MultiheadAttention& attention,
             mha::PagedKvCache& cache) {
  switch (input.Byte() % 6) {
    case 0:
      return cache.AddSequence(input.Size(4));
    case 1:
      return cache.RemoveSequence(input.Size(4));
    case 2:
      return cache.Fork(input.Size(4), input.Size(4));
    case 3:
      return cache.Truncate(input.Size(4), input.Size(40));
    case 4:
      return AppendSlots(input, cache);
    default:
      return ForwardPacked(input, attention, cache);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput input(data, size);
  const mha::AttentionConfig config = Config(input);
  std::vector<float> weights[4];
  mha::AttentionWeights layer_weights;
  mha::Projection* projections[4] = {&layer_weights.query, &layer_weights.key,
                                     &layer_weights.value, &layer_weights.output};
  const int64_t rows[4] = {16, 8 * config.num_kv_heads, 8 * config.num_kv_heads, 16};
  for (int i = 0; i < 4; ++i) {
    weights[i].assign(rows[i] * kEmbed, 0.0f);
    for (size_t j = 0; j < weights[i].size(); ++j)
      weights[i][j] = ((j * 7 + i) % 13) * 0.05f - 0.3f;
    projections[i]->weight =
        mha::TensorView(weights[i].data(), mha::Shape{rows[i], kEmbed});
  }
  const mha::MultiheadAttention attention(config, layer_weights);
  std::unique_ptr<mha::PagedKvCache> cache;
  const mha::PagedKvCacheOptions options = Options(input);
  // A pool of a billion blocks is valid, but not one this process can hold
  // (kv_cache_test checks that refusals of impossible sizes come before allocating).
  if (options.num_blocks > 4096) return 0;
  try {
    cache = std::make_unique<mha::PagedKvCache>(config, options);
  } catch (const mha::Error&) {
    return 0;
  }
  for (int op = 0; op < 64 && input.Byte() != 0; ++op) {
    try {
      Operate(input, attention, *cache);
    } catch (const mha::Error&) {
    }
    const mha::PagedKvCacheStats stats = cache->stats();
    if (stats.used_blocks + stats.free_blocks != stats.num_blocks ||
        stats.free_blocks < 0) {
      std::abort();  // a block lost or counted twice
    }
  }
  return 0;
}
