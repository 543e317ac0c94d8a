"""Battery 16a (issue 38), fix46r: checkpoint saves that are interrupted, and the task/model
records and functions that took bad input silently or failed deep inside torch."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)
REPO = Path(__file__).resolve().parents[1]


def _model(seed: int) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(CFG)


# -- save_checkpoint stopped while writing (data loss) ---------------------------------------------
_CHILD = textwrap.dedent("""
    import os, signal, sys, torch
    from pathlib import Path
    from course_utils.model import checkpoint as C
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    folder, sig = Path(sys.argv[1]), int(sys.argv[2])
    real = C._write_new

    def dies_midway(path, data):  # half the bytes written, then the signal
        if path.name.endswith(".safetensors.saving"):
            real(path, data[: len(data) // 2])
            os.kill(os.getpid(), sig)
        real(path, data)

    C._write_new = dies_midway
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)
    C.save_checkpoint(TinyTransformer(cfg), folder / "toy", task="t", metrics={}, command="c")
    sys.exit(7)  # not reached once the weights go through _write_new
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_save_killed_while_writing_leaves_only_names_the_next_save_removes(tmp_path, sig):
    """Every temporary file is one of save_checkpoint's own names (safetensors' anonymous
    ``.tmpXXXX`` is gone); SIGTERM rolls the save back like Ctrl-C; the next save tidies up."""
    old = _model(0)
    C.save_checkpoint(old, tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(int(sig))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -sig, done.stderr[-2000:]
    left = {p.name for p in tmp_path.iterdir()}
    if sig == signal.SIGTERM:  # rolled back: the old pair, byte for byte, and nothing else
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    else:
        assert left <= set(before) | {".toy.safetensors.saving", ".toy.json.saving"}, left
    loaded = C.load_checkpoint(tmp_path / "toy", task="t", device="cpu")[0]
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), old.state_dict().values(),
                                                 strict=True))
    C.save_checkpoint(_model(2), tmp_path / "toy", task="t", metrics={}, command="c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json", "toy.safetensors"]


def test_a_weights_write_that_fails_midway_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    C.save_checkpoint(_model(0), tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, seen = C._write_new, []

    def full_disk(path, data):
        seen.append(path.name)
        real(path, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(C, "_write_new", full_disk)
    with pytest.raises(C.CheckpointError, match=r"checkpoint toy in the folder .*No space left"):
        C.save_checkpoint(_model(1), tmp_path / "toy", task="t", metrics={}, command="c")
    assert seen == [".toy.safetensors.saving"]  # the weights go through the module's own writer
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
