// libFuzzer target: the paged KV cache against a model of each sequence (its tokens).
// The input picks the layer (GQA, RoPE, sinks, a sliding window), the storage kind and
// block size, and a run of mostly valid operations: add, remove, fork, truncate,
// packed steps of several sequences at once, and speculative steps (a token tree
// verified, then an accepted path kept). The cache may refuse a call (out of blocks,
// a truncation past its window); then the model is left as it was too. After every step
// each sequence's outputs must equal the last rows of one causal forward over its
// modelled tokens, within the storage's bound; the pool must account for every block. Any
// disagreement aborts.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "mha/mha.hpp"
#include "tests/fuzz/fuzz_input.h"

namespace {

using mha::fuzz::FuzzInput;

// Sequences reach past 256 tokens, where decodes split their keys.
constexpr int64_t kEmbed = 16, kMaxSequences = 4, kMaxLength = 320;

struct Layer {
  mha::AttentionConfig config;
  std::vector<float> weights[4], sinks;
  mha::AttentionWeights views;

  explicit Layer(FuzzInput& input) {
    config.num_heads = 2;
    config.num_kv_heads = 1 + input.Byte() % 2;
    config.head_dim = 8;
    config.query_dim = kEmbed;
    if (input.Byte() % 2) config.rotary.pairing = mha::RotaryPairing::kHalfSplit;
    if (input.Byte() % 2) {
      for (int h = 0; h < 2; ++h) sinks.push_back((input.Byte() % 16) * 0.5f - 2.0f);
      views.sinks = mha::TensorView(sinks.data(), mha::Shape{2});
    }
    mha::Projection* projections[4] = {&views.query, &views.key, &views.value,
                                       &views.output};
    const int64_t rows[4] = {16, 8 * config.num_kv_heads, 8 * config.num_kv_heads, 16};
    for (int i = 0; i < 4; ++i) {
      weights[i].resize(rows[i] * kEmbed);
      for (size_t j = 0; j < weights[i].size(); ++j)
        weights[i][j] = static_cast<float>((j * 7 + i) % 13) * 0.05f - 0.3f;
      projections[i]->weight =
          mha::TensorView(weights[i].data(), mha::Shape{rows[i], kEmbed});
    }
  }
};

using Model = std::map<int64_t, std::vector<float>>;  // id -> tokens [length, kEmbed]

std::vector<float> CausalRows(const mha::MultiheadAttention& attention,
                              const std::vector<float>& tokens, int64_t last) {
  const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
  std::vector<float> out(tokens.size());
  mha::AttentionMasks causal;
  causal.is_causal = true;
  attention.Forward(
      {mha::TensorView(tokens.data(), mha::Shape{1, length, kEmbed}), {}, {}}, causal,
      {mha::MutableTensorView(out.data(), mha::Shape{1, length, kEmbed}), {}});
  return {out.end() - last * kEmbed, out.end()};
}

void Expect(bool ok, const char* what, int64_t sequence) {
  if (ok) return;
  std::fprintf(stderr, "%s (sequence %lld)\n", what, static_cast<long long>(sequence));
  std::abort();
}

// One packed step: up to kMaxSequences sequences, each 1-8 new tokens, or up to 96 (a
// prefill chunk or a decode), appended then attended; the outputs checked against the
// model.
void Step(FuzzInput& input, const mha::MultiheadAttention& attention,
          mha::PagedKvCache& cache, Model& model, double bound) {
  std::vector<int64_t> ids, counts, starts = {0};
  std::vector<float> packed;
  for (const auto& [id, tokens] : model) {
    if (input.Byte() % 3 == 0) continue;
    const bool long_chunk = input.Byte() % 4 == 0;
    const int64_t count = 1 + input.Byte() % (long_chunk ? 96 : 8);
    if (static_cast<int64_t>(tokens.size()) / kEmbed + count > kMaxLength) continue;
    ids.push_back(id);
    counts.push_back(count);
    starts.push_back(starts.back() + count);
    for (int64_t i = 0; i < count * kEmbed; ++i) {
      packed.push_back((static_cast<int>(input.Byte()) - 128) / 64.0f);
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size()), rows = starts.back();
  if (n == 0) return;
  try {
    cache.AppendSlots(ids.data(), counts.data(), n);
  } catch (const mha::OutOfBlocksError&) {
    return;
  }
  std::vector<float> out(rows * kEmbed);
  attention.ForwardPacked(
      mha::TensorView(packed.data(), mha::Shape{rows, kEmbed}),
      {mha::TensorView(ids.data(), mha::DType::kInt64, mha::Shape{n}),
       mha::TensorView(starts.data(), mha::DType::kInt64, mha::Shape{n + 1})},
      cache, 0, mha::MutableTensorView(out.data(), mha::Shape{rows, kEmbed}));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float>& tokens = model[ids[i]];
    tokens.insert(tokens.end(), packed.begin() + starts[i] * kEmbed,
                  packed.begin() + starts[i + 1] * kEmbed);
    Expect(cache.length(ids[i]) == static_cast<int64_t>(tokens.size()) / kEmbed, "length",
           ids[i]);
    const std::vector<float> expected = CausalRows(attention, tokens, counts[i]);
    double scale = 1.0, error = 0.0;
    for (float v : expected) scale = std::max(scale, double{std::fabs(v)});
    for (int64_t j = 0; j < counts[i] * kEmbed; ++j) {
      error =
          std::max(error, std::fabs(double{out[starts[i] * kEmbed + j]} - expected[j]));
    }
    Expect(error <= bound * scale, "output differs from the model's causal forward",
           ids[i]);
  }
}

// Checks row `row` of `out` against the last row of a causal forward over `tokens`.
void ExpectLastRow(const mha::MultiheadAttention& attention,
                   const std::vector<float>& tokens, const std::vector<float>& out,
                   int64_t row, double bound, int64_t id) {
  const std::vector<float> expected = CausalRows(attention, tokens, 1);
  double scale = 1.0, error = 0.0;
  for (float v : expected) scale = std::max(scale, double{std::fabs(v)});
  for (int64_t j = 0; j < kEmbed; ++j) {
    error = std::max(error, std::fabs(double{out[row * kEmbed + j]} - expected[j]));
  }
  Expect(error <= bound * scale, "draft token differs from its path's forward", id);
}

// A speculative step on sequence `id`: a tree of 1-8 draft tokens, each checked
// against the sequence decoded along its path, then a root-first path kept.
void TreeStep(FuzzInput& input, const mha::MultiheadAttention& attention,
              mha::PagedKvCache& cache, Model& model, double bound, int64_t id) {
  std::vector<float>& tokens = model[id];
  const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
  const int64_t count = 1 + input.Byte() % 8;
  if (length + count > kMaxLength) return;
  std::vector<int64_t> parents(count), starts = {0, count};
  std::vector<float> draft(count * kEmbed);
  for (int64_t i = 0; i < count; ++i) parents[i] = input.Byte() % (i + 1) - 1;
  for (float& v : draft) v = (static_cast<int>(input.Byte()) - 128) / 64.0f;
  try {
    cache.AppendSlots(&id, &count, 1);
  } catch (const mha::OutOfBlocksError&) {
    return;
  }
  std::vector<float> out(count * kEmbed);
  mha::PackedBatch batch{
      mha::TensorView(&id, mha::DType::kInt64, mha::Shape{1}),
      mha::TensorView(starts.data(), mha::DType::kInt64, mha::Shape{2})};
  batch.tree_parents =
      mha::TensorView(parents.data(), mha::DType::kInt64, mha::Shape{count});
  attention.ForwardPacked(mha::TensorView(draft.data(), mha::Shape{count, kEmbed}), batch,
                          cache, 0,
                          mha::MutableTensorView(out.data(), mha::Shape{count, kEmbed}));
  const auto path_tokens = [&](const std::vector<int64_t>& path) {
    std::vector<float> sequence = tokens;
    for (const int64_t i : path) {
      sequence.insert(sequence.end(), draft.begin() + i * kEmbed,
                      draft.begin() + (i + 1) * kEmbed);
    }
    return sequence;
  };
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> path;
    for (int64_t j = i; j >= 0; j = parents[j]) path.insert(path.begin(), j);
    ExpectLastRow(attention, path_tokens(path), out, i, bound, id);
  }
  std::vector<int64_t> kept;  // from the first root, down through chosen children
  for (int64_t i = 0; i < count; ++i) {
    const bool next = kept.empty() ? parents[i] == -1 : parents[i] == kept.back();
    if (next && input.Byte() % 4 != 0) kept.push_back(i);
  }
  cache.KeepTokens(id, length, kept.data(), static_cast<int64_t>(kept.size()));
  tokens = path_tokens(kept);
  Expect(cache.length(id) == static_cast<int64_t>(tokens.size()) / kEmbed,
         "length after KeepTokens", id);
}

void Operate(FuzzInput& input, const mha::MultiheadAttention& attention,
             mha::PagedKvCache& cache, Model& model, double bound) {
  const int64_t id = input.Byte() % kMaxSequences, other = input.Byte() % kMaxSequences;
  switch (input.Byte() % 7) {
    case 0:
      if (model.count(id)) return;
      cache.AddSequence(id);
      model[id];
      return;
    case 1:
      if (!model.count(id)) return;
      cache.RemoveSequence(id);
      model.erase(id);
      return;
    case 2:
      if (!model.count(id) || model.count(other)) return;
      cache.Fork(id, other);
      model[other] = model[id];
      return;
    case 3: {
      if (!model.count(id)) return;
      const int64_t length = static_cast<int64_t>(model[id].size()) / kEmbed;
      const int64_t keep = length - input.Byte() % 8;
      if (keep < 0) return;
      try {
        cache.Truncate(id, keep);
      } catch (const mha::Error&) {  // tokens already left the window, or no block
        return;
      }
      model[id].resize(keep * kEmbed);
      return;
    }
    case 4:  // trees place tokens by depth: layers with a window refuse them
      if (!model.count(id) || attention.config().features.sliding_window) return;
      return TreeStep(input, attention, cache, model, bound, id);
    default:
      return Step(input, attention, cache, model, bound);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput input(data, size);
  Layer layer(input);
  mha::PagedKvCacheOptions options;
  options.block_size = 16 * (1 + input.Byte() % 2);
  options.num_blocks = 1 + input.Byte() % 48;
  options.max_sequences = kMaxSequences;
  const mha::DType storages[] = {mha::DType::kFloat32,    mha::DType::kBFloat16,
                                 mha::DType::kInt8,       mha::DType::kFloat8E4M3,
                                 mha::DType::kFloat8E5M2, mha::DType::kInt4};
  options.storage = storages[input.Byte() % 6];
  const bool fp8 = options.storage == mha::DType::kFloat8E4M3 ||
                   options.storage == mha::DType::kFloat8E5M2;
  const bool int8 = options.storage == mha::DType::kInt8;
  if ((fp8 || int8) && input.Byte() % 2) {
    options.scales = fp8 ? mha::KvScales::kNone : mha::KvScales::kPerChannelKeys;
  }
  if (options.storage == mha::DType::kInt4)
    options.scales = mha::KvScales::kPerChannelKeys;
  if (input.Byte() % 2) {
    options.sliding_window = 1 + input.Byte() % 40;
    layer.config.features.sliding_window = 1 + input.Byte() % options.sliding_window;
  }
  // The bounds of kv_storage_accuracy_test's regimes for these small weights, with
  // room.
  const double bound = options.storage == mha::DType::kFloat32      ? 1e-4
                       : options.storage == mha::DType::kFloat8E4M3 ? 0.1
                       : options.storage == mha::DType::kFloat8E5M2 ? 0.2
                       : options.storage == mha::DType::kInt4       ? 0.6
                                                                    : 3e-2;
  const mha::MultiheadAttention attention(layer.config, layer.views);
  mha::PagedKvCache cache(layer.config, options);
  Model model;
  for (int op = 0; op < 48 && input.Byte() != 0; ++op) {
    Operate(input, attention, cache, model, bound);
    const mha::PagedKvCacheStats stats = cache.stats();
    Expect(stats.used_blocks + stats.free_blocks == stats.num_blocks, "blocks lost", -1);
    Expect(stats.sequences == static_cast<int64_t>(model.size()), "sequence count", -1);
  }
  return 0;
}
