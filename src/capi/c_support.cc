// The C API's shared support (c_support.h).
#include "src/capi/c_support.h"

#include <cstdio>
#include <vector>

namespace mha::capi {
namespace {

thread_local char t_last_error[4096];

}  // namespace

const char* LastError() { return t_last_error; }

void SetLastError(const char* prefix, const char* message) noexcept {
  std::snprintf(t_last_error, sizeof t_last_error, "%s%s", prefix, message);
}

void Require(const void* pointer, const char* name) {
  if (!pointer) throw mha::Error(std::string("mha: ") + name + ": must not be NULL");
}

[[noreturn]] void UnknownValue(const std::string& name, int value) {
  throw mha::Error("mha: " + name + ": unknown value " + std::to_string(value));
}

CacheStorage ToStorage(const mha_kv_storage& storage) {
  // Every kind of the one list (mha/kv_storage_kinds.h): a new kind needs no line here.
  switch (EnumValue(storage)) {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) \
  case MHA_KV_##C_NAME:                                   \
    return {mha::DType::dtype, mha::KvScales::scales};
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
  }
  UnknownValue("storage", EnumValue(storage));
}

mha::RotaryConfig ToRotary(const mha_rope_config& c, int64_t head_dim) {
  mha::RotaryConfig rotary;
  const int pairing = EnumValue(c.pairing), scaling = EnumValue(c.scaling);
  if (pairing != MHA_ROPE_NONE && pairing != MHA_ROPE_HALF_SPLIT &&
      pairing != MHA_ROPE_INTERLEAVED) {
    UnknownValue("rope.pairing", pairing);
  }
  if (scaling < MHA_ROPE_SCALING_NONE || scaling > MHA_ROPE_SCALING_LONGROPE) {
    UnknownValue("rope.scaling", scaling);
  }
  rotary.pairing = static_cast<mha::RotaryPairing>(pairing);
  rotary.rotary_dim = c.rotary_dim;
  if (c.theta != 0.0) rotary.theta = c.theta;
  if (c.max_positions != 0) rotary.max_positions = c.max_positions;
  rotary.scaling.type = static_cast<mha::RopeScalingType>(scaling);
  if (c.factor != 0.0) rotary.scaling.factor = c.factor;
  if (c.low_freq_factor != 0.0) rotary.scaling.low_freq_factor = c.low_freq_factor;
  if (c.high_freq_factor != 0.0) rotary.scaling.high_freq_factor = c.high_freq_factor;
  if (c.original_max_position_embeddings != 0) {
    rotary.scaling.original_max_position_embeddings = c.original_max_position_embeddings;
  }
  if (c.attention_factor != 0.0) rotary.attention_factor = c.attention_factor;
  rotary.scaling.attention_factor = c.longrope_attention_factor;
  const auto read_half = [&](const float* values, const char* name,
                             std::vector<float>& out) {
    if (!values) return;
    const int64_t half = (c.rotary_dim ? c.rotary_dim : head_dim) / 2;
    if (half < 1 || half > (int64_t{1} << 20)) {
      throw mha::Error(std::string("mha: rope.") + name +
                       ": needs rope.rotary_dim (0: head_dim " +
                       std::to_string(head_dim) + ") in [2, 2^21], got " +
                       std::to_string(c.rotary_dim));
    }
    out.assign(values, values + half);
  };
  read_half(c.short_factor, "short_factor", rotary.scaling.short_factor);
  read_half(c.long_factor, "long_factor", rotary.scaling.long_factor);
  read_half(c.inv_freq, "inv_freq", rotary.inv_freq);
  return rotary;
}

mha::PagedKvCacheOptions ToPagedOptions(const mha_paged_kv_cache_options& options) {
  mha::PagedKvCacheOptions o;
  o.num_blocks = options.num_blocks;
  o.block_size = options.block_size ? options.block_size : 16;
  o.max_sequences = options.max_sequences;
  o.num_layers = options.num_layers ? options.num_layers : 1;
  const CacheStorage storage = ToStorage(options.storage);
  o.storage = storage.dtype;
  o.scales = storage.scales;
  o.sliding_window = options.sliding_window;
  o.attention_chunk_size = options.attention_chunk_size;
  return o;
}

}  // namespace mha::capi
