/* mha C API: multi-head attention for embedding in any language. Opaque handles,
 * status codes and a readable message for the last failure; no C++ exception ever
 * crosses this interface. Semantics are those of the C++ API (mha/attention.hpp):
 * batch-first fp32 row-major arrays, shapes implied by the config. */
#ifndef MHA_MHA_H_
#define MHA_MHA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MHA_OK = 0,
  MHA_INVALID_ARGUMENT = 1, /* bad config, shape, pointer or value */
  MHA_OUT_OF_MEMORY = 2,
  MHA_INTERNAL_ERROR = 3, /* anything else, e.g. a oneDNN failure */
  MHA_OUT_OF_BLOCKS = 4   /* a paged cache's pool is full; nothing was changed */
} mha_status;

/* The message of the last call that failed on this thread ("" if none). Valid until
 * the next failing call on the same thread. */
const char* mha_last_error(void);

/* Caps the instruction set of mha's kernels and projections: "sse4", "avx2",
 * "avx512" or "native" (see mha/isa.hpp). Call before the first layer is created;
 * without a call, the environment variable MHA_MAX_ISA applies. */
mha_status mha_set_max_isa(const char* name);

/* What runs after the cap (see mha/isa.hpp's DescribeIsa). The strings stay valid
 * until the next mha_describe_isa call on this thread. */
typedef struct {
  const char* simd_target; /* Highway's dispatched target, e.g. "AVX3" */
  const char* onednn_isa;  /* oneDNN's effective ISA, e.g. "avx512_core_amx" */
  /* The bf16 product path of attention over bf16 K/V: AVX512_BF16 dot products, on
   * AMX tiles for blocks of 16 query rows or more; neither: fp32 on widened values. */
  int bf16_dot_products, amx_tiles;
  const char* projection_kernels; /* oneDNN implementations so far, comma-separated */
} mha_isa_report;

mha_status mha_describe_isa(mha_isa_report* report);

/* Where the threads of mha's parallel loops run: "spread" (the default: each thread
 * of a call's team but the caller keeps a CPU of its own) or "unbound" (the OS places
 * them). See mha/threads.hpp. For every later call of the process. */
mha_status mha_set_thread_placement(const char* name);

typedef enum {
  MHA_LAYOUT_OUT_IN = 0,           /* [out, in]: PyTorch nn.Linear */
  MHA_LAYOUT_IN_OUT = 1,           /* [in, out]: y = x @ W */
  MHA_LAYOUT_HEADS_IN_HEAD_DIM = 2 /* [heads, in, head_dim] (input projections only) */
} mha_weight_layout;

/* Rotary position embeddings (see mha/rotary.hpp); all-zero: none. */
typedef enum {
  MHA_ROPE_NONE = 0,
  MHA_ROPE_HALF_SPLIT = 1, /* GPT-NeoX, Hugging Face Llama/Mistral/Qwen */
  MHA_ROPE_INTERLEAVED = 2 /* GPT-J, Meta's original Llama */
} mha_rope_pairing;

typedef enum {
  MHA_ROPE_SCALING_NONE = 0,
  MHA_ROPE_SCALING_LINEAR = 1,
  MHA_ROPE_SCALING_LLAMA3 = 2,
  MHA_ROPE_SCALING_DYNAMIC = 3, /* dynamic NTK, by each sequence's length */
  MHA_ROPE_SCALING_LONGROPE = 4 /* LongRoPE (Phi-3): short_factor / long_factor */
} mha_rope_scaling;

typedef struct {
  mha_rope_pairing pairing;
  int64_t rotary_dim;    /* 0: head_dim */
  double theta;          /* 0: 10000 */
  int64_t max_positions; /* 0: 8192 */
  mha_rope_scaling scaling;
  double factor, low_freq_factor, high_freq_factor; /* 0: 1, 1, 4 */
  int64_t original_max_position_embeddings;         /* 0: 8192 */
  const float* inv_freq;   /* [rotary_dim / 2] or NULL: replaces theta and scaling */
  double attention_factor; /* 0: 1 */
  /* longrope: [rotary_dim / 2] each; its cos/sin scale (0: sqrt(1 + ln(factor) /
   * ln(original_max_position_embeddings))) */
  const float *short_factor, *long_factor;
  double longrope_attention_factor;
} mha_rope_config;

/* Which values one QK-norm RMSNorm spans (see mha/features.hpp). */
typedef enum {
  MHA_QK_NORM_PER_HEAD = 0,    /* Qwen 3, Gemma 3: weights [head_dim] */
  MHA_QK_NORM_ACROSS_HEADS = 1 /* OLMo 2: weights [heads * head_dim] (layers only) */
} mha_qk_norm_scope;

/* A count that may be absent where 0 is a value. */
typedef struct {
  int has_value;
  int64_t value;
} mha_optional_int64;

/* Logit, window and QK-norm features: one field per line of mha/feature_options.h,
 * which says what each does, its default and its range. All-zero: none; a zero field
 * takes its default. */
typedef struct {
#define MHA_FEATURE_OPTION(name, group, member, c_type, default_text, range, doc) \
  c_type name;
#include "mha/feature_options.h"
#undef MHA_FEATURE_OPTION
} mha_features;

typedef struct {
  int64_t num_heads, head_dim;
  int64_t query_dim, key_dim, value_dim; /* key_dim/value_dim 0: query_dim */
  int64_t num_kv_heads;                  /* 0: num_heads */
  float scale;                           /* 0: 1 / sqrt(head_dim) */
  int bf16_weights; /* non-zero: projection weights stored as bfloat16 */
  int int8_weights; /* non-zero: int8 projections, dynamic quantisation (mha/config.hpp)
                     */
  int bf16_compute; /* non-zero: attention in bf16, compute_dtype (mha/config.hpp) */
  mha_features features;
  mha_rope_config rope;
} mha_config;

typedef struct {
  const float* weight; /* NULL: no such projection (output only) */
  mha_weight_layout layout;
  const float* bias; /* NULL: no bias */
} mha_projection;

typedef struct {
  mha_projection query, key, value, output;
  int64_t output_dim; /* width of the output projection; 0: num_heads * head_dim */
  const float* sinks; /* [num_heads] attention sinks (gpt-oss), or NULL */
  /* QK-norm weights (features.qk_norm): [head_dim] each per head; [num_heads *
   * head_dim] and [num_kv_heads * head_dim] across heads. NULL without QK-norm. */
  const float* query_norm_weight;
  const float* key_norm_weight;
} mha_weights;

typedef struct mha_layer mha_layer;
typedef struct mha_kv_cache mha_kv_cache;

void mha_layer_destroy(mha_layer* layer);
int64_t mha_layer_output_dim(const mha_layer* layer);

typedef struct {
  int64_t batch; /* >= 1 */
  int64_t query_len, key_len;
  const float* query;              /* [batch, query_len, query_dim] */
  const float* key;                /* [batch, key_len, key_dim]; NULL: the query */
  const float* value;              /* [batch, key_len, value_dim]; NULL: the query */
  int is_causal;                   /* query at position p sees keys 0..p */
  int causal_bottom_right;         /* non-zero: query i at position key_len-query_len+i */
  const int64_t* key_lengths;      /* [batch] or NULL */
  const uint8_t* key_padding_mask; /* [batch, key_len], non-zero = ignore, or NULL */
  const float* attn_mask;          /* [query_len, key_len], added to scores, or NULL */
  float* output;                   /* [batch, query_len, output_dim] */
  float* attn_weights;             /* NULL, or [batch, num_heads, query_len, key_len], or
                                      [batch, query_len, key_len] with average_attn_weights */
  int average_attn_weights;
  int num_threads;             /* 0: OpenMP's default */
  const int64_t* position_ids; /* rotary layers: [batch, query_len], or NULL: 0.. */
} mha_forward_args;

/* Safe to call from several threads at once on one layer. */
mha_status mha_forward(const mha_layer* layer, const mha_forward_args* args);

/* How a KV cache stores keys and values (one value per line of
   mha/kv_storage_kinds.h, which says what each stores); attention always runs in
   fp32. */
typedef enum {
#define MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales) MHA_KV_##C_NAME = c_value,
#include "mha/kv_storage_kinds.h"
#undef MHA_KV_KIND
} mha_kv_storage;

/* A KV cache for `layer`: max_batch sequences of up to max_seq_len tokens. */
mha_status mha_kv_cache_create(const mha_layer* layer, int64_t max_batch,
                               int64_t max_seq_len, mha_kv_storage storage,
                               mha_kv_cache** cache);
void mha_kv_cache_destroy(mha_kv_cache* cache);
/* sequence -1: every sequence. */
mha_status mha_kv_cache_reset(mha_kv_cache* cache, int64_t sequence);
/* Tokens cached for a sequence, or -1 (with mha_last_error) for a bad index. */
int64_t mha_kv_cache_length(const mha_kv_cache* cache, int64_t sequence);

/* Argument structs that may grow (the _ex entry points): zero the struct, set
 * struct_size = sizeof(it), then fill it. Fields are only ever added at the end, each
 * addition a new layout ("Layout 2:" below marks a field the second one added); a
 * struct_size of an earlier layout reads that layout's fields and takes 0 for the
 * rest; any other struct_size is refused (MHA_INVALID_ARGUMENT), the message listing
 * the accepted ones. On x86-64 they are: mha_cache_forward_args 64 (layouts 1 and 2:
 * kv_shared sits in layout 1's padding, so zero the struct) or 72;
 * mha_packed_forward_args 80, 88 or 96; mha_attention_ex_args 480 or 496; the other
 * growing structs (mha_layer_create_args, mha_layer_file_args, mha_latent_config)
 * have one layout, their sizeof. */

/* Head sharding for tensor parallelism (mha/head_shard.hpp): query heads
 * [first_head, end_head) of the full layer, on key/value group boundaries. */
typedef struct {
  int64_t first_head, end_head;
} mha_head_shard;

/* Shard `rank` of `world_size`: the KV groups split as evenly as possible, the first
 * num_kv_heads % world_size ranks taking one group more. Needs 0 <= rank <
 * world_size <= num_kv_heads. */
mha_status mha_even_head_shard(const mha_config* config, int64_t rank, int64_t world_size,
                               mha_head_shard* shard);

typedef struct {
  size_t struct_size;
  const mha_config* config;         /* the full layer's */
  const mha_weights* weights;       /* the full layer's, copied and packed: the caller
                                       may free them afterwards */
  const mha_head_shard* head_shard; /* NULL: the whole layer */
} mha_layer_create_args;

/* A layer. With head_shard, the layer of those heads only: its caches hold only their KV
 * heads, and the outputs of every shard of a layer, summed (MPI_Allreduce), are the full
 * layer's output (the output bias is added by the shard of head 0). */
mha_status mha_layer_create_ex(const mha_layer_create_args* args, mha_layer** layer);

/* A layer from a safetensors file of PyTorch state_dict names, as mha::LayerFile
 * (mha/layer_file.hpp) reads it: nn.MultiheadAttention's or q/k/v_proj and out_proj
 * or o_proj names, F32, BF16 or F16 (widened to float32). A growing struct. */
typedef struct {
  size_t struct_size;
  const char* path;
  const char* prefix;       /* NULL or "": every tensor; else only those named with it,
                               taken off (one layer of a checkpoint:
                               "model.layers.0.self_attn.") */
  int64_t num_heads;        /* query heads: head_dim = the query projection's rows / it */
  int64_t num_kv_heads;     /* 0: num_heads */
  const mha_config* config; /* NULL, or the rest (features, rope, scale, dtypes); its
                               sizes are the file's: one set and different is refused */
  const mha_head_shard* head_shard; /* NULL: the whole layer */
} mha_layer_file_args;
/* On failure (a missing or malformed file, a name the layer does not read, sizes
 * that disagree) *layer is untouched and mha_last_error() names the file. */
mha_status mha_layer_create_from_file(const mha_layer_file_args* args, mha_layer** layer);
typedef struct {
  size_t struct_size;
  int64_t batch, new_tokens;
  const float* query;          /* [batch, new_tokens, query_dim] */
  const int64_t* new_lengths;  /* [batch] or NULL: all new_tokens real */
  const int64_t* position_ids; /* [batch, new_tokens] or NULL: cache length + i */
  float* output;               /* [batch, new_tokens, output_dim] */
  int num_threads;
  /* Layout 2: non-zero: a KV-shared layer (Gemma 3n) reads the new tokens' keys and
   * values another layer appended in this step, appending nothing
   * (ForwardOptions::kv_shared). */
  int kv_shared;
  /* Layout 3: non-zero: ForwardOptions::batch_invariant. */
  int batch_invariant;
} mha_cache_forward_args;

/* Appends new tokens and attends causally over the cache (see
 * MultiheadAttention::ForwardWithCache). On failure the cache and output are left as
 * they were. */
mha_status mha_forward_with_cache_ex(const mha_layer* layer, mha_kv_cache* cache,
                                     const mha_cache_forward_args* args);

/* Cross-attention over a cached memory (see MultiheadAttention::ProjectMemory):
 * memory [batch, memory_len, key_dim] is projected once into sequences 0..batch-1 of
 * `cache` (memory_lengths [batch] or NULL: all); each step then attends query
 * [batch, query_len, query_dim] over it into output [batch, query_len, output_dim]. */
mha_status mha_project_memory(const mha_layer* layer, mha_kv_cache* cache, int64_t batch,
                              int64_t memory_len, const float* memory,
                              const int64_t* memory_lengths);
mha_status mha_forward_cross_attention(const mha_layer* layer, const mha_kv_cache* cache,
                                       int64_t batch, int64_t query_len,
                                       const float* query, float* output,
                                       int num_threads);

/* The paged KV cache of a continuous-batching server (see mha/paged_kv_cache.hpp). */
typedef struct mha_paged_kv_cache mha_paged_kv_cache;

typedef struct {
  int64_t num_blocks;    /* >= 1 */
  int64_t block_size;    /* tokens per block, a multiple of 16 in [16, 256]; 0: 16 */
  int64_t max_sequences; /* sequence ids are 0 .. max_sequences - 1 */
  int64_t num_layers;    /* 0: 1 */
  mha_kv_storage storage;
  int64_t sliding_window;       /* > 0: keep only the blocks this window can still see */
  int64_t attention_chunk_size; /* > 0: keep only the current chunk's blocks */
} mha_paged_kv_cache_options;

typedef struct {
  int64_t num_blocks, free_blocks, used_blocks, shared_blocks, sequences;
  int64_t bytes_per_block;
} mha_paged_kv_cache_stats;

mha_status mha_paged_kv_cache_create(const mha_layer* layer,
                                     const mha_paged_kv_cache_options* options,
                                     mha_paged_kv_cache** cache);
void mha_paged_kv_cache_destroy(mha_paged_kv_cache* cache);
mha_status mha_paged_kv_cache_add_sequence(mha_paged_kv_cache* cache, int64_t sequence);
mha_status mha_paged_kv_cache_remove_sequence(mha_paged_kv_cache* cache,
                                              int64_t sequence);
mha_status mha_paged_kv_cache_fork(mha_paged_kv_cache* cache, int64_t parent,
                                   int64_t child);
mha_status mha_paged_kv_cache_truncate(mha_paged_kv_cache* cache, int64_t sequence,
                                       int64_t length);
/* Speculative decoding's accepted path (PagedKvCache::KeepTokens): the tokens at
 * first + kept[k] (increasing) move to first + k; the sequence ends at first + count. */
mha_status mha_paged_kv_cache_keep_tokens(mha_paged_kv_cache* cache, int64_t sequence,
                                          int64_t first, const int64_t* kept,
                                          int64_t count);
/* Room for counts[i] more tokens in sequences[i]; all or nothing (MHA_OUT_OF_BLOCKS). */
mha_status mha_paged_kv_cache_append_slots(mha_paged_kv_cache* cache,
                                           const int64_t* sequences,
                                           const int64_t* counts, int64_t num_sequences);
/* Tokens of a sequence, or -1 (with mha_last_error) when it does not exist. */
int64_t mha_paged_kv_cache_length(const mha_paged_kv_cache* cache, int64_t sequence);
mha_status mha_paged_kv_cache_get_stats(const mha_paged_kv_cache* cache,
                                        mha_paged_kv_cache_stats* stats);

typedef struct {
  size_t struct_size;
  int64_t layer_index;
  int64_t num_tokens;
  const float* query; /* [num_tokens, query_dim] */
  int64_t num_sequences;
  const int64_t* sequence_ids;    /* [num_sequences] */
  const int64_t* query_start_loc; /* [num_sequences + 1] */
  const int64_t* position_ids;    /* [num_tokens] or NULL */
  float* output;                  /* [num_tokens, output_dim] */
  int num_threads;
  /* Layout 2: non-zero: a KV-shared layer reads layer_index's keys and values of
   * these tokens, written in this step by that layer (ForwardOptions::kv_shared). */
  int kv_shared;
  /* Layout 2: [num_tokens] or NULL: each token's parent among its sequence's new
   * tokens, or -1 (a token tree: PackedBatch::tree_parents). */
  const int64_t* tree_parents;
  /* Layout 3: non-zero: each token's output bits do not depend on the other tokens
   * of the step (ForwardOptions::batch_invariant; fp32 or bf16 weights). */
  int batch_invariant;
} mha_packed_forward_args;

/* One packed step (see MultiheadAttention::ForwardPacked): query holds the new
 * tokens of num_sequences sequences, sequence i's at rows query_start_loc[i] ..
 * query_start_loc[i+1]-1 (mha_paged_kv_cache_append_slots first). */
mha_status mha_forward_packed_ex(const mha_layer* layer, mha_paged_kv_cache* cache,
                                 const mha_packed_forward_args* args);

/* The attention core (see mha/scaled_dot_product_attention.hpp). */
typedef struct mha_rotary mha_rotary;
/* The cos/sin table for a head_dim, built once. */
mha_status mha_rotary_create(const mha_rope_config* config, int64_t head_dim,
                             mha_rotary** rotary);
void mha_rotary_destroy(mha_rotary* rotary);

typedef enum {
  MHA_BHSD = 0, /* [batch, heads, seq, head_dim] */
  MHA_BSHD = 1  /* [batch, seq, heads, head_dim] */
} mha_head_layout;

/* A float view: shape in the layout's order; last dimension contiguous; strides in
 * elements for the first three dimensions (all 0: dense). */
typedef struct {
  const float* data;
  int64_t shape[4];
  mha_head_layout layout;
  int64_t strides[3];
} mha_attention_tensor;

typedef struct {
  mha_attention_tensor query, key, value;
  mha_attention_tensor output; /* data written (cast from const) */
  float scale;                 /* 0: 1 / sqrt(head_dim) */
  int is_causal, causal_bottom_right;
  const int64_t* key_lengths;      /* [batch] or NULL */
  const uint8_t* key_padding_mask; /* [batch, key_len], non-zero = ignore, or NULL */
  const float* attn_mask;          /* [query_len, key_len], added to scores, or NULL */
  mha_features features;
  const float* sinks;             /* [query heads] or NULL */
  const mha_rotary* rotary;       /* or NULL */
  const int64_t* query_positions; /* [batch, query_len] or NULL: key_len-query_len+i */
  const int64_t* key_positions;   /* [batch, key_len] or NULL: j */
  float* logsumexp;               /* [batch, query heads, query_len] or NULL */
  int num_threads;
} mha_attention_args;

/* The attention core's call: `call` and the fields added after it. */
typedef struct {
  size_t struct_size;
  mha_attention_args call;
  /* Layout 2: QK-norm weights ([head_dim] each) for call.features.qk_norm
   * (per head); NULL: none. */
  const float* query_norm_weight;
  const float* key_norm_weight;
} mha_attention_ex_args;

mha_status mha_scaled_dot_product_attention_ex(const mha_attention_ex_args* args);

/* Multi-head latent attention: DeepSeek V2/V3's layer and its latent cache (see
 * mha/latent_attention.hpp). A growing struct (struct_size, as above). */
typedef enum {
  MHA_LATENT_FORM_AUTO = 0,     /* by cost: a prompt with nothing cached expands */
  MHA_LATENT_FORM_ABSORBED = 1, /* always absorbed */
  MHA_LATENT_FORM_EXPANDED = 2  /* only returned: what a call ran */
} mha_latent_form;

typedef struct {
  size_t struct_size;
  int64_t hidden_size, num_heads;
  int64_t q_lora_rank; /* 0: q_proj; else q_a_proj, q_a_layernorm, q_b_proj */
  int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  double rms_norm_eps;  /* 0: 1e-6 */
  mha_rope_config rope; /* DeepSeek: MHA_ROPE_INTERLEAVED; YaRN: inv_freq and
                           attention_factor (rotary_dim: 0 or qk_rope_head_dim) */
  float softmax_scale;  /* 0: (nope + rope)^-0.5 (times mscale^2 under YaRN) */
  mha_latent_form form;
  /* nn.Linear weights [out, in], float32, copied at creation; NULL where q_lora_rank
   * says none. */
  const float* q_proj;
  const float* q_a_proj;
  const float* q_a_layernorm;
  const float* q_b_proj;
  const float* kv_a_proj_with_mqa;
  const float* kv_a_layernorm;
  const float* kv_b_proj;
  const float* o_proj;
} mha_latent_config;

typedef struct mha_latent_layer mha_latent_layer;
typedef struct mha_latent_kv_cache mha_latent_kv_cache;

mha_status mha_latent_layer_create(const mha_latent_config* config,
                                   mha_latent_layer** layer);
void mha_latent_layer_destroy(mha_latent_layer* layer);
/* The latent and the rotary key part per token, nothing else. */
mha_status mha_latent_kv_cache_create(const mha_latent_layer* layer, int64_t max_batch,
                                      int64_t max_seq_len, mha_kv_storage storage,
                                      mha_latent_kv_cache** cache);
void mha_latent_kv_cache_destroy(mha_latent_kv_cache* cache);
/* Keeps a sequence's first `length` tokens (0: empty). */
mha_status mha_latent_kv_cache_truncate(mha_latent_kv_cache* cache, int64_t sequence,
                                        int64_t length);
/* Tokens cached, or -1 (with mha_last_error) for a bad index. */
int64_t mha_latent_kv_cache_length(const mha_latent_kv_cache* cache, int64_t sequence);
int64_t mha_latent_kv_cache_bytes_per_token(const mha_latent_kv_cache* cache);
/* A cached step of the latent layer: args as for mha_forward_with_cache_ex, with
 * query and output the hidden states [batch, new_tokens, hidden_size] (kv_shared is
 * refused, and so are new_lengths other than new_tokens: every row's tokens are
 * cached; uneven steps go through mha_latent_forward_packed_ex). form (or NULL)
 * receives the form the call ran. On failure the cache and output are unchanged. */
mha_status mha_latent_forward_with_cache_ex(const mha_latent_layer* layer,
                                            mha_latent_kv_cache* cache,
                                            const mha_cache_forward_args* args,
                                            mha_latent_form* form);
/* A paged cache of `layer`'s latents (every layer of a model in one pool, as for
 * mha_paged_kv_cache_create; no sliding_window or attention_chunk_size), managed by
 * the mha_paged_kv_cache_* calls. */
mha_status mha_latent_paged_kv_cache_create(const mha_latent_layer* layer,
                                            const mha_paged_kv_cache_options* options,
                                            mha_paged_kv_cache** cache);
/* One packed step of the latent layer: args as for mha_forward_packed_ex, with query
 * and output the hidden states [num_tokens, hidden_size] (token trees too; kv_shared
 * is refused). */
mha_status mha_latent_forward_packed_ex(const mha_latent_layer* layer,
                                        mha_paged_kv_cache* cache,
                                        const mha_packed_forward_args* args);

#ifdef __cplusplus
}
#endif

#endif /* MHA_MHA_H_ */
