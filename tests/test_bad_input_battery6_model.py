"""Battery 6 (model): bad input that used to pass without a word."""
from __future__ import annotations

import pytest

from course_utils.model.checkpoint import available_checkpoints
from course_utils.model.train import train_agreement, train_induction, train_mixture
from course_utils.model.transformer import ModelConfig, TinyTransformer, _weight_bytes


def test_available_checkpoints_skips_a_sidecar_without_weights(tmp_path):
    (tmp_path / "stray.json").write_text("{}")
    (tmp_path / "whole.json").write_text("{}")
    (tmp_path / "whole.safetensors").write_bytes(b"")
    assert available_checkpoints(tmp_path) == ["whole"]


@pytest.mark.parametrize("trainer", [train_induction, train_agreement, train_mixture])
@pytest.mark.parametrize("target, error", [(2.0, ValueError), (-0.1, ValueError), (True, TypeError),
                                           ("0.9", TypeError), (float("nan"), TypeError)])
def test_task_trainers_refuse_a_target_that_is_no_accuracy(trainer, target, error):
    with pytest.raises(error, match="target must be an accuracy"):
        trainer(steps=1, target=target, progress=False)


def test_tiny_transformer_refuses_weights_larger_than_memory_before_allocating():
    config = ModelConfig(vocab_size=10**12, max_len=8, d_model=64, num_heads=4, num_layers=1)
    with pytest.raises(ValueError, match=r"TinyTransformer\(config\) asks for .* GiB.*"
                       r"vocab_size=1000000000000"):
        TinyTransformer(config)
    small = TinyTransformer(ModelConfig(vocab_size=13, max_len=8, d_model=8, num_heads=2, num_layers=1))
    weights = sum(p.numel() for p in small.parameters())
    assert 4 * weights >= _weight_bytes(small.config) > 0
