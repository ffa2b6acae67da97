#!/usr/bin/env python3
"""Regenerates tests/data: PyTorch outputs for nn.MultiheadAttention variants and for
each implementation in ../shared/seeds, saved small as .npy/.safetensors so the
C++ tests can check mha against PyTorch without needing torch.

Usage: /usr/bin/python3 tools/make_fixtures.py [OUT_DIR]   (Debian's python3-torch)

Each case is a folder. Cases with an `args` file are run through mha-run with those
arguments (paths relative to the folder); `expected_output.npy` and, if present,
`expected_attn_weights.npy` hold PyTorch's results. The seed000/seed001 folders hold
raw weights in the seeds' own layouts for tests that build the layer directly.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        data = np.ascontiguousarray(tensor.detach().numpy().astype(np.float32)).tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for blob in blobs:
            f.write(blob)


class Case:
    def __init__(self, name):
        self.dir = os.path.join(OUT, name)
        os.makedirs(self.dir, exist_ok=True)
        self.args = []

    def array(self, file, value):
        value = value.detach().numpy() if torch.is_tensor(value) else value
        np.save(os.path.join(self.dir, file), value)
        return file

    def flag(self, name, file=None, value=None):
        self.args.append(name)
        if file is not None:
            self.args.append(self.array(file, value))

    def finish(self, output, attn_weights=None):
        self.array("expected_output.npy", output.float())
        if attn_weights is not None:
            self.array("expected_attn_weights.npy", attn_weights.float())
        if self.args:
            with open(os.path.join(self.dir, "args"), "w") as f:
                f.write("\n".join(self.args) + "\n")


def mha_case(name, mha, query, key=None, value=None, key_padding_mask=None,
             attn_mask=None, average=True, want_weights=True, causal=False, extra=()):
    """Runs nn.MultiheadAttention (eval, batch_first) and records mha-run arguments."""
    mha.eval()
    case = Case(name)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), mha.state_dict())
    case.args += ["--weights", "weights.safetensors", "--num-heads", str(mha.num_heads)]
    case.flag("--query", "query.npy", query)
    if key is not None:
        case.flag("--key", "key.npy", key)
        case.flag("--value", "value.npy", value)
    if key_padding_mask is not None:
        case.flag("--key-padding-mask", "key_padding_mask.npy", key_padding_mask)
    if attn_mask is not None and not causal:
        case.flag("--attn-mask", "attn_mask.npy", attn_mask)
    if causal:
        case.flag("--causal")
    if average:
        case.flag("--average-heads")
    case.args += list(extra)
    # Grad mode stays on so that PyTorch takes its reference (non-fused) path, which
    # reads float key padding masks as additive like mha does.
    out, weights = mha(query, query if key is None else key,
                       query if value is None else value,
                       key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                       need_weights=want_weights, average_attn_weights=average)
    case.finish(out.detach(), weights.detach())


def torch_mha_cases():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 16)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    mha_case("torch_mha_self_padding", nn.MultiheadAttention(16, 4, batch_first=True),
             x, key_padding_mask=padding, average=False)

    q, k, v = torch.randn(3, 4, 12), torch.randn(3, 6, 7), torch.randn(3, 6, 5)
    float_mask = torch.randn(4, 6)
    float_mask[1, 2] = float("-inf")
    mha_case("torch_mha_kdim_vdim_cross",
             nn.MultiheadAttention(12, 3, kdim=7, vdim=5, batch_first=True), q, k, v,
             attn_mask=float_mask, average=True)

    x = torch.randn(2, 6, 8)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    mha_case("torch_mha_causal_nobias", nn.MultiheadAttention(8, 2, bias=False, batch_first=True),
             x, attn_mask=causal, causal=True, average=False)

    x = torch.randn(7, 10)
    mask3d = torch.rand(2, 7, 7) < 0.3
    mask3d[:, :, 0] = False  # no fully masked rows: PyTorch returns NaN there
    mha_case("torch_mha_3d_mask_unbatched", nn.MultiheadAttention(10, 2, batch_first=True),
             x, attn_mask=mask3d, average=True)

    x = torch.randn(3, 5, 8)
    float_padding = torch.randn(3, 5)
    float_padding[2, 4] = float("-inf")
    mha_case("torch_mha_float_padding", nn.MultiheadAttention(8, 4, batch_first=True),
             x, key_padding_mask=float_padding, average=False, extra=["--threads", "1"])


def seed000():
    # Seed 000: x @ W layout, no output projection, and K = x @ W_q as written.
    torch.manual_seed(0)
    x = torch.randn(1, 4, 8)
    embed_dim, num_heads = 8, 2
    head_dim = embed_dim // num_heads
    W_q, W_k, W_v = (torch.randn(embed_dim, embed_dim) for _ in range(3))
    Q, K, V = x @ W_q, x @ W_q, x @ W_v

    def split_heads(t):
        return t.view(1, 4, num_heads, head_dim).transpose(1, 2)

    scores = split_heads(Q) @ split_heads(K).transpose(-2, -1) / math.sqrt(head_dim)
    head_output = F.softmax(scores, dim=-1) @ split_heads(V)
    concat = head_output.transpose(1, 2).reshape(1, 4, embed_dim)
    case = Case("seed000")
    for name, value in [("x", x), ("w_q", W_q), ("w_k", W_q), ("w_v", W_v)]:
        case.array(name + ".npy", value)
    case.finish(concat)


def seed001():
    # Seed 001: per-head weights [n_heads, T, d_k] and a triu (causal) mask.
    torch.manual_seed(0)
    n_heads, B, N, d_k, T = 2, 1, 5, 2, 3
    x = torch.randn((B, N, T))
    r = (1 / T) ** .5
    w = {name: torch.nn.init.uniform_(torch.empty((n_heads, T, d_k)), a=-r, b=r)
         for name in ("w_q", "w_k", "w_v")}

    def project(weight):
        return (x.view(-1, T) @ weight.permute([1, 0, 2]).contiguous().view(T, -1)).view(
            B, N, n_heads, d_k).permute([0, 2, 1, 3])

    Q, K, V = project(w["w_q"]), project(w["w_k"]), project(w["w_v"])
    mask = torch.triu(torch.ones((N, N), dtype=torch.bool), diagonal=1)
    QKT = (Q @ K.transpose(-2, -1)) * (d_k ** -.5)
    out = torch.softmax(QKT.masked_fill(mask, float("-inf")), dim=-1) @ V
    case = Case("seed001")
    case.array("x.npy", x)
    for name, value in w.items():
        case.array(name + ".npy", value)
    case.finish(out.permute(0, 2, 1, 3).reshape(B, N, n_heads * d_k))


class Seed002MultiHeadAttention(nn.Module):
    """Seed 002's class as written (d_in != d_out, causal buffer mask)."""

    def __init__(self, d_in, d_out, context_length, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads = d_out, num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1))

    def forward(self, x):
        b, num_tokens, _ = x.shape
        split = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys, queries, values = split(self.W_key(x)), split(self.W_query(x)), split(self.W_value(x))
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context = (attn_weights @ values).transpose(1, 2).contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context), attn_weights


def seed002():
    torch.manual_seed(123)
    inputs = nn.Embedding(6, 3).weight.data
    batches = torch.stack((inputs, inputs), dim=0)
    module = Seed002MultiHeadAttention(d_in=3, d_out=2, context_length=6, num_heads=2).eval()
    case = Case("seed002")
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), {
        "q_proj.weight": module.W_query.weight, "k_proj.weight": module.W_key.weight,
        "v_proj.weight": module.W_value.weight, "out_proj.weight": module.out_proj.weight,
        "out_proj.bias": module.out_proj.bias})
    case.args += ["--weights", "weights.safetensors", "--num-heads", "2"]
    case.flag("--query", "query.npy", batches)
    case.flag("--causal")
    with torch.no_grad():
        out, weights = module(batches)
    case.finish(out, weights)


class Seed003SelfAttention(nn.Module):
    """The SelfAttention seed 003 uses but does not define: one head, nn.Linear q/k/v."""

    def __init__(self, embedding_dim, head_dim):
        super().__init__()
        self.query = nn.Linear(embedding_dim, head_dim)
        self.key = nn.Linear(embedding_dim, head_dim)
        self.value = nn.Linear(embedding_dim, head_dim)
        self.head_dim = head_dim

    def forward(self, x):
        scores = self.query(x) @ self.key(x).transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores, dim=-1)
        return weights @ self.value(x), weights


class Seed003MultiHeadAttention(nn.Module):
    """Seed 003 as intended: heads run, concatenated, then projected (its loop
    returned after the first head)."""

    def __init__(self, embedding_dim, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(Seed003SelfAttention(embedding_dim, embedding_dim // num_heads)
                                   for _ in range(num_heads))
        self.output_proj = nn.Linear(embedding_dim, embedding_dim)

    def forward(self, x):
        outputs, weights = zip(*(head(x) for head in self.heads))
        return self.output_proj(torch.cat(outputs, dim=-1)), torch.stack(weights, dim=1)


def seed003():
    torch.manual_seed(3)
    module = Seed003MultiHeadAttention(embedding_dim=8, num_heads=2).eval()
    x = torch.randn(2, 5, 8)
    case = Case("seed003")
    stacked = {}
    for short, attr in (("q", "query"), ("k", "key"), ("v", "value")):
        stacked[short + "_proj.weight"] = torch.cat([getattr(h, attr).weight for h in module.heads])
        stacked[short + "_proj.bias"] = torch.cat([getattr(h, attr).bias for h in module.heads])
    stacked["out_proj.weight"] = module.output_proj.weight
    stacked["out_proj.bias"] = module.output_proj.bias
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), stacked)
    case.args += ["--weights", "weights.safetensors", "--num-heads", "2"]
    case.flag("--query", "query.npy", x)
    with torch.no_grad():
        out, weights = module(x)
    case.finish(out, weights)


class Seed004MultiHeadAttention(nn.Module):
    """Seed 004's class as written: masked_fill(mask == 0, -1e10)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_key = n_heads, d_model // n_heads
        self.Wq, self.Wk = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.Wv, self.Wo = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        b = key.size(0)
        split = lambda t: t.view(b, -1, self.n_heads, self.d_key).permute(0, 2, 1, 3)
        Q, K, V = split(self.Wq(query)), split(self.Wk(key)), split(self.Wv(value))
        scaled = torch.matmul(Q, K.permute(0, 1, 3, 2)) / math.sqrt(self.d_key)
        if mask is not None:
            scaled = scaled.masked_fill(mask == 0, -1e10)
        attn_probs = torch.softmax(scaled, dim=-1)
        A = torch.matmul(attn_probs, V).permute(0, 2, 1, 3).contiguous()
        return self.Wo(A.view(b, -1, self.n_heads * self.d_key)), attn_probs


def seed004(name, mask):
    torch.manual_seed(4)
    module = Seed004MultiHeadAttention(8, 4).eval()
    x = torch.randn(3, 6, 8)
    case = Case(name)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), {
        "q_proj.weight": module.Wq.weight, "q_proj.bias": module.Wq.bias,
        "k_proj.weight": module.Wk.weight, "k_proj.bias": module.Wk.bias,
        "v_proj.weight": module.Wv.weight, "v_proj.bias": module.Wv.bias,
        "out_proj.weight": module.Wo.weight, "out_proj.bias": module.Wo.bias})
    case.args += ["--weights", "weights.safetensors", "--num-heads", "4"]
    case.flag("--query", "query.npy", x)
    case.flag("--attn-mask", "attn_mask.npy", mask)
    case.args += ["--mask-convention", "zero-means-masked"]
    with torch.no_grad():
        out, weights = module(x, x, x, mask)
    case.finish(out, weights)


def gqa(name, num_heads, num_kv_heads, causal):
    """Grouped-query attention as Llama-style models write it (repeat_interleave of
    the K/V heads), through mha-run --num-kv-heads. PyTorch 1.13's MHA has no GQA."""
    torch.manual_seed(7)
    embed, head_dim, b, s = 16, 4, 2, 7
    q_proj = nn.Linear(embed, num_heads * head_dim)
    k_proj = nn.Linear(embed, num_kv_heads * head_dim)
    v_proj = nn.Linear(embed, num_kv_heads * head_dim)
    out_proj = nn.Linear(num_heads * head_dim, embed)
    x = torch.randn(b, s, embed)
    split = lambda t, h: t.view(b, s, h, head_dim).transpose(1, 2)
    with torch.no_grad():
        q = split(q_proj(x), num_heads)
        k = split(k_proj(x), num_kv_heads).repeat_interleave(num_heads // num_kv_heads, dim=1)
        v = split(v_proj(x), num_kv_heads).repeat_interleave(num_heads // num_kv_heads, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        if causal:
            scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1),
                                        float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = out_proj((weights @ v).transpose(1, 2).reshape(b, s, num_heads * head_dim))
    case = Case(name)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), {
        "q_proj.weight": q_proj.weight, "q_proj.bias": q_proj.bias,
        "k_proj.weight": k_proj.weight, "k_proj.bias": k_proj.bias,
        "v_proj.weight": v_proj.weight, "v_proj.bias": v_proj.bias,
        "out_proj.weight": out_proj.weight, "out_proj.bias": out_proj.bias})
    case.args += ["--weights", "weights.safetensors", "--num-heads", str(num_heads),
                  "--num-kv-heads", str(num_kv_heads)]
    case.flag("--query", "query.npy", x)
    if causal:
        case.flag("--causal")
    case.finish(out, weights)


# ---- Decoder features, re-derived from the public reference implementations ----

def rope_inv_freq(rotary_dim, theta, scaling=None):
    """transformers' default rope init, with _compute_llama3_parameters or linear."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float()
                               / rotary_dim))
    if scaling is None:
        return inv_freq
    if scaling[0] == "linear":
        return inv_freq / scaling[1]
    _, factor, low_freq_factor, high_freq_factor, old_context_len = scaling
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rope_frequencies():
    """rope_inv_freq for a grid of thetas, rotary dims and scalings: one .npy each,
    listed in cases.txt as `file theta rotary_dim scaling [factor low high original]`."""
    case = Case("rope_inv_freq")
    lines = []
    scalings = [None, ("linear", 2.0), ("linear", 8.0), ("llama3", 8.0, 1.0, 4.0, 8192),
                ("llama3", 32.0, 1.0, 4.0, 8192)]
    for theta in [10000.0, 150000.0, 500000.0, 1000000.0, 1234.5]:
        for rotary_dim in [64, 96, 128]:
            for scaling in scalings:
                kind = scaling[0] if scaling else "none"
                name = "theta%g_dim%d_%s%s.npy" % (theta, rotary_dim, kind,
                                                   "_%g" % scaling[1] if scaling else "")
                case.array(name, rope_inv_freq(rotary_dim, theta, scaling))
                lines.append(" ".join([name, repr(theta), str(rotary_dim), kind] +
                                      [repr(v) for v in (scaling or ())[1:]]))
    with open(os.path.join(case.dir, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def ntk_inv_freq(rotary_dim, theta, factor, original, positions):
    """_compute_dynamic_ntk_parameters as dynamic_rope_update calls it: seq_len is the
    largest position + 1, a tensor, so the base is computed in float32."""
    seq_len = torch.maximum(torch.max(positions) + 1, torch.tensor(original))
    base = theta * ((factor * seq_len / original) - (factor - 1)) ** (
        rotary_dim / (rotary_dim - 2))
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float()
                           / rotary_dim))


def longrope_inv_freq(rotary_dim, theta, factors):
    """_compute_longrope_parameters: 1.0 / (ext_factors * base ** (arange / dim))."""
    shape = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    return 1.0 / (torch.tensor(factors, dtype=torch.float32) * theta ** shape)


def rope_dynamic_frequencies():
    """Dynamic NTK frequencies past the switch: `file theta rotary_dim factor original
    length` lines in cases.txt."""
    case = Case("rope_dynamic_inv_freq")
    lines = []
    for theta in [10000.0, 500000.0, 1234.5]:
        for rotary_dim in [64, 128]:
            for factor, original, length in [(2.0, 4096, 4097), (2.0, 4096, 10000),
                                             (4.0, 2048, 30000), (8.0, 8192, 131072)]:
                name = "ntk_theta%g_dim%d_f%g_%d_%d.npy" % (theta, rotary_dim, factor,
                                                          original, length)
                case.array(name, ntk_inv_freq(rotary_dim, theta, factor, original,
                                              torch.tensor([length - 1])))
                lines.append(" ".join([name, repr(theta), str(rotary_dim), repr(factor),
                                       str(original), str(length)]))
    with open(os.path.join(case.dir, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def saved_linears(case, embed, heads, kv_heads, head_dim):
    """A layer's bias-free q/k/v/out projections, saved as the case's weights."""
    lin = {n: nn.Linear(embed, o * head_dim, bias=False) for n, o in
           (("q_proj", heads), ("k_proj", kv_heads), ("v_proj", kv_heads))}
    lin["out_proj"] = nn.Linear(heads * head_dim, embed, bias=False)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"),
                     {n + ".weight": m.weight for n, m in lin.items()})
    return lin


def dynamic_rope_decode_case(name, kind):
    """A decoder layer decoding through a cache whose length crosses the switch of
    dynamic NTK or LongRoPE (original 8): transformers' dynamic_rope_update takes the
    frequencies of each call from its largest position, and cached keys keep the
    rotation they were written with. Steps of 5, 1, 1, 4, 1 tokens (the 4-token chunk
    crosses 8); steps.txt lists them, scaling.txt the config."""
    torch.manual_seed(sum(name.encode()))
    embed, heads, kv_heads, head_dim, theta, original, factor = 32, 4, 2, 8, 10000.0, 8, 4.0
    steps = [5, 1, 1, 4, 1]
    seq = sum(steps)
    case = Case(name)
    lin = saved_linears(case, embed, heads, kv_heads, head_dim)
    x = torch.randn(1, seq, embed)
    case.array("query.npy", x)
    short = [1.0 + 0.1 * i for i in range(head_dim // 2)]
    long = [1.5 + 0.5 * i for i in range(head_dim // 2)]
    attention_factor = 1.0
    if kind == "longrope":  # Phi-3: factor = max_position_embeddings / original
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(original))
        case.array("longrope_factors.npy", torch.tensor([short, long]))

    def rotate(t, positions, inv_freq):
        freqs = positions.float()[:, None, :, None] * inv_freq[None, None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return t * (emb.cos() * attention_factor) + rotate_half(t) * (
            emb.sin() * attention_factor)

    keys, values, outputs, done = [], [], [], 0
    with torch.no_grad():
        for step in steps:
            rows = x[:, done:done + step]
            positions = torch.arange(done, done + step)[None, :]
            seq_len = int(torch.max(positions)) + 1
            if kind == "dynamic":
                inv_freq = rope_inv_freq(head_dim, theta) if seq_len <= original else \
                    ntk_inv_freq(head_dim, theta, factor, original, positions)
            else:
                inv_freq = longrope_inv_freq(head_dim, theta,
                                             long if seq_len > original else short)
            q = rotate(lin["q_proj"](rows).view(1, step, heads, head_dim).transpose(1, 2),
                       positions, inv_freq)
            keys.append(rotate(lin["k_proj"](rows).view(1, step, kv_heads, head_dim)
                               .transpose(1, 2), positions, inv_freq))
            values.append(lin["v_proj"](rows).view(1, step, kv_heads, head_dim)
                          .transpose(1, 2))
            out, _ = eager_attention(q, torch.cat(keys, 2), torch.cat(values, 2),
                                     head_dim ** -0.5, done)
            outputs.append(lin["out_proj"](out.transpose(1, 2).reshape(1, step, -1)))
            done += step
    with open(os.path.join(case.dir, "steps.txt"), "w") as f:
        f.write(" ".join(str(s) for s in steps) + "\n")
    with open(os.path.join(case.dir, "scaling.txt"), "w") as f:
        f.write("%s %r %d %r\n" % (kind, theta, original, factor))
    case.finish(torch.cat(outputs, 1))


def draft_tree_case(name):
    """Speculative decoding's verification step: a Llama-style layer (GQA 4/2, RoPE)
    reads a 7-token prompt, then a 4-way, depth-3 draft tree of 13 tokens (a root,
    four children, each with a child and a grandchild) in one call: each draft token
    sees the prompt and its ancestors, at position 7 + its depth. Then one path is
    kept (root, child 2, its child and grandchild) and a next token decodes at
    position 11 over the prompt and that path. parents.npy, kept.npy and the
    expected outputs of the three calls."""
    torch.manual_seed(27)
    embed, heads, kv_heads, head_dim, prompt_len = 32, 4, 2, 8, 7
    parents = [-1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    kept = [0, 2, 6, 10]
    case = Case(name)
    lin = saved_linears(case, embed, heads, kv_heads, head_dim)
    prompt, draft, nxt = (torch.randn(1, n, embed) for n in (prompt_len, 13, 1))
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    inv_freq = rope_inv_freq(head_dim, 10000.0)

    def project(x, positions):
        split = lambda t, h: t.view(1, x.shape[1], h, head_dim).transpose(1, 2)
        pos = torch.tensor(positions)[None, :]
        q = apply_rope(split(lin["q_proj"](x), heads), pos, inv_freq, "neox")
        k = apply_rope(split(lin["k_proj"](x), kv_heads), pos, inv_freq, "neox")
        return q, k, split(lin["v_proj"](x), kv_heads)

    def attend(q, k, v, allowed):
        groups = heads // kv_heads
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        scores = (q @ k.transpose(2, 3)) * head_dim ** -0.5
        scores = scores.masked_fill(~allowed[None, None], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return lin["out_proj"](out.transpose(1, 2).reshape(1, q.shape[2], -1))

    with torch.no_grad():
        pq, pk, pv = project(prompt, list(range(prompt_len)))
        prompt_out = attend(pq, pk, pv, torch.tril(torch.ones(prompt_len, prompt_len,
                                                              dtype=torch.bool)))
        dq, dk, dv = project(draft, [prompt_len + d for d in depth])
        ancestor = torch.zeros(13, 13, dtype=torch.bool)
        for i, p in enumerate(parents):
            ancestor[i, i] = True
            if p >= 0:
                ancestor[i] |= ancestor[p]
        allowed = torch.cat([torch.ones(13, prompt_len, dtype=torch.bool), ancestor], 1)
        draft_out = attend(dq, torch.cat([pk, dk], 2), torch.cat([pv, dv], 2), allowed)
        nq, nk, nv = project(nxt, [prompt_len + len(kept)])
        keys = torch.cat([pk, dk[:, :, kept], nk], 2)
        values = torch.cat([pv, dv[:, :, kept], nv], 2)
        next_out = attend(nq, keys, values, torch.ones(1, keys.shape[2], dtype=torch.bool))
    for file, value in (("prompt.npy", prompt), ("draft.npy", draft), ("next.npy", nxt),
                        ("expected_prompt.npy", prompt_out),
                        ("expected_draft.npy", draft_out),
                        ("expected_next.npy", next_out)):
        case.array(file, value)
    case.array("parents.npy", np.array(parents, dtype=np.int64))
    case.array("kept.npy", np.array(kept, dtype=np.int64))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):  # GPT-J
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x, positions, inv_freq, pairing):
    """x [B, H, S, D], positions [B, S]; rotates the first 2 * len(inv_freq) dims."""
    rotary_dim = 2 * inv_freq.shape[0]
    freqs = positions.float()[:, None, :, None] * inv_freq[None, None, None, :]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    if pairing == "neox":
        emb = torch.cat((freqs, freqs), dim=-1)
        rotated = x_rot * emb.cos() + rotate_half(x_rot) * emb.sin()
    else:
        cos = freqs.cos().repeat_interleave(2, dim=-1)
        sin = freqs.sin().repeat_interleave(2, dim=-1)
        rotated = x_rot * cos + rotate_every_two(x_rot) * sin
    return torch.cat((rotated, x_pass), dim=-1)


def bloom_alibi_slopes(num_heads):
    """BLOOM's build_alibi_tensor slopes."""
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))))
    slopes = torch.pow(base, torch.arange(1, 1 + closest_power_of_2))
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))))
        remaining = min(closest_power_of_2, num_heads - closest_power_of_2)
        slopes = torch.cat([slopes, torch.pow(extra_base, torch.arange(1, 1 + 2 * remaining, 2))])
    return slopes


def eager_attention(q, k, v, scaling, causal_offset=None, window=None, softcap=None,
                    alibi=None, sinks=None, key_padding=None, chunk=None):
    """q [B, H, Sq, D], k/v [B, KV, Sk, D] -> (out [B, H, Sq, D], logsumexp [B, H, Sq]).
    Order as in the references: scores * scaling, Gemma 2's softcap, BLOOM's alibi,
    Mistral's causal sliding-window mask, Llama 4's chunked overlay (transformers'
    masking_utils: kv_idx // chunk == q_idx // chunk), gpt-oss's sinks joined to the
    softmax."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    sq, sk = q.shape[2], k.shape[2]
    if alibi is not None:  # BLOOM: slope * key position (a per-row constant apart)
        scores = scores + alibi[None, :, None, None] * torch.arange(sk)[None, None, None, :]
    i = torch.arange(sq)[:, None] + (causal_offset or 0)
    j = torch.arange(sk)[None, :]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if causal_offset is not None:
        allowed &= j <= i
    if window is not None:
        allowed &= i - j < window
    if chunk is not None:
        allowed &= torch.div(i, chunk, rounding_mode="floor") == \
            torch.div(j, chunk, rounding_mode="floor")
    scores = scores.masked_fill(~allowed, float("-inf"))
    if key_padding is not None:
        scores = scores.masked_fill(key_padding[:, None, None, :], float("-inf"))
    if sinks is not None:
        sink = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, sq, -1)
        scores = torch.cat([scores, sink], dim=-1)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores - scores.max(dim=-1, keepdim=True).values, dim=-1)
    # Rows with every key masked: NaN in PyTorch, zeros in mha (its documented choice).
    probs = torch.nan_to_num(probs, nan=0.0)
    if sinks is not None:
        probs = probs[..., :-1]
    return torch.matmul(probs, v), lse


def rms_norm(x, weight, eps):
    """Qwen3RMSNorm / Olmo2RMSNorm (Gemma3RMSNorm with 1 + weight passed), in float32."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def decoder_case(name, embed, heads, kv_heads, seq, rope=None, rotary_dim=None,
                 theta=10000.0, scaling=None, window=None, softcap=None, alibi=False,
                 sinks=False, bias=False, position_ids=None, key_padding=None, chunk=None,
                 temperature=None, qk_norm=None):
    """A decoder layer (separate q/k/v/o linears, causal) run by mha-run. qk_norm:
    (scope, eps, unit_offset), scope "per-head" (Qwen 3; Gemma 3 with unit_offset) or
    "across-heads" (OLMo 2)."""
    torch.manual_seed(sum(name.encode()))
    head_dim = embed // heads
    batch = 2
    lin = {n: nn.Linear(embed, o * head_dim, bias=bias) for n, o in
           (("q_proj", heads), ("k_proj", kv_heads), ("v_proj", kv_heads))}
    lin["out_proj"] = nn.Linear(heads * head_dim, embed, bias=bias)
    x = torch.randn(batch, seq, embed)
    tensors = {n + ".weight": m.weight for n, m in lin.items()}
    if bias:
        tensors.update({n + ".bias": m.bias for n, m in lin.items()})
    sink_values = torch.randn(heads) * 2 if sinks else None
    if sinks:
        tensors["sinks"] = sink_values
    if qk_norm is not None:
        scope, eps, unit_offset = qk_norm
        widths = (head_dim, head_dim) if scope == "per-head" else \
            (heads * head_dim, kv_heads * head_dim)
        # Trained norms sit around 1; Gemma's stored weights around 0 (it adds the 1).
        norm_weights = [torch.randn(w) * 0.3 + (0.0 if unit_offset else 1.0) for w in widths]
        tensors["q_norm.weight"], tensors["k_norm.weight"] = norm_weights
    case = Case(name)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), tensors)
    case.args += ["--weights", "weights.safetensors", "--num-heads", str(heads),
                  "--num-kv-heads", str(kv_heads), "--causal"]
    case.flag("--query", "query.npy", x)

    def split(t, h):
        return t.view(batch, seq, h, head_dim).transpose(1, 2)

    def norm(t, weight):
        return rms_norm(t, 1.0 + weight if unit_offset else weight, eps)

    with torch.no_grad():
        q_flat, k_flat = lin["q_proj"](x), lin["k_proj"](x)
        if qk_norm is not None and scope == "across-heads":  # Olmo2Attention
            q_flat, k_flat = norm(q_flat, norm_weights[0]), norm(k_flat, norm_weights[1])
        q, k = split(q_flat, heads), split(k_flat, kv_heads)
        if qk_norm is not None and scope == "per-head":  # Qwen3Attention, Gemma3Attention
            q, k = norm(q, norm_weights[0]), norm(k, norm_weights[1])
        if qk_norm is not None:
            case.args += ["--qk-norm", "--qk-norm-eps", repr(eps)]
            if scope == "across-heads":
                case.args += ["--qk-norm-scope", "across_heads"]
            if unit_offset:
                case.args += ["--qk-norm-unit-offset"]
        v = split(lin["v_proj"](x), kv_heads)
        if rope is not None:
            rotary_dim = rotary_dim or head_dim
            inv_freq = rope_inv_freq(rotary_dim, theta, scaling)
            positions = position_ids if position_ids is not None else \
                torch.arange(seq)[None, :].expand(batch, -1)
            q, k = apply_rope(q, positions, inv_freq, rope), apply_rope(k, positions, inv_freq, rope)
            case.args += ["--rope", rope, "--rope-theta", repr(theta),
                          "--rotary-dim", str(rotary_dim)]
            if scaling is not None:
                case.args += ["--rope-scaling", scaling[0] + ":" + ",".join(
                    str(v) for v in scaling[1:])]
            if position_ids is not None:
                case.flag("--position-ids", "position_ids.npy", position_ids.numpy())
        if temperature is not None:  # Llama4TextAttention, on NoPE layers
            floor_scale, attn_scale = temperature
            cache_position = torch.arange(seq).float()
            attn_scales = torch.log(torch.floor((cache_position + 1.0) / floor_scale) + 1.0) \
                * attn_scale + 1.0
            q = q * attn_scales.view(1, 1, seq, 1)
            case.args += ["--temperature-tuning", "--temperature-tuning-floor-scale",
                          repr(floor_scale), "--temperature-tuning-attn-scale", repr(attn_scale)]
        if window is not None:
            case.args += ["--sliding-window", str(window)]
        if chunk is not None:
            case.args += ["--attention-chunk-size", str(chunk)]
        if softcap is not None:
            case.args += ["--softcap", repr(softcap)]
        slopes = bloom_alibi_slopes(heads) if alibi else None
        if alibi:
            case.args += ["--alibi"]
        if key_padding is not None:
            case.flag("--key-padding-mask", "key_padding_mask.npy", key_padding.numpy())
        out, _ = eager_attention(q, k, v, head_dim ** -0.5, 0, window, softcap, slopes,
                                 sink_values, key_padding, chunk)
        out = lin["out_proj"](out.transpose(1, 2).reshape(batch, seq, heads * head_dim))
    case.finish(out)


def gemma3n_kv_sharing_case(name):
    """Gemma 3n's KV sharing (Gemma3nTextAttention): a source layer and a later layer
    of the same type that reads the source's cached keys and values instead of
    projecting its own. Both: q_norm and k_norm (Gemma3nRMSNorm: x / sqrt(mean(x^2) +
    eps) * weight), v_norm without a weight, RoPE, a sliding window, scaling 1.0.
    shared.safetensors holds what the sharing layer has: q_proj, o_proj, q_norm."""
    torch.manual_seed(sum(name.encode()))
    embed, heads, kv_heads, head_dim, seq, window, eps = 32, 4, 2, 8, 12, 5, 1e-6
    source = {n: nn.Linear(embed, o * head_dim, bias=False) for n, o in
              (("q_proj", heads), ("k_proj", kv_heads), ("v_proj", kv_heads))}
    shared = {"q_proj": nn.Linear(embed, heads * head_dim, bias=False)}
    for layer in (source, shared):
        layer["out_proj"] = nn.Linear(heads * head_dim, embed, bias=False)
    norms = {n: torch.randn(head_dim) * 0.3 + 1.0 for n in
             ("source.q_norm", "source.k_norm", "shared.q_norm")}
    case = Case(name)
    source_tensors = {n + ".weight": m.weight for n, m in source.items()}
    source_tensors["q_norm.weight"] = norms["source.q_norm"]
    source_tensors["k_norm.weight"] = norms["source.k_norm"]
    shared_tensors = {n + ".weight": m.weight for n, m in shared.items()}
    shared_tensors["q_norm.weight"] = norms["shared.q_norm"]
    save_safetensors(os.path.join(case.dir, "source.safetensors"), source_tensors)
    save_safetensors(os.path.join(case.dir, "shared.safetensors"), shared_tensors)
    x_source, x_shared = torch.randn(1, seq, embed), torch.randn(1, seq, embed)
    case.array("source_input.npy", x_source)
    case.array("shared_input.npy", x_shared)
    inv_freq = rope_inv_freq(head_dim, 10000.0)
    positions = torch.arange(seq)[None, :]

    def heads_of(t, h):
        return t.view(1, seq, h, head_dim)

    with torch.no_grad():
        k = rms_norm(heads_of(source["k_proj"](x_source), kv_heads), norms["source.k_norm"], eps)
        v = rms_norm(heads_of(source["v_proj"](x_source), kv_heads), 1.0, eps)
        q = rms_norm(heads_of(shared["q_proj"](x_shared), heads), norms["shared.q_norm"], eps)
        q = apply_rope(q.transpose(1, 2), positions, inv_freq, "neox")
        k = apply_rope(k.transpose(1, 2), positions, inv_freq, "neox")
        out, _ = eager_attention(q, k, v.transpose(1, 2), 1.0, 0, window)
        out = shared["out_proj"](out.transpose(1, 2).reshape(1, seq, heads * head_dim))
    case.finish(out)


def core_case(name):
    """The attention-core API (mha-run --core): BSHD q/k/v, GQA, bottom-right causal
    over a longer key sequence, rope with linear scaling, softcap, window, sinks."""
    torch.manual_seed(7)
    batch, heads, kv_heads, sq, sk, head_dim = 2, 4, 2, 5, 13, 16
    q = torch.randn(batch, sq, heads, head_dim)
    k, v = torch.randn(batch, sk, kv_heads, head_dim), torch.randn(batch, sk, kv_heads, head_dim)
    sinks = torch.randn(heads)
    case = Case(name)
    case.args += ["--core", "--layout", "bshd", "--causal", "--bottom-right",
                  "--rope", "neox", "--rope-scaling", "linear:2.0", "--softcap", "3.0",
                  "--sliding-window", "6"]
    case.flag("--query", "query.npy", q)
    case.flag("--key", "key.npy", k)
    case.flag("--value", "value.npy", v)
    case.flag("--sinks", "sinks.npy", sinks)
    inv_freq = rope_inv_freq(head_dim, 10000.0, ("linear", 2.0))
    qpos = torch.arange(sk - sq, sk)[None, :].expand(batch, -1)
    kpos = torch.arange(sk)[None, :].expand(batch, -1)
    qh = apply_rope(q.transpose(1, 2), qpos, inv_freq, "neox")
    kh = apply_rope(k.transpose(1, 2), kpos, inv_freq, "neox")
    out, lse = eager_attention(qh, kh, v.transpose(1, 2), head_dim ** -0.5, sk - sq, 6, 3.0,
                               None, sinks)
    case.array("expected_logsumexp.npy", lse)
    case.finish(out.transpose(1, 2))


def deepseek_rope(x, positions, inv_freq):
    """DeepSeek-V2's apply_rotary_pos_emb: the rope part read as interleaved pairs,
    de-interleaved (view(.., d / 2, 2).transpose), then rotate_half."""
    b, h, s, d = x.shape
    x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return apply_rope(x, positions, inv_freq, "neox")


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_weights(hidden, heads, q_lora_rank, rank, nope, rope, v_dim):
    """Random DeepseekV2Attention weights under modeling_deepseek.py's names."""
    q_dim = heads * (nope + rope)
    w = {}
    if q_lora_rank:
        w["q_a_proj.weight"] = torch.randn(q_lora_rank, hidden) / math.sqrt(hidden)
        w["q_a_layernorm.weight"] = 1.0 + 0.1 * torch.randn(q_lora_rank)
        w["q_b_proj.weight"] = torch.randn(q_dim, q_lora_rank) / math.sqrt(q_lora_rank)
    else:
        w["q_proj.weight"] = torch.randn(q_dim, hidden) / math.sqrt(hidden)
    w["kv_a_proj_with_mqa.weight"] = torch.randn(rank + rope, hidden) / math.sqrt(hidden)
    w["kv_a_layernorm.weight"] = 1.0 + 0.1 * torch.randn(rank)
    w["kv_b_proj.weight"] = torch.randn(heads * (nope + v_dim), rank) / math.sqrt(rank)
    w["o_proj.weight"] = torch.randn(hidden, heads * v_dim) / math.sqrt(heads * v_dim)
    return w


def deepseek_attention(x, w, heads, rank, nope, rope, v_dim, scale, inv_freq):
    """DeepseekV2Attention.forward, eager, causal over positions 0 .. S - 1: the
    expanded form (kv_b_proj gives each head's k_nope and v). Returns its pieces."""
    batch, seq, _ = x.shape
    if "q_proj.weight" in w:
        q = x @ w["q_proj.weight"].T
    else:
        q_a = rms_norm(x @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"], 1e-6)
        q = q_a @ w["q_b_proj.weight"].T
    q = q.view(batch, seq, heads, nope + rope).transpose(1, 2)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    compressed = x @ w["kv_a_proj_with_mqa.weight"].T
    latent = rms_norm(compressed[..., :rank], w["kv_a_layernorm.weight"], 1e-6)
    k_pe = compressed[..., rank:].view(batch, seq, 1, rope).transpose(1, 2)
    kv = (latent @ w["kv_b_proj.weight"].T).view(batch, seq, heads, nope + v_dim)
    k_nope, v = kv.transpose(1, 2)[..., :nope], kv.transpose(1, 2)[..., nope:]
    positions = torch.arange(seq)[None, :].expand(batch, -1)
    q_pe = deepseek_rope(q_pe, positions, inv_freq)
    k_pe = deepseek_rope(k_pe, positions, inv_freq)
    query = torch.cat([q_nope, q_pe], dim=-1)
    key = torch.cat([k_nope, k_pe.expand(-1, heads, -1, -1)], dim=-1)
    attended, _ = eager_attention(query, key, v, scale, causal_offset=0)
    output = attended.transpose(1, 2).reshape(batch, seq, -1) @ w["o_proj.weight"].T
    return dict(q_nope=q_nope, q_pe=q_pe, latent=latent, k_pe=k_pe, attended=attended,
                output=output)


def mla_absorbed_core_case(name):
    """DeepSeek-V2-Lite-like multi-head latent attention (no q LoRA), re-derived from
    modeling_deepseek.py's DeepseekV2Attention: the expanded form (kv_b_proj gives
    each head's k_nope and v) is the reference; the fixture is its absorbed form for
    the attention core: MQA over keys [latent, k_pe] with values the latent, queries
    [q_nope W_UK_h, q_pe], scale q_head_dim^-0.5 * mscale^2 (YaRN). The expected
    output is the latent context, which W_UV_h maps to the expanded output (checked
    here)."""
    torch.manual_seed(24)
    batch, seq, hidden, heads = 2, 9, 32, 4
    rank, nope, rope, v_dim = 32, 16, 8, 16
    x = torch.randn(batch, seq, hidden)
    w = deepseek_weights(hidden, heads, 0, rank, nope, rope, v_dim)
    factor, mscale_all_dim = 40.0, 0.707  # V2-Lite's rope_scaling (yarn)
    scale = (nope + rope) ** -0.5 * yarn_get_mscale(factor, mscale_all_dim) ** 2
    e = deepseek_attention(x, w, heads, rank, nope, rope, v_dim, scale,
                           rope_inv_freq(rope, 10000.0))
    w_uk_uv = w["kv_b_proj.weight"].view(heads, nope + v_dim, rank)
    w_uk, w_uv = w_uk_uv[:, :nope], w_uk_uv[:, nope:]
    q_latent = torch.einsum("bhsn,hnr->bhsr", e["q_nope"], w_uk)
    absorbed_query = torch.cat([q_latent, e["q_pe"]], dim=-1)
    absorbed_key = torch.cat([e["latent"][:, None], e["k_pe"]], dim=-1)
    context, _ = eager_attention(absorbed_query, absorbed_key, e["latent"][:, None], scale,
                                 causal_offset=0)
    assert torch.allclose(torch.einsum("bhsr,hvr->bhsv", context, w_uv), e["attended"],
                          atol=1e-5)
    case = Case(name)
    case.args += ["--core", "--layout", "bshd", "--causal", "--scale", repr(scale)]
    case.flag("--query", "query.npy", absorbed_query.transpose(1, 2).contiguous())
    case.flag("--key", "key.npy", absorbed_key.transpose(1, 2).contiguous())
    case.flag("--value", "value.npy", e["latent"][:, :, None].contiguous())
    case.finish(context.transpose(1, 2))


def mla_layer_case(name, q_lora_rank, decode_steps):
    """The whole DeepSeek attention layer through mha-run --latent (its latent cache:
    a prefill, then decode_steps single tokens) against the expanded form."""
    torch.manual_seed(25 + q_lora_rank)
    batch, seq, hidden, heads = 2, 11, 32, 4
    rank, nope, rope, v_dim = 32, 16, 16, 16
    x = torch.randn(batch, seq, hidden)
    w = deepseek_weights(hidden, heads, q_lora_rank, rank, nope, rope, v_dim)
    scale = (nope + rope) ** -0.5 * yarn_get_mscale(40.0, 0.707) ** 2
    e = deepseek_attention(x, w, heads, rank, nope, rope, v_dim, scale,
                           rope_inv_freq(rope, 10000.0))
    case = Case(name)
    save_safetensors(os.path.join(case.dir, "weights.safetensors"), w)
    case.args += ["--latent", "--num-heads", str(heads), "--rope", "interleaved",
                  "--rope-theta", "10000", "--scale", repr(scale), "--decode-steps",
                  str(decode_steps), "--weights", "weights.safetensors"]
    case.flag("--query", "query.npy", x)
    case.finish(e["output"])


def decoder_cases():
    decoder_case("llama3_rope_gqa", 32, 4, 2, 7, rope="neox", theta=500000.0,
                 scaling=("llama3", 8.0, 1.0, 4.0, 16))
    left_padded = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3]])
    padding = torch.tensor([[False] * 6, [True, True] + [False] * 4])
    decoder_case("gptj_interleaved_partial_positions", 24, 3, 3, 6, rope="interleaved",
                 rotary_dim=4, bias=True, position_ids=left_padded, key_padding=padding)
    decoder_case("mistral_sliding_window", 32, 4, 1, 9, rope="neox", window=3)
    decoder_case("gemma2_softcap_window", 32, 2, 1, 8, rope="neox", softcap=5.0, window=4)
    decoder_case("gpt_oss_sinks_window", 32, 4, 2, 8, rope="neox", theta=150000.0,
                 window=5, sinks=True, bias=True)
    decoder_case("bloom_alibi_6_heads", 24, 6, 6, 7, alibi=True, bias=True)
    decoder_case("llama4_chunked_attention", 32, 4, 2, 11, rope="neox", theta=500000.0,
                 chunk=4)
    decoder_case("llama4_nope_temperature", 32, 4, 2, 11, temperature=(3.0, 0.1))
    decoder_case("qwen3_qk_norm_gqa", 32, 4, 2, 9, rope="neox", theta=1000000.0,
                 qk_norm=("per-head", 1e-6, False))
    decoder_case("gemma3_qk_norm_window", 32, 4, 2, 10, rope="neox", window=4,
                 qk_norm=("per-head", 1e-6, True))
    decoder_case("olmo2_qk_norm_across_heads", 32, 4, 4, 8, rope="neox", theta=500000.0,
                 qk_norm=("across-heads", 1e-6, False))
    gemma3n_kv_sharing_case("gemma3n_kv_sharing")
    dynamic_rope_decode_case("dynamic_ntk_decode_crossing", "dynamic")
    dynamic_rope_decode_case("longrope_decode_crossing", "longrope")
    draft_tree_case("draft_tree_4way_depth3")
    core_case("core_sdpa_features")
    mla_absorbed_core_case("deepseek_v2_lite_mla_absorbed")
    mla_layer_case("deepseek_v2_lite_mla_layer", 0, 4)
    mla_layer_case("deepseek_v3_mla_layer_q_lora", 24, 3)
    rope_frequencies()
    rope_dynamic_frequencies()


def main():
    torch_mha_cases()
    decoder_cases()
    gqa("gqa_8q_2kv_causal", 8, 2, True)
    gqa("mqa_4q_1kv", 4, 1, False)
    seed000()
    seed001()
    seed002()
    seed003()
    # Padding mask [B, 1, 1, S] (1 = token) and decoder mask [1, 1, S, S] (tril).
    padding = torch.ones(3, 1, 1, 6)
    padding[1, ..., 4:] = 0
    padding[2, ..., 2:] = 0
    seed004("seed004_padding", padding)
    seed004("seed004_subsequent", torch.tril(torch.ones(1, 1, 6, 6)))
    print("fixtures written to", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
