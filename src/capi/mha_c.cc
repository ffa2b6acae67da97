// The C API: each entry point converts its arguments to the C++ API's and turns every
// exception into a status and a thread-local message.
#include "mha/mha.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "mha/mha.hpp"
#include "src/base/check.h"
#include "src/capi/c_calls.h"
#include "src/capi/c_support.h"
#include "src/validation/problem.h"

using mha::capi::CachedCall;
using mha::capi::EnumValue;
using mha::capi::Guard;
using mha::capi::LastError;
using mha::capi::PackedCall;
using mha::capi::ReadCachedCall;
using mha::capi::ReadPackedCall;
using mha::capi::Require;
using mha::capi::ToFeatures;
using mha::capi::ToRotary;
using mha::capi::ToStorage;
using mha::capi::UnknownValue;
using mha::capi::VersionedArgs;

struct mha_layer {
  mha::MultiheadAttention attention;
};

struct mha_kv_cache {
  mha::KvCache cache;
};

struct mha_rotary {
  mha::RotaryEmbedding embedding;
};

namespace {

mha::AttentionConfig ToConfig(const mha_config& c) {
  mha::AttentionConfig config;
  config.num_heads = c.num_heads;
  config.head_dim = c.head_dim;
  config.query_dim = c.query_dim;
  config.key_dim = c.key_dim;
  config.value_dim = c.value_dim;
  config.num_kv_heads = c.num_kv_heads;
  if (c.scale != 0.0f) config.scale = c.scale;
  if (c.bf16_weights && c.int8_weights) {
    throw mha::Error("mha: config: bf16_weights and int8_weights are both set; pick one");
  }
  if (c.bf16_weights) config.weight_dtype = mha::DType::kBFloat16;
  if (c.int8_weights) config.weight_dtype = mha::DType::kInt8;
  if (c.bf16_compute) config.compute_dtype = mha::DType::kBFloat16;
  config.features = ToFeatures(c.features, c.num_heads);
  config.rotary = ToRotary(c.rope, c.head_dim);
  return config;
}

int ToLayout(const mha_weight_layout& field, const std::string& name) {
  const int layout = EnumValue(field);
  if (layout != MHA_LAYOUT_OUT_IN && layout != MHA_LAYOUT_IN_OUT &&
      layout != MHA_LAYOUT_HEADS_IN_HEAD_DIM) {
    UnknownValue(name + ".layout", layout);
  }
  return layout;
}

// A projection of `heads` heads reading `in` features (sizes validated by the caller);
// shapes follow the layout.
mha::Projection ToProjection(const mha_projection& p, const char* name, int64_t in,
                             int64_t heads, int64_t head_dim) {
  mha::Projection projection;
  const int layout = ToLayout(p.layout, std::string("weights.") + name);
  projection.layout = static_cast<mha::WeightLayout>(layout);
  const int64_t out = heads * head_dim;
  mha::Shape shape{out, in};
  if (layout == MHA_LAYOUT_IN_OUT) shape = mha::Shape{in, out};
  if (layout == MHA_LAYOUT_HEADS_IN_HEAD_DIM) shape = mha::Shape{heads, in, head_dim};
  if (p.weight) projection.weight = mha::TensorView(p.weight, shape);
  if (p.bias) projection.bias = mha::TensorView(p.bias, mha::Shape{out});
  return projection;
}

mha::AttentionWeights ToWeights(const mha::AttentionConfig& config,
                                const mha_weights& w) {
  mha::AttentionWeights weights;
  const int64_t kv_heads = config.resolved_num_kv_heads(), d = config.head_dim;
  weights.query = ToProjection(w.query, "query", config.query_dim, config.num_heads, d);
  weights.key = ToProjection(w.key, "key", config.resolved_key_dim(), kv_heads, d);
  weights.value =
      ToProjection(w.value, "value", config.resolved_value_dim(), kv_heads, d);
  if (w.output.weight) {
    const int64_t model = config.model_dim(), out = w.output_dim ? w.output_dim : model;
    const int layout = ToLayout(w.output.layout, "weights.output");
    weights.output.layout = static_cast<mha::WeightLayout>(layout);
    weights.output.weight = mha::TensorView(
        w.output.weight,
        layout == MHA_LAYOUT_IN_OUT ? mha::Shape{model, out} : mha::Shape{out, model});
    if (w.output.bias)
      weights.output.bias = mha::TensorView(w.output.bias, mha::Shape{out});
  }
  if (w.sinks) weights.sinks = mha::TensorView(w.sinks, mha::Shape{config.num_heads});
  const bool across = config.features.qk_norm &&
                      config.features.qk_norm->scope == mha::QkNormScope::kAcrossHeads;
  if (w.query_norm_weight) {
    weights.query_norm_weight =
        mha::TensorView(w.query_norm_weight, mha::Shape{across ? config.model_dim() : d});
  }
  if (w.key_norm_weight) {
    weights.key_norm_weight =
        mha::TensorView(w.key_norm_weight, mha::Shape{across ? config.kv_dim() : d});
  }
  return weights;
}

// The masks of a forward or core call (both argument structs name them alike).
template <class Args>
mha::AttentionMasks ToMasks(const Args& args, int64_t b, int64_t sq, int64_t sk) {
  mha::AttentionMasks masks;
  masks.is_causal = args.is_causal != 0;
  if (args.causal_bottom_right)
    masks.causal_alignment = mha::CausalAlignment::kBottomRight;
  if (args.key_lengths) {
    masks.key_lengths =
        mha::TensorView(args.key_lengths, mha::DType::kInt64, mha::Shape{b});
  }
  if (args.key_padding_mask) {
    masks.key_padding_mask =
        mha::TensorView(args.key_padding_mask, mha::DType::kBool, mha::Shape{b, sk});
  }
  if (args.attn_mask)
    masks.attn_mask = mha::TensorView(args.attn_mask, mha::Shape{sq, sk});
  return masks;
}

// A C core tensor as the core's strided view; every tensor of a call has the query's
// layout (the core's options.layout).
mha::TensorView ToTensor(const mha_attention_tensor& t, const char* name,
                         int query_layout) {
  const int layout = EnumValue(t.layout);
  if (layout != MHA_BHSD && layout != MHA_BSHD)
    UnknownValue(name + std::string(".layout"), layout);
  if (layout != query_layout) {
    throw mha::Error(std::string("mha: ") + name + ".layout: must be the query's (" +
                     std::to_string(query_layout) + "), got " + std::to_string(layout));
  }
  return mha::TensorView(t.data,
                         mha::Shape{t.shape[0], t.shape[1], t.shape[2], t.shape[3]})
      .WithStrides(t.strides[0], t.strides[1], t.strides[2]);
}

int64_t ToSeq(const mha_attention_tensor& t) {
  return t.layout == MHA_BHSD ? t.shape[2] : t.shape[1];
}

}  // namespace

extern "C" {

const char* mha_last_error(void) { return LastError(); }

mha_status mha_set_max_isa(const char* name) {
  return Guard([&] {
    Require(name, "name");
    mha::SetMaxIsa(mha::ParseIsa(name, "name"));
  });
}

mha_status mha_set_thread_placement(const char* name) {
  return Guard([&] {
    Require(name, "name");
    mha::SetThreadPlacement(mha::ParseThreadPlacement(name, "name"));
  });
}

mha_status mha_describe_isa(mha_isa_report* report) {
  return Guard([&] {
    Require(report, "report");
    // The strings live here until the next call on this thread.
    static thread_local mha::IsaReport described;
    static thread_local std::string kernels;
    described = mha::DescribeIsa();
    kernels.clear();
    for (const std::string& kernel : described.projection_kernels) {
      kernels += (kernels.empty() ? "" : ",") + kernel;
    }
    *report = {described.simd_target.c_str(), described.onednn_isa.c_str(),
               described.bf16_dot_products, described.amx_tiles, kernels.c_str()};
  });
}

mha_status mha_even_head_shard(const mha_config* config, int64_t rank, int64_t world_size,
                               mha_head_shard* shard) {
  return Guard([&] {
    Require(config, "config");
    Require(shard, "shard");
    const mha::HeadShard heads = mha::EvenHeadShard(ToConfig(*config), rank, world_size);
    *shard = {heads.first_head, heads.end_head};
  });
}

namespace {

// The layer of `head_shard`'s heads (NULL: all of them).
mha_layer* NewLayer(const mha::AttentionConfig& config,
                    const mha::AttentionWeights& weights,
                    const mha_head_shard* head_shard) {
  if (!head_shard) return new mha_layer{mha::MultiheadAttention(config, weights)};
  const mha::AttentionShard shard =
      mha::ShardHeads(config, weights, {head_shard->first_head, head_shard->end_head});
  return new mha_layer{mha::MultiheadAttention(shard.config, shard.weights)};
}

// The file's sizes into the caller's config: a size the caller set must be the file's.
mha_config WithFileSizes(const mha_config* given, const mha::AttentionConfig& file) {
  mha_config c;
  std::memset(&c, 0, sizeof c);
  if (given) c = *given;
  const std::pair<const char*, int64_t*> sizes[] = {
      {"num_heads", &c.num_heads}, {"head_dim", &c.head_dim},
      {"query_dim", &c.query_dim}, {"key_dim", &c.key_dim},
      {"value_dim", &c.value_dim}, {"num_kv_heads", &c.num_kv_heads}};
  const int64_t from_file[] = {file.num_heads,
                               file.head_dim,
                               file.query_dim,
                               file.resolved_key_dim(),
                               file.resolved_value_dim(),
                               file.resolved_num_kv_heads()};
  for (size_t i = 0; i < 6; ++i) {
    const int64_t set = *sizes[i].second;
    if (set != 0 && set != from_file[i]) {
      mha::internal::Fail("args.config->", sizes[i].first, ": ", set,
                          " differs from the file's ", from_file[i],
                          " (leave it 0: the file gives the sizes)");
    }
    *sizes[i].second = from_file[i];
  }
  return c;
}

}  // namespace

mha_status mha_layer_create_ex(const mha_layer_create_args* versioned,
                               mha_layer** layer) {
  return Guard([&] {
    const mha_layer_create_args args = VersionedArgs(versioned);
    Require(args.config, "args.config");
    Require(args.weights, "args.weights");
    Require(layer, "layer");
    const mha::AttentionConfig config = ToConfig(*args.config);
    mha::internal::ValidateConfig(config);  // before sizes are multiplied below
    *layer = NewLayer(config, ToWeights(config, *args.weights), args.head_shard);
  });
}

mha_status mha_layer_create_from_file(const mha_layer_file_args* versioned,
                                      mha_layer** layer) {
  return Guard([&] {
    const mha_layer_file_args args = VersionedArgs(versioned);
    Require(args.path, "args.path");
    Require(layer, "layer");
    const mha::LayerFile file = mha::LayerFile::Read(
        args.path, args.num_heads, args.num_kv_heads, args.prefix ? args.prefix : "");
    const mha::AttentionConfig config =
        ToConfig(WithFileSizes(args.config, file.config()));
    *layer = NewLayer(config, file.weights(), args.head_shard);
  });
}

void mha_layer_destroy(mha_layer* layer) { delete layer; }

int64_t mha_layer_output_dim(const mha_layer* layer) {
  return layer ? layer->attention.output_dim() : 0;
}

mha_status mha_forward(const mha_layer* layer, const mha_forward_args* args) {
  return Guard([&] {
    Require(layer, "layer");
    Require(args, "args");
    const mha::AttentionConfig& config = layer->attention.config();
    const int64_t b = args->batch, sq = args->query_len, sk = args->key_len;
    if ((!args->key || !args->value) && sk != sq) {
      mha::internal::Fail("args.key_len: must equal args.query_len (", sq,
                          ") where args.key or args.value is NULL (the query serves "
                          "as them), got ",
                          sk);
    }
    mha::AttentionInputs inputs;
    inputs.query = mha::TensorView(args->query, mha::Shape{b, sq, config.query_dim});
    if (args->key) {
      inputs.key =
          mha::TensorView(args->key, mha::Shape{b, sk, config.resolved_key_dim()});
    }
    if (args->value) {
      inputs.value =
          mha::TensorView(args->value, mha::Shape{b, sk, config.resolved_value_dim()});
    }
    const mha::AttentionMasks masks = ToMasks(*args, b, sq, sk);
    mha::ForwardOptions options;
    options.average_attn_weights = args->average_attn_weights != 0;
    options.num_threads = args->num_threads;
    if (args->position_ids) {
      options.position_ids =
          mha::TensorView(args->position_ids, mha::DType::kInt64, mha::Shape{b, sq});
    }
    mha::AttentionOutputs outputs;
    outputs.output = mha::MutableTensorView(
        args->output, mha::Shape{b, sq, layer->attention.output_dim()});
    if (args->attn_weights) {
      outputs.attn_weights = mha::MutableTensorView(
          args->attn_weights, options.average_attn_weights
                                  ? mha::Shape{b, sq, sk}
                                  : mha::Shape{b, config.num_heads, sq, sk});
    }
    layer->attention.Forward(inputs, masks, outputs, options);
  });
}

mha_status mha_kv_cache_create(const mha_layer* layer, int64_t max_batch,
                               int64_t max_seq_len, mha_kv_storage storage,
                               mha_kv_cache** cache) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const mha::capi::CacheStorage kind = ToStorage(storage);
    *cache = new mha_kv_cache{mha::KvCache(layer->attention.config(), max_batch,
                                           max_seq_len, kind.dtype, kind.scales)};
  });
}

void mha_kv_cache_destroy(mha_kv_cache* cache) { delete cache; }

mha_status mha_kv_cache_reset(mha_kv_cache* cache, int64_t sequence) {
  return Guard([&] {
    Require(cache, "cache");
    if (sequence == -1) {
      cache->cache.Reset();
    } else {
      cache->cache.Reset(sequence);
    }
  });
}

int64_t mha_kv_cache_length(const mha_kv_cache* cache, int64_t sequence) {
  int64_t length = -1;
  Guard([&] {
    Require(cache, "cache");
    length = cache->cache.length(sequence);
  });
  return length;
}

mha_status mha_forward_with_cache_ex(const mha_layer* layer, mha_kv_cache* cache,
                                     const mha_cache_forward_args* args) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const CachedCall call = ReadCachedCall(args, layer->attention.config().query_dim);
    layer->attention.ForwardWithCache(
        call.query, call.new_lengths, cache->cache,
        mha::MutableTensorView(call.args.output,
                               call.output_shape(layer->attention.output_dim())),
        call.options);
  });
}

mha_status mha_project_memory(const mha_layer* layer, mha_kv_cache* cache, int64_t batch,
                              int64_t memory_len, const float* memory,
                              const int64_t* memory_lengths) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const int64_t dim = layer->attention.config().resolved_key_dim();
    layer->attention.ProjectMemory(
        mha::TensorView(memory, mha::Shape{batch, memory_len, dim}),
        memory_lengths
            ? mha::TensorView(memory_lengths, mha::DType::kInt64, mha::Shape{batch})
            : mha::TensorView(),
        cache->cache);
  });
}

mha_status mha_forward_cross_attention(const mha_layer* layer, const mha_kv_cache* cache,
                                       int64_t batch, int64_t query_len,
                                       const float* query, float* output,
                                       int num_threads) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    mha::ForwardOptions options;
    options.num_threads = num_threads;
    layer->attention.ForwardCrossAttention(
        mha::TensorView(
            query, mha::Shape{batch, query_len, layer->attention.config().query_dim}),
        cache->cache,
        mha::MutableTensorView(
            output, mha::Shape{batch, query_len, layer->attention.output_dim()}),
        options);
  });
}

mha_status mha_paged_kv_cache_create(const mha_layer* layer,
                                     const mha_paged_kv_cache_options* options,
                                     mha_paged_kv_cache** cache) {
  return Guard([&] {
    Require(layer, "layer");
    Require(options, "options");
    Require(cache, "cache");
    *cache = new mha_paged_kv_cache{mha::PagedKvCache(
        layer->attention.config(), mha::capi::ToPagedOptions(*options))};
  });
}

void mha_paged_kv_cache_destroy(mha_paged_kv_cache* cache) { delete cache; }

mha_status mha_paged_kv_cache_add_sequence(mha_paged_kv_cache* cache, int64_t sequence) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.AddSequence(sequence);
  });
}

mha_status mha_paged_kv_cache_remove_sequence(mha_paged_kv_cache* cache,
                                              int64_t sequence) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.RemoveSequence(sequence);
  });
}

mha_status mha_paged_kv_cache_fork(mha_paged_kv_cache* cache, int64_t parent,
                                   int64_t child) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.Fork(parent, child);
  });
}

mha_status mha_paged_kv_cache_truncate(mha_paged_kv_cache* cache, int64_t sequence,
                                       int64_t length) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.Truncate(sequence, length);
  });
}

mha_status mha_paged_kv_cache_keep_tokens(mha_paged_kv_cache* cache, int64_t sequence,
                                          int64_t first, const int64_t* kept,
                                          int64_t count) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.KeepTokens(sequence, first, kept, count);
  });
}

mha_status mha_paged_kv_cache_append_slots(mha_paged_kv_cache* cache,
                                           const int64_t* sequences,
                                           const int64_t* counts, int64_t num_sequences) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.AppendSlots(sequences, counts, num_sequences);
  });
}

int64_t mha_paged_kv_cache_length(const mha_paged_kv_cache* cache, int64_t sequence) {
  int64_t length = -1;
  Guard([&] {
    Require(cache, "cache");
    length = cache->cache.length(sequence);
  });
  return length;
}

mha_status mha_paged_kv_cache_get_stats(const mha_paged_kv_cache* cache,
                                        mha_paged_kv_cache_stats* stats) {
  return Guard([&] {
    Require(cache, "cache");
    Require(stats, "stats");
    const mha::PagedKvCacheStats s = cache->cache.stats();
    *stats = {s.num_blocks,    s.free_blocks, s.used_blocks,
              s.shared_blocks, s.sequences,   s.bytes_per_block};
  });
}

mha_status mha_forward_packed_ex(const mha_layer* layer, mha_paged_kv_cache* cache,
                                 const mha_packed_forward_args* args) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const PackedCall call = ReadPackedCall(args, layer->attention.config().query_dim);
    layer->attention.ForwardPacked(
        call.query, call.batch, cache->cache, call.args.layer_index,
        mha::MutableTensorView(call.args.output,
                               call.output_shape(layer->attention.output_dim())),
        call.options);
  });
}

mha_status mha_rotary_create(const mha_rope_config* config, int64_t head_dim,
                             mha_rotary** rotary) {
  return Guard([&] {
    Require(config, "config");
    Require(rotary, "rotary");
    *rotary = new mha_rotary{mha::RotaryEmbedding(ToRotary(*config, head_dim), head_dim)};
  });
}

void mha_rotary_destroy(mha_rotary* rotary) { delete rotary; }

mha_status mha_scaled_dot_product_attention_ex(const mha_attention_ex_args* versioned) {
  return Guard([&] {
    // Layouts (mha.h): 1 (call), 2 (QK-norm weights).
    const size_t releases[] = {offsetof(mha_attention_ex_args, query_norm_weight),
                               sizeof(mha_attention_ex_args)};
    const mha_attention_ex_args copy = VersionedArgs(versioned, releases);
    const mha_attention_args* args = &copy.call;
    const int layout = EnumValue(args->query.layout);
    const mha::TensorView query = ToTensor(args->query, "query", layout);
    const mha::TensorView key = ToTensor(args->key, "key", layout);
    const mha::TensorView value = ToTensor(args->value, "value", layout);
    const mha::TensorView out = ToTensor(args->output, "output", layout);
    const int64_t b = query.shape[0], sq = ToSeq(args->query), sk = ToSeq(args->key);
    const int64_t heads =
        args->query.layout == MHA_BHSD ? query.shape[1] : query.shape[2];
    const mha::AttentionMasks masks = ToMasks(*args, b, sq, sk);
    mha::CoreOptions options;
    options.layout = layout == MHA_BHSD ? mha::HeadLayout::kBHSD : mha::HeadLayout::kBSHD;
    if (args->scale != 0.0f) options.scale = args->scale;
    options.features = ToFeatures(args->features, heads);
    if (args->sinks) options.sinks = mha::TensorView(args->sinks, mha::Shape{heads});
    const int64_t head_dim = query.shape[3];
    if (copy.query_norm_weight) {
      options.query_norm_weight =
          mha::TensorView(copy.query_norm_weight, mha::Shape{head_dim});
    }
    if (copy.key_norm_weight) {
      options.key_norm_weight =
          mha::TensorView(copy.key_norm_weight, mha::Shape{head_dim});
    }
    if (args->rotary) options.rotary = &args->rotary->embedding;
    if (args->query_positions) {
      options.query_positions =
          mha::TensorView(args->query_positions, mha::DType::kInt64, mha::Shape{b, sq});
    }
    if (args->key_positions) {
      options.key_positions =
          mha::TensorView(args->key_positions, mha::DType::kInt64, mha::Shape{b, sk});
    }
    options.num_threads = args->num_threads;
    mha::MutableTensorView output =
        mha::MutableTensorView(const_cast<void*>(out.data), mha::DType::kFloat32,
                               out.shape)
            .WithStrides(out.strides[0], out.strides[1], out.strides[2]);
    mha::MutableTensorView logsumexp;
    if (args->logsumexp) {
      logsumexp = mha::MutableTensorView(args->logsumexp, mha::Shape{b, heads, sq});
    }
    mha::ScaledDotProductAttention(query, key, value, masks, output, options, logsumexp);
  });
}

}  // extern "C"
