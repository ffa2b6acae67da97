// The C API of multi-head latent attention (mha.h, "Multi-head latent attention"):
// the config struct to LatentAttentionConfig and LatentAttentionWeights, handles
// around the layer and its latent cache.
#include "mha/mha.h"

#include <cstdint>
#include <optional>
#include <string>

#include "mha/latent_attention.hpp"
#include "src/capi/c_calls.h"
#include "src/capi/c_support.h"
#include "src/validation/latent_config.h"

struct mha_latent_layer {
  mha::MultiheadLatentAttention attention;
};

struct mha_latent_kv_cache {
  mha::KvCache cache;
};

namespace {

using mha::capi::EnumValue;
using mha::capi::Guard;
using mha::capi::Require;

mha::LatentAttentionConfig ToLatentConfig(const mha_latent_config& c) {
  mha::LatentAttentionConfig config;
  config.hidden_size = c.hidden_size;
  config.num_heads = c.num_heads;
  config.q_lora_rank = c.q_lora_rank;
  config.kv_lora_rank = c.kv_lora_rank;
  config.qk_nope_head_dim = c.qk_nope_head_dim;
  config.qk_rope_head_dim = c.qk_rope_head_dim;
  config.v_head_dim = c.v_head_dim;
  if (c.rms_norm_eps != 0.0) config.rms_norm_eps = c.rms_norm_eps;
  config.rotary = mha::capi::ToRotary(c.rope, c.qk_rope_head_dim);
  if (c.softmax_scale != 0.0f) config.softmax_scale = c.softmax_scale;
  const int form = EnumValue(c.form);
  if (form != MHA_LATENT_FORM_AUTO && form != MHA_LATENT_FORM_ABSORBED) {
    mha::capi::UnknownValue("config.form (auto or absorbed)", form);
  }
  config.form =
      form == MHA_LATENT_FORM_AUTO ? mha::LatentForm::kAuto : mha::LatentForm::kAbsorbed;
  return config;
}

// A weight of `shape`, or an absent view for NULL (the layer names what it needs).
mha::TensorView Weight(const float* data, mha::Shape shape) {
  return data ? mha::TensorView(data, shape) : mha::TensorView();
}

mha::LatentAttentionWeights ToLatentWeights(const mha::LatentAttentionConfig& c,
                                            const mha_latent_config& w) {
  const int64_t query_dim = c.num_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
  mha::LatentAttentionWeights weights;
  weights.q_proj = Weight(w.q_proj, {query_dim, c.hidden_size});
  weights.q_a_proj = Weight(w.q_a_proj, {c.q_lora_rank, c.hidden_size});
  weights.q_a_layernorm = Weight(w.q_a_layernorm, {c.q_lora_rank});
  weights.q_b_proj = Weight(w.q_b_proj, {query_dim, c.q_lora_rank});
  weights.kv_a_proj_with_mqa =
      Weight(w.kv_a_proj_with_mqa, {c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size});
  weights.kv_a_layernorm = Weight(w.kv_a_layernorm, {c.kv_lora_rank});
  weights.kv_b_proj = Weight(
      w.kv_b_proj, {c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank});
  weights.o_proj = Weight(w.o_proj, {c.hidden_size, c.num_heads * c.v_head_dim});
  return weights;
}

// The latent layer caches every row's new_tokens: a shorter row would cache its
// padding as real tokens, so uneven new_lengths are refused, never ignored.
void RefuseUnevenLengths(const mha::capi::CachedCall& call) {
  if (!call.new_lengths.present()) return;
  const int64_t* lengths = static_cast<const int64_t*>(call.new_lengths.data);
  for (int64_t b = 0; b < call.args.batch; ++b) {
    if (lengths[b] != call.args.new_tokens) {
      throw mha::Error("mha: args.new_lengths: the latent layer caches all new_tokens (" +
                       std::to_string(call.args.new_tokens) + ") of every row, got " +
                       std::to_string(lengths[b]) + " for row " + std::to_string(b) +
                       " (uneven steps: mha_latent_forward_packed_ex)");
    }
  }
}

}  // namespace

mha_status mha_latent_layer_create(const mha_latent_config* versioned,
                                   mha_latent_layer** layer) {
  return Guard([&] {
    Require(layer, "layer");
    const mha_latent_config c = mha::capi::VersionedArgs(versioned);
    const mha::LatentAttentionConfig config = ToLatentConfig(c);
    mha::internal::ValidateLatentConfig(config);  // before sizes multiply
    *layer = new mha_latent_layer{
        mha::MultiheadLatentAttention(config, ToLatentWeights(config, c))};
  });
}

void mha_latent_layer_destroy(mha_latent_layer* layer) { delete layer; }

mha_status mha_latent_kv_cache_create(const mha_latent_layer* layer, int64_t max_batch,
                                      int64_t max_seq_len, mha_kv_storage storage,
                                      mha_latent_kv_cache** cache) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const mha::capi::CacheStorage kind = mha::capi::ToStorage(storage);
    *cache = new mha_latent_kv_cache{mha::KvCache(layer->attention.config(), max_batch,
                                                  max_seq_len, kind.dtype, kind.scales)};
  });
}

void mha_latent_kv_cache_destroy(mha_latent_kv_cache* cache) { delete cache; }

mha_status mha_latent_kv_cache_truncate(mha_latent_kv_cache* cache, int64_t sequence,
                                        int64_t length) {
  return Guard([&] {
    Require(cache, "cache");
    cache->cache.Truncate(sequence, length);
  });
}

int64_t mha_latent_kv_cache_length(const mha_latent_kv_cache* cache, int64_t sequence) {
  int64_t length = -1;
  Guard([&] {
    Require(cache, "cache");
    length = cache->cache.length(sequence);
  });
  return length;
}

int64_t mha_latent_kv_cache_bytes_per_token(const mha_latent_kv_cache* cache) {
  return cache ? cache->cache.bytes_per_token() : -1;
}

mha_status mha_latent_forward_with_cache_ex(const mha_latent_layer* layer,
                                            mha_latent_kv_cache* cache,
                                            const mha_cache_forward_args* args,
                                            mha_latent_form* form) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const int64_t hidden = layer->attention.config().hidden_size;
    const mha::capi::CachedCall call = mha::capi::ReadCachedCall(args, hidden);
    RefuseUnevenLengths(call);
    const mha::LatentForm ran = layer->attention.ForwardWithCache(
        call.query, cache->cache,
        mha::MutableTensorView(call.args.output, call.output_shape(hidden)),
        call.options);
    if (form) {
      *form = ran == mha::LatentForm::kExpanded ? MHA_LATENT_FORM_EXPANDED
                                                : MHA_LATENT_FORM_ABSORBED;
    }
  });
}

mha_status mha_latent_paged_kv_cache_create(const mha_latent_layer* layer,
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

mha_status mha_latent_forward_packed_ex(const mha_latent_layer* layer,
                                        mha_paged_kv_cache* cache,
                                        const mha_packed_forward_args* args) {
  return Guard([&] {
    Require(layer, "layer");
    Require(cache, "cache");
    const int64_t hidden = layer->attention.config().hidden_size;
    const mha::capi::PackedCall call = mha::capi::ReadPackedCall(args, hidden);
    layer->attention.ForwardPacked(
        call.query, call.batch, cache->cache, call.args.layer_index,
        mha::MutableTensorView(call.args.output, call.output_shape(hidden)),
        call.options);
  });
}
