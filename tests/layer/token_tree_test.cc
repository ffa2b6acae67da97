// Token-tree verification for speculative decoding (PackedBatch::tree_parents) and
// its accepted path (PagedKvCache::KeepTokens): every draft token's output equals the
// last row of the sequence decoded along its own path alone (a contiguous cache:
// the cached prefix, then the path's tokens), in a packed step beside an ordinary
// decode; after KeepTokens the next token decodes as if only the path had been
// appended; each storage; bad trees and paths are refused with nothing changed.
#include <gtest/gtest.h>

#include <string>

#include "tests/kv_kinds.h"
#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 24, kCached = 21;
// A 9-token draft: two roots' worth of branches (0 -> {1, 2}, 1 -> {3, 4}, ...).
const std::vector<int64_t> kParents = {-1, 0, 0, 1, 1, 2, 3, 3, 6};

OwnedLayer TreeLayer() {
  LayerSpec spec;
  spec.num_heads = 4, spec.num_kv_heads = 2, spec.head_dim = 8, spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 61);
  layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  layer.config.features.softcap = 20.0f;
  return layer;
}

std::vector<float> Rows(const std::vector<float>& x, int64_t first, int64_t count) {
  return {x.begin() + first * kEmbed, x.begin() + (first + count) * kEmbed};
}

struct TreeStorage {
  const char* name;
  DType storage;
  KvScales scales;
};
void PrintTo(const TreeStorage& s, std::ostream* os) { *os << s.name; }

// The last output row of decoding `prefix` then `path_tokens` through a contiguous
// cache of `storage`.
std::vector<float> AlongPath(const MultiheadAttention& attention,
                             const AttentionConfig& config, const TreeStorage& storage,
                             const std::vector<float>& prefix,
                             const std::vector<float>& path_tokens) {
  KvCache cache(config, 1, 128, storage.storage, storage.scales);
  std::vector<float> out;
  for (const std::vector<float>* tokens : {&prefix, &path_tokens}) {
    const int64_t n = static_cast<int64_t>(tokens->size()) / kEmbed;
    out.assign(n * kEmbed, 0.0f);
    attention.ForwardWithCache(TensorView(tokens->data(), Shape{1, n, kEmbed}), {}, cache,
                               MutableTensorView(out.data(), Shape{1, n, kEmbed}));
  }
  return Rows(out, static_cast<int64_t>(path_tokens.size()) / kEmbed - 1, 1);
}

// The draft tokens of `path` (root first), gathered.
std::vector<float> PathTokens(const std::vector<float>& draft,
                              const std::vector<int64_t>& path) {
  std::vector<float> tokens;
  for (const int64_t i : path) {
    const std::vector<float> row = Rows(draft, i, 1);
    tokens.insert(tokens.end(), row.begin(), row.end());
  }
  return tokens;
}

std::vector<int64_t> PathTo(int64_t token) {
  std::vector<int64_t> path;
  for (int64_t i = token; i >= 0; i = kParents[i]) path.insert(path.begin(), i);
  return path;
}

class TokenTree : public ::testing::TestWithParam<TreeStorage> {};

// Keys per channel: the paged cache's 16-token blocks and the contiguous cache's
// 128-token pages scale them over different groups, hence the same bound as the
// other kinds' rounding rather than bit equality.
TEST_P(TokenTree, VerifiesEveryBranchThenKeepsTheAcceptedPath) {
  const TreeStorage storage = GetParam();
  const double bound = storage.storage == DType::kFloat32 ? 1e-4 : 3e-2;
  const OwnedLayer layer = TreeLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 8, options.max_sequences = 2, options.storage = storage.storage;
  options.scales = storage.scales;
  PagedKvCache cache(layer.config, options);
  const std::vector<float> prefix = RandomFloats(kCached * kEmbed, 62);
  const std::vector<float> other = RandomFloats(4 * kEmbed, 63);
  const std::vector<float> draft = RandomFloats(9 * kEmbed, 64);
  for (int64_t s = 0; s < 2; ++s) cache.AddSequence(s);
  AppendAndForward(attention, cache, {{0, prefix}, {1, Rows(other, 0, 3)}});
  // Sequence 0 verifies its tree while sequence 1 decodes one token.
  const auto outputs =
      AppendAndForward(attention, cache, {{0, draft, kParents}, {1, Rows(other, 3, 1)}});
  for (int64_t i = 0; i < 9; ++i) {
    const std::string what = "draft token " + std::to_string(i);
    ExpectClose(
        Rows(outputs[0], i, 1),
        AlongPath(attention, layer.config, storage, prefix, PathTokens(draft, PathTo(i))),
        what.c_str(), bound);
  }
  ExpectClose(
      outputs[1],
      AlongPath(attention, layer.config, storage, Rows(other, 0, 3), Rows(other, 3, 1)),
      "the decode beside the tree", bound);
  // Accept 0 -> 1 -> 4, then decode the next token.
  const std::vector<int64_t> accepted = {0, 1, 4};
  cache.KeepTokens(0, kCached, accepted.data(), 3);
  EXPECT_EQ(cache.length(0), kCached + 3);
  const std::vector<float> next = RandomFloats(kEmbed, 65);
  const auto after = AppendAndForward(attention, cache, {{0, next}});
  std::vector<float> path_then_next = PathTokens(draft, accepted);
  path_then_next.insert(path_then_next.end(), next.begin(), next.end());
  ExpectClose(after[0],
              AlongPath(attention, layer.config, storage, prefix, path_then_next),
              "after KeepTokens", bound);
  // Against a paged cache given the path directly: the same blocks, so the same
  // bits up to the order of the packed step's sums (keys per channel too: the path's
  // block is requantised from fp32 keys in both), and where P V meets integer weights
  // (x86), a weight that order moves across a rounding boundary: one step of its code,
  // 2^-15 of its row's largest weight (1.07e-6 measured for int4 capped at avx2).
  PagedKvCache direct(layer.config, options);
  direct.AddSequence(0);
  AppendAndForward(attention, direct, {{0, prefix}});
  AppendAndForward(attention, direct, {{0, PathTokens(draft, accepted)}});
  ExpectClose(AppendAndForward(attention, direct, {{0, next}})[0], after[0],
              "after KeepTokens, against the path appended", 1e-5);
}

// Every kind of the list.
std::vector<TreeStorage> TreeStorages() {
  std::vector<TreeStorage> storages;
  for (const KvKindSpelling& kind : AllKvKinds()) {
    storages.push_back({kind.name, kind.storage, kind.scales});
  }
  return storages;
}

INSTANTIATE_TEST_SUITE_P(Storages, TokenTree, ::testing::ValuesIn(TreeStorages()),
                         [](const auto& info) { return std::string(info.param.name); });

// A 70-token forest (several roots, branches past the first 64 tokens): every token
// as decoded along its own path.
TEST(TokenTreeShapes, ForestsPastSixtyFourTokensMatchTheirPaths) {
  const TreeStorage storage{"float32", DType::kFloat32, KvScales::kPerToken};
  const OwnedLayer layer = TreeLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 8, options.max_sequences = 1;
  PagedKvCache cache(layer.config, options);
  const std::vector<float> prefix = RandomFloats(kCached * kEmbed, 66);
  const std::vector<float> draft = RandomFloats(70 * kEmbed, 67);
  std::vector<int64_t> parents(70, -1);
  for (int64_t i = 1; i < 70; ++i) {  // a root every 9 tokens, else a scattered parent
    const uint64_t scatter = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull >> 40;
    parents[i] =
        i % 9 == 0 ? -1 : static_cast<int64_t>(scatter % static_cast<uint64_t>(i));
  }
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, prefix}});
  const std::vector<float> outputs =
      AppendAndForward(attention, cache, {{0, draft, parents}})[0];
  for (int64_t i = 0; i < 70; ++i) {
    std::vector<int64_t> path;
    for (int64_t t = i; t >= 0; t = parents[t]) path.insert(path.begin(), t);
    const std::string what = "forest token " + std::to_string(i);
    ExpectClose(
        Rows(outputs, i, 1),
        AlongPath(attention, layer.config, storage, prefix, PathTokens(draft, path)),
        what.c_str(), 1e-4);
  }
}

// A 2048-token chain given as a tree: the ordinary step's outputs, and a mask of a
// few numbers per token (ancestor bits would take 2048^2 / 8 = 512 KB): depth, place
// and subtree end (24 bytes), and the positions of the step's second buffer (a step
// plans into one while keeping the other: 8 bytes).
TEST(TokenTreeShapes, LongChainCostsLinearMemory) {
  constexpr int64_t kTokens = 2048;
  const OwnedLayer layer = TreeLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 2 * kTokens / 16, options.max_sequences = 2;
  PagedKvCache cache(layer.config, options);
  const std::vector<float> tokens = RandomFloats(kTokens * kEmbed, 68);
  std::vector<int64_t> chain(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) chain[i] = i - 1;
  cache.AddSequence(0);
  cache.AddSequence(1);
  const std::vector<float> plain = AppendAndForward(attention, cache, {{0, tokens}})[0];
  const size_t plain_bytes = attention.workspace_bytes();
  const std::vector<float> tree =
      AppendAndForward(attention, cache, {{1, tokens, chain}})[0];
  ExpectClose(tree, plain, "a chain as a tree", 1e-5);
  EXPECT_LT(attention.workspace_bytes() - plain_bytes, size_t{40} * kTokens);
}

TEST(TokenTreeErrors, BadTreesAndPathsChangeNothing) {
  const OwnedLayer layer = TreeLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 4, options.max_sequences = 1;
  PagedKvCache cache(layer.config, options);
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, RandomFloats(5 * kEmbed, 66)}});
  const std::vector<float> draft = RandomFloats(3 * kEmbed, 67);
  const int64_t three = 3, zero = 0;
  cache.AppendSlots(&zero, &three, 1);
  ExpectErrorMentioning(
      [&] {
        PackedForward(attention, cache, {{0, draft, {-1, 0, 2}}});
      },
      "batch.tree_parents[2]: must be in [-1, 2)");
  const std::vector<int64_t> not_increasing = {1, 0};
  ExpectErrorMentioning([&] { cache.KeepTokens(0, 5, not_increasing.data(), 2); },
                        "kept[1] must be in [2, 3)");
  ExpectErrorMentioning([&] { cache.KeepTokens(0, 4, not_increasing.data(), 1); },
                        "first must be in [5, 8]");
  EXPECT_EQ(cache.length(0), 8);
  OwnedLayer windowed = TreeLayer();
  windowed.config.features.sliding_window = 4;
  const MultiheadAttention window_layer(windowed.config, windowed.weights);
  ExpectErrorMentioning(
      [&] {
        PackedForward(window_layer, cache, {{0, draft, {-1, 0, 1}}});
      },
      "batch.tree_parents: token trees place tokens by depth");
}

}  // namespace
}  // namespace mha::testing
