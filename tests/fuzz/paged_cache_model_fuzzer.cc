// libFuzzer target: the paged KV cache against a model of each sequence (its tokens).
// The input picks the layer (GQA, RoPE, sinks, a sliding window, bf16 compute), the
// storage kind and block size, and a run of mostly valid operations: add, remove,
// fork, truncate, packed steps of several sequences at once, and speculative steps (a
// token tree verified, then an accepted path kept). Tokens are ordinary, tiny (2^-120:
// K/V rows far below every quantiser's step) or huge (2^10, or 2^22: past q4_0's and
// q8_0's fp16 scales); head_dim 8, or 264 (int8 keys meet a float query there); every
// storage kind, q8_0 and q4_0 included. The cache may refuse a
// call (out of blocks, a truncation past its window); then the model is left as it was
// too. After every step each sequence's outputs must equal the last rows of one causal
// forward over its modelled tokens, within the storage's bound (finite only, where a
// huge token makes the logits too sharp for any bound); the pool must account for
// every block. Every operation runs on two caches, their steps on 1 and 2 threads,
// which must give the same bits (docs/errors.md, Determinism). Any disagreement aborts.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
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
    // 264: int8 keys past the query codes' range meet a float query (QueryCodesFor).
    config.head_dim = input.Byte() % 8 == 0 ? 264 : 8;
    config.query_dim = kEmbed;
    if (input.Byte() % 2) config.rotary.pairing = mha::RotaryPairing::kHalfSplit;
    if (input.Byte() % 4 == 0) config.compute_dtype = mha::DType::kBFloat16;
    if (input.Byte() % 2) {
      for (int h = 0; h < 2; ++h) sinks.push_back((input.Byte() % 16) * 0.5f - 2.0f);
      views.sinks = mha::TensorView(sinks.data(), mha::Shape{2});
    }
    mha::Projection* projections[4] = {&views.query, &views.key, &views.value,
                                       &views.output};
    const int64_t d = config.head_dim, kv = d * config.num_kv_heads;
    const int64_t rows[4] = {2 * d, kv, kv, kEmbed};
    const int64_t columns[4] = {kEmbed, kEmbed, kEmbed, 2 * d};
    for (int i = 0; i < 4; ++i) {
      weights[i].resize(rows[i] * columns[i]);
      for (size_t j = 0; j < weights[i].size(); ++j)
        weights[i][j] = static_cast<float>((j * 7 + i) % 13) * 0.05f - 0.3f;
      projections[i]->weight =
          mha::TensorView(weights[i].data(), mha::Shape{rows[i], columns[i]});
    }
  }
};

using Model = std::map<int64_t, std::vector<float>>;  // id -> tokens [length, kEmbed]

// How outputs are checked against the model.
struct Checks {
  double bound;  // of max |out - expected| over max(1, max |expected|)
  // Keys per channel: a huge token coarsens the channel scales of every key in its
  // block, even after it is gone (truncated, or a draft token not kept: the kept keys
  // were quantised beside it). Such sequences are checked for finite outputs only.
  bool channel_keys;
  std::set<int64_t> coarsened;
};

bool HasHuge(const float* tokens, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (std::fabs(tokens[i]) > 64.0f) return true;
  }
  return false;
}

// The cache under test twice, driven alike; packed steps run on caches[t] with t + 1
// threads.
struct Caches {
  mha::PagedKvCache caches[2];
};

// Runs `op` on both caches: true when both refused it (mha::Error), false when both
// took it; anything else aborts.
template <class Op>
bool RefusedByBoth(Caches& c, const Op& op) {
  bool refused[2];
  for (int t = 0; t < 2; ++t) {
    try {
      op(c.caches[t]);
      refused[t] = false;
    } catch (const mha::Error&) {
      refused[t] = true;
    }
  }
  if (refused[0] != refused[1]) {
    std::fprintf(stderr, "one cache refused a call the other took\n");
    std::abort();
  }
  return refused[0];
}

// An input token's entries: ordinary in [-2, 2), tiny or huge by its first byte.
void DrawToken(FuzzInput& input, float* token) {
  const uint8_t kind = input.Byte();
  // 2^22: past q4_0's and q8_0's fp16 scale limits (65504 x 8, x 127).
  const int exponent = kind % 16 == 1   ? -120
                       : kind % 16 == 2 ? 10
                       : kind % 32 == 3 ? 22
                                        : 0;
  for (int64_t i = 0; i < kEmbed; ++i) {
    token[i] = std::ldexp((static_cast<int>(input.Byte()) - 128) / 64.0f, exponent);
  }
}

// The packed step on both caches, each on its thread count: the same bits.
std::vector<float> ForwardOnBoth(const mha::MultiheadAttention& attention, Caches& c,
                                 const std::vector<float>& packed,
                                 const mha::PackedBatch& batch) {
  const int64_t rows = static_cast<int64_t>(packed.size()) / kEmbed;
  std::vector<float> out[2];
  for (int t = 0; t < 2; ++t) {
    out[t].assign(packed.size(), 0.0f);
    mha::ForwardOptions options;
    options.num_threads = t + 1;
    attention.ForwardPacked(
        mha::TensorView(packed.data(), mha::Shape{rows, kEmbed}), batch, c.caches[t], 0,
        mha::MutableTensorView(out[t].data(), mha::Shape{rows, kEmbed}), options);
  }
  if (std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "a packed step gives other bits on 1 and 2 threads\n");
    std::abort();
  }
  return out[0];
}

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

// Rows `out` of sequence `id` against `expected`, the model's forward over `tokens`:
// within the bound of max(1, max |expected|), or only finite where a huge token
// makes the logits too sharp for any bound.
void ExpectRows(const float* out, const std::vector<float>& expected,
                const std::vector<float>& tokens, const Checks& checks, const char* what,
                int64_t id) {
  double scale = 1.0, error = 0.0;
  for (float v : expected) scale = std::max(scale, double{std::fabs(v)});
  for (size_t j = 0; j < expected.size(); ++j) {
    Expect(std::isfinite(out[j]), "a non-finite output", id);
    error = std::max(error, std::fabs(double{out[j]} - expected[j]));
  }
  const bool loose = HasHuge(tokens.data(), tokens.size()) || checks.coarsened.count(id);
  Expect(loose || error <= checks.bound * scale, what, id);
}

// One packed step: up to kMaxSequences sequences, each 1-8 new tokens, or up to 96 (a
// prefill chunk or a decode), appended then attended; the outputs checked against the
// model.
void Step(FuzzInput& input, const mha::MultiheadAttention& attention, Caches& caches,
          Model& model, Checks& checks) {
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
    packed.resize(packed.size() + count * kEmbed);
    for (int64_t i = 0; i < count; ++i) {
      DrawToken(input, packed.data() + packed.size() - (count - i) * kEmbed);
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) return;
  if (RefusedByBoth(caches, [&](mha::PagedKvCache& cache) {
        cache.AppendSlots(ids.data(), counts.data(), n);
      })) {
    return;  // out of blocks
  }
  const std::vector<float> out = ForwardOnBoth(
      attention, caches, packed,
      {mha::TensorView(ids.data(), mha::DType::kInt64, mha::Shape{n}),
       mha::TensorView(starts.data(), mha::DType::kInt64, mha::Shape{n + 1})});
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float>& tokens = model[ids[i]];
    tokens.insert(tokens.end(), packed.begin() + starts[i] * kEmbed,
                  packed.begin() + starts[i + 1] * kEmbed);
    if (checks.channel_keys &&
        HasHuge(packed.data() + starts[i] * kEmbed, counts[i] * kEmbed)) {
      checks.coarsened.insert(ids[i]);
    }
    Expect(
        caches.caches[0].length(ids[i]) == static_cast<int64_t>(tokens.size()) / kEmbed,
        "length", ids[i]);
    ExpectRows(out.data() + starts[i] * kEmbed, CausalRows(attention, tokens, counts[i]),
               tokens, checks, "output differs from the model's causal forward", ids[i]);
  }
}

// A speculative step on sequence `id`: a tree of 1-8 draft tokens, each checked
// against the sequence decoded along its path, then a root-first path kept.
void TreeStep(FuzzInput& input, const mha::MultiheadAttention& attention, Caches& caches,
              Model& model, Checks& checks, int64_t id) {
  std::vector<float>& tokens = model[id];
  const int64_t length = static_cast<int64_t>(tokens.size()) / kEmbed;
  const int64_t count = 1 + input.Byte() % 8;
  if (length + count > kMaxLength) return;
  std::vector<int64_t> parents(count), starts = {0, count};
  std::vector<float> draft(count * kEmbed);
  for (int64_t i = 0; i < count; ++i) parents[i] = input.Byte() % (i + 1) - 1;
  for (int64_t i = 0; i < count; ++i) DrawToken(input, draft.data() + i * kEmbed);
  if (RefusedByBoth(
          caches, [&](mha::PagedKvCache& cache) { cache.AppendSlots(&id, &count, 1); })) {
    return;  // out of blocks
  }
  mha::PackedBatch batch{
      mha::TensorView(&id, mha::DType::kInt64, mha::Shape{1}),
      mha::TensorView(starts.data(), mha::DType::kInt64, mha::Shape{2})};
  batch.tree_parents =
      mha::TensorView(parents.data(), mha::DType::kInt64, mha::Shape{count});
  const std::vector<float> out = ForwardOnBoth(attention, caches, draft, batch);
  if (checks.channel_keys && HasHuge(draft.data(), draft.size())) {
    checks.coarsened.insert(id);  // the drafts share blocks
  }
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
    const std::vector<float> tokens_along = path_tokens(path);
    ExpectRows(out.data() + i * kEmbed, CausalRows(attention, tokens_along, 1),
               tokens_along, checks, "draft token differs from its path's forward", id);
  }
  std::vector<int64_t> kept;  // from the first root, down through chosen children
  for (int64_t i = 0; i < count; ++i) {
    const bool next = kept.empty() ? parents[i] == -1 : parents[i] == kept.back();
    if (next && input.Byte() % 4 != 0) kept.push_back(i);
  }
  Expect(!RefusedByBoth(caches,
                        [&](mha::PagedKvCache& cache) {
                          cache.KeepTokens(id, length, kept.data(),
                                           static_cast<int64_t>(kept.size()));
                        }),
         "KeepTokens refused", id);
  tokens = path_tokens(kept);
  Expect(caches.caches[0].length(id) == static_cast<int64_t>(tokens.size()) / kEmbed,
         "length after KeepTokens", id);
}

void Operate(FuzzInput& input, const mha::MultiheadAttention& attention, Caches& caches,
             Model& model, Checks& checks) {
  const int64_t id = input.Byte() % kMaxSequences, other = input.Byte() % kMaxSequences;
  switch (input.Byte() % 7) {
    case 0:
      if (model.count(id)) return;
      Expect(!RefusedByBoth(caches,
                            [&](mha::PagedKvCache& cache) { cache.AddSequence(id); }),
             "AddSequence refused", id);
      model[id];
      return;
    case 1:
      if (!model.count(id)) return;
      Expect(!RefusedByBoth(caches,
                            [&](mha::PagedKvCache& cache) { cache.RemoveSequence(id); }),
             "RemoveSequence refused", id);
      model.erase(id);
      checks.coarsened.erase(id);
      return;
    case 2:
      if (!model.count(id) || model.count(other)) return;
      Expect(!RefusedByBoth(caches,
                            [&](mha::PagedKvCache& cache) { cache.Fork(id, other); }),
             "Fork refused", id);
      model[other] = model[id];
      if (checks.coarsened.count(id)) checks.coarsened.insert(other);
      return;
    case 3: {
      if (!model.count(id)) return;
      const int64_t length = static_cast<int64_t>(model[id].size()) / kEmbed;
      const int64_t keep = length - input.Byte() % 8;
      if (keep < 0) return;
      // Refused when tokens already left the window, or no block is free.
      if (RefusedByBoth(caches,
                        [&](mha::PagedKvCache& cache) { cache.Truncate(id, keep); })) {
        return;
      }
      model[id].resize(keep * kEmbed);
      return;
    }
    case 4:  // trees place tokens by depth: layers with a window refuse them
      if (!model.count(id) || attention.config().features.sliding_window) return;
      return TreeStep(input, attention, caches, model, checks, id);
    default:
      return Step(input, attention, caches, model, checks);
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
  // ggml's block kinds, one fp16 scale per 32 channels: q8_0 (int8) and q4_0 (int4).
  if ((int8 || options.storage == mha::DType::kInt4) && input.Byte() % 3 == 0) {
    options.scales = mha::KvScales::kPerGroup;
  }
  if (input.Byte() % 2) {
    options.sliding_window = 1 + input.Byte() % 40;
    layer.config.features.sliding_window = 1 + input.Byte() % options.sliding_window;
  }
  // The bounds of kv_storage_accuracy_test's regimes for these small weights, with
  // room; bf16 compute rounds the model's forward as a bf16 cache would. int8 (per
  // token, keys per channel, q8_0): the random layer's documented 5.5e-2 (serving.md);
  // 3e-2 here failed a 2-token tree step at 3.4e-2 on every product path (the corpus's
  // int8_tree_past_3e-2). fp8: the random layer's documented 0.23 (e4m3; 0.32 scale
  // free) and 0.55 (e5m2); 0.1 and 0.2 here failed packed steps at 0.105 and 0.151
  // (e4m3) and 0.229 (e5m2), on every product path, main before the bf16 softmax
  // change alike (e4m3_step_past_0.1, e4m3_step_past_0.15, e5m2_step_past_0.2).
  const bool scale_free = options.scales == mha::KvScales::kNone;
  const double storage_bound = options.storage == mha::DType::kFloat32 ? 1e-4
                               : options.storage == mha::DType::kFloat8E4M3
                                   ? (scale_free ? 0.32 : 0.23)
                               : options.storage == mha::DType::kFloat8E5M2 ? 0.55
                               : options.storage == mha::DType::kInt4       ? 0.6
                               : options.storage == mha::DType::kInt8       ? 5.5e-2
                                                                            : 3e-2;
  Checks checks{layer.config.compute_dtype == mha::DType::kBFloat16
                    ? std::max(storage_bound, 3e-2)
                    : storage_bound,
                options.scales == mha::KvScales::kPerChannelKeys,
                {}};
  const mha::MultiheadAttention attention(layer.config, layer.views);
  Caches caches{{mha::PagedKvCache(layer.config, options),
                 mha::PagedKvCache(layer.config, options)}};
  Model model;
  for (int op = 0; op < 48 && input.Byte() != 0; ++op) {
    Operate(input, attention, caches, model, checks);
    const mha::PagedKvCacheStats stats = caches.caches[0].stats();
    Expect(stats.used_blocks + stats.free_blocks == stats.num_blocks, "blocks lost", -1);
    Expect(stats.sequences == static_cast<int64_t>(model.size()), "sequence count", -1);
  }
  return 0;
}
