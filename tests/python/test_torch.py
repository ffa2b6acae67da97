"""torch tensors and numpy arrays in and out without copies: contiguous float32 and
bfloat16 tensors are read in place (mha._activation_view gives the address read),
outputs follow the query's kind and dtype, and out= is written in place."""
import numpy as np
import pytest

import mha
from test_layer import random_state_dict

torch = pytest.importorskip("torch")


def make_layer(batch_first=True):
    rng = np.random.default_rng(0)
    return mha.MultiheadAttention.from_state_dict(
        random_state_dict(rng, 32, 4, 2), 4, 2, batch_first=batch_first)


@pytest.mark.parametrize("dtype,name", [(torch.float32, "float32"),
                                        (torch.bfloat16, "bfloat16")])
def test_contiguous_tensors_are_read_in_place(dtype, name):
    tensor = torch.randn(3, 5, 32).to(dtype)
    assert mha._activation_view(tensor) == (tensor.data_ptr(), name)
    grad = torch.randn(3, 5, 32, requires_grad=True)
    assert mha._activation_view(grad) == (grad.data_ptr(), "float32")


def test_numpy_float32_is_read_in_place_and_others_converted():
    array = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    assert mha._activation_view(array) == (array.ctypes.data, "float32")
    address, dtype = mha._activation_view(array.astype(np.float64))
    assert dtype == "float32"
    strided = torch.randn(32, 4).t()  # a transposed view: copied to be contiguous
    address, dtype = mha._activation_view(strided)
    assert address != strided.data_ptr() and dtype == "float32"
    half = torch.randn(4, 32).half()
    assert mha._activation_view(half)[1] == "float32"


def test_outputs_follow_the_query_kind_and_dtype():
    layer = make_layer()
    x = torch.randn(2, 6, 32)
    numpy_out, _ = layer(x.numpy())
    torch_out, _ = layer(x)
    assert isinstance(numpy_out, np.ndarray) and isinstance(torch_out, torch.Tensor)
    assert torch_out.dtype == torch.float32
    np.testing.assert_array_equal(torch_out.numpy(), numpy_out)
    bf16_out, _ = layer(x.bfloat16())
    assert bf16_out.dtype == torch.bfloat16
    # bf16 in, bf16 out: within bf16's precision (2^-8) of the output's scale.
    reference, _ = layer(x.bfloat16().float())
    scale = float(reference.abs().max())
    np.testing.assert_allclose(bf16_out.float().numpy(), reference.numpy(),
                               atol=2e-2 * scale)
    _, weights = layer(x, need_weights=True)
    assert isinstance(weights, torch.Tensor) and weights.shape == (2, 6, 6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_every_call_returns_a_float16_or_float64_query_its_dtype(dtype):
    """One rule (docs/api.md, "Outputs"): computed in float32, returned as the query's
    dtype by the layer, its cache and the core alike."""
    layer = make_layer()
    x = torch.randn(2, 6, 32)
    expected, _ = layer(x)
    out, _ = layer(x.to(dtype))
    assert out.dtype == dtype
    # float16 inputs: within its precision (2^-11) of the output's scale.
    torch.testing.assert_close(out, expected.to(dtype), rtol=0,
                               atol=1e-2 * float(expected.abs().max()))
    cache = mha.KvCache(layer, max_batch=2, max_seq_len=6)
    assert layer.forward_with_cache(x.to(dtype), cache).dtype == dtype
    q = torch.randn(1, 2, 5, 8).to(dtype)
    assert mha.scaled_dot_product_attention(q, q, q).dtype == dtype


def test_core_outputs_follow_the_query_kind_and_dtype():
    """scaled_dot_product_attention as the layer calls: a torch query gets torch
    outputs of its dtype (the log-sum-exp stays float32, as PyTorch keeps it)."""
    q, k, v = (torch.randn(2, 4, 6, 16) for _ in range(3))
    numpy_out, numpy_lse = mha.scaled_dot_product_attention(
        q.numpy(), k.numpy(), v.numpy(), is_causal=True, return_logsumexp=True)
    torch_out, torch_lse = mha.scaled_dot_product_attention(
        q, k, v, is_causal=True, return_logsumexp=True)
    assert isinstance(numpy_out, np.ndarray) and isinstance(torch_out, torch.Tensor)
    assert torch_out.dtype == torch.float32 and torch_lse.dtype == torch.float32
    np.testing.assert_array_equal(torch_out.numpy(), numpy_out)
    np.testing.assert_array_equal(torch_lse.numpy(), numpy_lse)
    bf16_out, bf16_lse = mha.scaled_dot_product_attention(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True, return_logsumexp=True)
    assert bf16_out.dtype == torch.bfloat16 and bf16_lse.dtype == torch.float32
    reference = mha.scaled_dot_product_attention(
        q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), is_causal=True)
    np.testing.assert_allclose(bf16_out.float().numpy(), reference.numpy(),
                               atol=2e-2 * float(reference.abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_out_is_written_in_place(dtype):
    layer = make_layer()
    x = torch.randn(2, 6, 32).to(dtype)
    expected, _ = layer(x)
    out = torch.full((2, 6, 32), float("nan"), dtype=dtype)
    address = out.data_ptr()
    result, _ = layer(x, out=out)
    assert result is out and out.data_ptr() == address
    assert torch.equal(out, expected)
    array = np.full((2, 6, 32), np.nan, np.float32)
    result, _ = layer(x.float().numpy(), out=array)
    assert result is array
    np.testing.assert_array_equal(array, layer(x.float().numpy())[0])


def test_cached_and_packed_calls_take_bf16_and_out():
    layer = make_layer()
    tokens = torch.randn(7, 32).bfloat16()
    cache = mha.KvCache(layer, max_batch=1, max_seq_len=8)
    out = torch.empty(1, 7, 32, dtype=torch.bfloat16)
    assert layer.forward_with_cache(tokens[None], cache, out=out) is out
    paged = mha.PagedKvCache(layer, num_blocks=1, max_sequences=1, block_size=16)
    paged.add_sequence(0)
    paged.append_slots([0], [7])
    packed = torch.empty(7, 32, dtype=torch.bfloat16)
    result = layer.forward_packed(tokens, np.array([0]), np.array([0, 7]), paged,
                                  out=packed)
    assert result is packed
    np.testing.assert_allclose(packed.float().numpy(), out[0].float().numpy(), atol=3e-2)


def test_sequence_first_torch_output_is_a_transposed_view():
    layer = make_layer(batch_first=False)
    x = torch.randn(6, 2, 32)
    out, _ = layer(x)
    assert out.shape == (6, 2, 32) and not out.is_contiguous()
    expected, _ = make_layer()(x.transpose(0, 1).contiguous())
    assert torch.equal(out, expected.transpose(0, 1))


@pytest.mark.parametrize("out,message", [
    (lambda: np.empty((2, 6, 31), np.float32), "expected shape [2, 6, 32], got [2, 6, 31]"),
    (lambda: torch.empty(2, 6, 32, dtype=torch.float64), "got torch.float64"),
    (lambda: torch.empty(2, 32, 6).transpose(1, 2), "contiguous CPU tensor"),
    (lambda: np.empty((2, 6, 32), np.float64), "got float64"),
    (lambda: np.empty((2, 32, 6), np.float32).swapaxes(1, 2), "not C-contiguous"),
    (lambda: [[0.0]], "expected a numpy array or torch tensor"),
], ids=["shape", "torch_dtype", "torch_strides", "numpy_dtype", "numpy_strides", "list"])
def test_bad_out_is_refused_naming_it(out, message):
    with pytest.raises(ValueError, match="out: .*" + message.replace("[", r"\[")
                       .replace("]", r"\]").replace(".", r"\.")):
        make_layer()(torch.randn(2, 6, 32), out=out())


def test_read_only_out_and_sequence_first_out_are_refused():
    read_only = np.empty((2, 6, 32), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="out: .*read-only"):
        make_layer()(np.zeros((2, 6, 32), np.float32), out=read_only)
    with pytest.raises(ValueError, match="out: needs a layer built with batch_first"):
        make_layer(batch_first=False)(np.zeros((6, 2, 32), np.float32),
                                      out=np.empty((6, 2, 32), np.float32))
