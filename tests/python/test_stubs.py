"""mha.pyi, installed beside the module, against the module itself: every public
name is in the stubs, and every function's parameters (names, order, keyword-only,
which have defaults) are the module's; help() describes every argument of the main
calls."""
import ast
import os
import re
import types

import numpy as np
import pytest

import mha

STUBS = os.path.join(os.path.dirname(mha.__file__), "mha.pyi")


def stub_tree():
    with open(STUBS) as file:
        return ast.parse(file.read())


def stub_scopes():
    """{name: node} at the top level and {class: {member: node}}, bases folded in."""
    top, classes = {}, {}
    for node in stub_tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top[node.name] = node
    for name, node in top.items():
        if isinstance(node, ast.ClassDef):
            members = {}
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    members.update(classes[base.id])
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.setdefault(item.name, item)
                elif isinstance(item, ast.AnnAssign):
                    members[item.target.id] = item
                elif isinstance(item, ast.Assign):  # an alias: __call__ = forward
                    members[item.targets[0].id] = members[item.value.id]
            classes[name] = members
    return top, classes


def split_top_level(text):
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "[(<" and 1 or (char in "])>" and -1 or 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def runtime_parameters(function):
    """[(name, keyword_only, has_default)] from pybind11's signature line."""
    first = function.__doc__.split("\n")[0]
    inside = first[first.index("(") + 1:first.rindex(") ->")]
    parameters, keyword_only = [], False
    for part in split_top_level(inside):
        if part == "*":
            keyword_only = True
            continue
        name = part.split(":")[0].strip()
        if name != "self":
            parameters.append((name, keyword_only, "=" in part))
    return parameters


def stub_parameters(node):
    args = node.args
    positional = [a.arg for a in args.args if a.arg != "self"]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    result = [(name, False, d) for name, d in zip(positional, defaults)]
    result += [(a.arg, True, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return result


def public(names):
    return [n for n in names if not n.startswith("__") or n in ("__init__", "__call__",
                                                                 "__contains__")]


def module_callables():
    top, classes = stub_scopes()
    for name in public(dir(mha)):
        value = getattr(mha, name)
        if isinstance(value, type):
            for member in public(vars(value)):
                attribute = getattr(value, member)
                yield f"{name}.{member}", attribute, classes.get(name, {}).get(member)
        else:
            yield name, value, top.get(name)


def test_every_public_name_has_a_stub():
    top, classes = stub_scopes()
    # Submodules (mha.torch) are Python files with their own names, not stubbed here.
    missing = [name for name in public(dir(mha))
               if name not in top and not isinstance(getattr(mha, name), types.ModuleType)]
    missing += [f"{c}.{m}" for c in classes for m in public(vars(getattr(mha, c, object)))
                if c in dir(mha) and isinstance(getattr(mha, c), type)
                and m not in classes[c] and not m.startswith("_")]
    assert not missing, f"not in mha.pyi: {missing}"


def signature_cases():
    """Every function and method with one pybind11 signature (not overloaded, not
    the **kwargs constructors of the config structs)."""
    for name, function, stub in module_callables():
        first = (function.__doc__ or "").split("\n")[0]
        if callable(function) and not isinstance(function, type) and "(" in first \
                and "Overloaded" not in (function.__doc__ or "") and "**kwargs" not in first:
            yield pytest.param(function, stub, id=name)


@pytest.mark.parametrize("function,stub", signature_cases())
def test_stub_parameters_match_the_module(function, stub):
    assert isinstance(stub, ast.FunctionDef), "no stub"
    name = function.__qualname__
    assert stub_parameters(stub) == runtime_parameters(function), name


@pytest.mark.parametrize("function", [
    mha.MultiheadAttention.__init__, mha.MultiheadAttention.from_state_dict,
    mha.MultiheadAttention.forward, mha.MultiheadAttention.forward_with_cache,
    mha.MultiheadAttention.forward_packed, mha.MultiheadAttention.project_memory,
    mha.MultiheadAttention.forward_cross_attention, mha.KvCache.__init__,
    mha.PagedKvCache.__init__, mha.MultiheadLatentAttention.forward_with_cache,
    mha.MultiheadLatentAttention.forward_packed, mha.scaled_dot_product_attention],
    ids=lambda f: f.__qualname__)
def test_help_describes_every_argument(function):
    doc = function.__doc__
    described = doc[doc.index("Args:"):]
    for name, _, _ in runtime_parameters(function):
        assert re.search(rf"^    (\w+, )*{name}(, \w+)*:", described, re.M), \
            f"{function.__qualname__}: argument {name} is not described"


FEATURE_CLASSES = {"": mha.AttentionFeatures, "qk_norm": mha.QkNorm,
                   "temperature_tuning": mha.AttentionTemperature}
API_MD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "api.md")


@pytest.mark.parametrize("option", mha.feature_options(), ids=lambda o: o["path"])
def test_feature_option_is_in_every_python_face(option):
    """A line of mha/feature_options.h is a field with its help, in mha.pyi and in
    docs/api.md's table."""
    group, _, member = option["path"].rpartition(".")
    owner = FEATURE_CLASSES[group]
    assert option["doc"] in getattr(owner, member).__doc__
    _, classes = stub_scopes()
    assert member in classes[owner.__name__], f"{option['path']}: not in mha.pyi"
    row = (f"| `{option['path']}` | `{option['name']}` | `{option['flag']}` | "
           f"{option['default']} | {option['range']} | {option['doc']} |")
    with open(API_MD) as file:
        assert row in file.read(), f"docs/api.md lacks the row:\n{row}"


def test_version_is_the_projects():
    """mha.__version__ is CMakeLists.txt's project(mha VERSION ...), the one number,
    and CHANGELOG.md has its section."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "CMakeLists.txt")) as file:
        version = re.search(r"project\(mha VERSION (\S+)", file.read()).group(1)
    assert mha.__version__ == version
    with open(os.path.join(root, "CHANGELOG.md")) as file:
        assert f"## {version} (" in file.read(), "CHANGELOG.md has no section for it"


def test_configs_show_what_was_set():
    """repr of the config classes: the fields that differ from their defaults, nested
    configs the same way."""
    config = mha.AttentionConfig(
        num_heads=8, head_dim=64, query_dim=512, compute_dtype=mha.DType.bfloat16,
        features=mha.AttentionFeatures(sliding_window=4096, softcap=50.0),
        rotary=mha.RotaryConfig(theta=5e5))
    text = repr(config)
    assert text.startswith("AttentionConfig(num_heads=8, head_dim=64, query_dim=512")
    for part in ("compute_dtype=DType.bfloat16", "sliding_window=4096", "softcap=50.0",
                 "rotary=RotaryConfig(theta=500000.0)"):
        assert part in text, text
    assert "key_dim" not in text and "alibi" not in text, text
    assert repr(mha.AttentionFeatures()) == "AttentionFeatures()"


def test_caches_and_the_latent_config_show_themselves():
    latent = mha.LatentAttentionConfig(hidden_size=64, num_heads=2, kv_lora_rank=16)
    assert repr(latent).startswith("LatentAttentionConfig(hidden_size=64, num_heads=2, "
                                   "kv_lora_rank=16"), repr(latent)
    layer = mha.MultiheadAttention(
        mha.AttentionConfig(num_heads=2, head_dim=4, query_dim=8),
        *[np.eye(8, dtype=np.float32)] * 3)
    cache = mha.KvCache(layer, max_batch=2, max_seq_len=16)
    assert repr(cache) == (f"KvCache(max_batch=2, max_seq_len=16, "
                           f"bytes_per_token={cache.bytes_per_token})")
    for documented in (mha.KvCache, mha.PagedKvCache, mha.AttentionConfig,
                       mha.AttentionFeatures, mha.LatentForm):
        assert ".hpp" not in documented.__doc__ and ".h)" not in documented.__doc__, (
            documented.__doc__)


def test_messages_name_python_calls_and_a_dict_is_no_file():
    layer = mha.MultiheadAttention(
        mha.AttentionConfig(num_heads=2, head_dim=4, query_dim=8),
        *[np.eye(8, dtype=np.float32)] * 3)
    paged = mha.PagedKvCache(layer, num_blocks=4, max_sequences=2)
    paged.add_sequence(0)
    with pytest.raises(ValueError) as error:
        paged.add_sequence(0)
    assert "PagedKvCache.add_sequence: sequence 0 already exists" in str(error.value)
    assert "::" not in str(error.value)
    with pytest.raises(ValueError) as error:
        mha.MultiheadAttention.from_state_dict({"bogus": np.ones(2, np.float32)}, 2)
    assert not isinstance(error.value, mha.FileError)
    assert "state_dict: unknown tensor 'bogus'" in str(error.value)
