// AppendAndForward, PackedForward and CausalForward.
#include "tests/cache/paged_test_util.h"

namespace mha::testing {

std::vector<std::vector<float>> AppendAndForward(const MultiheadAttention& attention,
                                                 PagedKvCache& cache,
                                                 const std::vector<Chunk>& chunks,
                                                 int64_t layer,
                                                 const ForwardOptions& options) {
  if (layer == 0) {
    const int64_t embed = attention.config().query_dim;
    std::vector<int64_t> ids, counts;
    for (const Chunk& chunk : chunks) {
      ids.push_back(chunk.sequence);
      counts.push_back(static_cast<int64_t>(chunk.tokens.size()) / embed);
    }
    cache.AppendSlots(ids.data(), counts.data(), static_cast<int64_t>(ids.size()));
  }
  return PackedForward(attention, cache, chunks, layer, options);
}

std::vector<std::vector<float>> PackedForward(const MultiheadAttention& attention,
                                              PagedKvCache& cache,
                                              const std::vector<Chunk>& chunks,
                                              int64_t layer,
                                              const ForwardOptions& options) {
  const int64_t embed = attention.config().query_dim;
  std::vector<int64_t> ids, starts = {0}, parents;
  std::vector<float> packed;
  bool tree = false;
  for (const Chunk& chunk : chunks) {
    ids.push_back(chunk.sequence);
    const int64_t count = static_cast<int64_t>(chunk.tokens.size()) / embed;
    starts.push_back(starts.back() + count);
    packed.insert(packed.end(), chunk.tokens.begin(), chunk.tokens.end());
    tree = tree || !chunk.parents.empty();
    for (int64_t i = 0; i < count; ++i) {
      parents.push_back(chunk.parents.empty() ? i - 1 : chunk.parents[i]);
    }
  }
  const int64_t total = starts.back(), n = static_cast<int64_t>(ids.size());
  std::vector<float> out(total * attention.output_dim());
  PackedBatch batch{TensorView(ids.data(), DType::kInt64, Shape{n}),
                    TensorView(starts.data(), DType::kInt64, Shape{n + 1})};
  if (tree) batch.tree_parents = TensorView(parents.data(), DType::kInt64, Shape{total});
  attention.ForwardPacked(
      TensorView(packed.data(), Shape{total, embed}), batch, cache, layer,
      MutableTensorView(out.data(), Shape{total, attention.output_dim()}), options);
  std::vector<std::vector<float>> outputs;
  for (int64_t i = 0; i < n; ++i) {
    outputs.emplace_back(out.begin() + starts[i] * attention.output_dim(),
                         out.begin() + starts[i + 1] * attention.output_dim());
  }
  return outputs;
}

std::vector<float> CausalForward(const MultiheadAttention& attention,
                                 const std::vector<float>& tokens) {
  const int64_t embed = attention.config().query_dim;
  const int64_t length = static_cast<int64_t>(tokens.size()) / embed;
  std::vector<float> out(length * attention.output_dim());
  AttentionMasks masks;
  masks.is_causal = true;
  attention.Forward(
      {TensorView(tokens.data(), Shape{1, length, embed}), {}, {}}, masks,
      {MutableTensorView(out.data(), Shape{1, length, attention.output_dim()}), {}});
  return out;
}

}  // namespace mha::testing
