// One layer (MHA or MLA) shared by several request threads, each with its own inputs
// and KV cache (or its own sequences of one shared paged cache), gives exactly the
// serial results; and calls from inside the caller's own
// OpenMP parallel region run on the calling thread (no nested teams). Also built
// with ThreadSanitizer in CI.
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>

#include "src/base/parallel_for.h"
#include "tests/layer/latent_test_util.h"
#include "tests/cache/paged_test_util.h"

namespace mha::testing {
namespace {

constexpr int64_t kEmbed = 32, kLength = 19;
constexpr int kRequests = 4;

struct Request {
  std::vector<float> input = RandomFloats(2 * kLength * kEmbed, 40);
  std::vector<float> output = std::vector<float>(2 * kLength * kEmbed);
  std::vector<float> decoded = std::vector<float>(2 * kLength * kEmbed);
};

OwnedLayer SharedLayer() {
  LayerSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 8;
  spec.query_dim = kEmbed;
  return MakeLayer(spec, 17);
}

// One request: a causal forward, then the same tokens decoded through a cache.
void Serve(const MultiheadAttention& attention, Request& request, uint32_t seed,
           int num_threads = 1) {
  request.input = RandomFloats(2 * kLength * kEmbed, seed);
  AttentionMasks masks;
  masks.is_causal = true;
  ForwardOptions options;
  options.num_threads = num_threads;
  attention.Forward(
      {TensorView(request.input.data(), Shape{2, kLength, kEmbed}), {}, {}}, masks,
      {MutableTensorView(request.output.data(), Shape{2, kLength, kEmbed}), {}}, options);
  KvCache cache(attention.config(), 2, kLength);
  for (int64_t t = 0; t < kLength; ++t) {
    float token[2 * kEmbed], out[2 * kEmbed];
    for (int b = 0; b < 2; ++b) {
      std::copy_n(request.input.begin() + (b * kLength + t) * kEmbed, kEmbed,
                  token + b * kEmbed);
    }
    attention.ForwardWithCache(TensorView(token, Shape{2, 1, kEmbed}), {}, cache,
                               MutableTensorView(out, Shape{2, 1, kEmbed}), options);
    for (int b = 0; b < 2; ++b) {
      std::copy_n(out + b * kEmbed, kEmbed,
                  request.decoded.begin() + (b * kLength + t) * kEmbed);
    }
  }
}

TEST(Concurrency, RequestThreadsMatchSerialResults) {
  const OwnedLayer layer = SharedLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  Request serial[kRequests], concurrent[kRequests];
  for (int r = 0; r < kRequests; ++r) Serve(attention, serial[r], 100 + r);

  std::vector<std::thread> threads;
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      for (int repeat = 0; repeat < 3; ++repeat) Serve(attention, concurrent[r], 100 + r);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(concurrent[r].output, serial[r].output) << "request " << r;
    EXPECT_EQ(concurrent[r].decoded, serial[r].decoded) << "request " << r;
    ExpectClose(concurrent[r].decoded, concurrent[r].output, "decode vs forward");
  }
}

// Request threads sharing one layer and one paged cache, each owning its sequences
// (ids kIdSpacing * 2r and one chunk of ids further: the cache makes each chunk of
// per-id state on first use, so the threads make theirs concurrently): adding,
// forking, appending, attending and removing concurrently gives the serial outputs,
// and every block returns to the pool.
constexpr int64_t kIdSpacing = 256;

std::vector<float> ServePaged(const MultiheadAttention& attention, PagedKvCache& cache,
                              int r) {
  const std::vector<float> prompt = RandomFloats(kLength * kEmbed, 200 + r);
  const int64_t parent = kIdSpacing * 2 * r, child = parent + kIdSpacing;
  ForwardOptions options;
  options.num_threads = 1;
  cache.AddSequence(parent);
  std::vector<float> outputs =
      AppendAndForward(attention, cache, {{parent, prompt}}, 0, options)[0];
  cache.Fork(parent, child);
  for (int t = 0; t < 5; ++t) {
    const auto step = AppendAndForward(
        attention, cache,
        {{parent, RandomFloats(kEmbed, 300 + t)}, {child, RandomFloats(kEmbed, 400 + t)}},
        0, options);
    for (const auto& out : step) outputs.insert(outputs.end(), out.begin(), out.end());
  }
  cache.RemoveSequence(parent);
  cache.RemoveSequence(child);
  return outputs;
}

TEST(Concurrency, RequestThreadsSharePagedCache) {
  const OwnedLayer layer = SharedLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 64;
  options.max_sequences = 2 * kRequests * kIdSpacing;
  PagedKvCache cache(layer.config, options);
  std::vector<float> serial[kRequests], concurrent[kRequests];
  for (int r = 0; r < kRequests; ++r) serial[r] = ServePaged(attention, cache, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        concurrent[r] = ServePaged(attention, cache, r);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(concurrent[r], serial[r]) << "request " << r;
  }
  EXPECT_EQ(cache.stats().free_blocks, options.num_blocks);
}

// One planned step read by request threads at once, each running its own layer
// (cache layer r) over the step's sequences: the step's form plans are made by the
// first thread of a form and read by the others; every layer's output is its
// serial one.
TEST(Concurrency, RequestThreadsShareAPlannedStep) {
  const OwnedLayer layer = SharedLayer();
  OwnedLayer windowed = SharedLayer();
  windowed.config.features.sliding_window = 5;
  const MultiheadAttention attention(layer.config, layer.weights),
      windowed_attention(windowed.config, windowed.weights);
  PagedKvCacheOptions options;
  options.num_blocks = 16;
  options.max_sequences = 2;
  options.num_layers = kRequests;
  PagedKvCache cache(layer.config, options);
  const int64_t ids[2] = {0, 1}, counts[2] = {kLength, 3},
                starts[3] = {0, kLength, kLength + 3};
  cache.AddSequence(0);
  cache.AddSequence(1);
  cache.AppendSlots(ids, counts, 2);
  PackedStep step;
  ForwardOptions call;
  call.num_threads = 1;
  step.Plan(cache,
            {TensorView(ids, DType::kInt64, Shape{2}),
             TensorView(starts, DType::kInt64, Shape{3})},
            call);
  const std::vector<float> x = RandomFloats((kLength + 3) * kEmbed, 41);
  const auto run = [&](int r) {
    std::vector<float> y(x.size());
    (r % 2 ? windowed_attention : attention)
        .ForwardPacked(TensorView(x.data(), Shape{kLength + 3, kEmbed}), step, r,
                       MutableTensorView(y.data(), Shape{kLength + 3, kEmbed}));
    return y;
  };
  std::vector<float> serial[kRequests], concurrent[kRequests];
  for (int r = 0; r < kRequests; ++r) serial[r] = run(r);
  step.Plan(cache,
            {TensorView(ids, DType::kInt64, Shape{2}),
             TensorView(starts, DType::kInt64, Shape{3})},
            call);  // its form plans made afresh, by the threads
  std::vector<std::thread> threads;
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      for (int repeat = 0; repeat < 3; ++repeat) concurrent[r] = run(r);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(concurrent[r], serial[r]) << "layer " << r;
  }
}

// MLA: request threads on one latent layer, each with its own KvCache (prefill, then
// decode steps), run at once on the layer's workspace pool and give the serial bits.
std::vector<float> ServeLatent(const MultiheadLatentAttention& attention, int request) {
  const LatentAttentionConfig& config = attention.config();
  KvCache cache(config, 1, 24);
  const std::vector<float> prompt = RandomFloats(8 * kHidden, 500 + request);
  std::vector<float> outputs(prompt.size());
  attention.ForwardWithCache(TensorView(prompt.data(), Shape{1, 8, kHidden}), cache,
                             MutableTensorView(outputs.data(), Shape{1, 8, kHidden}));
  for (int t = 0; t < 4; ++t) {
    const std::vector<float> token = RandomFloats(kHidden, 600 + 10 * request + t);
    std::vector<float> out(kHidden);
    attention.ForwardWithCache(TensorView(token.data(), Shape{1, 1, kHidden}), cache,
                               MutableTensorView(out.data(), Shape{1, 1, kHidden}));
    outputs.insert(outputs.end(), out.begin(), out.end());
  }
  return outputs;
}

TEST(Concurrency, RequestThreadsShareALatentLayer) {
  const LatentAttentionConfig config = SmallLatentConfig(/*q_lora_rank=*/24);
  const LatentWeightsForTest weights(config);
  const MultiheadLatentAttention attention(config, weights.views);
  std::vector<float> serial[kRequests], concurrent[kRequests];
  for (int r = 0; r < kRequests; ++r) serial[r] = ServeLatent(attention, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      for (int repeat = 0; repeat < 3; ++repeat)
        concurrent[r] = ServeLatent(attention, r);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(concurrent[r], serial[r]) << "request " << r;
  }
}

TEST(Concurrency, InsideCallersParallelRegionRunsOnCallingThread) {
  const OwnedLayer layer = SharedLayer();
  const MultiheadAttention attention(layer.config, layer.weights);
  Request serial[2], inside[2];
  for (int r = 0; r < 2; ++r) Serve(attention, serial[r], 200 + r);
  int team_sizes[2] = {0, 0};
#pragma omp parallel num_threads(2)
  {
    const int r = omp_get_thread_num();
    team_sizes[r] = internal::TeamSize();
    Serve(attention, inside[r], 200 + r, /*num_threads=*/0);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(team_sizes[r], 1) << "a nested team would oversubscribe";
    ExpectClose(inside[r].output, serial[r].output, "inside a parallel region");
    ExpectClose(inside[r].decoded, serial[r].decoded, "decoded inside a parallel region");
  }
}

}  // namespace
}  // namespace mha::testing
