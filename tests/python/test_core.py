"""mha.scaled_dot_product_attention against the stored PyTorch fixture and a float64
numpy reference, with strided views read in place."""
import numpy as np
import pytest

import mha
from fixture_files import DATA, parse_args, rotary_config, features


def reference_sdpa(query, key, value, is_causal=False, chunk=None):
    q, k, v = (a.astype(np.float64) for a in (query, key, value))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if is_causal:
        scores += np.triu(np.full(scores.shape[-2:], -np.inf), 1)
    if chunk:  # Llama 4's chunked overlay: kv_idx // chunk == q_idx // chunk
        positions = np.arange(scores.shape[-1])
        same = positions[:, None] // chunk == positions[None, :] // chunk
        scores += np.where(same, 0.0, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("batch,heads,kv_heads,query_len,key_len,head_dim", [
    (1, 1, 1, 1, 1, 4), (2, 4, 2, 7, 7, 16), (1, 6, 1, 13, 21, 40)])
def test_matches_float64_reference(batch, heads, kv_heads, query_len, key_len, head_dim):
    rng = np.random.default_rng(query_len + key_len)
    q = rng.standard_normal((batch, heads, query_len, head_dim), np.float32)
    k = rng.standard_normal((batch, kv_heads, key_len, head_dim), np.float32)
    v = rng.standard_normal((batch, kv_heads, key_len, head_dim), np.float32)
    causal = query_len == key_len
    expected = reference_sdpa(q, k, v, causal)
    np.testing.assert_allclose(mha.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               expected, atol=1e-4, rtol=0)


def test_values_of_their_own_width_as_in_mla():
    # MLA's absorbed shape: MQA over keys [latent, rope part], values the latent (a view
    # of the keys' first columns, read in place).
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 8, 3, 40), np.float32)
    k = rng.standard_normal((1, 1, 30, 40), np.float32)
    v = k[..., :32]
    output = mha.scaled_dot_product_attention(q, k, v)
    assert output.shape == (1, 8, 3, 32)
    np.testing.assert_allclose(output, reference_sdpa(q, k, v), atol=1e-4, rtol=0)


def test_attention_chunks_match_float64_reference():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 4, 50, 16), np.float32)
    k = rng.standard_normal((1, 2, 50, 16), np.float32)
    v = rng.standard_normal((1, 2, 50, 16), np.float32)
    output = mha.scaled_dot_product_attention(
        q, k, v, is_causal=True, features=mha.AttentionFeatures(attention_chunk_size=12))
    np.testing.assert_allclose(output, reference_sdpa(q, k, v, True, chunk=12),
                               atol=1e-4, rtol=0)


def test_temperature_tuning_scales_each_query_by_its_position():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 4, 40, 16), np.float32)
    k = rng.standard_normal((2, 1, 40, 16), np.float32)
    v = rng.standard_normal((2, 1, 40, 16), np.float32)
    temperature = mha.AttentionTemperature(floor_scale=4.0, attn_scale=0.2)
    output = mha.scaled_dot_product_attention(
        q, k, v, is_causal=True,
        features=mha.AttentionFeatures(temperature_tuning=temperature))
    positions = np.arange(40, dtype=np.float32)
    scales = np.log(np.floor((positions + 1) / 4.0) + 1) * 0.2 + 1  # Llama 4's formula
    np.testing.assert_allclose(output, reference_sdpa(q * scales[:, None], k, v, True),
                               atol=1e-4, rtol=0)


def test_qk_norm_equals_normalising_query_and_key_first():
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 4, 30, 16), np.float32)
    k = rng.standard_normal((2, 2, 30, 16), np.float32)
    v = rng.standard_normal((2, 2, 30, 16), np.float32)
    q_weight = (rng.standard_normal(16) * 0.3).astype(np.float32)
    k_weight = (rng.standard_normal(16) * 0.3).astype(np.float32)

    def gemma_norm(x, weight):  # Gemma3RMSNorm: 1 + weight
        x = x.astype(np.float64)
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * (1.0 + weight)

    norm = mha.QkNorm(eps=1e-6, unit_offset=True)
    output = mha.scaled_dot_product_attention(
        q, k, v, is_causal=True, features=mha.AttentionFeatures(qk_norm=norm),
        q_norm_weight=q_weight, k_norm_weight=k_weight)
    expected = reference_sdpa(gemma_norm(q, q_weight), gemma_norm(k, k_weight), v, True)
    np.testing.assert_allclose(output, expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="options.key_norm_weight: required"):
        mha.scaled_dot_product_attention(
            q, k, v, features=mha.AttentionFeatures(qk_norm=norm), q_norm_weight=q_weight)


def test_bf16_compute_within_its_bound():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 4, 33, 64), np.float32)
    k = rng.standard_normal((2, 2, 140, 64), np.float32)
    v = rng.standard_normal((2, 2, 140, 64), np.float32)
    output = mha.scaled_dot_product_attention(q, k, v, compute_dtype=mha.DType.bfloat16)
    expected = reference_sdpa(q, k, v)
    np.testing.assert_allclose(output, expected, atol=1e-2, rtol=0)
    with pytest.raises(ValueError, match="compute_dtype: must be float32 or bfloat16"):
        mha.scaled_dot_product_attention(q, k, v, compute_dtype=mha.DType.int8)


def test_slices_of_a_fused_qkv_buffer():
    rng = np.random.default_rng(7)
    qkv = rng.standard_normal((2, 9, 3, 4, 8), np.float32)  # [B, S, q/k/v, H, D]
    q, k, v = (qkv[:, :, i] for i in range(3))                # [B, S, H, D] views
    output = mha.scaled_dot_product_attention(q, k, v, layout=mha.HeadLayout.bshd)
    expected = reference_sdpa(*(np.swapaxes(a, 1, 2) for a in (q, k, v)))
    np.testing.assert_allclose(np.swapaxes(output, 1, 2), expected, atol=1e-4, rtol=0)


def test_pytorch_core_fixture():
    case = "core_sdpa_features"
    flags = parse_args(case)
    q, k, v, sinks = (np.load(DATA / case / flags[f])
                      for f in ("--query", "--key", "--value", "--sinks"))
    output, logsumexp = mha.scaled_dot_product_attention(
        q, k, v, is_causal=True, layout=mha.HeadLayout.bshd, features=features(flags),
        sinks=sinks, rotary=rotary_config(flags),
        causal_alignment=mha.CausalAlignment.bottom_right, return_logsumexp=True)
    np.testing.assert_allclose(output, np.load(DATA / case / "expected_output.npy"),
                               atol=1e-4, rtol=0)
    np.testing.assert_allclose(logsumexp, np.load(DATA / case / "expected_logsumexp.npy"),
                               atol=1e-4, rtol=0)


def test_bad_shapes_are_value_errors():
    q = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="key"):
        mha.scaled_dot_product_attention(q, np.zeros((1, 2, 3, 5), np.float32), q)


def test_broadcast_and_reversed_views_are_copied():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, 4, 5, 8), np.float32)
    kv = rng.standard_normal((1, 1, 5, 8), np.float32)
    broadcast = np.broadcast_to(kv, (1, 4, 5, 8))  # stride 0 over heads
    expected = reference_sdpa(q, kv, kv)
    np.testing.assert_allclose(mha.scaled_dot_product_attention(q, broadcast, broadcast),
                               expected, atol=1e-4, rtol=0)
    reversed_keys = kv[:, :, ::-1]  # negative stride over the sequence
    np.testing.assert_allclose(
        mha.scaled_dot_product_attention(q, reversed_keys, reversed_keys),
        reference_sdpa(q, reversed_keys.copy(), reversed_keys.copy()), atol=1e-4, rtol=0)


def test_a_rotary_table_built_once_is_reused():
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((1, 2, 6, 8), np.float32) for _ in range(3))
    config = mha.RotaryConfig(pairing=mha.RotaryPairing.half_split, max_positions=1 << 24)
    table = mha.RotaryEmbedding(config, 8)
    assert table.max_positions == 1 << 24 and table.head_dim == 8
    small = mha.RotaryConfig(pairing=mha.RotaryPairing.half_split, max_positions=6)
    expected = mha.scaled_dot_product_attention(q, k, v, rotary=small)
    # The config is cut to the positions the call reaches; the table is used as built.
    np.testing.assert_array_equal(mha.scaled_dot_product_attention(q, k, v, rotary=config),
                                  expected)
    np.testing.assert_array_equal(mha.scaled_dot_product_attention(q, k, v, rotary=table),
                                  expected)
    with pytest.raises(ValueError, match="head_dim"):
        mha.scaled_dot_product_attention(q, k, v, rotary=mha.RotaryEmbedding(config, 4))


def test_missing_arrays_are_named():
    q = np.zeros((1, 2, 3, 4), np.float32)
    for name, args in (("query", (None, q, q)), ("key", (q, None, q)), ("value", (q, q, None))):
        with pytest.raises(ValueError, match=f"mha: {name}: expected a float array of 4 "
                                             "dimensions, got None"):
            mha.scaled_dot_product_attention(*args)


def sdpa_bool_reference(query, key, value, keep, scale=None):
    """F.scaled_dot_product_attention's math with a bool attn_mask (True = takes part),
    in float64; a row that keeps no key is 0 (mha's rule; PyTorch gives NaN)."""
    q, k, v = (a.astype(np.float64) for a in (query, key, value))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.where(keep, q @ np.swapaxes(k, -1, -2) * scale, -np.inf)
    top = scores.max(-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(-1, keepdims=True)
    return np.where(total > 0, weights / np.where(total > 0, total, 1.0), 0.0) @ v


# The bool-mask shapes F.scaled_dot_product_attention broadcasts, as PyTorch's own
# tests draw them (test_transformers.py): [Sq, Sk], [B, 1, Sq, Sk], [1, H, Sq, Sk],
# [B, H, 1, Sk], [B, H, Sq, Sk].
@pytest.mark.parametrize("mask_shape", [
    (5, 7), (2, 1, 5, 7), (1, 3, 5, 7), (2, 3, 1, 7), (2, 3, 5, 7)])
def test_bool_attn_mask_reads_true_as_attend_like_torch_sdpa(mask_shape):
    rng = np.random.default_rng(sum(mask_shape))
    q = rng.standard_normal((2, 3, 5, 8), np.float32)
    k = rng.standard_normal((2, 3, 7, 8), np.float32)
    v = rng.standard_normal((2, 3, 7, 8), np.float32)
    keep = rng.random(mask_shape) < 0.6
    keep.reshape(-1, mask_shape[-1])[0] = False  # a row that keeps nothing
    expected = sdpa_bool_reference(q, k, v, np.broadcast_to(keep, (2, 3, 5, 7)))
    np.testing.assert_allclose(mha.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                               expected, atol=1e-5, rtol=0)
    # nn.MultiheadAttention's reading stays one argument away.
    np.testing.assert_allclose(
        mha.scaled_dot_product_attention(q, k, v, attn_mask=~keep,
                                         mask_convention=mha.MaskConvention.torch),
        expected, atol=1e-5, rtol=0)


def test_tril_keep_mask_equals_is_causal_and_key_padding_keeps_its_meaning():
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((1, 2, 4, 8), np.float32) for _ in range(3))
    keep = np.tril(np.ones((4, 4), bool))
    np.testing.assert_allclose(mha.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                               mha.scaled_dot_product_attention(q, k, v, is_causal=True),
                               atol=1e-6, rtol=0)
    padding = np.array([[False, False, False, True]])  # True = padding, as in nn.MHA
    expected = sdpa_bool_reference(q, k, v, keep & ~padding[:, None, None, :])
    np.testing.assert_allclose(
        mha.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                         key_padding_mask=padding),
        expected, atol=1e-5, rtol=0)


def test_scale_zero_attends_uniformly_over_the_visible_keys():
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((1, 2, 6, 8), np.float32) for _ in range(3))
    output = mha.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.0)
    expected = np.cumsum(v.astype(np.float64), axis=2) / np.arange(1, 7)[:, None]
    np.testing.assert_allclose(output, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="options.scale: must be finite"):
        mha.scaled_dot_product_attention(q, k, v, scale=float("inf"))
