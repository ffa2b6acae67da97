"""mha.torch against PyTorch itself: MultiheadAttention matches nn.MultiheadAttention
for every argument (or refuses it by name), state_dicts load both ways and are never
stale, convert() swaps the modules of whole models (nn.TransformerEncoder with masks,
torchvision's ViT-B/16) within the stated bounds per weight dtype, models save and
load, and scaled_dot_product_attention follows torch 2's signature and semantics."""
import copy
import io
import itertools
import math

import pytest

torch = pytest.importorskip("torch")
import mha.torch as mt  # noqa: E402  (after the skip: mha.torch imports torch)
from torch import nn  # noqa: E402

# max |mha - torch| / max |torch| per weight dtype (docs/api.md, "mha.torch"); the
# measured figures there are well inside these.
# Measured on ViT-B/16 (random weights, 2 x 224 x 224): 1.1e-6, 3.2e-3 (bf16 compute:
# 2.3e-3) and 1.6e-2.
BOUNDS = {None: 1e-4, torch.bfloat16: 1e-2, torch.int8: 5e-2}


def relative_error(got, want):
    return ((got.float() - want.float()).abs().max() /
            want.float().abs().max().clamp_min(1e-30)).item()


def torch_pair(seed=0, **arguments):
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(**arguments).eval()
    return reference, mt.MultiheadAttention.from_module(reference).eval()


def inputs(batch_first, batched, query_len, key_len, embed, kdim, vdim, seed=1):
    generator = torch.Generator().manual_seed(seed)

    def rand(length, width):
        shape = (2, length, width) if batch_first else (length, 2, width)
        return torch.randn(*(shape if batched else (length, width)), generator=generator)

    return (rand(query_len, embed), rand(key_len, kdim or embed),
            rand(key_len, vdim or embed))


def masks(kind, batched, query_len, key_len, heads):
    batch = 2 if batched else 1
    padding = torch.zeros(batch, key_len, dtype=torch.bool)
    padding[0, -2:] = True
    if kind == "none":
        return None, None
    if kind == "padding_bool":
        return (padding if batched else padding[0]), None
    if kind == "padding_float":
        floats = torch.zeros(batch, key_len).masked_fill(padding, float("-inf"))
        return (floats if batched else floats[0]), None
    if kind == "attn_bool_2d":
        generator = torch.Generator().manual_seed(3)
        return None, torch.rand(query_len, key_len, generator=generator) > 0.7
    if kind == "attn_float_3d":
        generator = torch.Generator().manual_seed(4)
        return None, torch.randn(batch * heads, query_len, key_len, generator=generator)
    assert kind == "both"
    return (padding if batched else padding[0]), torch.triu(
        torch.ones(query_len, key_len, dtype=torch.bool), diagonal=1)


CASES = list(itertools.product(
    [True, False],  # batch_first
    [True, False],  # bias
    [None, (24, 40)],  # kdim, vdim
    ["none", "padding_bool", "padding_float", "attn_bool_2d", "attn_float_3d", "both"]))


@pytest.mark.parametrize("batch_first,bias,kv_dims,mask_kind", CASES)
def test_matches_torch_for_every_argument(batch_first, bias, kv_dims, mask_kind):
    kdim, vdim = kv_dims or (None, None)
    reference, converted = torch_pair(embed_dim=32, num_heads=4, bias=bias, kdim=kdim,
                                      vdim=vdim, batch_first=batch_first)
    for batched, (need_weights, average) in itertools.product(
            [True, False], [(False, True), (True, True), (True, False)]):
        if mask_kind == "attn_float_3d" and not batched:
            continue  # torch wants a 2-D mask for unbatched inputs
        query, key, value = inputs(batch_first, batched, 5, 7, 32, kdim, vdim)
        padding, attn = masks(mask_kind, batched, 5, 7, 4)
        arguments = dict(key_padding_mask=padding, attn_mask=attn,
                         need_weights=need_weights, average_attn_weights=average)
        with torch.no_grad():
            want, want_weights = reference(query, key, value, **arguments)
            got, got_weights = converted(query, key, value, **arguments)
        assert got.shape == want.shape
        assert relative_error(got, want) < 1e-5
        if need_weights:
            assert got_weights.shape == want_weights.shape
            assert (got_weights - want_weights).abs().max().item() < 1e-6
        else:
            assert got_weights is None and want_weights is None


def test_self_attention_and_is_causal():
    reference, converted = torch_pair(embed_dim=48, num_heads=6, batch_first=True)
    x = torch.randn(3, 9, 48)
    causal = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        want = reference(x, x, x, attn_mask=causal, need_weights=False)[0]
        assert relative_error(converted(x, x, x, need_weights=False)[0],
                              reference(x, x, x, need_weights=False)[0]) < 1e-5
        # is_causal alone is the causal mask; with a mask it is torch 2's hint.
        assert relative_error(converted(x, x, x, is_causal=True)[0], want) < 1e-5
        assert relative_error(converted(x, x, x, attn_mask=causal, is_causal=True)[0],
                              want) < 1e-5


def test_refused_arguments_are_named():
    for name in ("add_bias_kv", "add_zero_attn"):
        with pytest.raises(ValueError, match=name):
            mt.MultiheadAttention(16, 2, **{name: True})
        with pytest.raises(ValueError, match=name):
            mt.MultiheadAttention.from_module(nn.MultiheadAttention(16, 2, **{name: True}))
    with pytest.raises(ValueError, match="weight_dtype.*float16"):
        mt.MultiheadAttention(16, 2, weight_dtype=torch.float16)
    with pytest.raises(ValueError, match="compute_dtype.*int8"):
        mt.MultiheadAttention(16, 2, compute_dtype=torch.int8)
    with pytest.raises(ValueError, match="num_threads.*-1"):
        mt.MultiheadAttention(16, 2, num_threads=-1)
    with pytest.raises(TypeError, match="module: expected a torch.nn.MultiheadAttention"):
        mt.MultiheadAttention.from_module(nn.Linear(4, 4))
    module = mt.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(1, 3, 16)
    with pytest.raises(RuntimeError, match="inference only.*no_grad"):
        module(x, x, x)  # parameters require grad, and grad is enabled
    module.requires_grad_(False)
    module(x, x, x)  # nothing requires grad: allowed
    with pytest.raises(RuntimeError, match="requires grad"):
        module(x.requires_grad_(), x, x)
    dropout = mt.MultiheadAttention(16, 2, dropout=0.1, batch_first=True)
    with torch.no_grad(), pytest.raises(RuntimeError, match="dropout=0.1 in training"):
        dropout(x, x, x)
    with torch.no_grad():
        dropout.eval()(x, x, x)  # dropout is off in eval mode, as in torch
        mt.MultiheadAttention(16, 2, batch_first=True).train()(x, x, x)  # no dropout


def test_thread_counts_give_the_same_bits():
    reference, converted = torch_pair(embed_dim=64, num_heads=4, batch_first=True)
    x = torch.randn(2, 70, 64)
    with torch.no_grad():
        results = []
        for threads in (1, 2, 0):
            converted.num_threads = threads
            results.append(converted(x, x, x, need_weights=False)[0])
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


def test_state_dicts_load_both_ways_and_never_go_stale():
    reference, converted = torch_pair(embed_dim=32, num_heads=4, batch_first=True)
    assert list(converted.state_dict()) == list(reference.state_dict())
    x = torch.randn(2, 6, 32)
    other = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    with torch.no_grad():
        before = converted(x, x, x)[0]
        converted.load_state_dict(other.state_dict())  # torch -> mha
        assert relative_error(converted(x, x, x)[0], other(x, x, x)[0]) < 1e-5
        assert relative_error(converted(x, x, x)[0], before) > 1e-2
        reference.load_state_dict(converted.state_dict())  # mha -> torch
        assert relative_error(reference(x, x, x)[0], other(x, x, x)[0]) < 1e-6
        converted.out_proj.weight.mul_(2.0)  # an in-place edit
        other.out_proj.weight.mul_(2.0)
        assert relative_error(converted(x, x, x)[0], other(x, x, x)[0]) < 1e-5
        converted.to(torch.bfloat16)  # new parameters: rebuilt from them
        out = converted(x.bfloat16(), x.bfloat16(), x.bfloat16())[0]
        assert out.dtype == torch.bfloat16
        assert relative_error(out, other(x, x, x)[0]) < 3e-2


def test_saved_and_loaded_models_run_alike():
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    model = nn.TransformerEncoder(layer, 2).eval()
    mt.convert(model)
    x = torch.randn(2, 7, 32)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    fresh = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True), 2).eval()
    mt.convert(fresh)
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = model(x)
        assert torch.equal(loaded(x), want)
        assert torch.equal(fresh(x), want)
    assert isinstance(loaded.layers[0].self_attn, mt.MultiheadAttention)


def count_calls(model):
    calls = [0]
    for module in model.modules():
        if isinstance(module, mt.MultiheadAttention):
            module.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("batch_first,norm_first,weight_dtype,compute_dtype",
                         [(True, False, None, None), (False, True, None, None),
                          (True, True, torch.bfloat16, None),
                          (False, False, None, torch.bfloat16),
                          (True, False, torch.int8, None)])
def test_converted_transformer_encoder_matches(batch_first, norm_first, weight_dtype,
                                               compute_dtype):
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(64, 8, dim_feedforward=128, batch_first=batch_first,
                                       norm_first=norm_first)
    original = nn.TransformerEncoder(layer, 3).eval()
    model = copy.deepcopy(original)
    report = mt.convert(model, weight_dtype=weight_dtype, compute_dtype=compute_dtype)
    assert report.replaced == [f"layers.{i}.self_attn" for i in range(3)]
    assert report.skipped == []
    assert report.fast_path_off == [f"layers.{i}" for i in range(3)]
    calls = count_calls(model)
    x = torch.randn(2, 10, 64) if batch_first else torch.randn(10, 2, 64)
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, 6:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(10)
    for arguments in ({}, {"src_key_padding_mask": padding}, {"mask": causal},
                      {"mask": causal, "src_key_padding_mask": padding}):
        with torch.no_grad():
            want, got = original(x, **arguments), model(x, **arguments)
        if "src_key_padding_mask" in arguments:  # torch's fast path zeroes padded rows
            keep = ~padding.unsqueeze(-1) if batch_first else ~padding.T.unsqueeze(-1)
            want, got = want * keep, got * keep
        assert relative_error(got, want) < BOUNDS[weight_dtype or compute_dtype], arguments
    assert calls[0] == 4 * 3  # every layer's attention ran in mha


def test_convert_leaves_what_mha_cannot_run_and_says_why():
    model = nn.Sequential(nn.MultiheadAttention(16, 2, add_bias_kv=True),
                          nn.MultiheadAttention(16, 2))
    report = mt.convert(model)
    assert report.replaced == ["1"]
    assert len(report.skipped) == 1 and report.skipped[0][0] == "0"
    assert "add_bias_kv" in report.skipped[0][1]
    assert type(model[0]) is nn.MultiheadAttention
    assert "replaced=['1']" in repr(report)


def test_convert_keeps_a_shared_module_shared():
    shared = nn.MultiheadAttention(16, 2)
    model = nn.ModuleDict({"a": nn.Sequential(shared), "b": nn.Sequential(shared)})
    report = mt.convert(model)
    assert report.replaced == ["a.0", "b.0"]
    assert model["a"][0] is model["b"][0]
    assert isinstance(model["a"][0], mt.MultiheadAttention)


@pytest.mark.parametrize("weight_dtype", [None, torch.bfloat16, torch.int8])
def test_converted_vit_b_16_matches(weight_dtype):
    models = pytest.importorskip("torchvision.models")
    torch.manual_seed(11)
    original = models.vit_b_16()
    original.heads = nn.Identity()  # torchvision zeroes the head: compare features
    original.eval()
    model = copy.deepcopy(original)
    report = mt.convert(model, weight_dtype=weight_dtype)
    assert len(report.replaced) == 12 and report.skipped == []
    calls = count_calls(model)
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        assert relative_error(model(images), original(images)) < BOUNDS[weight_dtype]
    assert calls[0] == 12


def sdpa_reference(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """softmax(Q K^T * scale + mask) V in float64, keys repeated for grouped heads."""
    q, k, v = (t.double() for t in (query, key, value))
    if q.dim() > 2 and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(repeat, -3), v.repeat_interleave(repeat, -3)
    scores = q @ k.transpose(-2, -1) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf"))
                  if attn_mask.dtype == torch.bool else scores + attn_mask.double())
    return torch.softmax(scores, -1) @ v


SDPA_CASES = [
    dict(shape=(2, 4, 6, 16), kv=(2, 4, 9, 16)),
    dict(shape=(2, 4, 6, 16), kv=(2, 4, 9, 16), mask="bool"),
    dict(shape=(2, 4, 6, 16), kv=(2, 4, 9, 16), mask="float", scale=0.3),
    dict(shape=(2, 4, 8, 16), kv=(2, 4, 8, 16), is_causal=True),
    dict(shape=(2, 8, 5, 32), kv=(2, 2, 11, 32), enable_gqa=True, mask="bool"),
    dict(shape=(3, 6, 16), kv=(3, 10, 16)),  # no heads dimension
    dict(shape=(6, 16), kv=(10, 16), mask="float"),
]


@pytest.mark.parametrize("case", SDPA_CASES)
def test_scaled_dot_product_attention_follows_torch_2(case):
    generator = torch.Generator().manual_seed(13)
    query = torch.randn(*case["shape"], generator=generator)
    key = torch.randn(*case["kv"], generator=generator)
    value = torch.randn(*case["kv"], generator=generator)
    mask = None
    if "mask" in case:
        size = (query.shape[-2], key.shape[-2])
        mask = (torch.rand(*size, generator=generator) > 0.3 if case["mask"] == "bool"
                else torch.randn(*size, generator=generator))
        if case["mask"] == "bool":
            mask[:, 0] = True  # every query row keeps a key
    arguments = dict(attn_mask=mask, is_causal=case.get("is_causal", False),
                     scale=case.get("scale"))
    with torch.no_grad():
        got = mt.scaled_dot_product_attention(query, key, value,
                                              enable_gqa=case.get("enable_gqa", False),
                                              **arguments)
    want = sdpa_reference(query, key, value, **arguments)
    assert got.shape == want.shape and got.dtype == query.dtype
    assert relative_error(got, want) < 1e-5
    torch_sdpa = getattr(nn.functional, "scaled_dot_product_attention", None)
    if torch_sdpa is not None and not case.get("enable_gqa"):  # torch 2
        assert relative_error(got, torch_sdpa(query, key, value, **arguments)) < 1e-5


def test_scaled_dot_product_attention_refusals_name_the_argument():
    q = torch.randn(1, 4, 3, 8)
    with pytest.raises(ValueError, match="dropout_p=0.1"):
        mt.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="4 heads and key 2.*enable_gqa"):
        mt.scaled_dot_product_attention(q, q[:, :2], q[:, :2])
    with pytest.raises(ValueError, match="same rank"):
        mt.scaled_dot_product_attention(q, q[0], q)
    with pytest.raises(RuntimeError, match="no_grad"):
        mt.scaled_dot_product_attention(q.clone().requires_grad_(), q, q)
