// Once a shape has been seen, no call allocates anything of its own: Forward, the
// attention-core API with every feature, cached decode steps and packed steps over a
// paged cache. oneDNN 2.6 still allocates inside every primitive execution (its
// per-call argument map, and thread partitions when threaded), which no caller can
// avoid: every allocation made during a repeated call must have a libdnnl frame on its
// stack. The core API runs no oneDNN: it must allocate nothing at all.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "tests/called_from_onednn.h"

#include "tests/layer/latent_test_util.h"
#include "tests/test_util.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_total{0}, g_outside_onednn{0}, g_bytes{0};
// The sizes of the first allocations counted, in order.
constexpr int kSizesKept = 64;
std::atomic<size_t> g_sizes[kSizesKept];
thread_local bool t_inside_hook = false;

void Count(size_t size) {
  if (!g_counting || t_inside_hook) return;
  t_inside_hook = true;
  const long index = g_total++;
  if (index < kSizesKept) g_sizes[index] = size;
  g_bytes += static_cast<long>(size);
  if (!mha::testing::CalledFromOneDnn()) ++g_outside_onednn;
  t_inside_hook = false;
}

void* Allocate(size_t size) {
  Count(size);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(size_t size) { return Allocate(size); }
void* operator new[](size_t size) { return Allocate(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  Count(size);
  return std::malloc(size ? size : 1);
}
void* operator new(size_t size, std::align_val_t align) {
  Count(size);
  const size_t alignment = static_cast<size_t>(align);
  if (void* p =
          std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace mha::testing {
namespace {

struct AllocationCase {
  const char* name;
  int64_t batch, query_len, key_len;
  bool causal, weights, chunked;
  int threads;
};
void PrintTo(const AllocationCase& c, std::ostream* os) { *os << c.name; }

class Allocations : public ::testing::TestWithParam<AllocationCase> {};

TEST_P(Allocations, RepeatedForwardAllocatesOnlyInsideOneDnn) {
  const AllocationCase& c = GetParam();
  LayerSpec spec;
  spec.num_heads = 4;
  spec.head_dim = 16;
  spec.query_dim = 64;
  const OwnedLayer layer = MakeLayer(spec, 3);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> query = RandomFloats(c.batch * c.query_len * 64, 1);
  const std::vector<float> key = RandomFloats(c.batch * c.key_len * 64, 2);
  AttentionInputs inputs{
      TensorView(query.data(), Shape{c.batch, c.query_len, 64}), {}, {}};
  if (c.key_len != c.query_len) {
    inputs.key = inputs.value = TensorView(key.data(), Shape{c.batch, c.key_len, 64});
  }
  AttentionMasks masks;
  masks.is_causal = c.causal;
  std::vector<float> out(c.batch * c.query_len * 64),
      probs(c.batch * c.query_len * c.key_len);
  const AttentionOutputs outputs{
      MutableTensorView(out.data(), Shape{c.batch, c.query_len, 64}),
      c.weights ? MutableTensorView(probs.data(), Shape{c.batch, c.query_len, c.key_len})
                : MutableTensorView()};
  ForwardOptions options;
  options.num_threads = c.threads;
  if (c.chunked) options.workspace_budget_bytes = 64 * 1024;
  void* warm[1];
  backtrace(warm, 1);  // backtrace loads its unwinder on first use
  for (int i = 0; i < 2; ++i) attention.Forward(inputs, masks, outputs, options);

  g_total = g_outside_onednn = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) attention.Forward(inputs, masks, outputs, options);
  g_counting = false;
  EXPECT_EQ(g_outside_onednn, 0) << c.name << ": " << g_total << " allocations in all";
  EXPECT_GT(g_total, 0) << "the counting hook saw nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Allocations,
    ::testing::Values(
        AllocationCase{"self", 2, 100, 100, false, false, false, 2},
        AllocationCase{"self_one_thread", 2, 100, 100, true, false, false, 1},
        AllocationCase{"small_rows", 1, 20, 20, false, false, false, 1},
        AllocationCase{"self_weights", 2, 100, 100, false, true, false, 2},
        AllocationCase{"cross", 2, 90, 130, false, false, false, 2},
        AllocationCase{"chunked_causal", 2, 130, 130, true, false, true, 2}),
    [](const auto& info) { return std::string(info.param.name); });

// Counts the allocations of 5 calls of `run` after 2 warm-up calls.
template <class Run>
void ExpectNoAllocationsOutsideOneDnn(const char* what, const Run& run) {
  void* warm[1];
  backtrace(warm, 1);  // backtrace loads its unwinder on first use
  for (int i = 0; i < 2; ++i) run();
  g_total = g_outside_onednn = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) run();
  g_counting = false;
  EXPECT_EQ(g_outside_onednn, 0) << what << ": " << g_total << " allocations in all";
}

// The core API with rotary embeddings, ALiBi, sinks, a window and log-sum-exp, on 1
// and 2 threads.
TEST(Allocations, CoreCallWithEveryFeatureAllocatesNothing) {
  const int64_t b = 2, h = 4, h_kv = 2, sq = 9, sk = 70, d = 32;
  const std::vector<float> q = RandomFloats(b * h * sq * d, 1),
                           kv = RandomFloats(b * h_kv * sk * d, 2);
  std::vector<float> out(q.size()), lse(b * h * sq);
  const std::vector<float> sinks = RandomFloats(h, 3);
  RotaryConfig rope;
  rope.pairing = RotaryPairing::kHalfSplit;
  rope.max_positions = 128;
  const RotaryEmbedding rotary(rope, d);
  CoreOptions options;
  options.features.alibi = true;
  options.features.sliding_window = 40;
  options.features.softcap = 30.0f;
  options.sinks = TensorView(sinks.data(), Shape{h});
  options.rotary = &rotary;
  const std::vector<float> norm_weights = RandomFloats(d, 4);
  options.features.qk_norm = QkNorm{};
  options.query_norm_weight = options.key_norm_weight =
      TensorView(norm_weights.data(), Shape{d});
  AttentionMasks masks;
  masks.is_causal = true;
  masks.causal_alignment = CausalAlignment::kBottomRight;
  for (const int threads : {1, 2}) {
    options.num_threads = threads;
    ExpectNoAllocationsOutsideOneDnn("core", [&] {
      ScaledDotProductAttention(
          {q.data(), Shape{b, h, sq, d}}, {kv.data(), Shape{b, h_kv, sk, d}},
          {kv.data(), Shape{b, h_kv, sk, d}}, masks, {out.data(), Shape{b, h, sq, d}},
          options, MutableTensorView(lse.data(), Shape{b, h, sq}));
    });
    EXPECT_EQ(g_total, 0) << "the core API runs no oneDNN";
  }
}

OwnedLayer DecoderLayer() {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  spec.query_dim = 64;
  OwnedLayer layer = MakeLayer(spec, 4);
  layer.config.rotary.pairing = RotaryPairing::kHalfSplit;
  layer.config.features.sliding_window = 24;
  layer.config.features.alibi = true;
  return layer;
}

// Decode steps through a contiguous cache of every storage kind.
TEST(Allocations, CachedDecodeStepsAllocateOnlyInsideOneDnn) {
  const OwnedLayer layer = DecoderLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> prompt = RandomFloats(2 * 20 * 64, 5),
                           token = RandomFloats(2 * 64, 6);
  std::vector<float> out(2 * 20 * 64);
  for (const DType storage : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    KvCache cache(layer.config, 2, 64, storage);
    attention.ForwardWithCache(TensorView(prompt.data(), Shape{2, 20, 64}), {}, cache,
                               MutableTensorView(out.data(), Shape{2, 20, 64}));
    ExpectNoAllocationsOutsideOneDnn(DTypeName(storage), [&] {
      attention.ForwardWithCache(TensorView(token.data(), Shape{2, 1, 64}), {}, cache,
                                 MutableTensorView(out.data(), Shape{2, 1, 64}));
    });
  }
}

// Packed steps (AppendSlots, then ForwardPacked) of two sequences over a paged cache,
// within their current blocks.
TEST(Allocations, PackedStepsAllocateOnlyInsideOneDnn) {
  const OwnedLayer layer = DecoderLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 16;
  options.max_sequences = 4;
  PagedKvCache cache(layer.config, options);
  const std::vector<float> prompt = RandomFloats(2 * 33 * 64, 7),
                           tokens = RandomFloats(2 * 64, 8);
  std::vector<float> out(2 * 33 * 64);
  const int64_t ids[2] = {0, 1}, prompt_counts[2] = {33, 33}, ones[2] = {1, 1};
  const int64_t prompt_starts[3] = {0, 33, 66}, starts[3] = {0, 1, 2};
  for (const int64_t id : ids) cache.AddSequence(id);
  cache.AppendSlots(ids, prompt_counts, 2);
  attention.ForwardPacked(TensorView(prompt.data(), Shape{66, 64}),
                          {TensorView(ids, DType::kInt64, Shape{2}),
                           TensorView(prompt_starts, DType::kInt64, Shape{3})},
                          cache, 0, MutableTensorView(out.data(), Shape{66, 64}));
  const PackedBatch decode{TensorView(ids, DType::kInt64, Shape{2}),
                           TensorView(starts, DType::kInt64, Shape{3})};
  const auto decode_step = [&] {
    cache.AppendSlots(ids, ones, 2);
    attention.ForwardPacked(TensorView(tokens.data(), Shape{2, 64}), decode, cache, 0,
                            MutableTensorView(out.data(), Shape{2, 64}));
  };
  ExpectNoAllocationsOutsideOneDnn("packed", decode_step);
  // A step planned once for the layers, kept and planned again each step.
  PackedStep step;
  const auto planned_step = [&] {
    cache.AppendSlots(ids, ones, 2);
    step.Plan(cache, decode);
    for (int l = 0; l < 2; ++l) {
      attention.ForwardPacked(TensorView(tokens.data(), Shape{2, 64}), step, 0,
                              MutableTensorView(out.data(), Shape{2, 64}));
    }
  };
  ExpectNoAllocationsOutsideOneDnn("planned step", planned_step);
}

// MLA's decode steps through a KvCache and its packed steps over a latent paged
// cache, on 2 threads.
TEST(Allocations, LatentStepsAllocateOnlyInsideOneDnn) {
  const LatentAttentionConfig config = SmallLatentConfig(/*q_lora_rank=*/24);
  const LatentWeightsForTest weights(config);
  const MultiheadLatentAttention attention(config, weights.views);
  ForwardOptions options;
  options.num_threads = 2;
  const std::vector<float> prompt = RandomFloats(2 * 20 * kHidden, 5),
                           token = RandomFloats(2 * kHidden, 6);
  std::vector<float> out(prompt.size());
  KvCache cache(config, 2, 64);
  attention.ForwardWithCache(TensorView(prompt.data(), Shape{2, 20, kHidden}), cache,
                             MutableTensorView(out.data(), Shape{2, 20, kHidden}),
                             options);
  ExpectNoAllocationsOutsideOneDnn("latent decode", [&] {
    attention.ForwardWithCache(TensorView(token.data(), Shape{2, 1, kHidden}), cache,
                               MutableTensorView(out.data(), Shape{2, 1, kHidden}),
                               options);
  });
  PagedKvCacheOptions paged_options;
  paged_options.num_blocks = 16;
  paged_options.max_sequences = 2;
  PagedKvCache paged(config, paged_options);
  const int64_t ids[2] = {0, 1}, prompt_counts[2] = {20, 20}, ones[2] = {1, 1};
  const int64_t prompt_starts[3] = {0, 20, 40}, starts[3] = {0, 1, 2};
  for (const int64_t id : ids) paged.AddSequence(id);
  paged.AppendSlots(ids, prompt_counts, 2);
  attention.ForwardPacked(TensorView(prompt.data(), Shape{40, kHidden}),
                          {TensorView(ids, DType::kInt64, Shape{2}),
                           TensorView(prompt_starts, DType::kInt64, Shape{3})},
                          paged, 0, MutableTensorView(out.data(), Shape{40, kHidden}),
                          options);
  const auto latent_step = [&] {
    paged.AppendSlots(ids, ones, 2);
    attention.ForwardPacked(TensorView(token.data(), Shape{2, kHidden}),
                            {TensorView(ids, DType::kInt64, Shape{2}),
                             TensorView(starts, DType::kInt64, Shape{3})},
                            paged, 0, MutableTensorView(out.data(), Shape{2, kHidden}),
                            options);
  };
  ExpectNoAllocationsOutsideOneDnn("latent packed", latent_step);
}

// Creating a paged cache allocates its pool first (one too big for memory fails
// before any bookkeeping is filled), then 8 bytes per block and chunk pointers for
// the ids: per-id state is made as ids are used, not 88 bytes x max_sequences.
TEST(Allocations, PagedCacheCreationAllocatesThePoolFirstAndLittleElse) {
  const OwnedLayer layer = DecoderLayer();
  PagedKvCacheOptions options;
  options.num_blocks = 1 << 16;
  options.max_sequences = int64_t{1} << 24;
  g_total = g_bytes = 0;
  g_counting = true;
  std::optional<PagedKvCache> cache(std::in_place, layer.config, options);
  g_counting = false;
  const long pool_bytes = static_cast<long>(options.num_blocks) *
                          static_cast<long>(cache->stats().bytes_per_block);
  EXPECT_LT(g_bytes, pool_bytes + (long{1} << 20) + 8 * options.num_blocks)
      << "pool " << pool_bytes << " bytes";
  // The bookkeeping's first vector is 4 bytes per block; the pool's are far larger.
  const size_t bookkeeping = 4 * static_cast<size_t>(options.num_blocks);
  int first_large = 0;
  while (first_large < kSizesKept && first_large < g_total &&
         g_sizes[first_large] < bookkeeping) {
    ++first_large;
  }
  ASSERT_LT(first_large, g_total);
  EXPECT_GT(g_sizes[first_large], 16 * bookkeeping) << "bookkeeping before the pool";
}

// A cross-attention decoder step over a projected memory, and projecting it again.
TEST(Allocations, CrossAttentionStepsAllocateOnlyInsideOneDnn) {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.head_dim = 16;
  spec.query_dim = 64;
  const OwnedLayer layer = MakeLayer(spec, 9);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> memory = RandomFloats(2 * 30 * 64, 10),
                           query = RandomFloats(2 * 64, 11);
  std::vector<float> out(2 * 64);
  KvCache cache(layer.config, 2, 30);
  ExpectNoAllocationsOutsideOneDnn("cross", [&] {
    attention.ProjectMemory(TensorView(memory.data(), Shape{2, 30, 64}), {}, cache);
    attention.ForwardCrossAttention(TensorView(query.data(), Shape{2, 1, 64}), cache,
                                    MutableTensorView(out.data(), Shape{2, 1, 64}));
  });
}

}  // namespace
}  // namespace mha::testing
