/* The feature options, declared once: one line each, from which the C fields of
 * mha_features, their conversion, the Python keywords and their help, and mha-run's
 * flags are made (tests/features/feature_options_test.cc and tests/python/test_stubs.py
 * check the faces written by hand: mha.pyi and docs/api.md).
 *
 * MHA_FEATURE_OPTION(name, group, member, c_type, default, range, doc):
 *   name     the C field and mha-run's flag (--name, '_' as '-'): group_member, or
 *            member for the features themselves
 *   group    `features` (mha::AttentionFeatures), or the optional group the member
 *            belongs to (qk_norm: mha::QkNorm; temperature_tuning:
 *            mha::AttentionTemperature), set by the group's own line first
 *   member   the C++ and Python field
 *   c_type   the C field's type; a zero field means "not set": the default
 * The checks of every value are the library's (AttentionFeatures' documentation). */
/* clang-format off */
MHA_FEATURE_OPTION(softcap, features, softcap, float, "none", "> 0",
  "logits soft-capped: softcap * tanh(score / softcap), before biases and masks (Gemma 2)")
MHA_FEATURE_OPTION(alibi, features, alibi, int, "off", "on or off",
  "ALiBi (BLOOM, MPT): score += slope[h] * (j - i) for key j and query i")
MHA_FEATURE_OPTION(alibi_slopes, features, alibi_slopes, const float*, "BLOOM's slopes",
  "[num_heads], abs <= 2^64", "each query head's ALiBi slope")
MHA_FEATURE_OPTION(sliding_window, features, sliding_window, int64_t, "none", ">= 1",
  "query p sees keys p - sliding_window + 1 .. p at most (Mistral, Gemma's local layers)")
MHA_FEATURE_OPTION(sliding_window_right, features, sliding_window_right,
  mha_optional_int64, "none", ">= 0",
  "keys after p + sliding_window_right are masked too (symmetric local attention)")
MHA_FEATURE_OPTION(attention_chunk_size, features, attention_chunk_size, int64_t, "none",
  ">= 1", "query p sees only its chunk's keys, C * floor(p / C) .. + C - 1 (Llama 4)")
MHA_FEATURE_OPTION(temperature_tuning, features, temperature_tuning, int, "off",
  "on or off", "Llama 4's query temperature: the query at position p times "
  "log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1")
MHA_FEATURE_OPTION(temperature_tuning_floor_scale, temperature_tuning, floor_scale,
  double, "8192", "[2^63 / FLT_MAX, FLT_MAX]", "the temperature's floor_scale")
MHA_FEATURE_OPTION(temperature_tuning_attn_scale, temperature_tuning, attn_scale, double,
  "0.1", "abs(attn_scale) <= 2^64 / 89", "the temperature's attn_scale")
MHA_FEATURE_OPTION(qk_norm, features, qk_norm, int, "off", "on or off",
  "RMSNorm of queries and keys before rotation, with the layer's query and key norm "
  "weights (Qwen 3, Gemma 3, OLMo 2)")
MHA_FEATURE_OPTION(qk_norm_scope, qk_norm, scope, mha_qk_norm_scope, "per_head",
  "per_head, across_heads", "per_head: each head's head_dim values, weights [head_dim]; "
  "across_heads (layers only): a token's every head, weights [heads * head_dim] (OLMo 2)")
MHA_FEATURE_OPTION(qk_norm_eps, qk_norm, eps, double, "1e-6", "finite, >= 0",
  "the RMSNorm's epsilon (rms_norm_eps)")
MHA_FEATURE_OPTION(qk_norm_unit_offset, qk_norm, unit_offset, int, "off", "on or off",
  "scale by 1 + weight instead of weight (Gemma 3)")
MHA_FEATURE_OPTION(qk_norm_value_norm, qk_norm, value_norm, int, "off", "on or off",
  "each head's value row RMS-normalised too, without a weight (Gemma 3n's v_norm)")
/* clang-format on */
