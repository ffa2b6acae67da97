// libFuzzer target: the C API as a hostile caller drives it. Sizes come from the
// input (sometimes any int64); buffers are allocated to match them when small and
// passed as NULL otherwise, so every call either runs in bounds or must fail cleanly:
// layer creation, forward with masks, and a KV cache's creation, appends and resets.
#include <vector>

#include "mha/mha.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using mha::fuzz::FuzzInput;

constexpr int64_t kMaxElements = 1 << 14;

// A buffer of `count` floats from the input, or empty (passed as NULL) when the
// count is negative, overflows or is too large to run.
std::vector<float> Floats(FuzzInput& input, std::initializer_list<int64_t> dims) {
  int64_t count = 1;
  for (const int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(count, d, &count) || count > kMaxElements) {
      return {};
    }
  }
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = (input.Byte() % 16) * 0.125f - 1.0f;
  if (!values.empty() && input.Byte() == 255) values[0] = input.Float();  // NaN, inf
  return values;
}

float* OrNull(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

void Forward(FuzzInput& input, const mha_layer* layer, const mha_config& config) {
  mha_forward_args args = {};
  args.batch = input.Size(3);
  args.query_len = input.Size(6);
  args.key_len = input.Byte() % 2 ? args.query_len : input.Size(6);
  std::vector<float> query =
      Floats(input, {args.batch, args.query_len, config.query_dim});
  std::vector<float> key, value;
  if (args.key_len != args.query_len || input.Byte() % 2) {
    key = Floats(input, {args.batch, args.key_len, config.query_dim});
    value = Floats(input, {args.batch, args.key_len, config.query_dim});
    args.key = OrNull(key);
    args.value = OrNull(value);
  }
  std::vector<float> output =
      Floats(input, {args.batch, args.query_len, mha_layer_output_dim(layer)});
  std::vector<float> mask = Floats(input, {args.query_len, args.key_len});
  std::vector<float> weights = Floats(input, {args.batch, args.query_len, args.key_len});
  args.query = OrNull(query);
  args.output = OrNull(output);
  args.is_causal = input.Byte() % 2;
  if (input.Byte() % 3 == 0) args.attn_mask = OrNull(mask);
  if (input.Byte() % 3 == 0) args.attn_weights = OrNull(weights);
  args.average_attn_weights = 1;
  args.num_threads = static_cast<int>(input.Size(2));
  mha_forward(layer, &args);
}

void Cache(FuzzInput& input, const mha_layer* layer, const mha_config& config) {
  mha_kv_cache* cache = nullptr;
  const int64_t max_batch = input.Size(3), max_seq_len = input.Size(12);
  // A cache that is merely huge is a real allocation (and MHA_OUT_OF_MEMORY), not a
  // finding: only small sizes, and sizes no process could map, are tried.
  int64_t tokens = 0;
  if (!__builtin_mul_overflow(max_batch, max_seq_len, &tokens) && tokens > (1 << 16) &&
      tokens < (int64_t{1} << 50)) {
    return;
  }
  const int storage_value = input.Byte() % 4;  // 3: no such storage
  mha_kv_storage storage;
  static_assert(sizeof storage == sizeof storage_value, "C enums are int-sized");
  std::memcpy(&storage, &storage_value, sizeof storage);
  if (mha_kv_cache_create(layer, max_batch, max_seq_len, storage, &cache) != MHA_OK) {
    return;
  }
  for (int step = 0; step < 4; ++step) {
    const int64_t batch = input.Size(3), tokens = input.Size(4);
    std::vector<float> query = Floats(input, {batch, tokens, config.query_dim});
    std::vector<float> output =
        Floats(input, {batch, tokens, mha_layer_output_dim(layer)});
    mha_cache_forward_args args{};
    args.struct_size = sizeof args;
    args.batch = batch, args.new_tokens = tokens, args.query = OrNull(query);
    args.output = OrNull(output), args.num_threads = 1;
    mha_forward_with_cache_ex(layer, cache, &args);
    if (input.Byte() % 4 == 0) {
      // 0: every sequence (-1); n > 0: index n - 1; negative: passed as chosen.
      const int64_t sequence = input.Size(3);
      mha_kv_cache_reset(cache, sequence > 0    ? sequence - 1
                                : sequence == 0 ? -1
                                                : sequence);
    }
    mha_kv_cache_length(cache, input.Size(3));
  }
  mha_kv_cache_destroy(cache);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput input(data, size);
  mha_config config = {};
  config.num_heads = input.Size(4);
  config.head_dim = input.Size(8);
  config.query_dim = input.Size(16);
  config.num_kv_heads = input.Byte() % 3;
  const uint8_t features = input.Byte();
  if (features & 1) config.features.softcap = input.Float();
  if (features & 2) config.features.sliding_window = input.Size(8);
  if (features & 4) config.features.alibi = 1;
  std::vector<float> weights[4];
  mha_weights w = {};
  mha_projection* parts[4] = {&w.query, &w.key, &w.value, &w.output};
  if (config.num_heads >= 0 && config.num_heads <= 64 && config.head_dim >= 0 &&
      config.head_dim <= 64) {
    const int64_t model = config.num_heads * config.head_dim;
    const int64_t kv = config.num_kv_heads ? config.num_kv_heads : config.num_heads;
    const int64_t rows[4] = {model, kv * config.head_dim, kv * config.head_dim,
                             config.query_dim};
    const int64_t cols[4] = {config.query_dim, config.query_dim, config.query_dim, model};
    for (int p = 0; p < 4; ++p) {
      weights[p] = Floats(input, {rows[p], cols[p]});
      parts[p]->weight = OrNull(weights[p]);
    }
    w.output_dim = config.query_dim;  // the output weight is [query_dim, model]
  }
  const int layout_value = input.Byte() % 4;  // 3: no such layout
  std::memcpy(&w.key.layout, &layout_value, sizeof layout_value);
  mha_layer* layer = nullptr;
  const mha_layer_create_args create{sizeof(mha_layer_create_args), &config, &w, nullptr};
  if (mha_layer_create_ex(&create, &layer) != MHA_OK) return 0;
  Forward(input, layer, config);
  Cache(input, layer, config);
  mha_layer_destroy(layer);
  return 0;
}
