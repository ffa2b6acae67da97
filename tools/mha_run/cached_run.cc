// One loop of steps for both layer kinds and both cache kinds: only the cache's
// construction and the call differ.
#include "tools/mha_run/cached_run.h"

#include <algorithm>
#include <numeric>

#include "tools/mha_run/feature_flags.h"

namespace mha::cli {
namespace {

int64_t OutputWidth(const MultiheadAttention& layer) { return layer.output_dim(); }
int64_t OutputWidth(const MultiheadLatentAttention& layer) {
  return layer.config().hidden_size;
}

void Step(const MultiheadAttention& layer, const TensorView& in, KvCache& cache,
          const MutableTensorView& out, const ForwardOptions& options) {
  layer.ForwardWithCache(in, {}, cache, out, options);
}
void Step(const MultiheadLatentAttention& layer, const TensorView& in, KvCache& cache,
          const MutableTensorView& out, const ForwardOptions& options) {
  layer.ForwardWithCache(in, cache, out, options);
}

// The step's rows [B * step, width] as one packed step of B sequences.
template <class Layer>
void Step(const Layer& layer, const TensorView& in, PagedKvCache& cache,
          const MutableTensorView& out, const ForwardOptions& options) {
  const int64_t batch = in.shape[0], step = in.shape[1];
  std::vector<int64_t> ids(batch), counts(batch, step), starts(batch + 1);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t b = 0; b <= batch; ++b) starts[b] = b * step;
  cache.AppendSlots(ids.data(), counts.data(), batch);
  const PackedBatch packed{TensorView(ids.data(), DType::kInt64, Shape{batch}),
                           TensorView(starts.data(), DType::kInt64, Shape{batch + 1})};
  layer.ForwardPacked(
      TensorView(in.floats(), Shape{batch * step, in.shape[2]}), packed, cache, 0,
      MutableTensorView(out.floats(), Shape{batch * step, out.shape[2]}), options);
}

template <class Layer, class Cache>
std::vector<float> RunSteps(const Layer& layer, Cache& cache, const CachedRun& run,
                            const TensorView& input) {
  const int64_t batch = input.shape[0], seq = input.shape[1], width = input.shape[2];
  const int64_t out_width = OutputWidth(layer);
  const float* x = input.floats();
  std::vector<float> output(batch * seq * out_width), in, out;
  for (int64_t done = 0; done < seq;) {
    const int64_t step = done == 0 ? seq - run.decode_steps : 1;
    in.resize(batch * step * width);
    out.resize(batch * step * out_width);
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(x + (b * seq + done) * width, step * width,
                  in.data() + b * step * width);
    }
    Step(layer, TensorView(in.data(), Shape{batch, step, width}), cache,
         MutableTensorView(out.data(), Shape{batch, step, out_width}), run.options);
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(out.data() + b * step * out_width, step * out_width,
                  output.data() + (b * seq + done) * out_width);
    }
    done += step;
  }
  return output;
}

template <class Layer>
std::vector<float> Run(const Layer& layer, const CachedRun& run,
                       const TensorView& input) {
  const int64_t batch = input.shape[0], seq = input.shape[1];
  if (run.decode_steps >= seq) {
    throw UsageError("--decode-steps: must be below the sequence length " +
                     std::to_string(seq) + ", got " + std::to_string(run.decode_steps));
  }
  if (!run.paged) {
    KvCache cache(layer.config(), batch, seq, run.storage);
    return RunSteps(layer, cache, run, input);
  }
  PagedKvCacheOptions options;
  options.block_size = run.block_size;
  options.max_sequences = batch;
  // Every sequence's blocks, without forming seq + block_size (a huge --block-size
  // is the cache's to refuse); the product is checked by the cache's own limits.
  const int64_t block = std::max<int64_t>(run.block_size, 1);
  options.num_blocks = batch * (seq / block + (seq % block != 0 ? 1 : 0));
  options.storage = run.storage;
  PagedKvCache cache(layer.config(), options);
  for (int64_t b = 0; b < batch; ++b) cache.AddSequence(b);
  return RunSteps(layer, cache, run, input);
}

}  // namespace

std::vector<float> RunCached(const MultiheadAttention& layer, const CachedRun& run,
                             const TensorView& input) {
  return Run(layer, run, input);
}

std::vector<float> RunCached(const MultiheadLatentAttention& layer, const CachedRun& run,
                             const TensorView& input) {
  return Run(layer, run, input);
}

}  // namespace mha::cli
