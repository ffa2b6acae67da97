// The docstrings of the module's main calls, one "Args:" line per argument, so that
// help(mha.MultiheadAttention.forward) explains every argument
// (tests/python/test_stubs.py checks that each argument is described).
#pragma once

namespace mha::python::docs {

inline constexpr const char* kLayerInit =
    "The attention layer (nn.MultiheadAttention's projections and PyTorch's names), "
    "built once and run many times.\n\n"
    "Args:\n"
    "    config: mha.AttentionConfig: heads, sizes, weight and compute dtypes, features, "
    "rotary embedding.\n"
    "    q_proj_weight, k_proj_weight, v_proj_weight: projection weights, [out, in] "
    "(layout=out_in, PyTorch's), [in, out] (in_out) or heads_in_head_dim.\n"
    "    out_proj_weight: the output projection, or None for none.\n"
    "    q_proj_bias, k_proj_bias, v_proj_bias, out_proj_bias: biases, or None.\n"
    "    sinks: [num_heads] attention-sink logits (gpt-oss), or None.\n"
    "    q_norm_weight, k_norm_weight: QK-norm weights when config.features.qk_norm is "
    "set.\n"
    "    layout: mha.WeightLayout of the projection weights.\n"
    "    head_shard: mha.HeadShard: build only these heads' part of the layer (tensor "
    "parallelism: the shards' outputs sum to the layer's).\n"
    "    batch_first: True: inputs are [B, S, E]; False: [S, B, E], PyTorch's default.\n";

inline constexpr const char* kFromStateDict =
    "A layer from a PyTorch state_dict (nn.MultiheadAttention's in_proj_* / "
    "q_proj_weight... / out_proj.*, or Hugging Face's q_proj.weight...).\n\n"
    "Args:\n"
    "    state_dict: names to arrays or tensors.\n"
    "    num_heads: query heads.\n"
    "    num_kv_heads: key/value heads (grouped-query attention), 0 for num_heads.\n"
    "    config: an mha.AttentionConfig for everything the weights do not give "
    "(features, rotary, dtypes).\n"
    "    head_shard: mha.HeadShard: only these heads (tensor parallelism).\n"
    "    batch_first: True: inputs are [B, S, E]; False: [S, B, E]. None (the "
    "default) follows PyTorch for the names given: False for nn.MultiheadAttention's "
    "(in_proj_weight, q_proj_weight), True for Hugging Face's (q_proj.weight).\n";

inline constexpr const char* kForward =
    "Attention over query, key and value, as nn.MultiheadAttention.forward.\n\n"
    "Args:\n"
    "    query: [B, Sq, query_dim] (batch_first), [Sq, B, query_dim], or unbatched "
    "[Sq, query_dim]. torch float32/bfloat16 tensors and numpy float32 arrays are "
    "read in place.\n"
    "    key, value: [B, Sk, key_dim] and [B, Sk, value_dim]; None: self-attention on "
    "query.\n"
    "    key_padding_mask: [B, Sk] bool (True = masked) or float (added).\n"
    "    attn_mask: [Sq, Sk], [B, Sq, Sk] or [B, H, Sq, Sk], bool or float.\n"
    "    is_causal: a causal mask (with causal_alignment).\n"
    "    need_weights: also return the attention weights.\n"
    "    average_attn_weights: average the weights over heads (else per head).\n"
    "    position_ids: [B, Sq] int rotary positions (default 0..S-1).\n"
    "    key_lengths: [B] ints: keys at or past key_lengths[b] are masked.\n"
    "    mask_convention: mha.MaskConvention of bool masks (torch: True = masked).\n"
    "    causal_alignment: top_left (PyTorch's is_causal) or bottom_right.\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    batch_invariant: make each token's output bits independent of the other "
    "tokens in the call (reproducible serving; costs small calls some speed).\n"
    "    out: a C-contiguous float32 numpy array or float32/bfloat16 torch tensor of "
    "the output's shape, written in place and returned.\n\n"
    "Returns (output, attn_weights or None): a torch tensor of the query's dtype for a "
    "torch query, else a numpy float32 array.";

inline constexpr const char* kForwardWithCache =
    "Appends the new tokens to `cache` and attends causally over each sequence's "
    "cached and new tokens (decoding).\n\n"
    "Args:\n"
    "    query: [B, S, query_dim] new tokens (batch_first), float32 or bfloat16.\n"
    "    cache: the mha.KvCache of this layer.\n"
    "    new_lengths: [B] ints: sequence b appends only its first new_lengths[b] "
    "tokens (ragged batches); None: all S.\n"
    "    position_ids: [B, S] int rotary positions (default: cache length + i).\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    kv_shared: Gemma 3n's KV-shared layers: the tokens' keys and values are "
    "already in `cache`, appended in this step by the layer this one shares with; "
    "only queries are projected and nothing is appended.\n"
    "    batch_invariant: each token's output bits independent of the other tokens in "
    "the call.\n"
    "    out: the output's array or tensor, written in place and returned.\n\n"
    "Returns [B, S, output_dim].";

inline constexpr const char* kForwardPacked =
    "One step of continuous batching over a PagedKvCache: prefill chunks and decodes "
    "of many sequences packed without padding, after cache.append_slots made room "
    "for them.\n\n"
    "Args:\n"
    "    query: [T, query_dim]: the new tokens of every sequence, one after another.\n"
    "    sequence_ids: [N] ints: the cache ids of the step's sequences.\n"
    "    query_start_loc: [N + 1] ints: sequence i owns rows query_start_loc[i] .. "
    "query_start_loc[i + 1] - 1 (starts at 0, ends at T).\n"
    "    cache: the mha.PagedKvCache.\n"
    "    layer_index: the cache layer this layer writes and reads.\n"
    "    position_ids: [T] int rotary positions (default: each token's slot).\n"
    "    tree_parents: [T] ints: a token tree to verify (speculative decoding): each "
    "token's parent among its sequence's new tokens, or -1.\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    kv_shared: Gemma 3n's KV-shared layers: layer_index names the layer whose keys "
    "and values of these tokens, written in this step, this layer reads; nothing is "
    "written.\n"
    "    batch_invariant: each token's output bits independent of the other tokens in "
    "the step (a request gives the same bits alone or in any batch).\n"
    "    out: the output's array or tensor, written in place and returned.\n\n"
    "Returns [T, output_dim].";

inline constexpr const char* kProjectMemory =
    "Cross-attention (Whisper, T5, BART decoders): projects the encoder output once "
    "into `cache`, replacing what its sequences held.\n\n"
    "Args:\n"
    "    memory: [B, S_mem, key_dim] encoder output (batch_first; key_dim = "
    "value_dim).\n"
    "    cache: an mha.KvCache of this layer with max_batch >= B.\n"
    "    memory_lengths: [B] ints: sequence b keeps its first memory_lengths[b] tokens; "
    "None: all S_mem.\n";

inline constexpr const char* kForwardCrossAttention =
    "Attends the queries over the memory project_memory put in `cache`, without "
    "projecting it again; the only mask is each sequence's memory length.\n\n"
    "Args:\n"
    "    query: [B, Sq, query_dim] (batch_first), float32 or bfloat16.\n"
    "    cache: the mha.KvCache project_memory filled.\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    batch_invariant: each token's output bits independent of the other tokens.\n"
    "    out: the output's array or tensor, written in place and returned.\n\n"
    "Returns [B, Sq, output_dim].";

inline constexpr const char* kKvCache =
    "One layer's keys and values for max_batch sequences (kv_cache.hpp). Calls from "
    "several threads run one at a time.\n\n"
    "Args:\n"
    "    layer: the mha.MultiheadAttention whose shape it stores, or an "
    "mha.MultiheadLatentAttention (its latent and rotary key part per token).\n"
    "    max_batch: sequences.\n"
    "    max_seq_len: tokens per sequence.\n"
    "    storage: mha.DType: float32, bfloat16, int8, float8_e4m3fn, float8_e5m2 or "
    "int4.\n"
    "    scales: mha.KvScales: per_token, none (scale-free fp8), per_channel_keys "
    "(int8 keys per channel; int4) or per_group (ggml's q8_0 and q4_0).\n";

inline constexpr const char* kPagedKvCache =
    "A pool of blocks shared by a server's sequences and layers (paged_kv_cache.hpp): "
    "add, fork, truncate and remove sequences; append_slots before each packed step. "
    "Calls from several threads run one at a time: a forward_packed over this cache "
    "holds it for the whole call, so stats() or another sequence's step waits for a "
    "long prefill (C++'s PagedKvCache locks only its bookkeeping; serve one step at a "
    "time per cache from Python).\n\n"
    "Args:\n"
    "    layer: an mha.MultiheadAttention of the shape every layer stored has, or an "
    "mha.MultiheadLatentAttention (storage float32 or bfloat16 per token; no windows "
    "or chunks).\n"
    "    num_blocks: blocks in the pool.\n"
    "    max_sequences: sequence ids are 0 .. max_sequences - 1.\n"
    "    block_size: tokens per block (a multiple of 16 in [16, 256]).\n"
    "    num_layers: layers stored; append_slots serves them all.\n"
    "    storage: mha.DType of keys and values, as KvCache's.\n"
    "    scales: mha.KvScales, as KvCache's.\n"
    "    sliding_window: > 0: the layers attend over windows of this many keys, so "
    "blocks no next token can see go back to the pool.\n"
    "    attention_chunk_size: > 0: blocks before the current chunk are freed "
    "(Llama 4's chunked attention).\n";

inline constexpr const char* kLatentInit =
    "Multi-head latent attention (DeepSeek V2/V3's MLA): built once, run many times; "
    "its caches hold one latent and one rotary key part per token.\n\n"
    "Args:\n"
    "    config: mha.LatentAttentionConfig: hidden_size, num_heads, q_lora_rank, "
    "kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rms_norm_eps, "
    "rotary, softmax_scale, form.\n"
    "    q_proj, q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, "
    "kv_b_proj, o_proj: keyword weights, nn.Linear's [out, in] (modeling_deepseek.py's "
    "names without '.weight'); q_proj without q LoRA, else q_a_proj, q_a_layernorm and "
    "q_b_proj.\n";

inline constexpr const char* kLatentForwardWithCache =
    "Appends the hidden states' tokens to `cache` and attends causally over each "
    "sequence (a prompt with nothing cached expands by cost; other calls run "
    "absorbed).\n\n"
    "Args:\n"
    "    hidden_states: [B, S, hidden_size], float32 or bfloat16.\n"
    "    cache: an mha.KvCache made from this layer.\n"
    "    position_ids: [B, S] int rotary positions (default: cache length + i).\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    batch_invariant: each token's output bits independent of the other tokens.\n"
    "    out: the output's array or tensor, written in place and returned.\n\n"
    "Returns [B, S, hidden_size].";

inline constexpr const char* kLatentForwardPacked =
    "One step of continuous batching over an mha.PagedKvCache made from this layer "
    "(cache.append_slots first), absorbed.\n\n"
    "Args:\n"
    "    hidden_states: [T, hidden_size]: every sequence's new tokens, one after "
    "another.\n"
    "    sequence_ids: [N] ints: the cache ids of the step's sequences.\n"
    "    query_start_loc: [N + 1] ints: sequence i owns rows query_start_loc[i] .. "
    "query_start_loc[i + 1] - 1.\n"
    "    cache: the mha.PagedKvCache.\n"
    "    layer_index: the cache layer this layer writes and reads.\n"
    "    position_ids: [T] int rotary positions (default: each token's slot).\n"
    "    tree_parents: [T] ints: a token tree to verify (speculative decoding): each "
    "token's parent among its sequence's new tokens, or -1.\n"
    "    num_threads: threads for this call; 0: OpenMP's default.\n"
    "    batch_invariant: each token's output bits independent of the other tokens in "
    "the step.\n"
    "    out: the output's array or tensor, written in place and returned.\n\n"
    "Returns [T, hidden_size].";

}  // namespace mha::python::docs
