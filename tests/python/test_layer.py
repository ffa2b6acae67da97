"""mha.MultiheadAttention against the stored PyTorch fixtures and the double-precision
baseline (mha.NaiveMultiheadAttention), its caches, errors and threading."""
import threading
import time

import numpy as np
import pytest

import mha
from fixture_files import DATA, layer_case, layer_cases

TOLERANCE = 1e-4


def assert_close(actual, expected, what):
    bound = TOLERANCE * max(1.0, float(np.abs(expected).max()))
    error = float(np.abs(actual - expected).max())
    assert error <= bound, f"{what}: max |error| {error:.3g} > {bound:.3g}"


def random_state_dict(rng, embed_dim, num_heads, num_kv_heads=0, head_dim=None, bias=True):
    head_dim = head_dim or embed_dim // num_heads
    kv_rows = (num_kv_heads or num_heads) * head_dim
    rows = {"q_proj": num_heads * head_dim, "k_proj": kv_rows, "v_proj": kv_rows}
    state = {}
    for name, out in rows.items():
        state[f"{name}.weight"] = rng.standard_normal((out, embed_dim), np.float32) * 0.3
        if bias:
            state[f"{name}.bias"] = rng.standard_normal(out, np.float32) * 0.1
    state["out_proj.weight"] = rng.standard_normal((embed_dim, num_heads * head_dim),
                                                   np.float32) * 0.3
    state["out_proj.bias"] = rng.standard_normal(embed_dim, np.float32) * 0.1
    return state


@pytest.mark.parametrize("case", layer_cases())
def test_pytorch_fixture(case):
    state_dict, num_heads, num_kv_heads, config, forward, inputs = layer_case(case)
    # The fixtures' inputs are [B, S, E] whatever names their weights have.
    layer = mha.MultiheadAttention.from_state_dict(state_dict, num_heads, num_kv_heads,
                                                   config=config, batch_first=True)
    expected_weights = DATA / case / "expected_attn_weights.npy"
    output, weights = layer(*inputs, need_weights=expected_weights.exists(), **forward)
    assert_close(output, np.load(DATA / case / "expected_output.npy"), case)
    if expected_weights.exists():
        assert_close(weights, np.load(expected_weights), case + " weights")


@pytest.mark.parametrize("seed,layout,is_causal", [
    ("seed000", mha.WeightLayout.in_out, False),
    ("seed001", mha.WeightLayout.heads_in_head_dim, True)])
def test_seed_weight_layouts(seed, layout, is_causal):
    x = np.load(DATA / seed / "x.npy")
    w = [np.load(DATA / seed / f"w_{n}.npy") for n in "qkv"]
    expected = np.load(DATA / seed / "expected_output.npy")
    head_dim = expected.shape[-1] // 2
    config = mha.AttentionConfig(num_heads=2, head_dim=head_dim, query_dim=x.shape[-1])
    layer = mha.MultiheadAttention(config, *w, layout=layout)
    assert_close(layer(x, is_causal=is_causal)[0], expected, seed)


# Odd sizes, GQA, cross-attention, masks: the layer against the double-precision loops.
@pytest.mark.parametrize("batch,query_len,key_len,embed_dim,num_heads,num_kv_heads", [
    (1, 1, 1, 4, 1, 0), (2, 7, 7, 12, 3, 0), (3, 5, 9, 16, 4, 2), (1, 33, 17, 24, 6, 1)])
def test_matches_naive_baseline(batch, query_len, key_len, embed_dim, num_heads,
                                num_kv_heads):
    rng = np.random.default_rng(query_len * 100 + key_len)
    state = random_state_dict(rng, embed_dim, num_heads, num_kv_heads)
    query = rng.standard_normal((batch, query_len, embed_dim), np.float32)
    memory = rng.standard_normal((batch, key_len, embed_dim), np.float32)
    padding = rng.random((batch, key_len)) < 0.3
    kwargs = dict(key_padding_mask=padding, need_weights=True, average_attn_weights=False)
    fast = mha.MultiheadAttention.from_state_dict(state, num_heads, num_kv_heads)
    naive = mha.NaiveMultiheadAttention.from_state_dict(state, num_heads, num_kv_heads)
    output, weights = fast(query, memory, memory, **kwargs)
    expected_output, expected_weights = naive(query, memory, memory, **kwargs)
    assert output.shape == (batch, query_len, embed_dim)
    assert weights.shape == (batch, num_heads, query_len, key_len)
    assert_close(output, expected_output, "output")
    assert_close(weights, expected_weights, "weights")
    assert np.all(weights[np.broadcast_to(padding[:, None, None, :], weights.shape)] == 0)


def test_sequence_first_like_pytorch_default():
    rng = np.random.default_rng(1)
    state = random_state_dict(rng, 8, 2)
    x = rng.standard_normal((2, 5, 8), np.float32)
    batch_first = mha.MultiheadAttention.from_state_dict(state, 2)
    seq_first = mha.MultiheadAttention.from_state_dict(state, 2, batch_first=False)
    expected = batch_first(x)[0]
    assert_close(seq_first(np.swapaxes(x, 0, 1))[0], np.swapaxes(expected, 0, 1),
                 "batch_first=False")


def test_inputs_of_any_dtype_and_layout_are_converted():
    rng = np.random.default_rng(2)
    state = random_state_dict(rng, 8, 2)
    layer = mha.MultiheadAttention.from_state_dict(state, 2)
    x = rng.standard_normal((2, 8, 5), np.float32)
    expected = layer(np.ascontiguousarray(np.swapaxes(x, 1, 2)))[0]
    assert_close(layer(np.swapaxes(x, 1, 2))[0], expected, "strided view")
    assert_close(layer(np.swapaxes(x, 1, 2).astype(np.float64))[0], expected, "float64")
    assert layer(np.swapaxes(x, 1, 2))[0].dtype == np.float32


def test_torch_tensors_when_torch_is_present():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 6, 16)
    expected, _ = reference(x, x, x, need_weights=False)
    layer = mha.MultiheadAttention.from_state_dict(reference.state_dict(), num_heads=4,
                                                   batch_first=True)
    assert_close(layer(x)[0], expected.detach().numpy(), "torch")


def test_errors_are_value_errors_with_the_library_message():
    rng = np.random.default_rng(3)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 8, 2), 2)
    with pytest.raises(ValueError, match=r"last dimension must be 8, got shape \[2, 5, 7\]"):
        layer(np.zeros((2, 5, 7), np.float32))
    with pytest.raises(ValueError, match="key_padding_mask"):
        layer(np.zeros((2, 5, 8), np.float32), key_padding_mask=np.zeros((2, 4), bool))
    # num_heads is the caller's argument, not the file's: ValueError, not FileError.
    for bad in (3, 0, -2):
        with pytest.raises(ValueError, match=rf"num_heads: expected a divisor of the "
                           rf"query projection's 8 rows \(state_dict\), got {bad}") as error:
            mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 8, 2), bad)
        assert not isinstance(error.value, mha.FileError)
    with pytest.raises(ValueError, match="no in_proj_weight"):
        mha.MultiheadAttention.from_state_dict({"sinks": np.zeros(3)}, 2)
    # A name the layer does not read (here a typo) is refused, naming it.
    typo = random_state_dict(rng, 8, 2)
    typo["out_proj.wieght"] = typo.pop("out_proj.weight")
    with pytest.raises(ValueError, match="unknown tensor 'out_proj.wieght'"):
        mha.MultiheadAttention.from_state_dict(typo, 2)
    with pytest.raises(TypeError, match="no field 'heads'"):
        mha.AttentionConfig(heads=2)


def test_cache_decode_matches_one_causal_forward():
    rng = np.random.default_rng(4)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 16, 4, 2), 4, 2)
    x = rng.standard_normal((2, 9, 16), np.float32)
    expected = layer(x, is_causal=True)[0]
    cache = mha.KvCache(layer, max_batch=2, max_seq_len=16)
    steps = [layer.forward_with_cache(x[:, :6], cache)]
    steps += [layer.forward_with_cache(x[:, i:i + 1], cache) for i in range(6, 9)]
    assert cache.length(0) == 9 and cache.length(1) == 9
    assert_close(np.concatenate(steps, axis=1), expected, "decode")
    with pytest.raises(ValueError, match="max_seq_len"):
        layer.forward_with_cache(rng.standard_normal((2, 8, 16), np.float32), cache)
    assert cache.length(0) == 9


def test_quantised_caches_decode_within_their_bounds():
    rng = np.random.default_rng(6)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 16, 4, 2), 4, 2)
    x = rng.standard_normal((1, 9, 16), np.float32)
    expected = layer(x, is_causal=True)[0]
    # Per token and KV head (2): K's 4 and V's 4 padded to 16 bytes, and two fp32
    # scales unless scale free; keys per channel add a 128-token page's 16 channel
    # scales (64 bytes), rounded up to a byte per token. int4: half a byte per code,
    # the token scales, K's channel scales and minimums (128 bytes per page) and V's
    # group scale and minimum per token: 2 + 4 + 1 and 8 + 4 + 8 bytes.
    kinds = [(mha.DType.int8, mha.KvScales.per_token, 3e-2, 2 * (20 + 8)),
             (mha.DType.int8, mha.KvScales.per_channel_keys, 3e-2, 2 * (20 + 8 + 1)),
             (mha.DType.float8_e4m3fn, mha.KvScales.per_token, 0.1, 2 * (20 + 8)),
             (mha.DType.float8_e5m2, mha.KvScales.none, 0.2, 2 * 20),
             (mha.DType.int4, mha.KvScales.per_channel_keys, 0.15, 2 * (7 + 20))]
    for storage, scales, bound, token_bytes in kinds:
        cache = mha.KvCache(layer, max_batch=1, max_seq_len=16, storage=storage,
                            scales=scales)
        assert cache.bytes_per_token == token_bytes
        steps = [layer.forward_with_cache(x[:, :5], cache)]
        steps += [layer.forward_with_cache(x[:, i:i + 1], cache) for i in range(5, 9)]
        got = np.concatenate(steps, axis=1)
        assert np.abs(got - expected).max() <= bound * max(1.0, np.abs(expected).max())
    with pytest.raises(ValueError, match="storage int8 with scales kNone is not a KV "
                       "storage kind; the kinds .*float8_e4m3fn/kNone"):
        mha.KvCache(layer, max_batch=1, max_seq_len=16, storage=mha.DType.int8,
                    scales=mha.KvScales.none)
    with pytest.raises(ValueError, match="storage int4 with scales kPerToken is not"):
        mha.KvCache(layer, max_batch=1, max_seq_len=16, storage=mha.DType.int4)
    with pytest.raises(ValueError,
                       match="storage float8_e4m3fn with scales kPerChannelKeys is not"):
        mha.KvCache(layer, max_batch=1, max_seq_len=16, storage=mha.DType.float8_e4m3fn,
                    scales=mha.KvScales.per_channel_keys)


def test_head_shards_sum_to_the_full_layer():
    rng = np.random.default_rng(5)
    state = random_state_dict(rng, 24, 6, 3)
    x = rng.standard_normal((2, 7, 24), np.float32)
    full = mha.MultiheadAttention.from_state_dict(state, 6, 3)
    total = np.zeros((2, 7, 24), np.float32)
    for rank in range(2):
        shard = mha.even_head_shard(full.config, rank, 2)
        part = mha.MultiheadAttention.from_state_dict(state, 6, 3, head_shard=shard)
        assert part.config.num_heads == 4 - 2 * rank and part.config.num_kv_heads == 2 - rank
        total += part(x, is_causal=True)[0]
    assert_close(total, full(x, is_causal=True)[0], "sharded")
    with pytest.raises(ValueError, match="splits a key/value group"):
        mha.MultiheadAttention.from_state_dict(state, 6, 3, head_shard=mha.HeadShard(1, 4))


@pytest.mark.parametrize("scope", [mha.QkNormScope.per_head, mha.QkNormScope.across_heads])
def test_qk_norm_layer_matches_naive_and_its_cache(scope):
    rng = np.random.default_rng(8)
    state = random_state_dict(rng, 24, 6, 3)
    per_head = scope == mha.QkNormScope.per_head
    q_weight = rng.standard_normal(4 if per_head else 24).astype(np.float32) * 0.3 + 1
    k_weight = rng.standard_normal(4 if per_head else 12).astype(np.float32) * 0.3 + 1
    config = mha.AttentionConfig(features=mha.AttentionFeatures(qk_norm=mha.QkNorm(
        scope=scope)), rotary=mha.RotaryConfig(pairing=mha.RotaryPairing.half_split))
    weights = [state[n + ".weight"] for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
    biases = {n + "_bias": state[n + ".bias"] for n in ("q_proj", "k_proj", "v_proj",
                                                         "out_proj")}
    config.num_heads, config.head_dim, config.query_dim, config.num_kv_heads = 6, 4, 24, 3
    kwargs = dict(q_norm_weight=q_weight, k_norm_weight=k_weight, **biases)
    fast = mha.MultiheadAttention(config, *weights, **kwargs)
    naive = mha.NaiveMultiheadAttention(config, *weights, **kwargs)
    x = rng.standard_normal((2, 9, 24), np.float32)
    expected = naive(x, is_causal=True)[0]
    assert_close(fast(x, is_causal=True)[0], expected, "qk_norm output")
    cache = mha.KvCache(fast, max_batch=2, max_seq_len=16)
    steps = [fast.forward_with_cache(x[:, :5], cache), fast.forward_with_cache(x[:, 5:], cache)]
    assert_close(np.concatenate(steps, axis=1), expected, "qk_norm cached")
    if per_head:  # each shard normalises its own heads with the same weights
        total = sum(mha.MultiheadAttention(config, *weights, head_shard=mha.HeadShard(
            first, first + 2), **kwargs)(x, is_causal=True)[0] for first in (0, 2, 4))
        assert_close(total, expected, "qk_norm sharded")
    else:
        with pytest.raises(ValueError, match="kAcrossHeads normalises over every head"):
            mha.MultiheadAttention(config, *weights, head_shard=mha.HeadShard(0, 2), **kwargs)


def test_kv_shared_layer_reads_the_source_layers_cache():
    rng = np.random.default_rng(9)
    source_state = random_state_dict(rng, 16, 4, 2)
    shared_state = random_state_dict(rng, 16, 4, 2)
    source = mha.MultiheadAttention.from_state_dict(source_state, 4, 2)
    shared = mha.MultiheadAttention.from_state_dict(shared_state, 4, 2)
    # The reference: the sharing layer's queries and output over the source's K/V.
    mixed = dict(shared_state)
    for name in ("k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"):
        mixed[name] = source_state[name]
    reference = mha.NaiveMultiheadAttention.from_state_dict(mixed, 4, 2)
    x_source = rng.standard_normal((1, 7, 16), np.float32)
    x_shared = rng.standard_normal((1, 7, 16), np.float32)
    expected = reference(x_shared, x_source, x_source, is_causal=True)[0]
    cache = mha.KvCache(source, max_batch=1, max_seq_len=8)
    outputs = []
    for first, last in ((0, 4), (4, 5), (5, 7)):
        source.forward_with_cache(x_source[:, first:last], cache)
        outputs.append(shared.forward_with_cache(x_shared[:, first:last], cache,
                                                 kv_shared=True))
        assert cache.length(0) == last
    assert_close(np.concatenate(outputs, axis=1), expected, "kv_shared")


@pytest.mark.parametrize("kind", ["dynamic", "longrope"])
def test_dynamic_rope_scaling_matches_naive(kind):
    rng = np.random.default_rng(10)
    state = random_state_dict(rng, 16, 2, 2)
    scaling = mha.RopeScaling(type=getattr(mha.RopeScalingType, kind), factor=4.0,
                              original_max_position_embeddings=8,
                              short_factor=[1.0, 1.3, 1.7, 2.0],
                              long_factor=[2.0, 3.0, 5.0, 9.0])
    config = mha.AttentionConfig(rotary=mha.RotaryConfig(
        pairing=mha.RotaryPairing.half_split, scaling=scaling))
    fast = mha.MultiheadAttention.from_state_dict(state, 2, 2, config=config)
    naive = mha.NaiveMultiheadAttention.from_state_dict(state, 2, 2, config=config)
    x = rng.standard_normal((2, 20, 16), np.float32)
    assert_close(fast(x, is_causal=True)[0], naive(x, is_causal=True)[0], kind)


def test_forward_releases_the_gil():
    rng = np.random.default_rng(6)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 256, 8), 8)
    x = rng.standard_normal((4, 512, 256), np.float32)
    layer(x)  # warm up the primitives and workspaces
    counter, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.05)
    before = counter[0]
    started = time.perf_counter()
    layer(x, num_threads=1)
    elapsed = time.perf_counter() - started
    during = counter[0] - before
    stop.set()
    thread.join()
    # Holding the GIL would stop the counter for the whole call.
    assert elapsed > 0.01 and during > 1000, (elapsed, during)


def test_integer_masks_are_refused_as_pytorch_does():
    rng = np.random.default_rng(7)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 8, 2), 2)
    x = rng.standard_normal((2, 5, 8), np.float32)
    padding = np.zeros((2, 5), np.int64)
    padding[:, 3:] = 1
    with pytest.raises(ValueError, match="key_padding_mask: expected a bool or floating"):
        layer(x, key_padding_mask=padding)
    with pytest.raises(ValueError, match="attn_mask: expected a bool or floating.*uint8"):
        layer(x, attn_mask=np.triu(np.ones((5, 5), np.uint8), 1))
    # As bool the same mask hides the padded keys.
    _, weights = layer(x, key_padding_mask=padding.astype(bool), need_weights=True)
    assert np.all(weights[:, :, 3:] == 0)


def test_weights_are_not_sized_from_a_wrong_key():
    rng = np.random.default_rng(8)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 8, 2), 2)
    x = rng.standard_normal((2, 5, 8), np.float32)
    key = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (2, 2**36, 0), (0, 0, 4))
    with pytest.raises(ValueError, match=r"key: expected \[B, S_k, 8\] with B = 2"):
        layer(x, key, key, need_weights=True)


def test_one_cache_shared_by_threads_is_never_overrun():
    # Two threads append to one cache until it is full: the calls run one at a time,
    # so exactly max_seq_len tokens land and every refused call says why.
    rng = np.random.default_rng(9)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 16, 2), 2)
    cache = mha.KvCache(layer, max_batch=1, max_seq_len=40)
    token = rng.standard_normal((1, 1, 16), np.float32)
    landed, errors = [0, 0], []

    def decode(index):
        for _ in range(60):
            try:
                layer.forward_with_cache(token, cache)
                landed[index] += 1
            except ValueError as error:
                errors.append(str(error))

    threads = [threading.Thread(target=decode, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.length(0) == 40 and sum(landed) == 40
    assert len(errors) == 80 and all("max_seq_len" in e for e in errors)


@pytest.mark.parametrize("batch_first", [True, False])
def test_cross_attention_over_a_projected_memory(batch_first):
    rng = np.random.default_rng(11)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 32, 4, 2), 4, 2,
                                                   batch_first=batch_first)
    memory = rng.standard_normal((3, 9, 32)).astype(np.float32)
    query = rng.standard_normal((3, 4, 32)).astype(np.float32)
    lengths = np.array([9, 5, 1])
    cache = mha.KvCache(layer, max_batch=3, max_seq_len=9)

    def sequence_first(x):
        return x if batch_first else np.ascontiguousarray(x.swapaxes(0, 1))

    layer.project_memory(sequence_first(memory), cache, memory_lengths=lengths)
    assert [cache.length(b) for b in range(3)] == [9, 5, 1]
    padded = np.arange(9)[None, :] >= lengths[:, None]
    expected, _ = layer(sequence_first(query), sequence_first(memory),
                        sequence_first(memory), key_padding_mask=padded)
    for _ in range(2):  # the memory is projected once and read by every step
        output = layer.forward_cross_attention(sequence_first(query), cache)
        assert_close(output, expected, "cross-attention")
    with pytest.raises(ValueError, match=r"memory_lengths\[1\]: must be in \[0, 9\], got 10"):
        layer.project_memory(sequence_first(memory), cache, memory_lengths=[9, 10, 1])
    assert [cache.length(b) for b in range(3)] == [9, 5, 1]  # unchanged by the failure


def test_from_state_dict_follows_pytorchs_batch_first_for_its_names():
    rng = np.random.default_rng(7)
    torch_names = {"in_proj_weight": rng.standard_normal((24, 8), np.float32),
                   "out_proj.weight": rng.standard_normal((8, 8), np.float32)}
    layer = mha.MultiheadAttention.from_state_dict(torch_names, 2)
    assert layer.batch_first is False  # nn.MultiheadAttention's default
    x = rng.standard_normal((5, 3, 8), np.float32)  # [S, B, E]
    explicit = mha.MultiheadAttention.from_state_dict(torch_names, 2, batch_first=True)
    np.testing.assert_allclose(layer(x)[0],
                               explicit(x.transpose(1, 0, 2))[0].transpose(1, 0, 2),
                               rtol=1e-5, atol=1e-6)
    assert mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 8, 2),
                                                  2).batch_first is True


def test_describe_isa_reports_the_bf16_product_path():
    report = mha.describe_isa()
    assert report.simd_target and report.onednn_isa
    assert report.bf16_dot_products or not report.amx_tiles  # AMX runs bf16 products
    assert "bf16_dot_products=" in repr(report)
    with pytest.raises(ValueError, match="name: expected one of sse4"):
        mha.set_max_isa("avx9")


def test_thread_placement_changes_no_result():
    """mha/threads.hpp: where the team's threads run is not what they compute."""
    rng = np.random.default_rng(22)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 64, 4), 4)
    x = rng.standard_normal((2, 90, 64)).astype(np.float32)
    assert mha.thread_placement() == "spread"
    spread, _ = layer(x, is_causal=True)
    mha.set_thread_placement("unbound")
    try:
        assert mha.thread_placement() == "unbound"
        unbound, _ = layer(x, is_causal=True)
    finally:
        mha.set_thread_placement("spread")
    np.testing.assert_array_equal(spread, unbound)
    with pytest.raises(ValueError, match="name: expected one of spread, unbound, got 'x'"):
        mha.set_thread_placement("x")


def test_out_may_be_the_query_itself():
    """docs/api.md, "In place": the output written over the query (a residual stream)
    is the output written elsewhere, bit for bit."""
    rng = np.random.default_rng(21)
    layer = mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 32, 4, 2), 4, 2)
    x = rng.standard_normal((2, 70, 32)).astype(np.float32)
    expected, _ = layer(x, is_causal=True)
    result, _ = layer(x, is_causal=True, out=x)
    assert np.shares_memory(result, x)
    np.testing.assert_array_equal(x, expected)
