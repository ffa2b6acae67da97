# Type stubs of the mha module (the pybind11 extension built from src/python/),
# installed beside it. tests/python/test_stubs.py checks that every public name and
# every parameter (name, order, keyword-only, default) here matches the module.
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, overload

import numpy as np

# numpy arrays, torch tensors (float32 and bfloat16 read in place) or nested lists.
ArrayLike = Any
# What a call returns: docs/api.md, "Outputs" (a torch query's dtype; numpy float32).
Output = Any

class _Enum:
    """What every enum below has (pybind11 enums)."""
    def __init__(self, value: int) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class FileError(ValueError): ...
class OutOfBlocksError(ValueError): ...

class DType(_Enum):
    float32: DType
    bfloat16: DType
    int8: DType
    float8_e4m3fn: DType
    float8_e5m2: DType
    int4: DType

class KvScales(_Enum):
    per_token: KvScales
    none: KvScales
    per_channel_keys: KvScales
    per_group: KvScales

class WeightLayout(_Enum):
    out_in: WeightLayout
    in_out: WeightLayout
    heads_in_head_dim: WeightLayout

class RotaryPairing(_Enum):
    none: RotaryPairing
    half_split: RotaryPairing
    interleaved: RotaryPairing

class RopeScalingType(_Enum):
    none: RopeScalingType
    linear: RopeScalingType
    llama3: RopeScalingType
    dynamic: RopeScalingType
    longrope: RopeScalingType

class MaskConvention(_Enum):
    torch: MaskConvention
    zero_means_masked: MaskConvention
    sdpa: MaskConvention

class CausalAlignment(_Enum):
    top_left: CausalAlignment
    bottom_right: CausalAlignment

class QkNormScope(_Enum):
    per_head: QkNormScope
    across_heads: QkNormScope

class LatentForm(_Enum):
    auto: LatentForm
    absorbed: LatentForm
    expanded: LatentForm

class HeadLayout(_Enum):
    bhsd: HeadLayout
    bshd: HeadLayout

class RopeScaling:
    type: RopeScalingType
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int
    short_factor: List[float]
    long_factor: List[float]
    attention_factor: float
    def __init__(self, **kwargs: Any) -> None: ...

class RotaryConfig:
    pairing: RotaryPairing
    rotary_dim: int
    theta: float
    scaling: RopeScaling
    inv_freq: List[float]
    attention_factor: float
    max_positions: int
    def __init__(self, **kwargs: Any) -> None: ...

class RotaryEmbedding:
    def __init__(self, config: RotaryConfig, head_dim: int) -> None: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def rotary_dim(self) -> int: ...
    @property
    def max_positions(self) -> int: ...
    @property
    def inv_freq(self) -> List[float]: ...

class AttentionTemperature:
    floor_scale: float
    attn_scale: float
    def __init__(self, **kwargs: Any) -> None: ...

class QkNorm:
    eps: float
    unit_offset: bool
    scope: QkNormScope
    value_norm: bool
    def __init__(self, **kwargs: Any) -> None: ...

class AttentionFeatures:
    softcap: Optional[float]
    alibi: bool
    alibi_slopes: List[float]
    sliding_window: Optional[int]
    sliding_window_right: Optional[int]
    attention_chunk_size: Optional[int]
    temperature_tuning: Optional[AttentionTemperature]
    qk_norm: Optional[QkNorm]
    def __init__(self, **kwargs: Any) -> None: ...

class IsaReport:
    simd_target: str
    onednn_isa: str
    bf16_dot_products: bool
    amx_tiles: bool
    projection_kernels: List[str]
    def __init__(self) -> None: ...

__version__: str

def set_max_isa(name: str) -> None: ...
def describe_isa() -> IsaReport: ...
def set_thread_placement(name: str) -> None: ...
def thread_placement() -> str: ...
def feature_options() -> List[Dict[str, str]]: ...
def save_safetensors(path: str, tensors: Dict[str, ArrayLike]) -> None: ...

class AttentionConfig:
    num_heads: int
    head_dim: int
    query_dim: int
    key_dim: int
    value_dim: int
    scale: Optional[float]
    num_kv_heads: int
    weight_dtype: DType
    compute_dtype: DType
    features: AttentionFeatures
    rotary: RotaryConfig
    def __init__(self, **kwargs: Any) -> None: ...

class HeadShard:
    first_head: int
    end_head: int
    def __init__(self, first_head: int, end_head: int) -> None: ...

def even_head_shard(config: AttentionConfig, rank: int, world_size: int) -> HeadShard: ...

class KvCache:
    def __init__(self, layer: Union[MultiheadAttention, MultiheadLatentAttention],
                 max_batch: int, max_seq_len: int,
                 storage: DType = ..., scales: KvScales = ...) -> None: ...
    @property
    def bytes_per_token(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_seq_len(self) -> int: ...
    def length(self, sequence: int) -> int: ...
    @overload
    def reset(self) -> None: ...
    @overload
    def reset(self, sequence: int) -> None: ...
    def truncate(self, sequence: int, length: int) -> None: ...

class PagedKvCache:
    def __init__(self, layer: Union[MultiheadAttention, MultiheadLatentAttention],
                 num_blocks: int, max_sequences: int, *,
                 block_size: int = 16, num_layers: int = 1, storage: DType = ...,
                 scales: KvScales = ..., sliding_window: int = 0,
                 attention_chunk_size: int = 0) -> None: ...
    def add_sequence(self, sequence: int) -> None: ...
    def remove_sequence(self, sequence: int) -> None: ...
    def fork(self, parent: int, child: int) -> None: ...
    def truncate(self, sequence: int, length: int) -> None: ...
    def keep_tokens(self, sequence: int, first: int, kept: Sequence[int]) -> None: ...
    def append_slots(self, sequences: Sequence[int], counts: Sequence[int]) -> None: ...
    def length(self, sequence: int) -> int: ...
    def __contains__(self, sequence: int) -> bool: ...
    def stats(self) -> Dict[str, int]: ...

class _Layer:
    def __init__(self, config: AttentionConfig, q_proj_weight: ArrayLike,
                 k_proj_weight: ArrayLike, v_proj_weight: ArrayLike,
                 out_proj_weight: Optional[ArrayLike] = None, *,
                 q_proj_bias: Optional[ArrayLike] = None,
                 k_proj_bias: Optional[ArrayLike] = None,
                 v_proj_bias: Optional[ArrayLike] = None,
                 out_proj_bias: Optional[ArrayLike] = None,
                 sinks: Optional[ArrayLike] = None,
                 q_norm_weight: Optional[ArrayLike] = None,
                 k_norm_weight: Optional[ArrayLike] = None,
                 layout: WeightLayout = ..., head_shard: Optional[HeadShard] = None,
                 batch_first: bool = True) -> None: ...
    @property
    def config(self) -> AttentionConfig: ...
    @property
    def output_dim(self) -> int: ...
    @property
    def head_shard(self) -> Optional[HeadShard]: ...
    @property
    def batch_first(self) -> bool: ...
    def forward(self, query: ArrayLike, key: Optional[ArrayLike] = None,
                value: Optional[ArrayLike] = None, *,
                key_padding_mask: Optional[ArrayLike] = None,
                attn_mask: Optional[ArrayLike] = None, is_causal: bool = False,
                need_weights: bool = False, average_attn_weights: bool = True,
                position_ids: Optional[ArrayLike] = None,
                key_lengths: Optional[ArrayLike] = None,
                mask_convention: MaskConvention = ...,
                causal_alignment: CausalAlignment = ..., num_threads: int = 0,
                batch_invariant: bool = False,
                out: Optional[ArrayLike] = None) -> Tuple[Output, Optional[Output]]: ...
    __call__ = forward

class MultiheadAttention(_Layer):
    @staticmethod
    def from_state_dict(state_dict: Dict[str, ArrayLike], num_heads: int,
                        num_kv_heads: int = 0, *, config: Optional[AttentionConfig] = None,
                        head_shard: Optional[HeadShard] = None,
                        batch_first: Optional[bool] = None,
                        prefix: str = "") -> MultiheadAttention: ...
    def forward_with_cache(self, query: ArrayLike, cache: KvCache, *,
                           new_lengths: Optional[ArrayLike] = None,
                           position_ids: Optional[ArrayLike] = None, num_threads: int = 0,
                           kv_shared: bool = False, batch_invariant: bool = False,
                           out: Optional[ArrayLike] = None) -> Output: ...
    def project_memory(self, memory: ArrayLike, cache: KvCache, *,
                       memory_lengths: Optional[ArrayLike] = None) -> None: ...
    def forward_cross_attention(self, query: ArrayLike, cache: KvCache, *,
                                num_threads: int = 0, batch_invariant: bool = False,
                                out: Optional[ArrayLike] = None) -> Output: ...
    def forward_packed(self, query: ArrayLike, sequence_ids: ArrayLike,
                       query_start_loc: ArrayLike, cache: PagedKvCache,
                       layer_index: int = 0, *, position_ids: Optional[ArrayLike] = None,
                       tree_parents: Optional[ArrayLike] = None, num_threads: int = 0,
                       kv_shared: bool = False, batch_invariant: bool = False,
                       out: Optional[ArrayLike] = None) -> Output: ...

class NaiveMultiheadAttention(_Layer):
    @staticmethod
    def from_state_dict(state_dict: Dict[str, ArrayLike], num_heads: int,
                        num_kv_heads: int = 0, *, config: Optional[AttentionConfig] = None,
                        head_shard: Optional[HeadShard] = None,
                        batch_first: Optional[bool] = None,
                        prefix: str = "") -> NaiveMultiheadAttention: ...

def scaled_dot_product_attention(
        query: ArrayLike, key: ArrayLike, value: ArrayLike,
        attn_mask: Optional[ArrayLike] = None, is_causal: bool = False,
        scale: Optional[float] = None, *, layout: HeadLayout = ...,
        features: AttentionFeatures = ..., sinks: Optional[ArrayLike] = None,
        q_norm_weight: Optional[ArrayLike] = None,
        k_norm_weight: Optional[ArrayLike] = None,
        rotary: Union[RotaryConfig, RotaryEmbedding, None] = None,
        key_padding_mask: Optional[ArrayLike] = None,
        mask_convention: MaskConvention = ...,
        causal_alignment: CausalAlignment = ..., return_logsumexp: bool = False,
        num_threads: int = 0,
        compute_dtype: DType = ...) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]: ...

def _activation_view(activation: ArrayLike) -> Tuple[int, str]: ...

class LatentAttentionConfig:
    hidden_size: int
    num_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rms_norm_eps: float
    rotary: RotaryConfig
    softmax_scale: Optional[float]
    form: LatentForm
    def __init__(self, **kwargs: Any) -> None: ...

class MultiheadLatentAttention:
    def __init__(self, config: LatentAttentionConfig, **weights: ArrayLike) -> None: ...
    @property
    def config(self) -> LatentAttentionConfig: ...
    def forward_with_cache(self, hidden_states: ArrayLike, cache: KvCache, *,
                           position_ids: Optional[ArrayLike] = None, num_threads: int = 0,
                           batch_invariant: bool = False,
                           out: Optional[ArrayLike] = None) -> Output: ...
    def forward_packed(self, hidden_states: ArrayLike, sequence_ids: ArrayLike,
                       query_start_loc: ArrayLike, cache: PagedKvCache,
                       layer_index: int = 0, *, position_ids: Optional[ArrayLike] = None,
                       tree_parents: Optional[ArrayLike] = None, num_threads: int = 0,
                       batch_invariant: bool = False,
                       out: Optional[ArrayLike] = None) -> Output: ...

class NaiveMultiheadLatentAttention:
    def __init__(self, config: LatentAttentionConfig, **weights: ArrayLike) -> None: ...
    def forward(self, hidden_states: ArrayLike) -> np.ndarray: ...
