"""Battery 6 (model): bad input that used to pass without a word."""
from __future__ import annotations

from course_utils.model.checkpoint import available_checkpoints


def test_available_checkpoints_skips_a_sidecar_without_weights(tmp_path):
    (tmp_path / "stray.json").write_text("{}")
    (tmp_path / "whole.json").write_text("{}")
    (tmp_path / "whole.safetensors").write_bytes(b"")
    assert available_checkpoints(tmp_path) == ["whole"]
