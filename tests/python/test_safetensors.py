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


@pytest.mark.parametrize("bad", [None, "text", 3.0, [1.0, 2.0]])
def test_a_value_that_is_not_an_array_is_refused_by_name(tmp_path, bad):
    path = tmp_path / "w.safetensors"
    mha.save_safetensors(str(path), {"a": np.ones(3, np.float32)})
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"tensors\['w'\]: expected a numpy array or "
                                        r"torch tensor, got <class '(NoneType|str|float|list)'>"):
        mha.save_safetensors(str(path), {"a": np.zeros(2, np.float32), "w": bad})
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["w.safetensors"]  # no temporary left


def test_the_reserved_metadata_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'__metadata__' is the format's reserved name"):
        mha.save_safetensors(str(tmp_path / "w.safetensors"),
                             {"__metadata__": np.ones(1, np.float32)})
    assert os.listdir(tmp_path) == []


def test_a_planted_link_beside_the_file_is_not_followed(tmp_path):
    """The temporary file is created fresh (O_EXCL) under a name of this process, so a
    link planted where the old fixed name was overwrites nothing."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    path = tmp_path / "w.safetensors"
    os.symlink(victim, str(path) + ".partial")
    mha.save_safetensors(str(path), {"a": np.arange(4, dtype=np.float32)})
    assert victim.read_bytes() == b"keep me"
    np.testing.assert_array_equal(read_safetensors(str(path))["a"], np.arange(4))
    assert sorted(os.listdir(tmp_path)) == ["victim", "w.safetensors", "w.safetensors.partial"]


def test_from_state_dict_reads_one_layer_of_a_model_by_its_prefix():
    rng = np.random.default_rng(2)
    model = {}
    for layer in range(3):
        for name, rows in [("q_proj", 16), ("k_proj", 8), ("v_proj", 8), ("o_proj", 16)]:
            model[f"model.layers.{layer}.self_attn.{name}.weight"] = (
                rng.standard_normal((rows, 16)).astype(np.float32))
        model[f"model.layers.{layer}.mlp.up_proj.weight"] = np.ones((4, 16), np.float32)
    model["model.embed_tokens.weight"] = np.ones((10, 16), np.float32)
    prefix = "model.layers.1.self_attn."
    own = {k[len(prefix):]: v for k, v in model.items() if k.startswith(prefix)}
    x = rng.standard_normal((1, 5, 16)).astype(np.float32)
    direct = mha.MultiheadAttention.from_state_dict(own, num_heads=4, num_kv_heads=2)
    by_prefix = mha.MultiheadAttention.from_state_dict(model, num_heads=4, num_kv_heads=2,
                                                       prefix=prefix)
    assert by_prefix.batch_first  # Hugging Face's names: batch-first, as without a prefix
    np.testing.assert_array_equal(by_prefix(x)[0], direct(x)[0])
    with pytest.raises(ValueError, match="give its prefix 'model.layers.0.self_attn.'"):
        mha.MultiheadAttention.from_state_dict(model, num_heads=4)
    with pytest.raises(ValueError, match="prefix: no state_dict name starts with 'decoder.'"):
        mha.MultiheadAttention.from_state_dict(model, num_heads=4, prefix="decoder.")
