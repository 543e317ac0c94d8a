"""Battery 15's worst findings, each failing before its fix: a link or a FIFO planted at a
checkpoint save's temporary name (data loss; a hang)."""

import os
import signal

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


def _model():
    torch.manual_seed(0)
    return TinyTransformer(CFG)


@pytest.mark.parametrize("temporary", [".k.json.saving", ".k.safetensors.saving"])
def test_a_link_at_a_saves_temporary_name_is_never_written_through(tmp_path, temporary):
    precious = tmp_path / "precious.txt"
    precious.write_text("precious data")
    (tmp_path / temporary).symlink_to(precious)
    C.save_checkpoint(_model(), tmp_path / "k", task="t", metrics={}, command="c")
    assert precious.read_text() == "precious data"
    assert not (tmp_path / "k.json").is_symlink() and not (tmp_path / "k.safetensors").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "k.safetensors", "precious.txt"]
    C.load_checkpoint(tmp_path / "k")


def test_a_fifo_at_a_saves_temporary_name_does_not_hang_the_save(tmp_path):
    os.mkfifo(tmp_path / ".k.json.saving")

    def stuck(signum, frame):
        raise TimeoutError("save_checkpoint blocked on the FIFO")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    try:
        C.save_checkpoint(_model(), tmp_path / "k", task="t", metrics={}, command="c")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "k.safetensors"]
