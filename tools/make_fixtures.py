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


def main():
    torch_mha_cases()
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
