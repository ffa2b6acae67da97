// Out of memory at every allocation: each operation runs with its 1st, 2nd, ...
// allocation failing (mha's, and the standard library's for it; see
// failing_allocator.h for oneDNN's) until it runs clean. Each run must either succeed or
// throw std::bad_alloc (MHA_OUT_OF_MEMORY in C): never abort or throw anything else.
// After a failure the layer and the caches must be as they were: the same call, repeated,
// gives bitwise the result of a run that never failed. LeakSanitizer (CI's sanitized
// build) checks nothing leaks.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "mha/mha.h"
#include "tests/system/allocation_failure/failing_allocator.h"
#include "tests/cache/paged_test_util.h"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 32;
constexpr long kMaxAllocations = 100000;

// Runs `operation` with allocation n failing for n = 1, 2, ... until a run reaches
// no failure; after each run `check(threw)` checks what it left. Returns the number
// of allocations of a clean run.
long ForEveryAllocation(const std::function<void()>& operation,
                        const std::function<void(bool threw)>& check) {
  for (long n = 1; n < kMaxAllocations; ++n) {
    bool threw = false, happened = false;
    {
      const AllocationFailure failure(n);
      try {
        operation();
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      happened = failure.happened();
    }
    EXPECT_TRUE(happened || !threw) << "std::bad_alloc with no failed allocation";
    check(threw);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "with allocation " << n << " failing";
      return n;
    }
    if (!happened) return n - 1;
  }
  ADD_FAILURE() << "no clean run within " << kMaxAllocations << " allocations";
  return kMaxAllocations;
}

struct LayerCase {
  const char* name;
  int64_t num_heads, num_kv_heads, query_len, key_len;
  bool rotary, causal, weights;
  DType weight_dtype;
  double workspace_budget_bytes;  // small: the chunked flow
};
void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

const LayerCase kLayerCases[] = {
    {"self", 4, 0, 24, 24, false, false, false, DType::kFloat32, 1e9},
    {"causal_weights", 4, 0, 24, 24, false, true, true, DType::kFloat32, 1e9},
    {"cross_chunked", 4, 0, 40, 56, false, false, false, DType::kFloat32, 4096},
    {"gqa_rotary", 4, 2, 24, 24, true, true, false, DType::kFloat32, 1e9},
    {"int8_weights", 4, 0, 24, 24, false, false, false, DType::kInt8, 1e9},
};

OwnedLayer MakeCaseLayer(const LayerCase& c) {
  LayerSpec spec;
  spec.num_heads = c.num_heads;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = 8;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 7);
  layer.config.weight_dtype = c.weight_dtype;
  if (c.rotary) layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  layer.config.features.sliding_window =
      c.rotary ? std::optional<int64_t>(9) : std::nullopt;
  return layer;
}

// One forward's arguments and its output buffers.
class ForwardCall {
 public:
  explicit ForwardCall(const LayerCase& c, int threads = 2)
      : query_(RandomFloats(2 * c.query_len * kEmbed, 1)),
        key_(RandomFloats(2 * c.key_len * kEmbed, 2)),
        output_(query_.size()),
        weights_(c.weights ? 2 * c.query_len * c.key_len : 0) {
    inputs_.query = TensorView(query_.data(), Shape{2, c.query_len, kEmbed});
    if (c.key_len != c.query_len) {
      inputs_.key = inputs_.value = TensorView(key_.data(), Shape{2, c.key_len, kEmbed});
    }
    masks_.is_causal = c.causal;
    outputs_.output = MutableTensorView(output_.data(), Shape{2, c.query_len, kEmbed});
    if (c.weights) {
      outputs_.attn_weights =
          MutableTensorView(weights_.data(), Shape{2, c.query_len, c.key_len});
    }
    options_.num_threads = threads;
    options_.workspace_budget_bytes = c.workspace_budget_bytes;
  }

  void Run(const MultiheadAttention& attention) {
    attention.Forward(inputs_, masks_, outputs_, options_);
  }
  // Output then attention weights.
  std::vector<float> Result() const {
    std::vector<float> result = output_;
    result.insert(result.end(), weights_.begin(), weights_.end());
    return result;
  }

 private:
  std::vector<float> query_, key_, output_, weights_;
  AttentionInputs inputs_;
  AttentionMasks masks_;
  AttentionOutputs outputs_;
  ForwardOptions options_;
};

class LayerUnderFailure : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerUnderFailure, Construction) {
  const OwnedLayer layer = MakeCaseLayer(GetParam());
  const long allocations = ForEveryAllocation(
      [&] { const MultiheadAttention attention(layer.config, layer.weights); },
      [](bool) {});
  EXPECT_GT(allocations, 10);
}

// A layer's first forward makes its workspace and oneDNN's fixed-shape primitives.
TEST_P(LayerUnderFailure, FirstForward) {
  const OwnedLayer layer = MakeCaseLayer(GetParam());
  ForwardCall expected(GetParam());
  expected.Run(MultiheadAttention(layer.config, layer.weights));
  std::unique_ptr<MultiheadAttention> attention;
  ForwardCall call(GetParam());
  ForEveryAllocation(
      [&] {
        attention = nullptr;
        attention = std::make_unique<MultiheadAttention>(layer.config, layer.weights);
        call.Run(*attention);
      },
      [&](bool threw) {
        if (threw) {
          if (!attention) return;  // construction failed
          call.Run(*attention);    // the same layer, whatever its workspace holds
        }
        EXPECT_EQ(call.Result(), expected.Result());
      });
}

// Warm forwards of one layer over row counts that evict each other's primitives, so
// failures land in primitive replacement too; the layer stays usable.
TEST_P(LayerUnderFailure, RepeatedForwards) {
  const OwnedLayer layer = MakeCaseLayer(GetParam());
  const MultiheadAttention attention(layer.config, layer.weights);
  std::vector<ForwardCall> calls;
  for (int64_t length : {3, 5, 7, 9, 11, 13}) {
    LayerCase shape = GetParam();
    shape.query_len = length;
    shape.key_len = GetParam().key_len == GetParam().query_len ? length : length + 4;
    calls.emplace_back(shape, /*threads=*/1);  // ctest -j oversubscribes OpenMP
  }
  std::vector<std::vector<float>> expected;
  for (ForwardCall& call : calls) {
    call.Run(attention);
    expected.push_back(call.Result());
  }
  ForEveryAllocation(
      [&] {
        for (ForwardCall& call : calls) call.Run(attention);
      },
      [&](bool threw) {
        for (size_t i = 0; i < calls.size(); ++i) {
          if (threw) calls[i].Run(attention);
          EXPECT_EQ(calls[i].Result(), expected[i]) << "call " << i;
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerUnderFailure, ::testing::ValuesIn(kLayerCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A contiguous cache with a prefill, then one step; the step under failure.
struct CacheCase {
  const char* name;
  DType storage;
  int64_t new_tokens;  // per sequence in the failing step
};
void PrintTo(const CacheCase& c, std::ostream* os) { *os << c.name; }

class CacheUnderFailure : public ::testing::TestWithParam<CacheCase> {};

std::vector<float> CacheStep(const MultiheadAttention& attention, KvCache& cache,
                             const std::vector<float>& tokens, int64_t length) {
  std::vector<float> output(tokens.size());
  ForwardOptions options;
  options.num_threads = 2;
  attention.ForwardWithCache(
      TensorView(tokens.data(), Shape{2, length, kEmbed}), {}, cache,
      MutableTensorView(output.data(), Shape{2, length, kEmbed}), options);
  return output;
}

TEST_P(CacheUnderFailure, Creation) {
  const OwnedLayer layer = MakeCaseLayer(kLayerCases[3]);
  ForEveryAllocation(
      [&] { const KvCache cache(layer.config, 2, 40, GetParam().storage); }, [](bool) {});
}

TEST_P(CacheUnderFailure, Step) {
  const CacheCase& c = GetParam();
  const OwnedLayer layer = MakeCaseLayer(kLayerCases[3]);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> prefill = RandomFloats(2 * 6 * kEmbed, 3),
                           step = RandomFloats(2 * c.new_tokens * kEmbed, 4),
                           next = RandomFloats(2 * kEmbed, 5);
  KvCache expected_cache(layer.config, 2, 40, c.storage);
  CacheStep(attention, expected_cache, prefill, 6);
  const std::vector<float> expected_step =
      CacheStep(attention, expected_cache, step, c.new_tokens);
  const std::vector<float> expected_next = CacheStep(attention, expected_cache, next, 1);

  std::unique_ptr<KvCache> cache;
  std::vector<float> output;
  ForEveryAllocation(
      [&] {
        output.clear();
        cache = std::make_unique<KvCache>(layer.config, 2, 40, c.storage);
        CacheStep(attention, *cache, prefill, 6);
        output = CacheStep(attention, *cache, step, c.new_tokens);
      },
      [&](bool threw) {
        if (threw && !cache) return;
        if (threw) {  // the prefill or the step failed: repeat what did not happen
          const int64_t length = cache->length(0);
          ASSERT_EQ(cache->length(1), length);
          ASSERT_TRUE(length == 0 || length == 6) << "a failed step changed the cache";
          if (length == 0) CacheStep(attention, *cache, prefill, 6);
          output = CacheStep(attention, *cache, step, c.new_tokens);
        }
        EXPECT_EQ(output, expected_step);
        EXPECT_EQ(CacheStep(attention, *cache, next, 1), expected_next);
      });
}

INSTANTIATE_TEST_SUITE_P(Storages, CacheUnderFailure,
                         ::testing::Values(CacheCase{"fp32_decode", DType::kFloat32, 1},
                                           CacheCase{"fp32_chunk", DType::kFloat32, 5},
                                           CacheCase{"bf16_decode", DType::kBFloat16, 1},
                                           CacheCase{"int8_chunk", DType::kInt8, 5}),
                         [](const auto& info) { return std::string(info.param.name); });

// A paged cache: a prompt, forked, then a packed step of both sequences that copies
// their shared partial block and adds a block (AppendSlots is all or nothing).
TEST(PagedCacheUnderFailure, CreationForkAndStep) {
  const OwnedLayer layer = MakeCaseLayer(kLayerCases[3]);
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 8;
  options.max_sequences = 3;
  const std::vector<float> prompt = RandomFloats(30 * kEmbed, 6),
                           step0 = RandomFloats(3 * kEmbed, 7),
                           step2 = RandomFloats(kEmbed, 8);
  const auto prepare = [&](PagedKvCache& cache) {
    cache.AddSequence(0);
    AppendAndForward(attention, cache, {{0, prompt}});
    cache.Fork(0, 2);
  };
  const auto step = [&](PagedKvCache& cache) {
    return AppendAndForward(attention, cache, {{0, step0}, {2, step2}});
  };
  PagedKvCache expected_cache(layer.config, options);
  prepare(expected_cache);
  const std::vector<std::vector<float>> expected = step(expected_cache);

  std::unique_ptr<PagedKvCache> cache;
  bool prepared = false;
  std::vector<std::vector<float>> outputs;
  ForEveryAllocation(
      [&] {
        prepared = false;
        outputs.clear();
        cache = nullptr;
        cache = std::make_unique<PagedKvCache>(layer.config, options);
        prepare(*cache);
        prepared = true;
        outputs = step(*cache);
      },
      [&](bool threw) {
        if (threw && !prepared) return;  // the setup failed: nothing to compare
        if (threw) {
          const PagedKvCacheStats stats = cache->stats();
          if (cache->length(0) == 30) {  // AppendSlots failed, or the step before it
            ASSERT_EQ(cache->length(2), 30);
            ASSERT_EQ(stats.used_blocks, 2) << "a failed AppendSlots changed the cache";
            outputs = step(*cache);
          } else {  // the slots were appended, the forward failed: run it again
            ASSERT_EQ(cache->length(0), 33);
            ASSERT_EQ(cache->length(2), 31);
            outputs = PackedForward(attention, *cache, {{0, step0}, {2, step2}});
          }
        }
        EXPECT_EQ(outputs, expected);
      });
}

// The C API turns every failure into MHA_OUT_OF_MEMORY, never another status.
TEST(CApiUnderFailure, CreateForwardAndCacheStep) {
  const OwnedLayer layer = MakeCaseLayer(kLayerCases[0]);
  mha_config config{};
  config.num_heads = layer.config.num_heads;
  config.head_dim = layer.config.head_dim;
  config.query_dim = kEmbed;
  mha_weights weights{};
  weights.query.weight = static_cast<const float*>(layer.weights.query.weight.data);
  weights.key.weight = static_cast<const float*>(layer.weights.key.weight.data);
  weights.value.weight = static_cast<const float*>(layer.weights.value.weight.data);
  weights.output.weight = static_cast<const float*>(layer.weights.output.weight.data);
  const std::vector<float> query = RandomFloats(3 * kEmbed, 9);
  std::vector<float> output(query.size());
  ForEveryAllocation(
      [&] {
        mha_layer* c_layer = nullptr;
        mha_kv_cache* cache = nullptr;
        mha_layer_create_args create{sizeof(mha_layer_create_args), &config, &weights,
                                     nullptr};
        mha_status status = mha_layer_create_ex(&create, &c_layer);
        if (status == MHA_OK)
          status = mha_kv_cache_create(c_layer, 1, 8, MHA_KV_FLOAT32, &cache);
        if (status == MHA_OK) {
          mha_cache_forward_args step{};
          step.struct_size = sizeof step;
          step.batch = 1, step.new_tokens = 3, step.query = query.data();
          step.output = output.data(), step.num_threads = 2;
          status = mha_forward_with_cache_ex(c_layer, cache, &step);
        }
        mha_kv_cache_destroy(cache);
        mha_layer_destroy(c_layer);
        if (status == MHA_OUT_OF_MEMORY) {
          EXPECT_STREQ(mha_last_error(), "mha: out of memory");
          throw std::bad_alloc();  // counted as the failure it reports
        }
        EXPECT_EQ(status, MHA_OK) << mha_last_error();
      },
      [](bool) {});
}

}  // namespace
}  // namespace mha::testing
