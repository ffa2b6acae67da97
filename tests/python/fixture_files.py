"""Reads the PyTorch fixtures in tests/data without torch: safetensors, .npy and the
mha-run `args` files, turned into mha.MultiheadAttention / forward arguments."""
import json
import pathlib
import struct

import numpy as np

import mha

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    body = raw[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], np.float32).reshape(info["shape"])
    return tensors


def parse_args(case):
    """The `args` file as {flag: value or True}."""
    words = (DATA / case / "args").read_text().split()
    flags, i = {}, 0
    while i < len(words):
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[words[i]] = words[i + 1]
            i += 2
        else:
            flags[words[i]] = True
            i += 1
    return flags


def rotary_config(flags):
    if "--rope" not in flags:
        return None
    pairing = {"neox": mha.RotaryPairing.half_split,
               "interleaved": mha.RotaryPairing.interleaved}[flags["--rope"]]
    rotary = mha.RotaryConfig(pairing=pairing, theta=float(flags.get("--rope-theta", 10000)),
                              rotary_dim=int(flags.get("--rotary-dim", 0)))
    if "--rope-scaling" in flags:
        kind, values = flags["--rope-scaling"].split(":")
        numbers = [float(v) for v in values.split(",")]
        scaling = mha.RopeScaling(type=getattr(mha.RopeScalingType, kind), factor=numbers[0])
        if kind == "llama3":
            scaling.low_freq_factor, scaling.high_freq_factor = numbers[1], numbers[2]
            scaling.original_max_position_embeddings = int(numbers[3])
        rotary.scaling = scaling
    return rotary


def features(flags):
    return mha.AttentionFeatures(
        alibi="--alibi" in flags,
        softcap=float(flags["--softcap"]) if "--softcap" in flags else None,
        sliding_window=int(flags["--sliding-window"]) if "--sliding-window" in flags else None,
        attention_chunk_size=(int(flags["--attention-chunk-size"])
                              if "--attention-chunk-size" in flags else None),
        temperature_tuning=temperature(flags),
        qk_norm=qk_norm(flags))


def qk_norm(flags):
    if "--qk-norm" not in flags:
        return None
    scope = getattr(mha.QkNormScope, flags.get("--qk-norm-scope", "per_head"))
    return mha.QkNorm(scope=scope, eps=float(flags.get("--qk-norm-eps", 1e-6)),
                      unit_offset="--qk-norm-unit-offset" in flags,
                      value_norm="--qk-norm-value-norm" in flags)


def temperature(flags):
    if "--temperature-tuning" not in flags:
        return None
    return mha.AttentionTemperature(
        floor_scale=float(flags.get("--temperature-tuning-floor-scale", 8192.0)),
        attn_scale=float(flags.get("--temperature-tuning-attn-scale", 0.1)))


def load(case, flags, flag):
    return np.load(DATA / case / flags[flag]) if flag in flags else None


def layer_case(case):
    """(state_dict, num_heads, num_kv_heads, config, forward kwargs, positional inputs)."""
    flags = parse_args(case)
    config = mha.AttentionConfig(features=features(flags))
    rotary = rotary_config(flags)
    if rotary is not None:
        config.rotary = rotary
    forward = dict(
        is_causal="--causal" in flags,
        key_padding_mask=load(case, flags, "--key-padding-mask"),
        attn_mask=load(case, flags, "--attn-mask"),
        position_ids=load(case, flags, "--position-ids"),
        average_attn_weights="--average-heads" in flags,
    )
    if flags.get("--mask-convention") == "zero-means-masked":
        forward["mask_convention"] = mha.MaskConvention.zero_means_masked
    inputs = [load(case, flags, f) for f in ("--query", "--key", "--value")]
    state_dict = read_safetensors(DATA / case / flags["--weights"])
    num_kv_heads = int(flags.get("--num-kv-heads", 0))
    return state_dict, int(flags["--num-heads"]), num_kv_heads, config, forward, inputs


def layer_cases():
    """The fixtures of MultiheadAttention layers (MLA layers, --latent, have no Python
    binding yet)."""
    return sorted(p.parent.name for p in DATA.glob("*/args")
                  if "--weights" in parse_args(p.parent.name)
                  and "--latent" not in parse_args(p.parent.name))
