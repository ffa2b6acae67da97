/* The C API from C: a forward checked against a naive C implementation, errors as
 * status codes with messages, KV-cache decoding against a causal forward, the paged
 * cache's packed steps (and running out of blocks), the cross-attention cache, head
 * shards (tensor parallelism), and the attention core (GQA, BSHD, sinks, log-sum-exp,
 * rotary table) against naive C. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha/mha.h"

enum { B = 2, S = 5, E = 8, H = 2, D = 4 };

/* The test's shorthands for the struct-argument entry points, in their common form. */
static mha_status LayerCreate(const mha_config* config, const mha_weights* weights,
                              mha_layer** layer) {
  mha_layer_create_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.config = config, args.weights = weights;
  return mha_layer_create_ex(&args, layer);
}

static mha_status Core(const mha_attention_args* call) {
  mha_attention_ex_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.call = *call;
  return mha_scaled_dot_product_attention_ex(&args);
}

static mha_cache_forward_args CacheArgs(int64_t batch, int64_t new_tokens,
                                        const float* query, float* output) {
  mha_cache_forward_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.batch = batch, args.new_tokens = new_tokens, args.query = query;
  args.output = output;
  return args;
}

static mha_status CacheStep(const mha_layer* layer, mha_kv_cache* cache, int64_t batch,
                            int64_t new_tokens, const float* query, float* output) {
  const mha_cache_forward_args args = CacheArgs(batch, new_tokens, query, output);
  return mha_forward_with_cache_ex(layer, cache, &args);
}

static mha_status LatentCacheStep(const mha_latent_layer* layer,
                                  mha_latent_kv_cache* cache, int64_t batch,
                                  int64_t new_tokens, const float* hidden_states,
                                  float* output, mha_latent_form* form) {
  const mha_cache_forward_args args = CacheArgs(batch, new_tokens, hidden_states, output);
  return mha_latent_forward_with_cache_ex(layer, cache, &args, form);
}

static mha_packed_forward_args PackedArgs(int64_t num_tokens, const float* query,
                                          int64_t num_sequences, const int64_t* ids,
                                          const int64_t* starts, float* output) {
  mha_packed_forward_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.num_tokens = num_tokens, args.query = query, args.num_sequences = num_sequences;
  args.sequence_ids = ids, args.query_start_loc = starts, args.output = output;
  return args;
}

static mha_status PackedStep(const mha_layer* layer, mha_paged_kv_cache* cache,
                             int64_t num_tokens, const float* query,
                             int64_t num_sequences, const int64_t* ids,
                             const int64_t* starts, float* output) {
  const mha_packed_forward_args args =
      PackedArgs(num_tokens, query, num_sequences, ids, starts, output);
  return mha_forward_packed_ex(layer, cache, &args);
}

/* Growing structs as their first release declared them (a caller built then passes
 * these sizeofs). */
typedef struct {
  size_t struct_size;
  int64_t batch, new_tokens;
  const float* query;
  const int64_t* new_lengths;
  const int64_t* position_ids;
  float* output;
  int num_threads;
} cache_args_first_release;

typedef struct {
  size_t struct_size;
  int64_t layer_index;
  int64_t num_tokens;
  const float* query;
  int64_t num_sequences;
  const int64_t* sequence_ids;
  const int64_t* query_start_loc;
  const int64_t* position_ids;
  float* output;
  int num_threads;
} packed_args_first_release;

static int g_passed, g_failed;

static void Check(int ok, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    printf("FAILED: %s (last error: %s)\n", what, mha_last_error());
  }
}

static float Close(const float* a, const float* b, int n) {
  float worst = 0.0f;
  for (int i = 0; i < n; ++i) worst = fmaxf(worst, fabsf(a[i] - b[i]));
  return worst;
}

/* y[r][o] = sum_i x[r][i] w[o][i] + bias[o]  (nn.Linear layout) */
static void Linear(const float* x, int rows, int in, const float* w, const float* bias,
                   int out, float* y) {
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double sum = bias[o];
      for (int i = 0; i < in; ++i) sum += (double)x[r * in + i] * w[o * in + i];
      y[r * out + o] = (float)sum;
    }
}

/* Naive causal-or-not self-attention with projections, for the check. */
static void Naive(const float* x, const float* w[4], const float* bias[4], int causal,
                  float* out) {
  float q[B * S * E], k[B * S * E], v[B * S * E], ctx[B * S * E];
  Linear(x, B * S, E, w[0], bias[0], E, q);
  Linear(x, B * S, E, w[1], bias[1], E, k);
  Linear(x, B * S, E, w[2], bias[2], E, v);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        double p[S], max = -1e30, sum = 0.0;
        for (int j = 0; j < S; ++j) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d)
            dot += q[(b * S + i) * E + h * D + d] * k[(b * S + j) * E + h * D + d];
          p[j] = (causal && j > i) ? -1e30 : dot / sqrt((double)D);
          if (p[j] > max) max = p[j];
        }
        for (int j = 0; j < S; ++j)
          sum += (p[j] = (p[j] <= -1e29) ? 0.0 : exp(p[j] - max));
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int j = 0; j < S; ++j) acc += p[j] / sum * v[(b * S + j) * E + h * D + d];
          ctx[(b * S + i) * E + h * D + d] = (float)acc;
        }
      }
  Linear(ctx, B * S, E, w[3], bias[3], E, out);
}

/* Naive causal attention core on BSHD q [1, S, 2, D], k/v [1, S, 1, D] with a sink
 * per query head: output like q, lse [1, 2, S]. */
static void NaiveCore(const float* q, const float* k, const float* v, const float* sinks,
                      float* out, float* lse) {
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < S; ++i) {
      double logits[S], max = sinks[h], sum = 0.0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0.0;
        for (int d = 0; d < D; ++d) dot += (double)q[(i * 2 + h) * D + d] * k[j * D + d];
        logits[j] = dot / sqrt((double)D);
        if (logits[j] > max) max = logits[j];
      }
      sum = exp(sinks[h] - max);
      for (int j = 0; j <= i; ++j) sum += exp(logits[j] - max);
      lse[h * S + i] = (float)(max + log(sum));
      for (int d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int j = 0; j <= i; ++j) acc += exp(logits[j] - max) / sum * v[j * D + d];
        out[(i * 2 + h) * D + d] = (float)acc;
      }
    }
}

/* rows x D values of x, each row x * w / sqrt(mean(x^2) + 1e-6), into y. */
static void RmsNormRows(const float* x, int rows, const float* w, float* y) {
  for (int r = 0; r < rows; ++r) {
    double squares = 0.0;
    for (int d = 0; d < D; ++d) squares += (double)x[r * D + d] * x[r * D + d];
    const double inverse = 1.0 / sqrt(squares / D + 1e-6);
    for (int d = 0; d < D; ++d) y[r * D + d] = (float)(x[r * D + d] * inverse * w[d]);
  }
}

static mha_attention_tensor Bshd(const float* data, int64_t heads) {
  mha_attention_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.shape[0] = 1, t.shape[1] = S, t.shape[2] = heads, t.shape[3] = D;
  t.layout = MHA_BSHD;
  return t;
}

static void CheckCore(void) {
  float q[S * 2 * D], k[S * D], v[S * D], sinks[2] = {0.5f, -1.0f};
  for (int i = 0; i < S * 2 * D; ++i) q[i] = (float)sin(0.3 * i);
  for (int i = 0; i < S * D; ++i) k[i] = (float)cos(0.7 * i), v[i] = (float)sin(1.1 * i);
  float out[S * 2 * D] = {0}, expected[S * 2 * D], lse[2 * S], expected_lse[2 * S];
  NaiveCore(q, k, v, sinks, expected, expected_lse);
  mha_attention_args args;
  memset(&args, 0, sizeof args);
  args.query = Bshd(q, 2), args.key = Bshd(k, 1), args.value = Bshd(v, 1);
  args.output = Bshd(out, 2);
  args.is_causal = 1;
  args.sinks = sinks;
  args.logsumexp = lse;
  Check(Core(&args) == MHA_OK, "core call");
  Check(Close(out, expected, S * 2 * D) < 1e-5f, "core output");
  Check(Close(lse, expected_lse, 2 * S) < 1e-5f, "core logsumexp");

  /* The growing struct gives the same bits; a wrong struct_size is refused, naming
   * it, with the output untouched. */
  float out_ex[S * 2 * D];
  mha_attention_ex_args ex;
  memset(&ex, 0, sizeof ex);
  ex.struct_size = sizeof ex;
  ex.call = args;
  ex.call.output = Bshd(out_ex, 2);
  ex.call.logsumexp = NULL;
  Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_OK, "core call, _ex");
  Check(memcmp(out, out_ex, sizeof out) == 0, "core output, _ex: the same bits");
  ex.struct_size = sizeof ex + 8;
  memset(out_ex, 0, sizeof out_ex);
  Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "struct_size") != NULL && out_ex[0] == 0.0f,
        "core struct_size refused");

  /* QK-norm (a field of the growing struct) equals normalising q and k first. */
  float q_norm[S * 2 * D], k_norm[S * D], q_weight[D], k_weight[D], normed[S * 2 * D];
  for (int d = 0; d < D; ++d)
    q_weight[d] = 0.5f + 0.1f * d, k_weight[d] = 1.5f - 0.05f * d;
  RmsNormRows(q, S * 2, q_weight, q_norm);
  RmsNormRows(k, S, k_weight, k_norm);
  mha_attention_args pre = args;
  pre.query = Bshd(q_norm, 2), pre.key = Bshd(k_norm, 1), pre.output = Bshd(normed, 2);
  pre.logsumexp = NULL;
  Check(Core(&pre) == MHA_OK, "core on normalised q, k");
  ex.struct_size = sizeof ex;
  ex.call.features.qk_norm = 1;
  ex.query_norm_weight = q_weight, ex.key_norm_weight = k_weight;
  Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_OK, "core with QK-norm");
  Check(Close(out_ex, normed, S * 2 * D) < 1e-5f, "QK-norm: as normalised first");
  Check(Close(out_ex, out, S * 2 * D) > 1e-3f, "QK-norm changes the output");
  /* The first release's struct_size (sizeof a struct holding only `call`) is taken,
   * and reads no weights past it. */
  ex.struct_size = offsetof(mha_attention_ex_args, query_norm_weight);
  Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "query_norm_weight: required by features.qk_norm"),
        "first-release struct: no weights read");
  ex.struct_size = sizeof ex;
  ex.call.features.qk_norm_scope = MHA_QK_NORM_ACROSS_HEADS;
  Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "qk_norm.scope") != NULL,
        "QK-norm across heads refused by the core");
  /* An out-of-range scope is refused as the integer it is (never loaded as the enum);
   * a group's member set while the group is off is refused, not ignored. */
  {
    const int bad_scope = 7;
    memcpy(&ex.call.features.qk_norm_scope, &bad_scope, sizeof bad_scope);
    Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_INVALID_ARGUMENT &&
              strstr(mha_last_error(), "features.qk_norm_scope: unknown value 7"),
          "unknown QK-norm scope refused");
    ex.call.features.qk_norm_scope = MHA_QK_NORM_PER_HEAD;
    ex.call.features.qk_norm = 0;
    ex.call.features.qk_norm_eps = -5.0;
    Check(mha_scaled_dot_product_attention_ex(&ex) == MHA_INVALID_ARGUMENT &&
              strstr(mha_last_error(),
                     "features.qk_norm_eps: set to -5, but features.qk_norm is off"),
          "a group member without its group refused");
    ex.call.features.qk_norm_eps = 0.0;
  }

  /* A bad window is refused, naming it, with the output untouched. */
  args.features.sliding_window = -2;
  memset(out, 0, sizeof out);
  Check(Core(&args) == MHA_INVALID_ARGUMENT, "bad window");
  Check(strstr(mha_last_error(), "sliding_window") != NULL, "bad window message");
  Check(out[0] == 0.0f && out[S * 2 * D - 1] == 0.0f, "nothing written");
  args.features.sliding_window = 0;
  args.features.attention_chunk_size = -1;
  Check(Core(&args) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "attention_chunk_size") != NULL && out[0] == 0.0f,
        "bad attention chunk refused, naming it");
  /* Chunks of 1 key (Llama 4's chunked attention at its smallest): without sinks
   * every query sees only its own key, so each head's output row is V's. */
  args.features.attention_chunk_size = 1;
  args.sinks = NULL;
  Check(Core(&args) == MHA_OK, "chunked core call");
  float worst = 0.0f;
  for (int i = 0; i < S; ++i)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < D; ++d)
        worst = fmaxf(worst, fabsf(out[(i * 2 + h) * D + d] - v[i * D + d]));
  Check(worst < 1e-6f, "chunks of 1: the output is V");
  args.features.attention_chunk_size = 0;
  args.sinks = sinks;
  /* A bad query temperature is refused, naming it. */
  args.features.temperature_tuning = 1;
  args.features.temperature_tuning_floor_scale = -1.0;
  memset(out, 0, sizeof out);
  Check(Core(&args) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "temperature_tuning.floor_scale") != NULL &&
            out[0] == 0.0f,
        "bad temperature refused, naming it");
  /* A floor_scale past every position leaves every query's scale exactly 1. */
  args.features.temperature_tuning_floor_scale = 1e30;
  args.features.temperature_tuning_attn_scale = 0.5;
  Check(Core(&args) == MHA_OK, "temperature accepted");
  Check(Close(out, expected, S * 2 * D) < 1e-5f, "temperature 1: the plain output");
  /* Its members left set with the group off are refused, not ignored. */
  args.features.temperature_tuning = 0;
  Check(Core(&args) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(),
                   "features.temperature_tuning_floor_scale: set to 1e+30"),
        "temperature members without the group refused");
  args.features.temperature_tuning_floor_scale = 0.0;
  args.features.temperature_tuning_attn_scale = 0.0;

  /* A rotary table: odd rotary_dim refused; a valid one changes the result. */
  mha_rope_config rope;
  memset(&rope, 0, sizeof rope);
  rope.pairing = MHA_ROPE_HALF_SPLIT;
  rope.rotary_dim = 3;
  mha_rotary* rotary = NULL;
  Check(mha_rotary_create(&rope, D, &rotary) == MHA_INVALID_ARGUMENT, "odd rotary_dim");
  Check(strstr(mha_last_error(), "rotary_dim") != NULL, "rotary_dim message");
  rope.rotary_dim = 0;
  Check(mha_rotary_create(&rope, D, &rotary) == MHA_OK, "rotary create");
  args.rotary = rotary;
  Check(Core(&args) == MHA_OK, "core with rope");
  Check(Close(out, expected, S * 2 * D) > 1e-3f, "rope rotates");
  mha_rotary_destroy(rotary);
  /* LongRoPE needs its factors; the core rotates by them. */
  rope.scaling = MHA_ROPE_SCALING_LONGROPE;
  Check(mha_rotary_create(&rope, D, &rotary) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "short_factor") != NULL,
        "longrope without factors refused");
  float factors[D / 2];
  for (int i = 0; i < D / 2; ++i) factors[i] = 1.0f + (float)i;
  rope.short_factor = rope.long_factor = factors;
  Check(mha_rotary_create(&rope, D, &rotary) == MHA_OK, "longrope table");
  args.rotary = rotary;
  Check(Core(&args) == MHA_OK && Close(out, expected, S * 2 * D) > 1e-3f,
        "core with a longrope table");
  args.rotary = NULL;
  mha_rotary_destroy(rotary);
  rope.scaling = MHA_ROPE_SCALING_NONE;
  rope.short_factor = rope.long_factor = NULL;
  /* Caller frequencies with rotary_dim 0 (head_dim, as the header says): D / 2 read. */
  float inv_freq[D / 2];
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = powf(10000.0f, -2.0f * i / D);
  rope.inv_freq = inv_freq;
  Check(mha_rotary_create(&rope, D, &rotary) == MHA_OK, "inv_freq with rotary_dim 0");
  mha_rotary_destroy(rotary);
}

/* Both batch rows of x as two sequences of one paged cache: a packed prefill of 3 and
 * 2 tokens, then packed steps of the rest, against the causal outputs; then a full
 * pool refuses more and changes nothing; a fork shares every block. */
static void CheckPaged(const mha_layer* layer, const float* x, const float* expected) {
  mha_paged_kv_cache_options options;
  memset(&options, 0, sizeof options);
  options.num_blocks = 2;
  options.max_sequences = 4;
  options.storage = MHA_KV_INT8;
  mha_paged_kv_cache* cache = NULL;
  Check(mha_paged_kv_cache_create(layer, &options, &cache) == MHA_OK, "create paged");
  const int64_t ids[2] = {0, 1};
  for (int s = 0; s < 2; ++s)
    Check(mha_paged_kv_cache_add_sequence(cache, s) == MHA_OK, "add");
  const int64_t firsts[2][2] = {{3, 2}, {S - 3, S - 2}};
  int64_t done[2] = {0, 0};
  for (int step = 0; step < 2; ++step) {
    float packed[2 * S * E], out[2 * S * E], want[2 * S * E];
    int64_t starts[3] = {0, 0, 0};
    for (int s = 0; s < 2; ++s) {
      const int64_t count = firsts[step][s];
      memcpy(packed + starts[s] * E, x + (s * S + done[s]) * E,
             sizeof(float) * count * E);
      memcpy(want + starts[s] * E, expected + (s * S + done[s]) * E,
             sizeof(float) * count * E);
      starts[s + 1] = starts[s] + count;
      done[s] += count;
    }
    Check(mha_paged_kv_cache_append_slots(cache, ids, firsts[step], 2) == MHA_OK,
          "slots");
    if (step == 0) {
      Check(PackedStep(layer, cache, starts[2], packed, 2, ids, starts, out) == MHA_OK,
            "packed step");
    } else { /* the same call through the growing struct */
      /* First as its first release declared it, padding not zeroed: the padding is
       * not read as layout 2's kv_shared, so this step's keys are written (checked below
       * against the step done again). */
      float first_out[2 * S * E];
      packed_args_first_release first;
      memset(&first, 0xA5, sizeof first);
      first.struct_size = sizeof first;
      first.layer_index = 0, first.num_tokens = starts[2], first.query = packed;
      first.num_sequences = 2, first.sequence_ids = ids, first.query_start_loc = starts;
      first.position_ids = NULL, first.output = first_out, first.num_threads = 0;
      Check(mha_forward_packed_ex(layer, cache, (const mha_packed_forward_args*)&first) ==
                MHA_OK,
            "packed step, first-release struct");
      mha_packed_forward_args args;
      memset(&args, 0, sizeof args);
      args.struct_size = sizeof args;
      args.num_tokens = starts[2];
      args.query = packed;
      args.num_sequences = 2;
      args.sequence_ids = ids;
      args.query_start_loc = starts;
      args.output = out;
      Check(mha_forward_packed_ex(layer, cache, &args) == MHA_OK, "packed step, _ex");
      Check(memcmp(first_out, out, sizeof(float) * starts[2] * E) == 0,
            "first-release struct: the same bits, its keys written");
      /* The layer KV-shared with itself reads the keys and values it just wrote: the
       * same output (its queries projected alone), nothing appended. */
      float shared_out[2 * S * E];
      args.output = shared_out;
      args.kv_shared = 1;
      Check(mha_forward_packed_ex(layer, cache, &args) == MHA_OK &&
                Close(shared_out, out, (int)starts[2] * E) < 1e-5f &&
                mha_paged_kv_cache_length(cache, 0) == done[0],
            "kv_shared packed step");
      /* Each sequence's tokens given as a chain tree: the ordinary step's output. */
      int64_t chain[2 * S];
      for (int s = 0; s < 2; ++s)
        for (int64_t i = 0; i < starts[s + 1] - starts[s]; ++i)
          chain[starts[s] + i] = i - 1;
      args.kv_shared = 0;
      args.tree_parents = chain;
      Check(mha_forward_packed_ex(layer, cache, &args) == MHA_OK &&
                Close(shared_out, out, (int)starts[2] * E) < 1e-5f,
            "a chain as a token tree");
      chain[1] = 1; /* not before its child */
      Check(mha_forward_packed_ex(layer, cache, &args) == MHA_INVALID_ARGUMENT &&
                strstr(mha_last_error(), "tree_parents[1]") != NULL,
            "a bad tree refused");
      args.tree_parents = NULL;
      const int64_t kept[1] = {0};
      Check(mha_paged_kv_cache_keep_tokens(cache, 0, done[0], kept, 1) ==
                    MHA_INVALID_ARGUMENT &&
                strstr(mha_last_error(), "count must be in [0, 0]") != NULL,
            "keep_tokens past the sequence refused");
      args.struct_size = offsetof(mha_packed_forward_args, batch_invariant);
      Check(mha_forward_packed_ex(layer, cache, &args) == MHA_OK,
            "layout 2's struct_size");
      args.output = out;
      const size_t refused[] = {0, offsetof(mha_packed_forward_args, kv_shared),
                                offsetof(mha_packed_forward_args, tree_parents) + 4,
                                sizeof args + 8};
      for (int i = 0; i < 4; ++i) {
        args.struct_size = refused[i]; /* 84 would copy half of tree_parents */
        Check(mha_forward_packed_ex(layer, cache, &args) == MHA_INVALID_ARGUMENT &&
                  strstr(mha_last_error(), "release (80, 88, 96)") != NULL,
              "packed struct_size off the release sizes refused");
      }
    }
    Check(Close(out, want, (int)starts[2] * E) < 1e-2f, "packed output (int8 bound)");
  }
  const int64_t one = 20;
  float packed_none[1] = {0.0f};
  Check(mha_paged_kv_cache_append_slots(cache, ids, &one, 1) == MHA_OUT_OF_BLOCKS,
        "full pool refused");
  Check(strstr(mha_last_error(), "blocks") != NULL, "full pool message");
  Check(mha_paged_kv_cache_length(cache, 0) == S, "length kept");
  Check(mha_paged_kv_cache_fork(cache, 0, 2) == MHA_OK, "fork");
  mha_paged_kv_cache_stats stats;
  Check(mha_paged_kv_cache_get_stats(cache, &stats) == MHA_OK && stats.used_blocks == 2 &&
            stats.shared_blocks == 1 && stats.sequences == 3,
        "stats after fork");
  Check(mha_paged_kv_cache_length(cache, 3) == -1, "missing sequence");
  Check(mha_paged_kv_cache_truncate(cache, 2, 1) == MHA_OUT_OF_BLOCKS,
        "truncating into a shared block needs a free one");
  Check(PackedStep(layer, cache, 0, packed_none, INT64_MAX, ids, ids, packed_none) ==
                MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "num_sequences: must be in") != NULL,
        "num_sequences at INT64_MAX refused before num_sequences + 1");
  Check(mha_paged_kv_cache_remove_sequence(cache, 2) == MHA_OK, "remove");
  mha_paged_kv_cache_destroy(cache);
}

/* Cross-attention: x as the memory, projected once; the queries of x's last row
 * attend over it as one forward over (query, x, x) would. */
static void CheckCrossAttention(const mha_layer* layer, const float* x) {
  mha_kv_cache* memory = NULL;
  Check(mha_kv_cache_create(layer, B, S, MHA_KV_FLOAT32, &memory) == MHA_OK,
        "create memory cache");
  Check(mha_project_memory(layer, memory, B, S, x, NULL) == MHA_OK, "project memory");
  float out[B * S * E], expected[B * S * E];
  Check(mha_forward_cross_attention(layer, memory, B, S, x, out, 0) == MHA_OK,
        "cross-attention step");
  mha_forward_args args;
  memset(&args, 0, sizeof(args));
  args.batch = B;
  args.query_len = args.key_len = S;
  args.query = x;
  args.output = expected;
  Check(mha_forward(layer, &args) == MHA_OK, "forward over the memory");
  Check(Close(out, expected, B * S * E) < 1e-4f, "cross-attention output");
  mha_kv_cache_destroy(memory);
}

/* MLA (DeepSeek V2-Lite's layer, small): a prompt of 6 tokens expands; the same
 * prompt as 5 tokens then 1 (expanded, then absorbed over the latent cache) gives the
 * same last row; bytes per token, truncation and a missing weight. */
static void CheckLatent(void) {
  enum { kHidden = 16, kHeads = 2, kRank = 16, kNope = 8, kRope = 16, kV = 8, kT = 6 };
  static float q[kHeads * (kNope + kRope) * kHidden], kv_a[(kRank + kRope) * kHidden],
      norm[kRank], kv_b[kHeads * (kNope + kV) * kRank], o[kHidden * kHeads * kV],
      x[kT * kHidden], whole[kT * kHidden], split[kT * kHidden];
  float* all[] = {q, kv_a, kv_b, o, x};
  const int sizes[] = {sizeof q, sizeof kv_a, sizeof kv_b, sizeof o, sizeof x};
  for (int a = 0; a < 5; ++a)
    for (int i = 0; i < sizes[a] / (int)sizeof(float); ++i)
      all[a][i] = ((float)((double)rand() / RAND_MAX) - 0.5f) * 0.5f;
  for (int i = 0; i < kRank; ++i) norm[i] = 1.0f;
  mha_latent_config config;
  memset(&config, 0, sizeof config);
  config.struct_size = sizeof config;
  config.hidden_size = kHidden;
  config.num_heads = kHeads;
  config.kv_lora_rank = kRank;
  config.qk_nope_head_dim = kNope;
  config.qk_rope_head_dim = kRope;
  config.v_head_dim = kV;
  config.rope.pairing = MHA_ROPE_INTERLEAVED;
  config.q_proj = q;
  config.kv_a_proj_with_mqa = kv_a;
  config.kv_a_layernorm = norm;
  config.kv_b_proj = kv_b;
  mha_latent_layer* layer = NULL;
  Check(mha_latent_layer_create(&config, &layer) == MHA_INVALID_ARGUMENT,
        "latent layer without o_proj refused");
  Check(strstr(mha_last_error(), "weights.o_proj") != NULL, "latent message names it");
  config.o_proj = o;
  Check(mha_latent_layer_create(&config, &layer) == MHA_OK, "create latent layer");
  mha_latent_kv_cache* cache = NULL;
  Check(mha_latent_kv_cache_create(layer, 1, kT, MHA_KV_FLOAT32, &cache) == MHA_OK,
        "create latent cache");
  Check(mha_latent_kv_cache_bytes_per_token(cache) == (kRank + kRope) * 4,
        "latent bytes per token");
  mha_latent_form form = MHA_LATENT_FORM_AUTO;
  Check(LatentCacheStep(layer, cache, 1, kT, x, whole, &form) == MHA_OK &&
            form == MHA_LATENT_FORM_EXPANDED,
        "latent prompt expands");
  Check(mha_latent_kv_cache_truncate(cache, 0, 0) == MHA_OK &&
            mha_latent_kv_cache_length(cache, 0) == 0,
        "latent truncate");
  Check(LatentCacheStep(layer, cache, 1, kT - 1, x, split, &form) == MHA_OK,
        "latent first 5");
  Check(LatentCacheStep(layer, cache, 1, 1, x + (kT - 1) * kHidden,
                        split + (kT - 1) * kHidden, &form) == MHA_OK &&
            form == MHA_LATENT_FORM_ABSORBED,
        "latent step absorbed");
  Check(Close(whole, split, kT * kHidden) < 1e-4f, "latent forms agree");
  Check(LatentCacheStep(layer, cache, 1, 1, x, split, NULL) == MHA_INVALID_ARGUMENT &&
            mha_latent_kv_cache_length(cache, 0) == kT,
        "latent cache full: refused, unchanged");
  /* Uneven new_lengths would cache padding as tokens: refused, the cache unchanged. */
  {
    const int64_t uneven = kT - 1;
    mha_cache_forward_args args = CacheArgs(1, kT, x, split);
    args.new_lengths = &uneven;
    Check(mha_latent_kv_cache_truncate(cache, 0, 0) == MHA_OK &&
              mha_latent_forward_with_cache_ex(layer, cache, &args, NULL) ==
                  MHA_INVALID_ARGUMENT &&
              strstr(mha_last_error(), "args.new_lengths") &&
              mha_latent_kv_cache_length(cache, 0) == 0,
          "latent uneven new_lengths refused");
    const int64_t even = kT;
    args.new_lengths = &even;
    Check(mha_latent_forward_with_cache_ex(layer, cache, &args, NULL) == MHA_OK &&
              mha_latent_kv_cache_length(cache, 0) == kT,
          "latent full new_lengths taken");
  }
  mha_latent_kv_cache_destroy(cache);

  /* The same prompt as one packed step over a paged latent cache (absorbed). */
  mha_paged_kv_cache_options options;
  memset(&options, 0, sizeof options);
  options.num_blocks = 2;
  options.max_sequences = 1;
  mha_paged_kv_cache* paged = NULL;
  Check(mha_latent_paged_kv_cache_create(layer, &options, &paged) == MHA_OK,
        "create latent paged cache");
  const int64_t id = 0, count = kT, starts[2] = {0, kT};
  Check(mha_paged_kv_cache_add_sequence(paged, 0) == MHA_OK &&
            mha_paged_kv_cache_append_slots(paged, &id, &count, 1) == MHA_OK,
        "latent paged slots");
  float packed[kT * kHidden];
  mha_packed_forward_args packed_args = PackedArgs(kT, x, 1, &id, starts, packed);
  Check(mha_latent_forward_packed_ex(layer, paged, &packed_args) == MHA_OK,
        "latent packed step");
  Check(Close(whole, packed, kT * kHidden) < 1e-4f, "latent packed agrees");
  /* A token tree: the last token's parent is -1, a sibling of the first, so it sees
   * only itself at position 0, as the same token alone does. */
  int64_t parents[kT];
  for (int i = 0; i < kT; ++i) parents[i] = i == kT - 1 ? -1 : i - 1;
  float tree[kT * kHidden], alone[kHidden];
  packed_args.tree_parents = parents, packed_args.output = tree;
  Check(mha_paged_kv_cache_truncate(paged, 0, 0) == MHA_OK &&
            mha_paged_kv_cache_append_slots(paged, &id, &count, 1) == MHA_OK &&
            mha_latent_forward_packed_ex(layer, paged, &packed_args) == MHA_OK,
        "latent token tree step");
  mha_latent_kv_cache* single = NULL;
  Check(mha_latent_kv_cache_create(layer, 1, 1, MHA_KV_FLOAT32, &single) == MHA_OK &&
            LatentCacheStep(layer, single, 1, 1, x + (kT - 1) * kHidden, alone, NULL) ==
                MHA_OK,
        "latent token alone");
  mha_latent_kv_cache_destroy(single);
  Check(Close(tree, packed, (kT - 1) * kHidden) < 1e-5f, "tree: the chain as before");
  Check(Close(tree + (kT - 1) * kHidden, alone, kHidden) < 1e-4f,
        "tree: a root token sees only itself");
  Check(Close(tree + (kT - 1) * kHidden, packed + (kT - 1) * kHidden, kHidden) > 1e-3f,
        "tree: not the chain's last output");
  mha_paged_kv_cache_stats stats;
  Check(mha_paged_kv_cache_get_stats(paged, &stats) == MHA_OK &&
            stats.bytes_per_block == 16 * (kRank + kRope) * 4,
        "latent paged bytes per block");
  mha_paged_kv_cache_destroy(paged);
  mha_latent_layer_destroy(layer);
}

/* batch_invariant reaches the library through mha_packed_forward_args: a packed step
 * of two sequences gives the first sequence's rows bitwise as it alone. (At this
 * layer's size the default gives them too; batch_invariance_test shows where the
 * option matters.) */
static void CheckBatchInvariantStep(const mha_layer* layer, const float* x) {
  float together[2 * S * E], alone[S * E];
  for (int run = 0; run < 2; ++run) {
    const int count = run == 0 ? 2 : 1;
    mha_paged_kv_cache_options options;
    memset(&options, 0, sizeof options);
    options.num_blocks = 2;
    options.max_sequences = 2;
    mha_paged_kv_cache* cache = NULL;
    Check(mha_paged_kv_cache_create(layer, &options, &cache) == MHA_OK, "create paged");
    const int64_t ids[2] = {0, 1}, counts[2] = {S, S}, starts[3] = {0, S, 2 * S};
    for (int s = 0; s < count; ++s) mha_paged_kv_cache_add_sequence(cache, s);
    Check(mha_paged_kv_cache_append_slots(cache, ids, counts, count) == MHA_OK, "slots");
    mha_packed_forward_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof args;
    args.num_tokens = count * S;
    args.query = x;
    args.num_sequences = count;
    args.sequence_ids = ids;
    args.query_start_loc = starts;
    args.output = run == 0 ? together : alone;
    args.batch_invariant = 1;
    Check(mha_forward_packed_ex(layer, cache, &args) == MHA_OK, "batch-invariant step");
    mha_paged_kv_cache_destroy(cache);
  }
  Check(memcmp(together, alone, sizeof alone) == 0,
        "batch-invariant: a sequence's bits alone and beside another");
}

/* Two head shards made through mha_layer_create_ex: their outputs sum to the whole
 * layer's; bad shards and struct sizes are refused, naming them. */
static void CheckHeadShards(const mha_config* config, const mha_weights* w,
                            const mha_layer* whole, const float* x) {
  float expected[B * S * E] = {0}, sum[B * S * E] = {0}, out[B * S * E] = {0};
  mha_forward_args forward;
  memset(&forward, 0, sizeof forward);
  forward.batch = B;
  forward.query_len = forward.key_len = S;
  forward.query = x;
  forward.is_causal = 1;
  forward.output = expected;
  Check(mha_forward(whole, &forward) == MHA_OK, "whole layer forward");
  mha_head_shard shards[2];
  for (int rank = 0; rank < 2; ++rank) {
    Check(mha_even_head_shard(config, rank, 2, &shards[rank]) == MHA_OK, "even shard");
  }
  Check(shards[0].first_head == 0 && shards[0].end_head == 1 &&
            shards[1].first_head == 1 && shards[1].end_head == H,
        "even shards tile the heads");
  for (int rank = 0; rank < 2; ++rank) {
    mha_layer_create_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof args;
    args.config = config;
    args.weights = w;
    args.head_shard = &shards[rank];
    mha_layer* shard = NULL;
    Check(mha_layer_create_ex(&args, &shard) == MHA_OK, "create shard");
    forward.output = out;
    Check(mha_forward(shard, &forward) == MHA_OK, "shard forward");
    for (int i = 0; i < B * S * E; ++i) sum[i] += out[i];
    mha_layer_destroy(shard);
  }
  Check(Close(sum, expected, B * S * E) < 1e-5f, "shards sum to the whole layer");

  mha_layer_create_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.config = config;
  args.weights = w;
  mha_head_shard bad = {1, H + 1};
  args.head_shard = &bad;
  mha_layer* none = NULL;
  Check(mha_layer_create_ex(&args, &none) == MHA_INVALID_ARGUMENT && none == NULL,
        "shard past the heads refused");
  Check(strstr(mha_last_error(), "end_head <= num_heads") != NULL, "bad shard message");
  args.struct_size = 4;
  Check(mha_layer_create_ex(&args, &none) == MHA_INVALID_ARGUMENT && none == NULL,
        "bad struct_size refused");
  Check(strstr(mha_last_error(), "args.struct_size") != NULL, "struct_size message");
  Check(mha_even_head_shard(config, 2, 2, &shards[0]) == MHA_INVALID_ARGUMENT,
        "rank past world_size refused");
  Check(strstr(mha_last_error(), "rank < world_size") != NULL, "rank message");
}

/* A layer from a safetensors file: one layer of a "checkpoint" (its names under a
 * prefix, a second layer beside it), written here, gives the layer of the same
 * arrays; a wrong prefix, a size that disagrees and a missing file are refused. */
static void CheckLayerFile(const float* w[4], const float* bias[4], const float* x) {
  const char* path = "capi_test_layer.safetensors";
  const char* parts[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
  char header[4096] = "{";
  size_t offset = 0;
  for (int layer = 0; layer < 2; ++layer) {
    for (int p = 0; p < 4; ++p) {
      char entry[256];
      snprintf(entry, sizeof entry,
               "%s\"model.layers.%d.self_attn.%s.weight\":{\"dtype\":\"F32\","
               "\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
               "\"model.layers.%d.self_attn.%s.bias\":{\"dtype\":\"F32\","
               "\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
               strlen(header) > 1 ? "," : "", layer, parts[p], E, E, offset,
               offset + 4 * E * E, layer, parts[p], E, offset + 4 * E * E,
               offset + 4 * E * E + 4 * E);
      strcat(header, entry);
      offset += 4 * E * E + 4 * E;
    }
  }
  strcat(header, "}");
  FILE* file = fopen(path, "wb");
  const uint64_t length = strlen(header);
  fwrite(&length, 8, 1, file);
  fwrite(header, 1, length, file);
  for (int layer = 0; layer < 2; ++layer) {
    for (int p = 0; p < 4; ++p) {
      fwrite(w[p], sizeof(float), E * E, file);
      fwrite(bias[p], sizeof(float), E, file);
    }
  }
  fclose(file);

  mha_layer_file_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.path = path;
  args.prefix = "model.layers.1.self_attn.";
  args.num_heads = H;
  mha_layer* layer = NULL;
  Check(mha_layer_create_from_file(&args, &layer) == MHA_OK, "layer from a file");
  float out[B * S * E], expected[B * S * E];
  mha_forward_args forward;
  memset(&forward, 0, sizeof forward);
  forward.batch = B, forward.query_len = forward.key_len = S, forward.query = x;
  forward.is_causal = 1, forward.output = out;
  Check(layer && mha_forward(layer, &forward) == MHA_OK, "forward of the file's layer");
  Naive(x, w, bias, 1, expected);
  Check(Close(out, expected, B * S * E) < 1e-4f, "the file's layer is the arrays' layer");
  mha_layer_destroy(layer);

  mha_layer* refused = NULL;
  args.prefix = "model.layers.7.";
  Check(mha_layer_create_from_file(&args, &refused) == MHA_INVALID_ARGUMENT &&
            refused == NULL && strstr(mha_last_error(), "no tensor's name starts with"),
        "a prefix no tensor has refused");
  args.prefix = NULL;
  Check(mha_layer_create_from_file(&args, &refused) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "give its prefix 'model.layers.0.self_attn.'"),
        "a checkpoint without its prefix refused, naming the prefix");
  mha_config config;
  memset(&config, 0, sizeof config);
  config.head_dim = 2 * D;
  args.prefix = "model.layers.0.self_attn.", args.config = &config;
  Check(
      mha_layer_create_from_file(&args, &refused) == MHA_INVALID_ARGUMENT &&
          strstr(mha_last_error(), "args.config->head_dim: 8 differs from the file's 4"),
      "a size that disagrees with the file refused");
  args.path = "no_such_file.safetensors";
  Check(mha_layer_create_from_file(&args, &refused) == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "no_such_file.safetensors: cannot open"),
        "a missing file refused, naming it");
  remove(path);
}

int main(void) {
  static float weights[4][E * E], biases[4][E], x[B * S * E];
  srand(7);
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < E * E; ++i)
      weights[p][i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    for (int i = 0; i < E; ++i) biases[p][i] = (float)((double)rand() / RAND_MAX) - 0.5f;
  }
  for (int i = 0; i < B * S * E; ++i)
    x[i] = (float)((double)rand() / RAND_MAX) * 2.0f - 1.0f;

  mha_config config;
  memset(&config, 0, sizeof config);
  config.num_heads = H;
  config.head_dim = D;
  config.query_dim = E;
  mha_weights w;
  memset(&w, 0, sizeof(w));
  mha_projection* parts[4] = {&w.query, &w.key, &w.value, &w.output};
  for (int p = 0; p < 4; ++p) {
    parts[p]->weight = weights[p];
    parts[p]->bias = biases[p];
    parts[p]->layout = MHA_LAYOUT_OUT_IN;
  }
  mha_layer* layer = NULL;
  Check(LayerCreate(&config, &w, &layer) == MHA_OK, "create layer");
  Check(mha_layer_output_dim(layer) == E, "output_dim");

  /* Forward against the naive C implementation, causal and not. */
  const float* wp[4] = {weights[0], weights[1], weights[2], weights[3]};
  const float* bp[4] = {biases[0], biases[1], biases[2], biases[3]};
  CheckLayerFile(wp, bp, x);
  Check(mha_set_thread_placement("pinned") == MHA_INVALID_ARGUMENT &&
            strstr(mha_last_error(), "name: expected one of spread, unbound, got 'pinned'"),
        "an unknown thread placement refused, naming it");
  for (int causal = 0; causal < 2; ++causal) {
    float out[B * S * E], expected[B * S * E];
    Check(mha_set_thread_placement(causal ? "spread" : "unbound") == MHA_OK,
          "thread placement set");
    mha_forward_args args;
    memset(&args, 0, sizeof(args));
    args.batch = B;
    args.query_len = args.key_len = S;
    args.query = x;
    args.is_causal = causal;
    args.output = out;
    Check(mha_forward(layer, &args) == MHA_OK, "forward");
    Naive(x, wp, bp, causal, expected);
    Check(Close(out, expected, B * S * E) < 1e-4f, causal ? "causal output" : "output");

    /* Decoding token by token through a cache gives the causal outputs. */
    if (causal) {
      CheckPaged(layer, x, expected);
      mha_kv_cache* cache = NULL;
      Check(mha_kv_cache_create(layer, B, S, MHA_KV_FLOAT32, &cache) == MHA_OK,
            "create cache");
      for (int t = 0; t < S; ++t) {
        float token[B * E], step[B * E], want[B * E];
        for (int b = 0; b < B; ++b) {
          memcpy(token + b * E, x + (b * S + t) * E, sizeof(float) * E);
          memcpy(want + b * E, expected + (b * S + t) * E, sizeof(float) * E);
        }
        if (t % 2 == 0) {
          Check(CacheStep(layer, cache, B, 1, token, step) == MHA_OK, "decode step");
        } else if (t == 1) { /* the struct as its first release declared it */
          cache_args_first_release first;
          memset(&first, 0xA5, sizeof first); /* its padding is layout 2's kv_shared */
          first.struct_size = sizeof first;
          first.batch = B, first.new_tokens = 1, first.query = token;
          first.new_lengths = first.position_ids = NULL;
          first.output = step, first.num_threads = 0;
          const mha_cache_forward_args* as_new = (const mha_cache_forward_args*)&first;
          Check(mha_forward_with_cache_ex(layer, cache, as_new) == MHA_INVALID_ARGUMENT &&
                    strstr(mha_last_error(), "args.kv_shared: must be 0 or 1") != NULL &&
                    mha_kv_cache_length(cache, 0) == t,
                "a first-release struct's unzeroed padding refused, nothing appended");
          first.struct_size =
              offsetof(cache_args_first_release, num_threads) + sizeof(int);
          Check(mha_forward_with_cache_ex(layer, cache, as_new) == MHA_INVALID_ARGUMENT &&
                    strstr(mha_last_error(), "sizeof the struct of a release (64, 72)"),
                "a struct_size off the release sizes refused, naming them");
          memset(&first, 0, sizeof first);
          first.struct_size = sizeof first;
          first.batch = B, first.new_tokens = 1, first.query = token, first.output = step;
          Check(mha_forward_with_cache_ex(layer, cache, as_new) == MHA_OK,
                "decode step, first-release struct");
        } else { /* the same call through the growing struct */
          mha_cache_forward_args args;
          memset(&args, 0, sizeof args);
          args.struct_size = sizeof args;
          args.batch = B;
          args.new_tokens = 1;
          args.query = token;
          args.output = step;
          Check(mha_forward_with_cache_ex(layer, cache, &args) == MHA_OK,
                "decode step, _ex");
        }
        Check(Close(step, want, B * E) < 1e-4f, "decode output");
      }
      Check(mha_kv_cache_length(cache, 1) == S, "cache length");
      /* A full cache refuses more and stays as it was. */
      float token[B * E] = {0}, step[B * E];
      Check(CacheStep(layer, cache, B, 1, token, step) == MHA_INVALID_ARGUMENT,
            "overflow refused");
      Check(strstr(mha_last_error(), "exceeds max_seq_len") != NULL, "overflow message");
      Check(mha_kv_cache_length(cache, 0) == S, "length kept");
      Check(mha_kv_cache_reset(cache, -1) == MHA_OK && mha_kv_cache_length(cache, 0) == 0,
            "reset");
      Check(mha_kv_cache_length(cache, 9) == -1, "bad sequence index");
      mha_kv_cache_destroy(cache);
    }
  }

  CheckHeadShards(&config, &w, layer, x);
  CheckBatchInvariantStep(layer, x);

  /* Errors are status codes with messages naming the argument. */
  mha_config bad = config;
  bad.num_heads = 0;
  mha_layer* none = NULL;
  Check(LayerCreate(&bad, &w, &none) == MHA_INVALID_ARGUMENT && none == NULL,
        "bad config refused");
  Check(strstr(mha_last_error(), "num_heads") != NULL, "bad config message");
  Check(mha_forward(layer, NULL) == MHA_INVALID_ARGUMENT, "NULL args refused");
  /* The query serves as key and value only at its own length. */
  {
    float out[B * S * E];
    mha_forward_args args;
    memset(&args, 0, sizeof(args));
    args.batch = B;
    args.query_len = S;
    args.key_len = S - 1;
    args.query = x;
    args.output = out;
    Check(mha_forward(layer, &args) == MHA_INVALID_ARGUMENT, "key_len != query_len");
    Check(strstr(mha_last_error(), "args.key_len: must equal args.query_len") != NULL,
          "key_len message");
  }
  Check(strstr(mha_last_error(), "args") != NULL, "NULL args message");
  /* Sizes whose product overflows are refused before anything multiplies them. */
  bad = config;
  bad.num_heads = (int64_t)1 << 40;
  bad.head_dim = (int64_t)1 << 40;
  Check(LayerCreate(&bad, &w, &none) == MHA_INVALID_ARGUMENT && none == NULL,
        "overflowing width refused");
  Check(strstr(mha_last_error(), "num_heads * head_dim") != NULL, "width message");
  /* An enum field holding no enumerator (a C caller can store any int). */
  {
    mha_weights bad_weights = w;
    const int layout = 99;
    memcpy(&bad_weights.value.layout, &layout, sizeof layout);
    Check(LayerCreate(&config, &bad_weights, &none) == MHA_INVALID_ARGUMENT,
          "unknown layout refused");
    Check(strstr(mha_last_error(), "weights.value.layout: unknown value 99") != NULL,
          "unknown layout message");
    mha_kv_cache* no_cache = NULL;
    mha_kv_storage storage;
    memcpy(&storage, &layout, sizeof layout);
    Check(mha_kv_cache_create(layer, 1, 8, storage, &no_cache) == MHA_INVALID_ARGUMENT,
          "unknown storage refused");
    /* A cache no process could map: an error naming the sizes, not out of memory. */
    Check(mha_kv_cache_create(layer, (int64_t)1 << 62, 8, MHA_KV_FLOAT32, &no_cache) ==
              MHA_INVALID_ARGUMENT,
          "absurd cache refused");
    Check(strstr(mha_last_error(), "max_batch 4611686018427387904") != NULL,
          "absurd cache message");
  }
  /* Thread counts OpenMP could not start are refused, not attempted. */
  {
    float out[B * S * E];
    mha_forward_args args;
    memset(&args, 0, sizeof(args));
    args.batch = B;
    args.query_len = args.key_len = S;
    args.query = x;
    args.output = out;
    args.num_threads = 65536;
    Check(mha_forward(layer, &args) == MHA_INVALID_ARGUMENT, "65536 threads refused");
    Check(strstr(mha_last_error(), "num_threads") != NULL, "threads message");
  }

  /* bf16 weights and attention, and a bf16 cache: within the bf16 bound of the fp32
     results. */
  mha_config bf16_config = config;
  bf16_config.bf16_weights = 1;
  bf16_config.bf16_compute = 1;
  mha_layer* bf16_layer = NULL;
  Check(LayerCreate(&bf16_config, &w, &bf16_layer) == MHA_OK, "create bf16 layer");
  mha_kv_cache* bf16_cache = NULL;
  Check(mha_kv_cache_create(bf16_layer, B, S, MHA_KV_BFLOAT16, &bf16_cache) == MHA_OK,
        "create bf16 cache");
  {
    float out[B * S * E], expected[B * S * E];
    Naive(x, wp, bp, 1, expected);
    Check(CacheStep(bf16_layer, bf16_cache, B, S, x, out) == MHA_OK, "bf16 prefill");
    Check(Close(out, expected, B * S * E) < 1e-2f, "bf16 prefill output");
    mha_forward_args args;
    memset(&args, 0, sizeof(args));
    args.batch = B;
    args.query_len = args.key_len = S;
    args.query = x;
    args.is_causal = 1;
    args.output = out;
    Check(mha_forward(bf16_layer, &args) == MHA_OK, "bf16 forward");
    Check(Close(out, expected, B * S * E) < 1e-2f, "bf16 forward output");
  }
  mha_kv_cache_destroy(bf16_cache);
  mha_layer_destroy(bf16_layer);

  /* fp8 caches, scaled and scale free, int8 with keys per channel, int4, q8_0 and
     q4_0: a causal prefill within their bounds (fp8: 3 or 2 bits of mantissa; int4:
     15 steps); an unknown storage is refused. */
  {
    const mha_kv_storage kinds[8] = {MHA_KV_FP8_E4M3,
                                     MHA_KV_FP8_E5M2,
                                     MHA_KV_FP8_E4M3_SCALE_FREE,
                                     MHA_KV_FP8_E5M2_SCALE_FREE,
                                     MHA_KV_INT8_CHANNEL_KEYS,
                                     MHA_KV_INT4,
                                     MHA_KV_Q8_0,
                                     MHA_KV_Q4_0};
    const float bounds[8] = {0.1f, 0.2f, 0.1f, 0.2f, 2e-2f, 0.1f, 2e-2f, 0.2f};
    float out[B * S * E], expected[B * S * E];
    Naive(x, wp, bp, 1, expected);
    for (int k = 0; k < 8; ++k) {
      mha_kv_cache* fp8_cache = NULL;
      Check(mha_kv_cache_create(layer, B, S, kinds[k], &fp8_cache) == MHA_OK,
            "create fp8 cache");
      Check(CacheStep(layer, fp8_cache, B, S, x, out) == MHA_OK, "fp8 prefill");
      Check(Close(out, expected, B * S * E) < bounds[k], "fp8 prefill output");
      mha_kv_cache_destroy(fp8_cache);
    }
    mha_kv_cache* refused = NULL;
    Check(mha_kv_cache_create(layer, B, S, (mha_kv_storage)99, &refused) ==
                  MHA_INVALID_ARGUMENT &&
              refused == NULL && strstr(mha_last_error(), "storage: unknown value 99"),
          "unknown storage refused");
  }

  /* int8 projections: within the int8 bound of the fp32 results; not with bf16. */
  mha_config int8_config = config;
  int8_config.int8_weights = 1;
  mha_layer* int8_layer = NULL;
  Check(LayerCreate(&int8_config, &w, &int8_layer) == MHA_OK, "create int8 layer");
  {
    float out[B * S * E], expected[B * S * E];
    Naive(x, wp, bp, 0, expected);
    mha_forward_args args;
    memset(&args, 0, sizeof(args));
    args.batch = B;
    args.query_len = S;
    args.key_len = S;
    args.query = x;
    args.output = out;
    Check(mha_forward(int8_layer, &args) == MHA_OK, "int8 forward");
    Check(Close(out, expected, B * S * E) < 5e-2f, "int8 output");
  }
  mha_layer_destroy(int8_layer);
  int8_config.bf16_weights = 1;
  Check(LayerCreate(&int8_config, &w, &int8_layer) == MHA_INVALID_ARGUMENT,
        "int8 and bf16 refused");
  Check(strstr(mha_last_error(), "int8_weights") != NULL, "int8 and bf16 message");

  CheckCrossAttention(layer, x);
  mha_layer_destroy(layer);
  CheckCore();
  CheckLatent();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
