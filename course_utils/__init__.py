"""course_utils: the code the multi-head attention course stands on.

Masks everywhere use ``True`` = may attend (see :mod:`course_utils.attention.masks`).
"""

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

import sys as _sys

__version__ = "0.2.0"  # pyproject.toml's version, the release tag's (tests/test_publish.py)


def __getattr__(name: str):
    """Import the trainers lazily, so ``python -m course_utils.model.train`` runs cleanly."""
    if name in ("train_induction", "train_agreement"):
        from .model import train

        return getattr(train, name)
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")


# -- old module paths -------------------------------------------------------------------------
# The package was grouped into folders on 2026-11-26 (CHANGELOG.md). Code written against the
# flat layout (``import course_utils.gqa``) keeps working: each old name is the new module itself.
_MOVED = {
    'ablation': 'interp.ablation',
    'bench_gqa': 'bench.gqa_speed',
    'bench_memory': 'bench.memory',
    'checkpoint': 'model.checkpoint',
    'decode_step': 'bench.decode_step',
    'fused_decode': 'attention.fused_decode',
    'gqa': 'attention.gqa',
    'heatmaps': 'interp.heatmaps',
    'kv_cache': 'model.kv_cache',
    'masks': 'attention.masks',
    'mla': 'attention.mla',
    'naive_mha': 'attention.naive_mha',
    'paged_cache': 'model.paged_cache',
    'parallel': 'model.parallel',
    'patching': 'interp.patching',
    'scores': 'interp.scores',
    'sdpa_backends': 'attention.sdpa_backends',
    'shapes': 'attention.shapes',
    'train': 'model.train',
    'two_relations': 'tasks.two_relations',
    'validation': 'attention.validation',
    'widgets': 'interp.widgets',
    'worked_example': 'tasks.worked_example',
}


class _MovedModuleFinder:
    """Import ``course_utils.<old>`` as the module that now lives at its new path."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if not name.startswith(__name__ + ".") or name[len(__name__) + 1:] not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, _MovedModuleLoader())


class _MovedModuleLoader:
    def create_module(self, spec: object) -> object:
        import importlib

        module = importlib.import_module(f"{__name__}.{_MOVED[spec.name.rsplit('.', 1)[1]]}")
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: object) -> None:
        module.__spec__ = self.real_spec  # the import system set the old name's spec on it


if not any(isinstance(f, type) and f.__name__ == "_MovedModuleFinder" for f in _sys.meta_path):
    _sys.meta_path.insert(0, _MovedModuleFinder)
