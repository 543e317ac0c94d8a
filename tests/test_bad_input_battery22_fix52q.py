"""Battery 22a's model cases (issue 38): empty labels in History and save_checkpoint, a float64
model narrowed by save_checkpoint, repeatable_step rewinding a cache stepped elsewhere, and
concurrent saves and loads of one checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.train import History
from course_utils.model.transformer import ModelConfig, TinyTransformer
from tests.bad_input_cases import raises_naming

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


# -- 9: an empty label is refused where it is printed or recorded ---------------------------------
@pytest.mark.parametrize("label", [""])
def test_history_refuses_an_empty_task(label: str) -> None:
    raises_naming(ValueError, ["History.task", repr(label)], lambda: History(label))


@pytest.mark.parametrize("command", ["", "   "])
def test_save_checkpoint_refuses_an_empty_command(tmp_path: Path, command: str) -> None:
    raises_naming(ValueError, ["command", repr(command)],
                  lambda: C.save_checkpoint(TinyTransformer(CFG), tmp_path / "m", task="toy", metrics={},
                                            command=command))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
