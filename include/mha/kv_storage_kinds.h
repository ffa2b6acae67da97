/* The KV cache storage kinds, one line each: the one list that the C header's
   mha_kv_storage, the C++ (mha::DType, mha::KvScales) pairs, the Python module and
   the library's kind table are made from. Include it with MHA_KV_KIND defined as
     MHA_KV_KIND(Name, C_NAME, c_value, dtype, scales)
   Name: the internal kind (src/kv/kinds/<kind>.cc holds its page format and kernel
   hooks); MHA_KV_<C_NAME> = c_value: its C spelling; dtype, scales: its C++ and
   Python spelling, a mha::DType and a mha::KvScales enumerator.
   The kinds' accuracy and bytes per token: docs/serving.md. */
/* fp32, and bfloat16 (keys and values rounded once, as appended) */
MHA_KV_KIND(Float32, FLOAT32, 0, kFloat32, kPerToken)
MHA_KV_KIND(BFloat16, BFLOAT16, 1, kBFloat16, kPerToken)
/* symmetric int8, one fp32 scale per (token, KV head) for the key and the value */
MHA_KV_KIND(Int8, INT8, 2, kInt8, kPerToken)
/* fp8 (PyTorch's float8_e4m3fn / float8_e5m2), one fp32 scale per (token, KV head) */
MHA_KV_KIND(Fp8E4M3, FP8_E4M3, 3, kFloat8E4M3, kPerToken)
MHA_KV_KIND(Fp8E5M2, FP8_E5M2, 4, kFloat8E5M2, kPerToken)
/* fp8 cast as it is, no scales: for models calibrated for fp8 KV */
MHA_KV_KIND(Fp8E4M3ScaleFree, FP8_E4M3_SCALE_FREE, 5, kFloat8E4M3, kNone)
MHA_KV_KIND(Fp8E5M2ScaleFree, FP8_E5M2_SCALE_FREE, 6, kFloat8E5M2, kNone)
/* int8, keys per channel (one scale per block, KV head and channel), values per
   token: for keys with outlier channels */
MHA_KV_KIND(Int8ChannelKeys, INT8_CHANNEL_KEYS, 7, kInt8, kPerChannelKeys)
/* int4 with zero points: keys per channel as INT8_CHANNEL_KEYS, values per token in
   groups of 32 channels */
MHA_KV_KIND(Int4, INT4, 8, kInt4, kPerChannelKeys)
/* ggml's q8_0: int8, one fp16 scale per 32 channels of each token's key and value */
MHA_KV_KIND(Q8_0, Q8_0, 9, kInt8, kPerGroup)
/* ggml's q4_0: 4-bit codes for -8..7, one fp16 scale per 32 channels of each token */
MHA_KV_KIND(Q4_0, Q4_0, 10, kInt4, kPerGroup)
