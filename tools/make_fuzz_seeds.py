#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): a few small,
valid inputs each, from which libFuzzer mutates. Plain Python, no numpy."""
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fuzz" / "corpus"


def npy(shape, descr="<f4", fill=b"\x00\x00\x80\x3f"):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    count = 1
    for d in shape:
        count *= d
    size = {"<f4": 4, "|b1": 1, "<i8": 8}[descr]
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + (
        fill[:size] * count)


def safetensors(tensors):
    header, data = {}, b""
    for name, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        blob = struct.pack("<%df" % count, *[(i % 7) * 0.1 - 0.3 for i in range(count)])
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def write(target, name, data):
    path = ROOT / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


packed = safetensors([("in_proj_weight", [12, 4]), ("in_proj_bias", [12]),
                      ("out_proj.weight", [4, 4]), ("out_proj.bias", [4])])
separate = safetensors([("q_proj.weight", [4, 4]), ("k_proj.weight", [2, 4]),
                        ("v_proj.weight", [2, 4]), ("out_proj.weight", [4, 4])])
query = npy([1, 3, 4])

write("npy_fuzzer", "f4_2x3.npy", npy([2, 3]))
write("npy_fuzzer", "b1_5.npy", npy([5], "|b1", b"\x01"))
write("npy_fuzzer", "i8_scalar.npy", npy([], "<i8", b"\x02" + b"\x00" * 7))
write("safetensors_layer_fuzzer", "packed", b"\x01" + packed)
write("safetensors_layer_fuzzer", "gqa_separate", b"\x05" + separate)
# Paged cache: config, options (blocks, block size, sequences, layers, storage,
# window), then operations: add 0, append 5 to it, a packed forward of 5 rows, fork,
# a decode step of both.
write("paged_cache_fuzzer", "prefill_fork_decode",
      bytes([0, 0, 6, 0, 3, 0, 0, 1,
             1, 0, 0,
             1, 4, 1, 0, 5,
             1, 5, 1, 0, 5, 1] + [8] * 80 + [0,
             1, 2, 0, 2,
             1, 4, 2, 0, 1, 2, 1,
             1, 5, 2, 0, 1, 2, 1, 1] + [8] * 32 + [1]))
write("paged_cache_fuzzer", "int8_window", bytes([1, 1, 4, 1, 2, 1, 2, 0, 20,
                                                  1, 0, 1, 1, 4, 1, 1, 30]))
write("capi_fuzzer", "two_heads", bytes([2, 4, 8, 0, 0]))
write("capi_fuzzer", "gqa_softcap", bytes([4, 2, 8, 2, 1, 64, 0, 0, 0]))
for flags in (1, 4 | 8, 16 | 1, 16 | 32 | 64 | 1):
    mask = npy([3, 3], "|b1", b"\x00") if flags & 32 == 0 else npy([1, 3], "|b1", b"\x00")
    body = struct.pack("<H", len(packed)) + packed
    body += (struct.pack("<H", len(query)) + query + mask) if flags & 16 else query
    write("mha_run_fuzzer", "flags_%d" % flags, bytes([flags]) + body)
# The core against its reference: layout, B, H_kv, group, Sq, Sk, head_dim pick, masks
# (causal, bottom-right, attn_mask, padding, lengths), features (window, softcap,
# ALiBi, sinks, rope), then the tensors' gaps and values.
write("core_reference_fuzzer", "plain_bhsd",
      bytes([0, 0, 0, 1, 4, 9, 3, 0, 0]) + bytes(range(64, 192)) * 8)
write("core_reference_fuzzer", "everything_bshd",
      bytes([1, 1, 1, 2, 6, 20, 4, 1 | 2 | 8 | 16 | 32, 1]) + bytes(range(0, 250, 3)) * 4 +
      bytes([1 | 4 | 8 | 16 | 64, 5, 7, 3]) + bytes(range(30, 220)) * 6)


def core_tensor(magnitude, count):
    """A tensor: no gap (1), its magnitude pick (>= 192: exponents[pick % 3]), values."""
    return bytes([1, magnitude]) + bytes((i * 29 + 7) % 256 for i in range(count))


# bf16 compute on 2 threads (the "more" byte 1 | 4), causal, [1, 2, 5, 8] queries at
# 2^-70 (pick 200), keys at 2^-40 (193) and values at 2^40 (194).
write("core_reference_fuzzer", "bf16_tiny_huge",
      bytes([0, 0, 0, 1, 4, 9, 3, 1, 0, 1 | 4]) + core_tensor(200, 80) +
      core_tensor(193, 80) + core_tensor(194, 80) + core_tensor(0, 80))
# The paged cache against its model: layer (KV heads, rope, compute dtype (0: bf16),
# sinks and their two values), block size, blocks, storage (and its scales), window
# (and its two sizes), then operations, each (go on, id, other, op): add (0), fork (2),
# truncate (3, and how many to drop), a token tree (4), a step (5: per sequence, take
# it, a count pick, the count, its tokens: a kind each (1: tiny, 2: huge) and 16
# values).
def op(id, kind, other=0):
    return bytes([1, id, other, kind])


def tokens(count, kind=0):
    out = b""
    for t in range(count):
        out += bytes([kind]) + bytes((t * 37 + i * 11) % 256 for i in range(16))
    return out


def step(chunks, kind=0):
    out = op(0, 5)
    for count in chunks:  # counts 1-8, or up to 96 with a long pick (0)
        out += bytes([1, 0, count - 1]) if count > 8 else bytes([1, 1, count - 1])
        out += tokens(count, kind)
    return out


write("paged_cache_model_fuzzer", "prefill_fork_decode",
      bytes([1, 1, 1, 1, 6, 10, 0, 12, 0, 0]) + op(0, 0) + step([12]) + op(0, 2, 1) +
      step([1, 1]) * 3 + op(1, 3) + bytes([2]) + step([3, 1]))
write("paged_cache_model_fuzzer", "int8_channel_keys_window",
      bytes([0, 0, 1, 0, 1, 20, 2, 1, 1, 20, 9]) + op(0, 0) + step([5]) * 6)
# Past 256 tokens with a window and sinks: the decodes whose keys split at 256.
write("paged_cache_model_fuzzer", "sinks_window_past_256",
      bytes([0, 0, 1, 1, 14, 2, 0, 30, 0, 1, 31, 20]) + op(0, 0) + step([96]) * 2 +
      step([64]) + step([1]) * 4)
# bf16 compute over a bf16 cache: a prompt, then a 5-token tree (0 -> {1, 2}, 1 -> 3,
# 3 -> 4) whose path 0 -> 1 -> 3 is kept.
write("paged_cache_model_fuzzer", "bf16_compute_tree",
      bytes([0, 0, 0, 0, 0, 12, 1, 0]) + op(0, 0) + step([9]) + op(0, 4) +
      bytes([4, 0, 1, 1, 2, 4]) + tokens(5) + bytes([1, 1, 1, 0]) + step([1]))
# Tiny and huge tokens in an int8 cache with keys per token, then in fp8 e5m2.
write("paged_cache_model_fuzzer", "int8_tiny_huge",
      bytes([0, 0, 1, 0, 0, 12, 2, 0, 0]) + op(0, 0) + step([6], 1) + step([3], 2) +
      step([4]))
write("paged_cache_model_fuzzer", "e5m2_tiny",
      bytes([0, 0, 1, 0, 0, 12, 4, 0, 0]) + op(0, 0) + step([6], 1) + step([2]))
