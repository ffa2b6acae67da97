// Randomized property test of the paged KV cache: thousands of random operations
// (add, packed append of random lengths, fork, truncate, remove, running out of
// blocks) against a model of the tokens each sequence holds. After every packed step
// each new token's output must equal the naive double-precision reference attention
// over the model's tokens; failed calls must change nothing; no block may leak. Run
// under AddressSanitizer in CI.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "mha/reference.hpp"
#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 16, kMaxLength = 96, kMaxSequences = 6;

struct PropertyCase {
  const char* name;
  DType storage;
  int64_t block_size, num_blocks, window;
  bool rope;
  int operations;
  KvScales scales = KvScales::kPerToken;
  // Against the fp32 reference: the storage's rounding (kv_storage_accuracy_test
  // states each kind's bounds), far below what a wrong block or token would give.
  double tolerance = 1e-2;
};
void PrintTo(const PropertyCase& c, std::ostream* os) { *os << c.name; }

class PagedCacheProperty : public ::testing::TestWithParam<PropertyCase> {
 protected:
  void SetUp() override {
    const PropertyCase& c = GetParam();
    LayerSpec spec;
    spec.num_heads = 4;
    spec.num_kv_heads = 2;
    spec.head_dim = 4;
    spec.query_dim = kEmbed;
    layer_ = MakeLayer(spec, 99);
    if (c.rope) layer_.config.rotary.pairing = RotaryPairing::kHalfSplit;
    if (c.window > 0) layer_.config.features.sliding_window = c.window;
    attention_ = std::make_unique<MultiheadAttention>(layer_.config, layer_.weights);
    PagedKvCacheOptions options;
    options.num_blocks = c.num_blocks;
    options.block_size = c.block_size;
    options.max_sequences = kMaxSequences;
    options.storage = c.storage;
    options.scales = c.scales;
    options.sliding_window = c.window;
    cache_ = std::make_unique<PagedKvCache>(layer_.config, options);
  }

  // The naive reference's outputs for the last `count` tokens of `tokens`.
  std::vector<float> Reference(const std::vector<float>& tokens, int64_t count) const {
    const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
    std::vector<float> out(length * kEmbed);
    AttentionMasks masks;
    masks.is_causal = true;
    NaiveMultiheadAttention(
        layer_.config, layer_.weights,
        {TensorView(tokens.data(), Shape{1, length, kEmbed}), {}, {}}, masks,
        {MutableTensorView(out.data(), Shape{1, length, kEmbed}), {}});
    return std::vector<float>(out.end() - count * kEmbed, out.end());
  }

  void Step(std::mt19937& rng) {
    std::vector<Chunk> chunks;
    for (const auto& [id, tokens] : model_) {
      if (rng() % 3 == 0) continue;
      const int64_t room = kMaxLength - static_cast<int64_t>(tokens.size()) / kEmbed;
      const int64_t count = std::min<int64_t>(room, rng() % 4 == 0 ? 1 + rng() % 40 : 1);
      if (count > 0) chunks.push_back({id, RandomFloats(count * kEmbed, rng())});
    }
    if (chunks.empty()) return;
    const PagedKvCacheStats before = cache_->stats();
    std::vector<std::vector<float>> outputs;
    try {
      outputs = AppendAndForward(*attention_, *cache_, chunks);
    } catch (const OutOfBlocksError&) {
      ++out_of_blocks_;
      ASSERT_EQ(cache_->stats().used_blocks, before.used_blocks);
      for (const auto& [id, tokens] : model_) {
        ASSERT_EQ(cache_->length(id), static_cast<int64_t>(tokens.size()) / kEmbed);
      }
      return;
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      std::vector<float>& tokens = model_[chunks[i].sequence];
      tokens.insert(tokens.end(), chunks[i].tokens.begin(), chunks[i].tokens.end());
      const int64_t count = static_cast<int64_t>(chunks[i].tokens.size()) / kEmbed;
      ExpectClose(outputs[i], Reference(tokens, count), GetParam().name,
                  GetParam().storage == DType::kFloat32 ? 1e-4 : GetParam().tolerance);
      ASSERT_EQ(cache_->length(chunks[i].sequence),
                static_cast<int64_t>(tokens.size()) / kEmbed);
    }
  }

  int64_t FreeId(std::mt19937& rng) const {
    for (int attempt = 0; attempt < 8; ++attempt) {
      const int64_t id = rng() % kMaxSequences;
      if (!model_.count(id)) return id;
    }
    return -1;
  }

  int64_t SomeId(std::mt19937& rng) const {
    auto it = model_.begin();
    std::advance(it, rng() % model_.size());
    return it->first;
  }

  void Operate(std::mt19937& rng) {
    const int op = rng() % 10;
    if (op < 2 || model_.empty()) {  // add
      const int64_t id = FreeId(rng);
      if (id < 0) return;
      cache_->AddSequence(id);
      model_[id];
    } else if (op < 6) {
      Step(rng);
    } else if (op == 6) {  // fork
      const int64_t parent = SomeId(rng), child = FreeId(rng);
      if (child < 0) return;
      cache_->Fork(parent, child);
      model_[child] = model_[parent];
    } else if (op == 7) {  // truncate: may be refused (window, no block to copy)
      const int64_t id = SomeId(rng);
      std::vector<float>& tokens = model_[id];
      const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
      const int64_t keep = length == 0 ? 0 : rng() % (length + 1);
      try {
        cache_->Truncate(id, keep);
        tokens.resize(keep * kEmbed);
      } catch (const Error&) {
        ++refused_truncates_;
        ASSERT_EQ(cache_->length(id), length);
      }
    } else {  // remove
      const int64_t id = SomeId(rng);
      cache_->RemoveSequence(id);
      model_.erase(id);
    }
    CheckBlocks();
  }

  // Sharing only lowers the blocks used below the sum of the sequences' own.
  void CheckBlocks() const {
    const PagedKvCacheStats stats = cache_->stats();
    const int64_t block_size = GetParam().block_size;
    int64_t own = 0;
    for (const auto& [id, tokens] : model_) {
      own += (static_cast<int64_t>(tokens.size()) / kEmbed + block_size - 1) / block_size;
    }
    ASSERT_LE(stats.used_blocks, own);
    ASSERT_EQ(stats.used_blocks + stats.free_blocks, stats.num_blocks);
    ASSERT_EQ(stats.sequences, static_cast<int64_t>(model_.size()));
  }

  OwnedLayer layer_;
  std::unique_ptr<MultiheadAttention> attention_;
  std::unique_ptr<PagedKvCache> cache_;
  std::map<int64_t, std::vector<float>> model_;  // id -> tokens [length, kEmbed]
  int out_of_blocks_ = 0, refused_truncates_ = 0;
};

TEST_P(PagedCacheProperty, RandomOperationsMatchModelAndReference) {
  std::mt19937 rng(2024);
  for (int i = 0; i < GetParam().operations && !HasFatalFailure(); ++i) Operate(rng);
  for (auto it = model_.begin(); it != model_.end(); it = model_.erase(it)) {
    cache_->RemoveSequence(it->first);
  }
  EXPECT_EQ(cache_->stats().free_blocks, GetParam().num_blocks) << "blocks leaked";
  EXPECT_GT(out_of_blocks_, 0) << "the pool never ran out: the test is too easy";
  RecordProperty("out_of_blocks", out_of_blocks_);
}

INSTANTIATE_TEST_SUITE_P(
    Storages, PagedCacheProperty,
    ::testing::Values(PropertyCase{"fp32_rope", DType::kFloat32, 16, 14, 0, true, 3000},
                      PropertyCase{"bf16", DType::kBFloat16, 32, 8, 0, false, 3000},
                      PropertyCase{"int8_window", DType::kInt8, 16, 10, 40, true, 3000},
                      PropertyCase{"fp8_e4m3_rope", DType::kFloat8E4M3, 16, 12, 0, true,
                                   3000, KvScales::kPerToken, 8e-2},
                      PropertyCase{"fp8_e5m2_scale_free_window", DType::kFloat8E5M2, 32,
                                   8, 40, false, 3000, KvScales::kNone, 0.15},
                      PropertyCase{"int8_channel_keys_rope_window", DType::kInt8, 16, 10,
                                   40, true, 3000, KvScales::kPerChannelKeys},
                      PropertyCase{"int4_rope_window", DType::kInt4, 16, 10, 40, true,
                                   3000, KvScales::kPerChannelKeys, 6e-2}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mha::testing
