/* mha C API: multi-head attention for embedding in any language. Opaque handles,
 * status codes and a readable message for the last failure; no C++ exception ever
 * crosses this interface. Semantics are those of the C++ API (mha/attention.hpp):
 * batch-first fp32 row-major arrays, shapes implied by the config. */
#ifndef MHA_MHA_H_
#define MHA_MHA_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MHA_OK = 0,
  MHA_INVALID_ARGUMENT = 1, /* bad config, shape, pointer or value */
  MHA_OUT_OF_MEMORY = 2,
  MHA_INTERNAL_ERROR = 3 /* anything else, e.g. a oneDNN failure */
} mha_status;

/* The message of the last call that failed on this thread ("" if none). Valid until
 * the next failing call on the same thread. */
const char* mha_last_error(void);

typedef enum {
  MHA_LAYOUT_OUT_IN = 0,           /* [out, in]: PyTorch nn.Linear */
  MHA_LAYOUT_IN_OUT = 1,           /* [in, out]: y = x @ W */
  MHA_LAYOUT_HEADS_IN_HEAD_DIM = 2 /* [heads, in, head_dim] (input projections only) */
} mha_weight_layout;

typedef struct {
  int64_t num_heads, head_dim;
  int64_t query_dim, key_dim, value_dim; /* key_dim/value_dim 0: query_dim */
  int64_t num_kv_heads;                  /* 0: num_heads */
  float scale;                           /* 0: 1 / sqrt(head_dim) */
  int bf16_weights; /* non-zero: projection weights stored as bfloat16 */
} mha_config;

typedef struct {
  const float* weight; /* NULL: no such projection (output only) */
  mha_weight_layout layout;
  const float* bias; /* NULL: no bias */
} mha_projection;

typedef struct {
  mha_projection query, key, value, output;
  int64_t output_dim; /* width of the output projection; 0: num_heads * head_dim */
} mha_weights;

typedef struct mha_layer mha_layer;
typedef struct mha_kv_cache mha_kv_cache;

/* Copies and packs the weights: the caller may free them afterwards. */
mha_status mha_layer_create(const mha_config* config, const mha_weights* weights,
                            mha_layer** layer);
void mha_layer_destroy(mha_layer* layer);
int64_t mha_layer_output_dim(const mha_layer* layer);

typedef struct {
  int64_t batch; /* >= 1 */
  int64_t query_len, key_len;
  const float* query;              /* [batch, query_len, query_dim] */
  const float* key;                /* [batch, key_len, key_dim]; NULL: the query */
  const float* value;              /* [batch, key_len, value_dim]; NULL: the query */
  int is_causal;                   /* query i sees keys 0..i */
  const int64_t* key_lengths;      /* [batch] or NULL */
  const uint8_t* key_padding_mask; /* [batch, key_len], non-zero = ignore, or NULL */
  const float* attn_mask;          /* [query_len, key_len], added to scores, or NULL */
  float* output;                   /* [batch, query_len, output_dim] */
  float* attn_weights;             /* NULL, or [batch, num_heads, query_len, key_len], or
                                      [batch, query_len, key_len] with average_attn_weights */
  int average_attn_weights;
  int num_threads; /* 0: OpenMP's default */
} mha_forward_args;

/* Safe to call from several threads at once on one layer. */
mha_status mha_forward(const mha_layer* layer, const mha_forward_args* args);

/* A KV cache for `layer`: max_batch sequences of up to max_seq_len tokens, keys and
 * values stored as bfloat16 when bf16_storage is non-zero. */
mha_status mha_kv_cache_create(const mha_layer* layer, int64_t max_batch,
                               int64_t max_seq_len, int bf16_storage,
                               mha_kv_cache** cache);
void mha_kv_cache_destroy(mha_kv_cache* cache);
/* sequence -1: every sequence. */
mha_status mha_kv_cache_reset(mha_kv_cache* cache, int64_t sequence);
/* Tokens cached for a sequence, or -1 (with mha_last_error) for a bad index. */
int64_t mha_kv_cache_length(const mha_kv_cache* cache, int64_t sequence);

/* Appends new tokens and attends causally over the cache (see
 * MultiheadAttention::ForwardWithCache). query [batch, new_tokens, query_dim];
 * new_lengths [batch] or NULL (all new_tokens real); output [batch, new_tokens,
 * output_dim]. On failure the cache and output are left as they were. */
mha_status mha_forward_with_cache(const mha_layer* layer, mha_kv_cache* cache,
                                  int64_t batch, int64_t new_tokens, const float* query,
                                  const int64_t* new_lengths, float* output,
                                  int num_threads);

#ifdef __cplusplus
}
#endif

#endif /* MHA_MHA_H_ */
