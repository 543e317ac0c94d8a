"""A save_checkpoint over an existing checkpoint that stops between its two renames leaves a
checkpoint that loads: rolled back when the interruption is an exception, and found again by
load_checkpoint when the process died there."""

import os
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


def _model(seed):
    torch.manual_seed(seed)
    return TinyTransformer(CFG)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _same_weights(a, b):
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return all(torch.equal(x, y) for x, y in pairs)


@pytest.mark.parametrize("failing_call", [1, 2])
def test_a_save_stopped_at_either_rename_leaves_every_file_as_it_was(tmp_path, monkeypatch, failing_call):
    old = _model(0)
    C.save_checkpoint(old, tmp_path / "keep", task="t", metrics={"acc": 0.5}, command="c")
    before = _files(tmp_path)
    original, calls = Path.replace, []

    def flaky(self, target):
        calls.append(self)
        if len(calls) == failing_call:
            raise KeyboardInterrupt("stopped between the renames")
        return original(self, target)

    monkeypatch.setattr(Path, "replace", flaky)
    with pytest.raises(KeyboardInterrupt):
        C.save_checkpoint(_model(1), tmp_path / "keep", task="t", metrics={"acc": 0.9}, command="c")
    monkeypatch.setattr(Path, "replace", original)
    assert _files(tmp_path) == before
    loaded, meta = C.load_checkpoint(tmp_path / "keep")
    assert meta["metrics"] == {"acc": 0.5} and _same_weights(loaded, old)


def test_a_new_checkpoint_stopped_between_the_renames_leaves_nothing(tmp_path, monkeypatch):
    original, calls = Path.replace, []

    def flaky(self, target):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, target)

    monkeypatch.setattr(Path, "replace", flaky)
    with pytest.raises(KeyboardInterrupt):
        C.save_checkpoint(_model(1), tmp_path / "new", task="t", metrics={}, command="c")
    assert list(tmp_path.iterdir()) == []


def test_a_save_killed_between_the_renames_still_loads_the_old_pair(tmp_path):
    old, new = _model(0), _model(1)
    C.save_checkpoint(old, tmp_path / "keep", task="t", metrics={"acc": 0.5}, command="c")
    C.save_checkpoint(new, tmp_path / "other", task="t", metrics={"acc": 0.9}, command="c")
    # what a save of `new` over `keep` leaves when the process dies after the first rename
    os.link(tmp_path / "keep.safetensors", tmp_path / ".keep.safetensors.previous")
    shutil.copyfile(tmp_path / "other.safetensors", tmp_path / ".keep.safetensors.saving")
    os.replace(tmp_path / ".keep.safetensors.saving", tmp_path / "keep.safetensors")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded, meta = C.load_checkpoint(tmp_path / "keep")
    assert meta["metrics"] == {"acc": 0.5} and _same_weights(loaded, old)
    assert any("interrupted save_checkpoint" in str(w.message) for w in caught)
    # and saving again finishes the job and removes the kept copy
    C.save_checkpoint(new, tmp_path / "keep", task="t", metrics={"acc": 0.9}, command="c")
    assert not (tmp_path / ".keep.safetensors.previous").exists()
    assert _same_weights(C.load_checkpoint(tmp_path / "keep")[0], new)


@pytest.mark.parametrize("training, words", [({"t": torch.ones(1)}, "training['t'] must be plain JSON"),
                                             ({"x": float("nan")}, "training['x'] must be a finite number"),
                                             ({"a": [1, float("inf")]}, "training['a'][1]")])
def test_training_that_is_not_plain_json_is_refused_before_writing(tmp_path, training, words):
    with pytest.raises((TypeError, ValueError), match=words.replace("[", r"\[").replace("]", r"\]")):
        C.save_checkpoint(_model(0), tmp_path / "m", task="t", metrics={}, command="c", training=training)
    assert list(tmp_path.iterdir()) == []


def test_a_sidecar_with_a_nan_metric_is_refused(tmp_path):
    C.save_checkpoint(_model(0), tmp_path / "m", task="t", metrics={"acc": 0.5}, command="c")
    path = tmp_path / "m.json"
    path.write_text(path.read_text().replace('"acc": 0.5', '"acc": NaN'))
    with pytest.raises(C.CheckpointError, match="m.json: every metric must be a finite number"):
        C.load_checkpoint(tmp_path / "m")


def test_available_checkpoints_names_a_folder_that_is_not_one(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NotADirectoryError, match="afile.*a file"):
        C.available_checkpoints(tmp_path / "afile")
    with pytest.raises(NotADirectoryError, match="missing"):
        C.available_checkpoints(tmp_path / "missing")
    with pytest.raises(TypeError, match="directory must be a str or Path"):
        C.available_checkpoints(3)


def test_a_write_that_fails_is_a_checkpoint_error_naming_the_file(tmp_path, monkeypatch):
    C.save_checkpoint(_model(0), tmp_path / "full", task="t", metrics={}, command="c")
    before = _files(tmp_path)

    def no_space(*args, **kwargs):
        from safetensors import SafetensorError

        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(C, "save_file", no_space)
    with pytest.raises(C.CheckpointError, match="cannot write the checkpoint .*full .*No space left"):
        C.save_checkpoint(_model(1), tmp_path / "full", task="t", metrics={}, command="c")
    assert _files(tmp_path) == before


def test_the_next_save_clears_what_a_save_killed_between_the_renames_left(tmp_path):
    old, new = _model(0), _model(1)
    C.save_checkpoint(old, tmp_path / "keep", task="t", metrics={"acc": 0.5}, command="c")
    pid = os.fork()
    if pid == 0:  # the child dies (no cleanup, no exception) just before the sidecar's rename
        try:
            def die(self, target):
                if str(target).endswith(".json"):
                    os._exit(3)
                return os.replace(self, target)

            Path.replace = die
            C.save_checkpoint(new, tmp_path / "keep", task="t", metrics={"acc": 0.9}, command="c")
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".keep.json.saving", ".keep.safetensors.previous", "keep.json", "keep.safetensors"]
    with pytest.warns(UserWarning, match="removes the leftovers"):
        loaded, meta = C.load_checkpoint(tmp_path / "keep")
    assert meta["metrics"] == {"acc": 0.5} and _same_weights(loaded, old)
    assert sorted(p.name for p in tmp_path.iterdir()) == left  # loading writes nothing
    C.save_checkpoint(new, tmp_path / "keep", task="t", metrics={"acc": 0.9}, command="c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json", "keep.safetensors"]
    assert _same_weights(C.load_checkpoint(tmp_path / "keep")[0], new)
