"""mha.MultiheadLatentAttention (DeepSeek's MLA) from Python: its contiguous cache
(a prompt, then decode steps) and a packed step over its paged cache, with and without
a token tree, against the double-precision expanded baseline."""
import numpy as np
import pytest

import mha

HIDDEN, HEADS, RANK, NOPE, ROPE, V = 32, 2, 32, 16, 16, 16


def make_layers(q_lora_rank=0, seed=0):
    rng = np.random.default_rng(seed)

    def linear(rows, columns):
        return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)

    config = mha.LatentAttentionConfig(
        hidden_size=HIDDEN, num_heads=HEADS, q_lora_rank=q_lora_rank, kv_lora_rank=RANK,
        qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V,
        rotary=mha.RotaryConfig(pairing=mha.RotaryPairing.interleaved, theta=10000.0))
    weights = dict(kv_a_proj_with_mqa=linear(RANK + ROPE, HIDDEN),
                   kv_a_layernorm=(1 + 0.1 * rng.standard_normal(RANK)).astype(np.float32),
                   kv_b_proj=linear(HEADS * (NOPE + V), RANK), o_proj=linear(HIDDEN, HEADS * V))
    if q_lora_rank:
        weights.update(q_a_proj=linear(q_lora_rank, HIDDEN), q_b_proj=linear(
            HEADS * (NOPE + ROPE), q_lora_rank),
            q_a_layernorm=np.ones(q_lora_rank, np.float32))
    else:
        weights.update(q_proj=linear(HEADS * (NOPE + ROPE), HIDDEN))
    return (mha.MultiheadLatentAttention(config, **weights),
            mha.NaiveMultiheadLatentAttention(config, **weights))


@pytest.mark.parametrize("q_lora_rank", [0, 24])
def test_prompt_then_decode_matches_naive(q_lora_rank):
    layer, naive = make_layers(q_lora_rank)
    x = np.random.default_rng(1).standard_normal((2, 7, HIDDEN)).astype(np.float32)
    expected = naive.forward(x)
    cache = mha.KvCache(layer, max_batch=2, max_seq_len=7)
    outputs = [layer.forward_with_cache(x[:, :5], cache)]
    outputs += [layer.forward_with_cache(x[:, i:i + 1], cache) for i in (5, 6)]
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), expected, atol=1e-4)
    assert cache.length(0) == 7 and cache.bytes_per_token == (RANK + ROPE) * 4


def test_packed_step_and_token_tree_over_the_paged_cache():
    layer, naive = make_layers()
    x = np.random.default_rng(2).standard_normal((6, HIDDEN)).astype(np.float32)
    cache = mha.PagedKvCache(layer, num_blocks=2, max_sequences=1)
    cache.add_sequence(0)
    cache.append_slots([0], [6])
    out = layer.forward_packed(x, [0], [0, 6], cache)
    np.testing.assert_allclose(out, naive.forward(x[None])[0], atol=1e-4)
    # The last token a root of the tree: it sees only itself, at position 0.
    cache.truncate(0, 0)
    cache.append_slots([0], [6])
    tree = layer.forward_packed(x, [0], [0, 6], cache, tree_parents=[-1, 0, 1, 2, 3, -1])
    np.testing.assert_allclose(tree[:5], out[:5], atol=1e-5)
    np.testing.assert_allclose(tree[5], naive.forward(x[None, 5:])[0, 0], atol=1e-4)


def test_bad_arguments_name_themselves():
    layer, _ = make_layers()
    with pytest.raises(TypeError, match="no weight 'k_proj'"):
        mha.MultiheadLatentAttention(layer.config, k_proj=np.zeros((1, 1), np.float32))
    with pytest.raises(TypeError, match="expected an mha.MultiheadAttention or"):
        mha.KvCache(object(), max_batch=1, max_seq_len=1)
    cache = mha.KvCache(layer, max_batch=1, max_seq_len=2)
    with pytest.raises(ValueError, match="hidden_states"):
        layer.forward_with_cache(np.zeros((1, 1, HIDDEN + 1), np.float32), cache)
    assert cache.length(0) == 0
