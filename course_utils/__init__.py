"""course_utils: the code the multi-head attention course stands on.

Masks everywhere use ``True`` = may attend (see :mod:`course_utils.attention.masks`).
"""

from . import _starting  # noqa: F401  (first, before torch: `python -m course_utils.X` stopped while starting)
from .attention.fused_decode import fused_decode_attention
from .attention.gqa import GroupedQueryAttention, grouped_query_attention
from .attention.masks import (
    causal_mask,
    padding_mask,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
)
from .attention.mha import MultiHeadAttention, scaled_dot_product_attention
from .env import pick_device, seed_everything
from .model.checkpoint import load_checkpoint
from .model.transformer import ModelConfig, TinyTransformer

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "grouped_query_attention",
    "GroupedQueryAttention",
    "fused_decode_attention",
    "causal_mask",
    "padding_mask",
    "to_torch_attn_mask",
    "to_torch_key_padding_mask",
    "seed_everything",
    "pick_device",
    "ModelConfig",
    "TinyTransformer",
    "load_checkpoint",
    "train_induction",
    "train_agreement",
]

__version__ = "0.2.0"  # pyproject.toml's version, the release tag's (tests/test_publish.py)


def __getattr__(name: str):
    """Import the trainers lazily, so ``python -m course_utils.model.train`` runs cleanly."""
    if name in ("train_induction", "train_agreement"):
        from .model import train

        return getattr(train, name)
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
