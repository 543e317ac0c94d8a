"""Battery 21a's model cases (issue 38): an interrupted save_checkpoint leaves the folders it
made, History fields that contradict each other, a NumPy int seed in train_model, and a
QuantizedCache that casts keys/values of another dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


# -- 15: a save stopped anywhere after its first folder was made removes the folders it made ----
def _stop_after(target: object, name: str, monkeypatch: pytest.MonkeyPatch,
                error: type[BaseException]) -> None:
    """``target.name`` does its work, then raises ``error`` (an interruption landing just after it)."""
    original = getattr(target, name)

    def stopped(*args: object, **kwargs: object) -> object:
        original(*args, **kwargs)
        raise error("stopped here")

    monkeypatch.setattr(target, name, stopped)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("where", ["mkdir", "config", "weights", "sidecar"])
def test_an_interrupted_save_removes_the_folders_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         where: str, error: type[BaseException]) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(CFG)
    target = {"mkdir": (Path, "mkdir"), "config": (ModelConfig, "to_dict"), "weights": (C, "save_file"),
              "sidecar": (C, "_write_new")}[where]
    _stop_after(*target, monkeypatch, error)
    with pytest.raises(error, match="stopped here"):
        C.save_checkpoint(model, tmp_path / "new" / "deeper" / "m", task="toy", metrics={}, command="c")
    monkeypatch.undo()
    assert sorted(tmp_path.rglob("*")) == []
