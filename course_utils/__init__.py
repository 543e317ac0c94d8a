"""course_utils: the code the multi-head attention course stands on.

Masks everywhere use ``True`` = may attend (see :mod:`course_utils.masks`).
"""

from .attention import LoopMultiHeadAttention, MultiHeadAttention, scaled_dot_product_attention
from .env import pick_device, seed_everything
from .masks import (
    causal_mask,
    padding_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "LoopMultiHeadAttention",
    "causal_mask",
    "padding_mask",
    "to_torch_attn_mask",
    "to_torch_key_padding_mask",
    "seed_everything",
    "pick_device",
]

__version__ = "0.1.0"
