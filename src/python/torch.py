"""mha.torch: mha inside PyTorch models, in one line.

- MultiheadAttention is torch.nn.MultiheadAttention (the same constructor, parameters
  and state_dict names: load_state_dict works both ways, isinstance still holds) whose
  forward runs mha's layer. from_module(m) makes one from a torch module.
- convert(model) swaps every nn.MultiheadAttention of a model for one, in place.
- scaled_dot_product_attention has torch 2's signature, on torch 1.13 too.

Inference only: mha computes no gradients, so a call that would need them (grad
enabled and a tensor that requires grad) and dropout in training mode are refused by
name. mha's layer holds its own packed copy of the weights; it is rebuilt whenever a
parameter changes (load_state_dict, .to(dtype), an in-place edit), never stale.
"""
import torch
from torch import nn

import mha

__all__ = ["MultiheadAttention", "convert", "ConvertReport", "scaled_dot_product_attention"]

# MHA_MAX_ISA caps oneDNN only before its first primitive, and Debian's torch uses the
# same libdnnl (its convolutions): apply the cap now, before torch runs. If torch has
# run already, mha's first call raises the cap's own error, which says so.
try:
    mha.describe_isa()
except ValueError:
    pass

# The weight and compute dtypes mha's layer offers, by torch dtype and by name.
_WEIGHT_DTYPES = {"float32": mha.DType.float32, "bfloat16": mha.DType.bfloat16,
                  "int8": mha.DType.int8}
_COMPUTE_DTYPES = {"float32": mha.DType.float32, "bfloat16": mha.DType.bfloat16}


def _dtype_name(dtype, argument, accepted):
    name = str(dtype).replace("torch.", "") if dtype is not None else "float32"
    if name not in accepted:
        raise ValueError(f"mha.torch: {argument}: expected one of "
                         f"{', '.join(sorted(accepted))}, got {dtype!r}")
    return name


def _refuse_gradients(where, tensors):
    if torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        raise RuntimeError(
            f"mha.torch: {where}: mha runs inference only and computes no gradients, "
            "but grad is enabled and a tensor requires grad: call it under "
            "torch.no_grad() or torch.inference_mode(), or requires_grad_(False)")


class MultiheadAttention(nn.MultiheadAttention):
    """torch.nn.MultiheadAttention run by mha. Extra keyword arguments:
    weight_dtype (torch.float32, torch.bfloat16 or torch.int8: how mha stores the
    projection weights) and compute_dtype (torch.float32 or torch.bfloat16: the
    attention products) and num_threads (mha's threads; 0: torch.get_num_threads(),
    which mha shares through OpenMP). add_bias_kv and add_zero_attn are refused."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False,
                 device=None, dtype=None, *, weight_dtype=None, compute_dtype=None,
                 num_threads=0):
        for name, value in (("add_bias_kv", add_bias_kv), ("add_zero_attn", add_zero_attn)):
            if value:
                raise ValueError(f"mha.torch.MultiheadAttention: {name}=True is not "
                                 "supported by mha (a learned or zero key/value row "
                                 "appended to every sequence)")
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, kdim=kdim,
                         vdim=vdim, batch_first=batch_first, device=device, dtype=dtype)
        self.weight_dtype = _dtype_name(weight_dtype, "weight_dtype", _WEIGHT_DTYPES)
        self.compute_dtype = _dtype_name(compute_dtype, "compute_dtype", _COMPUTE_DTYPES)
        if not isinstance(num_threads, int) or num_threads < 0:
            raise ValueError("mha.torch.MultiheadAttention: num_threads: expected an int "
                             f">= 0 (0: torch's), got {num_threads!r}")
        self.num_threads = num_threads
        self._layer = None
        self._layer_key = None

    @classmethod
    def from_module(cls, module, *, weight_dtype=None, compute_dtype=None, num_threads=0):
        """An mha module with `module`'s arguments, weights, device, dtype and mode."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError("mha.torch.MultiheadAttention.from_module: module: expected "
                            f"a torch.nn.MultiheadAttention, got {type(module).__name__}")
        parameter = next(module.parameters())
        converted = cls(module.embed_dim, module.num_heads, dropout=module.dropout,
                        bias=module.in_proj_bias is not None,
                        add_bias_kv=module.bias_k is not None,
                        add_zero_attn=module.add_zero_attn, kdim=module.kdim,
                        vdim=module.vdim, batch_first=module.batch_first,
                        device=parameter.device, dtype=parameter.dtype,
                        weight_dtype=weight_dtype, compute_dtype=compute_dtype,
                        num_threads=num_threads)
        converted.load_state_dict(module.state_dict())
        converted.train(module.training)
        return converted

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"batch_first={self.batch_first}, weight_dtype={self.weight_dtype}, "
                f"compute_dtype={self.compute_dtype}, num_threads={self.num_threads}")

    def __getstate__(self):  # torch.save: mha's layer is rebuilt from the parameters
        state = self.__dict__.copy()
        state["_layer"], state["_layer_key"] = None, None
        return state

    def _parameters_key(self):
        """What changes when any parameter does: its storage, dtype or version."""
        return tuple((p.data_ptr(), p.dtype, p._version) for p in self.parameters())

    def _mha_layer(self):
        key = self._parameters_key()
        if self._layer is None or key != self._layer_key:
            state = {name: tensor.detach().float().cpu()
                     for name, tensor in self.state_dict().items()}
            config = mha.AttentionConfig(weight_dtype=_WEIGHT_DTYPES[self.weight_dtype],
                                         compute_dtype=_COMPUTE_DTYPES[self.compute_dtype])
            self._layer = mha.MultiheadAttention.from_state_dict(
                state, self.num_heads, config=config, batch_first=self.batch_first)
            self._layer_key = key
        return self._layer

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """nn.MultiheadAttention.forward, run by mha: (output, weights or None)."""
        if self.training and self.dropout > 0.0:
            raise RuntimeError(
                f"mha.torch.MultiheadAttention: dropout={self.dropout} in training mode: "
                "mha applies no dropout; call .eval() (or build it with dropout=0.0)")
        _refuse_gradients("MultiheadAttention.forward",
                          [query, key, value, *self.parameters()])
        if query.device.type != "cpu":
            raise ValueError("mha.torch.MultiheadAttention: query: mha runs on the CPU, "
                             f"got a tensor on {query.device}")
        output, weights = self._mha_layer()(
            query, key, value, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
            is_causal=is_causal and attn_mask is None, need_weights=need_weights,
            average_attn_weights=average_attn_weights, num_threads=self.num_threads)
        return output, weights


class ConvertReport:
    """What convert() did: `replaced`, the names of the modules it swapped;
    `skipped`, (name, why) of those it left as they were; `fast_path_off`, the
    nn.TransformerEncoderLayer names whose fused fast path it turned off (that path
    calls torch's kernels directly and would never reach mha)."""

    def __init__(self):
        self.replaced, self.skipped, self.fast_path_off = [], [], []

    def __repr__(self):
        return (f"ConvertReport(replaced={self.replaced}, skipped={self.skipped}, "
                f"fast_path_off={self.fast_path_off})")


def convert(model, *, weight_dtype=None, compute_dtype=None, num_threads=0):
    """Replaces every torch.nn.MultiheadAttention in `model` (in place, weights kept)
    with mha.torch.MultiheadAttention; returns a ConvertReport. weight_dtype,
    compute_dtype and num_threads as MultiheadAttention's. A module mha cannot run (add_bias_kv,
    add_zero_attn) is left as it was and named in the report with why."""
    report = ConvertReport()
    converted_of = {}  # a module shared by several parents stays one module
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.MultiheadAttention:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if id(child) not in converted_of:
                try:
                    converted_of[id(child)] = MultiheadAttention.from_module(
                        child, weight_dtype=weight_dtype, compute_dtype=compute_dtype,
                        num_threads=num_threads)
                except ValueError as error:
                    converted_of[id(child)] = str(error)
            converted = converted_of[id(child)]
            if isinstance(converted, str):
                report.skipped.append((name, converted))
                continue
            setattr(parent, child_name, converted)
            report.replaced.append(name)
            if isinstance(parent, nn.TransformerEncoderLayer):
                # The fast path and nn.TransformerEncoder's nested-tensor path both
                # require it, and only they read it: the layer then calls self_attn.
                parent.activation_relu_or_gelu = 0
                report.fast_path_off.append(parent_name)
    return report


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention (torch 2's signature) run by
    mha, on torch 1.13 too: query [..., L, E], key and value [..., S, E] (batch and
    heads in front); a bool attn_mask is True where a key takes part, a float one is
    added to the scores. dropout_p must be 0 (mha applies no dropout)."""
    if dropout_p != 0.0:
        raise ValueError(f"mha.torch.scaled_dot_product_attention: dropout_p={dropout_p}: "
                         "mha applies no dropout; pass 0.0")
    _refuse_gradients("scaled_dot_product_attention", [query, key, value, attn_mask])
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise ValueError("mha.torch.scaled_dot_product_attention: query, key, value: "
                         "expected tensors of the same rank >= 2, got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    heads, kv_heads = _heads(query), _heads(key)
    if heads != kv_heads and not enable_gqa:
        raise ValueError("mha.torch.scaled_dot_product_attention: query has "
                         f"{heads} heads and key {kv_heads}: pass enable_gqa=True "
                         "for grouped key/value heads")
    lead = query.shape[:-2]
    four = [t.reshape(-1, _heads(t), *t.shape[-2:]) for t in (query, key, value)]
    mask = attn_mask
    if mask is not None and mask.dim() > 4:
        mask = mask.reshape(-1, *mask.shape[-3:])
    output = mha.scaled_dot_product_attention(*four, attn_mask=mask, is_causal=is_causal,
                                              scale=scale)
    return output.reshape(*lead, *output.shape[-2:])


def _heads(tensor):
    return tensor.shape[-3] if tensor.dim() > 2 else 1
