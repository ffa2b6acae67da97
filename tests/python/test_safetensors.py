"""mha.save_safetensors: what it writes is the safetensors format (read back here with
json and numpy alone) and what mha-run's --weights reads; a refused tensor leaves an
existing file as it was."""
import json
import os
import struct

import numpy as np
import pytest

import mha


def read_safetensors(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    assert (8 + length) % 8 == 0, "data must start 8-byte aligned"
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        assert entry["dtype"] == "F32"
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
    return out


def test_tensors_read_back_as_float32(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"in_proj_weight": rng.standard_normal((24, 8)),  # float64: converted
               "in_proj_bias": rng.standard_normal(24).astype(np.float32),
               "out_proj.weight": np.asfortranarray(rng.standard_normal((8, 8)))}
    path = str(tmp_path / "w.safetensors")
    mha.save_safetensors(path, tensors)
    back = read_safetensors(path)
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(back[name], value.astype(np.float32))


def test_layer_from_saved_weights_matches_the_state_dict(tmp_path):
    rng = np.random.default_rng(1)
    state = {"in_proj_weight": rng.standard_normal((24, 8)).astype(np.float32),
             "out_proj.weight": rng.standard_normal((8, 8)).astype(np.float32)}
    path = str(tmp_path / "w.safetensors")
    mha.save_safetensors(path, state)
    x = rng.standard_normal((1, 5, 8)).astype(np.float32)
    direct = mha.MultiheadAttention.from_state_dict(state, num_heads=2)
    saved = mha.MultiheadAttention.from_state_dict(read_safetensors(path), num_heads=2)
    np.testing.assert_array_equal(saved(x, x, x)[0], direct(x, x, x)[0])


def test_a_refused_tensor_leaves_the_file_as_it_was(tmp_path):
    path = str(tmp_path / "w.safetensors")
    mha.save_safetensors(path, {"a": np.ones(3, np.float32)})
    before = open(path, "rb").read()
    with pytest.raises((TypeError, ValueError)):
        mha.save_safetensors(path, {"b": np.zeros(2, np.float32), "c": "not a tensor"})
    assert open(path, "rb").read() == before
    assert not os.path.exists(path + ".partial")
