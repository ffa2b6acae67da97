// The paged KV cache: packed steps mixing prefill chunks and decodes give what one
// causal Forward over each whole sequence gives (MHA, GQA, RoPE, windows, every
// storage type and block size), and what the contiguous cache gives; Fork shares
// blocks and copies on write; Truncate rolls back; running out of blocks, or any
// bad argument, leaves the cache as it was.
#include <gtest/gtest.h>

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "src/core/attention_core.h"
#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 32;

struct PagedCase {
  const char* name;
  int64_t num_kv_heads = 4, block_size = 16;
  DType storage = DType::kFloat32;
  bool rope = false;
  int64_t window = 0;  // the layer's sliding window, and the cache's
  std::vector<int64_t> chunks = {1};
  int64_t attention_chunk = 0;  // the layer's attention_chunk_size, and the cache's
  KvScales scales = KvScales::kPerToken;
};
void PrintTo(const PagedCase& c, std::ostream* os) { *os << c.name; }

// The accuracy bounds docs/serving.md states (max error over max(1, max |output|)): bf16
// rounds keys and values to 8 bits of mantissa; int8 stores each (token, KV head)
// row as scale * q, |q| <= 127; fp8 keeps 3 (e4m3) or 2 (e5m2) bits of mantissa.
// int4 keeps 15 steps per key channel over a block and per 32 channels of a value.
// Seen here: at most 1.1e-3 (bf16), 2.9e-3 (int8) and 3.1e-2 (int4).
double Tolerance(DType storage) {
  return storage == DType::kFloat32      ? 1e-4
         : storage == DType::kFloat8E4M3 ? 0.1
         : storage == DType::kFloat8E5M2 ? 0.2
         : storage == DType::kInt4       ? 5e-2
                                         : 1e-2;
}

AttentionConfig WithFeatures(AttentionConfig config, const PagedCase& c) {
  if (c.rope) config.rotary.pairing = RotaryPairing::kHalfSplit;
  if (c.window > 0) config.features.sliding_window = c.window;
  if (c.attention_chunk > 0) config.features.attention_chunk_size = c.attention_chunk;
  return config;
}

OwnedLayer PagedLayer(const PagedCase& c) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = 8;
  spec.query_dim = kEmbed;
  OwnedLayer layer = MakeLayer(spec, 23);
  layer.config = WithFeatures(layer.config, c);
  return layer;
}

PagedKvCacheOptions Options(const PagedCase& c, int64_t num_blocks) {
  PagedKvCacheOptions options;
  options.num_blocks = num_blocks;
  options.block_size = c.block_size;
  options.max_sequences = 8;
  options.storage = c.storage;
  options.scales = c.scales;
  options.sliding_window = c.window;
  options.attention_chunk_size = c.attention_chunk;
  return options;
}

std::vector<float> Rows(const std::vector<float>& x, int64_t first, int64_t count) {
  return std::vector<float>(x.begin() + first * kEmbed,
                            x.begin() + (first + count) * kEmbed);
}

class PagedMatchesCausalForward : public ::testing::TestWithParam<PagedCase> {};

// Three sequences of different lengths join at different steps; each step packs
// the next chunk of every unfinished sequence (chunk sizes cycle per sequence), so
// prefill chunks and decodes share calls.
TEST_P(PagedMatchesCausalForward, MixedSteps) {
  const PagedCase& c = GetParam();
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  const int64_t lengths[3] = {70, 45, 130};
  std::vector<float> tokens[3], expected[3];
  for (int s = 0; s < 3; ++s) {
    tokens[s] = RandomFloats(lengths[s] * kEmbed, 50 + s);
    expected[s] = CausalForward(attention, tokens[s]);
  }
  PagedKvCache cache(layer.config, Options(c, 64));
  int64_t done[3] = {0, 0, 0};
  for (int step = 0; done[0] < lengths[0] || done[1] < lengths[1] || done[2] < lengths[2];
       ++step) {
    std::vector<Chunk> chunks;
    for (int s = 0; s < 3; ++s) {
      if (step < s || done[s] == lengths[s]) continue;  // sequence s joins at step s
      if (done[s] == 0) cache.AddSequence(s + 2);
      const int64_t count =
          std::min(lengths[s] - done[s], c.chunks[(step + s) % c.chunks.size()]);
      chunks.push_back({s + 2, Rows(tokens[s], done[s], count)});
      done[s] += count;
    }
    const auto outputs = AppendAndForward(attention, cache, chunks);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int s = static_cast<int>(chunks[i].sequence - 2);
      const int64_t count = static_cast<int64_t>(chunks[i].tokens.size()) / kEmbed;
      ExpectClose(outputs[i], Rows(expected[s], done[s] - count, count),
                  (std::string(c.name) + " sequence " + std::to_string(s)).c_str(),
                  Tolerance(c.storage));
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(cache.length(s + 2), lengths[s]);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PagedMatchesCausalForward,
    ::testing::Values(
        PagedCase{"prefill_then_decode", 4, 16, DType::kFloat32, false, 0, {37, 1, 1, 1}},
        PagedCase{"decode_only_gqa", 2, 16, DType::kFloat32, false, 0, {1}},
        PagedCase{"chunked_prefill_mqa_block32",
                  1,
                  32,
                  DType::kFloat32,
                  false,
                  0,
                  {13, 40, 1, 7}},
        PagedCase{"one_prefill_block256", 2, 256, DType::kFloat32, false, 0, {200}},
        PagedCase{"rope_gqa", 2, 16, DType::kFloat32, true, 0, {29, 1, 3, 1}},
        PagedCase{"window_releases_blocks", 2, 16, DType::kFloat32, true, 24, {9, 1, 1}},
        PagedCase{"bf16_rope", 2, 16, DType::kBFloat16, true, 0, {17, 1, 1}},
        PagedCase{"int8_gqa", 2, 16, DType::kInt8, false, 0, {33, 1, 5, 1}},
        PagedCase{"fp8_e4m3_gqa", 2, 16, DType::kFloat8E4M3, false, 0, {33, 1, 5, 1}},
        PagedCase{"fp8_e5m2_scale_free_rope_window_block32",
                  2,
                  32,
                  DType::kFloat8E5M2,
                  true,
                  40,
                  {20, 1, 1},
                  0,
                  KvScales::kNone},
        PagedCase{"int8_rope_window_block64", 2, 64, DType::kInt8, true, 40, {20, 1}},
        PagedCase{"int8_channel_keys_rope_window_block32",
                  2,
                  32,
                  DType::kInt8,
                  true,
                  40,
                  {45, 1, 1, 18, 1},
                  0,
                  KvScales::kPerChannelKeys},
        PagedCase{"int4_rope_window_block16",
                  2,
                  16,
                  DType::kInt4,
                  true,
                  40,
                  {45, 1, 1, 18, 1},
                  0,
                  KvScales::kPerChannelKeys},
        PagedCase{"attention_chunk_releases_blocks",
                  2,
                  16,
                  DType::kFloat32,
                  true,
                  0,
                  {21, 1, 1, 9, 1, 20},
                  24},
        PagedCase{"bf16_attention_chunk_and_window",
                  2,
                  16,
                  DType::kBFloat16,
                  true,
                  20,
                  {30, 1, 1, 17},
                  32}),
    [](const auto& info) { return std::string(info.param.name); });

// The same steps through the contiguous KvCache and the paged one give the same
// outputs: the storage differs, the arithmetic does not (beyond summation order).
TEST(PagedKvCache, MatchesContiguousCacheForEveryStorage) {
  const std::pair<DType, KvScales> kinds[] = {{DType::kFloat32, KvScales::kPerToken},
                                              {DType::kBFloat16, KvScales::kPerToken},
                                              {DType::kInt8, KvScales::kPerToken},
                                              {DType::kFloat8E4M3, KvScales::kPerToken},
                                              {DType::kFloat8E5M2, KvScales::kPerToken},
                                              {DType::kFloat8E4M3, KvScales::kNone},
                                              {DType::kFloat8E5M2, KvScales::kNone}};
  for (const auto& [storage, scales] : kinds) {
    PagedCase c{"contiguous", 2, 16, storage, true, 0, {}};
    c.scales = scales;
    const OwnedLayer layer = PagedLayer(c);
    const MultiheadAttention attention(layer.config, layer.weights);
    const std::vector<float> x = RandomFloats(60 * kEmbed, 9);
    KvCache contiguous(layer.config, 1, 60, storage, scales);
    PagedKvCache paged(layer.config, Options(c, 8));
    paged.AddSequence(0);
    int64_t done = 0;
    for (int64_t count : {21, 1, 1, 30, 1, 6}) {
      std::vector<float> expected(count * kEmbed);
      const std::vector<float> step = Rows(x, done, count);
      attention.ForwardWithCache(
          TensorView(step.data(), Shape{count, kEmbed}), {}, contiguous,
          MutableTensorView(expected.data(), Shape{count, kEmbed}));
      ExpectClose(AppendAndForward(attention, paged, {{0, step}})[0], expected,
                  DTypeName(storage), 1e-5);
      done += count;
    }
  }
}

TEST(PagedKvCache, ForkSharesBlocksAndCopiesOnWrite) {
  PagedCase c{"fork", 2, 16, DType::kFloat32, true, 0, {}};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> prompt = RandomFloats(40 * kEmbed, 1);  // 2.5 blocks
  PagedKvCache cache(layer.config, Options(c, 16));
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, prompt}});
  cache.Fork(0, 1);
  cache.Fork(0, 2);
  PagedKvCacheStats stats = cache.stats();
  EXPECT_EQ(stats.used_blocks, 3);  // one copy of the prompt
  EXPECT_EQ(stats.shared_blocks, 3);
  EXPECT_EQ(stats.sequences, 3);
  // Each branch continues with its own tokens; the partial third block is copied
  // by the first two writers, the last one writes in place.
  std::vector<float> continuation[3];
  std::vector<Chunk> chunks;
  for (int s = 0; s < 3; ++s) {
    continuation[s] = RandomFloats(5 * kEmbed, 10 + s);
    chunks.push_back({s, continuation[s]});
  }
  const auto outputs = AppendAndForward(attention, cache, chunks);
  for (int s = 0; s < 3; ++s) {
    std::vector<float> whole = prompt;
    whole.insert(whole.end(), continuation[s].begin(), continuation[s].end());
    ExpectClose(outputs[s], Rows(CausalForward(attention, whole), 40, 5), "branch");
  }
  stats = cache.stats();
  EXPECT_EQ(stats.used_blocks, 2 + 3);  // two shared full blocks, three private
  EXPECT_EQ(stats.shared_blocks, 2);
  for (int s = 0; s < 3; ++s) cache.RemoveSequence(s);
  EXPECT_EQ(cache.stats().free_blocks, 16);
}

TEST(PagedKvCache, TruncateRollsBackEvenInsideSharedBlocks) {
  PagedCase c{"truncate", 2, 16, DType::kFloat32, false, 0, {}};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(30 * kEmbed, 2);
  const std::vector<float> draft = RandomFloats(6 * kEmbed, 3);
  PagedKvCache cache(layer.config, Options(c, 8));
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, Rows(x, 0, 24)}});
  cache.Fork(0, 1);
  AppendAndForward(attention, cache, {{0, draft}});  // speculative tokens, rejected
  cache.Truncate(0, 20);                             // into the block sequence 1 shares
  EXPECT_EQ(cache.length(0), 20);
  const std::vector<float> expected = CausalForward(attention, x);
  ExpectClose(AppendAndForward(attention, cache, {{0, Rows(x, 20, 10)}})[0],
              Rows(expected, 20, 10), "truncated sequence");
  ExpectClose(AppendAndForward(attention, cache, {{1, Rows(x, 24, 6)}})[0],
              Rows(expected, 24, 6), "the sequence sharing its blocks");
  try {  // an unwindowed cache's message speaks of lengths only
    cache.Truncate(0, 31);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "mha: PagedKvCache::Truncate: length must be in [0, 30], got 31");
  }
}

TEST(PagedKvCache, RunningOutOfBlocksChangesNothing) {
  PagedCase c{"out_of_blocks", 2, 16, DType::kFloat32, false, 0, {}};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(60 * kEmbed, 4);
  PagedKvCache cache(layer.config, Options(c, 3));
  cache.AddSequence(0);
  cache.AddSequence(1);
  AppendAndForward(attention, cache, {{0, Rows(x, 0, 20)}, {1, Rows(x, 0, 10)}});
  const PagedKvCacheStats before = cache.stats();
  EXPECT_EQ(before.free_blocks, 0);
  // Sequence 1 fits in its block, sequence 0 needs a third: the whole call fails.
  const int64_t ids[2] = {1, 0}, counts[2] = {2, 13};
  EXPECT_THROW(cache.AppendSlots(ids, counts, 2), OutOfBlocksError);
  EXPECT_EQ(cache.length(0), 20);
  EXPECT_EQ(cache.length(1), 10);
  EXPECT_EQ(cache.stats().used_blocks, before.used_blocks);
  cache.RemoveSequence(1);
  const std::vector<float> expected = CausalForward(attention, Rows(x, 0, 33));
  ExpectClose(AppendAndForward(attention, cache, {{0, Rows(x, 20, 13)}})[0],
              Rows(expected, 20, 13), "after the failed call");
}

// Decodes 300 tokens one by one through a cache of `pool_blocks` blocks for case c's
// layer, each step against the causal forward, with at most `max_used` blocks in use;
// then checks `after` on the cache.
template <class After>
void DecodeInBoundedBlocks(const PagedCase& c, int64_t pool_blocks, int64_t max_used,
                           const After& after) {
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(300 * kEmbed, 5);
  const std::vector<float> expected = CausalForward(attention, x);
  PagedKvCache cache(layer.config, Options(c, pool_blocks));
  cache.AddSequence(0);
  for (int64_t t = 0; t < 300; ++t) {
    ExpectClose(AppendAndForward(attention, cache, {{0, Rows(x, t, 1)}})[0],
                Rows(expected, t, 1), c.name);
    ASSERT_LE(cache.stats().used_blocks, max_used);
  }
  after(cache);
}

TEST(PagedKvCache, WindowKeepsMemoryBounded) {
  const PagedCase c{"windowed decode", 2, 16, DType::kFloat32, true, 32, {}};
  DecodeInBoundedBlocks(c, 4, 3, [](PagedKvCache& cache) {  // 64 tokens of room
    EXPECT_THROW(cache.Truncate(0, 100), Error);  // those tokens left the window
  });
}

// Llama 4's chunked layers: a sequence holds its current chunk's blocks only, and may
// not be truncated back into a chunk whose blocks are gone.
TEST(PagedKvCache, AttentionChunkKeepsMemoryBounded) {
  const PagedCase c{"chunked decode", 2, 16, DType::kFloat32, true, 0, {}, 32};
  DecodeInBoundedBlocks(c, 3, 2, [](PagedKvCache& cache) {  // 48 tokens of room
    ExpectErrorMentioning([&] { cache.Truncate(0, 287); },
                          "length must be in [288, 300] (tokens before 288 left");
    cache.Truncate(0, 288);
    EXPECT_EQ(cache.length(0), 288);
  });
}

// A cache that drops chunks serves only layers whose chunks tile its own.
TEST(PagedKvCache, LayerChunkMustDivideTheCachesChunk) {
  PagedCase c{"chunk", 2, 16, DType::kFloat32, false, 0, {}, 8};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  c.attention_chunk = 20;  // the cache's: 8 does not divide it
  PagedKvCache cache(layer.config, Options(c, 4));
  cache.AddSequence(0);
  const std::vector<float> x = RandomFloats(kEmbed, 7);
  const int64_t id = 0, count = 1;
  cache.AppendSlots(&id, &count, 1);
  ExpectErrorMentioning(
      [&] {
        PackedForward(attention, cache, {{0, x}}, 0, {});
      },
      "cache: keeps attention chunks of 20 tokens, this layer's "
      "attention_chunk_size is 8 (must be > 0 and divide the cache's)");
  EXPECT_EQ(cache.length(0), 1);  // the slot appended before the refused step
}

TEST(PagedKvCache, MultiLayerPoolSharesBlockIds) {
  PagedCase c{"layers", 2, 16, DType::kBFloat16, true, 0, {}};
  const OwnedLayer first = PagedLayer(c);
  OwnedLayer second_layer = first;
  second_layer = MakeLayer(LayerSpec{4, 8, 2, kEmbed}, 77);
  second_layer.config = WithFeatures(second_layer.config, c);
  const MultiheadAttention layer0(first.config, first.weights);
  const MultiheadAttention layer1(second_layer.config, second_layer.weights);
  PagedKvCacheOptions options = Options(c, 8);
  options.num_layers = 2;
  PagedKvCache cache(first.config, options);
  cache.AddSequence(0);
  const std::vector<float> x = RandomFloats(40 * kEmbed, 6);
  std::vector<float> hidden0, hidden1;
  for (int64_t count : {19, 1, 20}) {
    const std::vector<float> step = Rows(x, hidden0.size() / kEmbed, count);
    const auto out0 = AppendAndForward(layer0, cache, {{0, step}}, 0)[0];
    const auto out1 = AppendAndForward(layer1, cache, {{0, out0}}, 1)[0];
    hidden0.insert(hidden0.end(), out0.begin(), out0.end());
    hidden1.insert(hidden1.end(), out1.begin(), out1.end());
  }
  ExpectClose(hidden0, CausalForward(layer0, x), "layer 0", 1e-2);
  ExpectClose(hidden1, CausalForward(layer1, CausalForward(layer0, x)), "layer 1", 2e-2);
}

// Flash-decoding: one sequence decoding over thousands of keys has too few tasks
// for the threads, so its keys are split and merged by log-sum-exp; the sink must
// count once. Checked against one causal Forward.
TEST(PagedKvCache, LongDecodeSplitsKeysAndMergesThem) {
  PagedCase c{"long", 2, 64, DType::kFloat32, true, 0, {}};
  OwnedLayer layer = PagedLayer(c);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  layer.weights.sinks = TensorView(sinks.data(), Shape{4});
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> x = RandomFloats(2103 * kEmbed, 8);
  const std::vector<float> expected = CausalForward(attention, x);
  PagedKvCache cache(layer.config, Options(c, 40));
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, Rows(x, 0, 2100)}});
  ForwardOptions two_threads;
  two_threads.num_threads = 2;
  for (int64_t t = 2100; t < 2103; ++t) {
    ExpectClose(
        AppendAndForward(attention, cache, {{0, Rows(x, t, 1)}}, 0, two_threads)[0],
        Rows(expected, t, 1), "split decode");
  }
}

TEST(PagedKvCache, BadArgumentsNameThemselvesAndChangeNothing) {
  PagedCase c{"errors", 2, 16, DType::kFloat32, false, 0, {}};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options = Options(c, 4);
  options.block_size = 24;
  ExpectErrorMentioning([&] { PagedKvCache bad(layer.config, options); }, "block_size");
  options = Options(c, 0);
  ExpectErrorMentioning([&] { PagedKvCache bad(layer.config, options); }, "num_blocks");
  options = Options(c, INT32_MAX);  // 2^31 blocks of 16 tokens: far beyond 2^47 bytes
  options.num_layers = 4096;
  ExpectErrorMentioning([&] { PagedKvCache bad(layer.config, options); },
                        "num_layers 4096 x num_blocks 2147483647 x block_size 16");
  PagedKvCache cache(layer.config, Options(c, 4));
  cache.AddSequence(0);
  ExpectErrorMentioning([&] { cache.AddSequence(0); }, "already exists");
  ExpectErrorMentioning([&] { cache.AddSequence(8); }, "sequence must be in [0, 8)");
  ExpectErrorMentioning([&] { cache.Fork(3, 1); }, "sequence 3 does not exist");
  const int64_t ids[2] = {0, 0}, counts[2] = {1, 1};
  ExpectErrorMentioning([&] { cache.AppendSlots(ids, counts, 2); }, "appears twice");
  const std::vector<float> x = RandomFloats(4 * kEmbed, 7);
  AppendAndForward(attention, cache, {{0, x}});
  std::vector<float> out(4 * kEmbed, -3.0f);
  const int64_t one_id[1] = {0}, bad_starts[2] = {0, 5}, starts[2] = {0, 4};
  ExpectErrorMentioning(
      [&] {
        attention.ForwardPacked(TensorView(x.data(), Shape{4, kEmbed}),
                                {TensorView(one_id, DType::kInt64, Shape{1}),
                                 TensorView(bad_starts, DType::kInt64, Shape{2})},
                                cache, 0,
                                MutableTensorView(out.data(), Shape{4, kEmbed}));
      },
      "batch.query_start_loc[1]");
  // The most negative start is refused before anything subtracts it (UBSan).
  const int64_t two_ids[2] = {0, 1}, lowest_starts[3] = {0, 1, INT64_MIN};
  cache.AddSequence(1);
  ExpectErrorMentioning(
      [&] {
        attention.ForwardPacked(TensorView(x.data(), Shape{4, kEmbed}),
                                {TensorView(two_ids, DType::kInt64, Shape{2}),
                                 TensorView(lowest_starts, DType::kInt64, Shape{3})},
                                cache, 0,
                                MutableTensorView(out.data(), Shape{4, kEmbed}));
      },
      "batch.query_start_loc[2]: must be in [1, 4], got -9223372036854775808");
  cache.RemoveSequence(1);
  ExpectErrorMentioning(
      [&] {
        attention.ForwardPacked(TensorView(x.data(), Shape{4, kEmbed}),
                                {TensorView(one_id, DType::kInt64, Shape{1}),
                                 TensorView(starts, DType::kInt64, Shape{2})},
                                cache, 1,
                                MutableTensorView(out.data(), Shape{4, kEmbed}));
      },
      "layer: must be in [0, 1)");
  ExpectErrorMentioning(
      [&] {  // 4 cached tokens, but 8 claimed new: AppendSlots was not called
        const int64_t eight[2] = {0, 8};
        const std::vector<float> y(8 * kEmbed);
        std::vector<float> o(8 * kEmbed);
        attention.ForwardPacked(TensorView(y.data(), Shape{8, kEmbed}),
                                {TensorView(one_id, DType::kInt64, Shape{1}),
                                 TensorView(eight, DType::kInt64, Shape{2})},
                                cache, 0, MutableTensorView(o.data(), Shape{8, kEmbed}));
      },
      "call cache.AppendSlots first");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -3.0f; }));
  EXPECT_EQ(cache.length(0), 4);
  PagedCase windowed = c;
  windowed.window = 16;
  PagedKvCache window_cache(layer.config, Options(windowed, 4));
  window_cache.AddSequence(0);
  ExpectErrorMentioning(
      [&] {
        AppendAndForward(attention, window_cache, {{0, x}});
      },
      "sliding window of 16");
}

// A packed step may write only the slots the last AppendSlots made: more tokens
// would write into blocks still shared with a fork (the parent's next output was
// wrong by 3.6).
// Sequence 0 holds the first `prefix` of `tokens` random tokens; sequence 1 is its fork.
struct ForkedPrefix {
  ForkedPrefix(int64_t num_blocks, int64_t prefix, int64_t tokens, uint32_t seed)
      : layer(PagedLayer(PagedCase{"fp32"})),
        attention(layer.config, layer.weights),
        cache(layer.config, Options(PagedCase{"fp32"}, num_blocks)),
        x(RandomFloats(tokens * kEmbed, seed)) {
    cache.AddSequence(0);
    AppendAndForward(attention, cache, {{0, Rows(x, 0, prefix)}});
    cache.Fork(0, 1);
  }
  OwnedLayer layer;
  MultiheadAttention attention;
  PagedKvCache cache;
  std::vector<float> x;
};

TEST(PagedKvCache, PackedStepBeyondItsAppendedSlotsIsRefused) {
  ForkedPrefix f(8, 20, 22, 11);
  const MultiheadAttention& attention = f.attention;
  PagedKvCache& cache = f.cache;
  const std::vector<float>& x = f.x;
  const int64_t child = 1, one = 1;
  cache.AppendSlots(&child, &one, 1);
  ExpectErrorMentioning(
      [&] {
        PackedForward(attention, cache, {{1, Rows(x, 0, 21)}});
      },
      "has 21 new tokens but its last cache.AppendSlots made room for 1");
  ExpectErrorMentioning(
      [&] {
        PackedForward(attention, cache, {{0, Rows(x, 19, 1)}});
      },
      "made room for 0");
  PackedForward(attention, cache, {{1, Rows(x, 20, 1)}});
  const auto next = AppendAndForward(attention, cache, {{0, Rows(x, 20, 1)}});
  ExpectClose(next[0], Rows(CausalForward(attention, Rows(x, 0, 21)), 20, 1),
              "parent after the refused step");
}

// Two windowed forks sharing every block: the blocks both release in one call come
// free, so their growth fits the pool.
TEST(PagedKvCache, WindowReleasesSharedByForksCountAsFree) {
  PagedCase c{"window"};
  c.window = 16;
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCache cache(layer.config, Options(c, 4));
  const std::vector<float> x = RandomFloats(34 * kEmbed, 12);
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, Rows(x, 0, 32)}});  // blocks 0 and 1, full
  cache.Fork(0, 1);
  EXPECT_EQ(cache.stats().free_blocks, 2);
  // Each needs a new block (2) and releases block 0 (shared: freed by both).
  const auto out =
      AppendAndForward(attention, cache, {{0, Rows(x, 32, 1)}, {1, Rows(x, 32, 1)}});
  EXPECT_EQ(cache.stats().free_blocks, 1);
  const auto expected = Rows(CausalForward(attention, Rows(x, 0, 33)), 32, 1);
  ExpectClose(out[0], expected, "parent");
  ExpectClose(out[1], expected, "child");
  // Both write into their shared partial block: one copy, the other keeps it.
  cache.Fork(0, 2);
  const auto again =
      AppendAndForward(attention, cache, {{0, Rows(x, 33, 1)}, {2, Rows(x, 33, 1)}});
  EXPECT_EQ(cache.stats().free_blocks, 0);
  ExpectClose(again[1], Rows(CausalForward(attention, Rows(x, 0, 34)), 33, 1), "fork");
}

// Truncating into a shared block with a full pool: its own tail block comes free
// first and takes the copy.
TEST(PagedKvCache, TruncateIntoASharedBlockUsesItsFreedTail) {
  ForkedPrefix f(4, 24, 40, 13);
  const MultiheadAttention& attention = f.attention;
  PagedKvCache& cache = f.cache;
  const std::vector<float>& x = f.x;
  // The child copies the shared partial block and takes one more: the pool is full.
  AppendAndForward(attention, cache, {{1, Rows(x, 24, 16)}});
  EXPECT_EQ(cache.stats().free_blocks, 0);
  cache.Truncate(1, 10);  // its 2 private blocks free, 1 taken by the copy
  EXPECT_EQ(cache.stats().free_blocks, 1);
  const auto out = AppendAndForward(attention, cache, {{1, Rows(x, 10, 1)}});
  ExpectClose(out[0], Rows(CausalForward(attention, Rows(x, 0, 11)), 10, 1), "child");
}

// Many ids: duplicates found at any distance (checked in linear time), and a packed
// call naming more sequences than the cache holds is refused before its workspace
// is sized from that count.
TEST(PagedKvCache, ManyIdsAreCheckedWithoutQuadraticTimeOrMemory) {
  const PagedCase c{"fp32"};
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options = Options(c, 4);
  options.max_sequences = 1 << 18;
  PagedKvCache cache(layer.config, options);
  std::vector<int64_t> ids(options.max_sequences), counts(ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(i);
    cache.AddSequence(ids[i]);
  }
  ids.back() = 0;
  ExpectErrorMentioning(
      [&] {
        cache.AppendSlots(ids.data(), counts.data(), static_cast<int64_t>(ids.size()));
      },
      "sequence 0 appears twice");
  for (size_t i = 2; i < ids.size(); ++i) cache.RemoveSequence(static_cast<int64_t>(i));
  const int64_t huge = int64_t{1} << 26;
  const std::vector<int64_t> starts(2, 0);
  const float none = 0.0f;
  ExpectErrorMentioning(
      [&] {
        attention.ForwardPacked(
            TensorView(&none, Shape{0, kEmbed}),
            {TensorView(ids.data(), DType::kInt64, Shape{huge}),
             TensorView(starts.data(), DType::kInt64, Shape{huge + 1})},
            cache, 0, MutableTensorView(nullptr, Shape{0, kEmbed}));
      },
      "67108864 sequences, but the cache holds 2");
  EXPECT_LT(attention.workspace_bytes(), size_t{1} << 20);
}

// Keys per channel hold each sequence's partial last block in fp32 outside the pool:
// counted in stats() while held, and given back with the sequence, so ids named by
// request (each used once) do not grow the process by a residual each.
TEST(PagedKvCache, PerChannelKeyResidualIsCountedAndReleasedWithItsSequence) {
  PagedCase c{"int8_channel_keys", 4, 256, DType::kInt8};
  c.scales = KvScales::kPerChannelKeys;
  const OwnedLayer layer = PagedLayer(c);
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options = Options(c, 4);
  options.num_layers = 8;
  options.max_sequences = 400;
  PagedKvCache cache(layer.config, options);
  const int64_t residual = 8 * 4 * 256 * 8 * int64_t{sizeof(float)};
  const std::vector<float> token = RandomFloats(kEmbed, 2);
  const auto in_use = [] { return mallinfo2().uordblks; };
  cache.AddSequence(0);
  AppendAndForward(attention, cache, {{0, token}});
  EXPECT_EQ(cache.stats().residual_bytes, residual);
  cache.RemoveSequence(0);
  EXPECT_EQ(cache.stats().residual_bytes, 0);
  const size_t before = in_use();
  for (int64_t id = 1; id < options.max_sequences; ++id) {
    cache.AddSequence(id);
    AppendAndForward(attention, cache, {{id, token}});
    cache.RemoveSequence(id);
  }
  // 399 residuals kept would be 26 MB; a sanitizer's allocator reports 0 here.
  EXPECT_LT(in_use(), before + static_cast<size_t>(4 * residual))
      << "residuals kept after RemoveSequence";
}

}  // namespace
}  // namespace mha::testing
