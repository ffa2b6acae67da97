"""mha.PagedKvCache and layer.forward_packed: packed steps of mixed prefill and
decode against each sequence run alone through a contiguous cache, forks, the pool
running out (mha.OutOfBlocksError, the cache unchanged), and bad arguments."""
import re

import numpy as np
import pytest

import mha
from test_layer import random_state_dict


def make_layer(seed=0):
    rng = np.random.default_rng(seed)
    return mha.MultiheadAttention.from_state_dict(random_state_dict(rng, 32, 4, 2), 4, 2)


def alone(layer, tokens):
    """The causal outputs of one sequence's tokens [S, E], in one call."""
    cache = mha.KvCache(layer, max_batch=1, max_seq_len=len(tokens))
    return layer.forward_with_cache(tokens[None], cache)[0]


def packed_step(layer, cache, work):
    """One packed step: work is [(sequence id, tokens [n, E])]; returns each output."""
    ids = [sequence for sequence, _ in work]
    counts = [len(tokens) for _, tokens in work]
    cache.append_slots(ids, counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    query = np.concatenate([tokens for _, tokens in work])
    out = layer.forward_packed(query, np.array(ids, np.int64), starts, cache)
    return [out[starts[i]:starts[i + 1]] for i in range(len(work))]


@pytest.mark.parametrize("storage,scales,bound", [
    (mha.DType.float32, mha.KvScales.per_token, 1e-4),
    (mha.DType.bfloat16, mha.KvScales.per_token, 3e-2),
    (mha.DType.int8, mha.KvScales.per_token, 3e-2),
    (mha.DType.int4, mha.KvScales.per_channel_keys, 0.15),
])
def test_mixed_packed_steps_match_each_sequence_alone(storage, scales, bound):
    layer = make_layer()
    rng = np.random.default_rng(1)
    lengths = {0: 21, 3: 5, 7: 40}
    tokens = {s: rng.standard_normal((n + 3, 32), np.float32) for s, n in lengths.items()}
    cache = mha.PagedKvCache(layer, num_blocks=16, max_sequences=8, storage=storage,
                             scales=scales)
    for sequence in lengths:
        cache.add_sequence(sequence)
    got = {s: [] for s in lengths}
    # Prefills of different lengths in one step, then three decode steps.
    for sequence, out in zip(lengths, packed_step(
            layer, cache, [(s, tokens[s][:n]) for s, n in lengths.items()])):
        got[sequence].append(out)
    for step in range(3):
        work = [(s, tokens[s][n + step:n + step + 1]) for s, n in lengths.items()]
        for sequence, out in zip(lengths, packed_step(layer, cache, work)):
            got[sequence].append(out)
    for sequence, n in lengths.items():
        assert cache.length(sequence) == n + 3
        expected = alone(layer, tokens[sequence])
        actual = np.concatenate(got[sequence])
        error = np.abs(actual - expected).max()
        assert error <= bound * max(1.0, np.abs(expected).max()), (sequence, error)


def test_fork_shares_blocks_and_decodes_apart():
    layer = make_layer()
    rng = np.random.default_rng(2)
    prompt = rng.standard_normal((40, 32), np.float32)
    nexts = rng.standard_normal((2, 1, 32), np.float32)
    cache = mha.PagedKvCache(layer, num_blocks=12, max_sequences=4)
    cache.add_sequence(0)
    packed_step(layer, cache, [(0, prompt)])
    cache.fork(0, 1)
    assert 1 in cache and cache.length(1) == 40
    assert cache.stats()["shared_blocks"] == 3
    outs = packed_step(layer, cache, [(0, nexts[0]), (1, nexts[1])])
    for i in range(2):
        expected = alone(layer, np.concatenate([prompt, nexts[i]]))[-1:]
        assert np.abs(outs[i] - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())
    used = cache.stats()["used_blocks"]
    cache.remove_sequence(1)
    assert 1 not in cache and cache.stats()["used_blocks"] == used - 1


def test_out_of_blocks_leaves_the_cache_as_it_was():
    layer = make_layer()
    cache = mha.PagedKvCache(layer, num_blocks=2, max_sequences=2)
    cache.add_sequence(0)
    cache.append_slots([0], [20])
    before = cache.stats()
    with pytest.raises(mha.OutOfBlocksError, match="block"):
        cache.append_slots([0], [20])
    assert issubclass(mha.OutOfBlocksError, ValueError)
    assert cache.stats() == before and cache.length(0) == 20
    cache.truncate(0, 4)
    assert cache.length(0) == 4


def test_bad_arguments_raise_value_error_naming_them():
    layer = make_layer()
    cache = mha.PagedKvCache(layer, num_blocks=4, max_sequences=2)
    with pytest.raises(ValueError, match="sequence"):
        cache.add_sequence(5)
    with pytest.raises(ValueError, match="2 sequences but 1 counts"):
        cache.append_slots([0, 1], [1])
    with pytest.raises(ValueError, match="query"):
        layer.forward_packed(np.zeros((1, 1, 32), np.float32), [0], [0, 1], cache)
    with pytest.raises(ValueError, match="block_size"):
        mha.PagedKvCache(layer, num_blocks=4, max_sequences=2, block_size=17)


@pytest.mark.parametrize("bad,what", [
    (np.array([0.0, 1.0]), "expected integers, got dtype float64"),
    (["0", "1"], "expected integers, got dtype <U1"),
    (np.array([0, 2**64 - 1], np.uint64), "up to 2^63 - 1, got 18446744073709551615"),
])
def test_index_arguments_take_integers_only(bad, what):
    layer = make_layer()
    cache = mha.PagedKvCache(layer, num_blocks=4, max_sequences=2)
    cache.add_sequence(0)
    cache.append_slots([0], [1])
    query = np.zeros((1, 32), np.float32)
    with pytest.raises(ValueError, match="query_start_loc.*" + re.escape(what)):
        layer.forward_packed(query, [0], bad, cache)
    assert cache.length(0) == 1


def test_kv_shared_packed_layer_reads_the_source_layers_pages():
    """A KV-shared layer (Gemma 3n) in a packed step reads the keys and values its
    source layer wrote in that step: the same output as through a contiguous cache."""
    source, shared = make_layer(1), make_layer(2)
    rng = np.random.default_rng(3)
    x_source = rng.standard_normal((6, 32), np.float32)
    x_shared = rng.standard_normal((6, 32), np.float32)
    contiguous = mha.KvCache(source, max_batch=1, max_seq_len=6)
    source.forward_with_cache(x_source[None], contiguous)
    expected = shared.forward_with_cache(x_shared[None], contiguous, kv_shared=True)[0]
    cache = mha.PagedKvCache(source, num_blocks=2, max_sequences=1)
    cache.add_sequence(0)
    cache.append_slots([0], [6])
    starts = np.array([0, 6], np.int64)
    source.forward_packed(x_source, [0], starts, cache, 0)
    out = shared.forward_packed(x_shared, [0], starts, cache, 0, kv_shared=True)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert cache.length(0) == 6
