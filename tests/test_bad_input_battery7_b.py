"""Battery 7 (b): bad input to the model, interp, tasks, bench CLI and scripts, refused by name."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.model import checkpoint as CK
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _model(seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(ModelConfig(vocab_size=11, max_len=8, d_model=8, num_heads=2, num_layers=1))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# -- checkpoints: the task a checkpoint holds (row 38), an empty task (row 11) -------------------
@pytest.mark.parametrize("task", ["", "   "])
def test_save_checkpoint_refuses_an_empty_task(tmp_path, task):
    with pytest.raises(ValueError, match=f"task must name the task .*got {task!r}"):
        CK.save_checkpoint(_model(), tmp_path / "m", task=task, metrics={}, command="c")
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_of_one_task_is_not_replaced_by_another_tasks_model(tmp_path):
    CK.save_checkpoint(_model(0), tmp_path / "m", task="copying", metrics={}, command="c")
    before = _files(tmp_path)
    with pytest.raises(CK.CheckpointError, match=r"m\.json holds a model of the task 'copying'; saving a "
                       r"model of the task 'sorting' .*replace_task=True"):
        CK.save_checkpoint(_model(1), tmp_path / "m", task="sorting", metrics={}, command="c")
    assert _files(tmp_path) == before
    CK.save_checkpoint(_model(1), tmp_path / "m", task="copying", metrics={}, command="c")  # same task: fine
    assert _files(tmp_path) != before
    CK.save_checkpoint(_model(1), tmp_path / "m", task="sorting", metrics={}, command="c", replace_task=True)
    assert json.loads((tmp_path / "m.json").read_text())["task"] == "sorting"


def test_a_course_tasks_name_holds_that_task_on_save_and_on_load(tmp_path):
    with pytest.raises(CK.CheckpointError, match="'induction' is the name of the course's induction check"):
        CK.save_checkpoint(_model(), tmp_path / "induction", task="agreement", metrics={}, command="c")
    assert list(tmp_path.iterdir()) == []
    CK.save_checkpoint(_model(), tmp_path / "induction", task="agreement", metrics={}, command="c",
                       replace_task=True)
    with pytest.raises(CK.CheckpointError, match=r"induction\.json holds a model of the task 'agreement', "
                       r"expected 'induction' .*pass task='agreement'"):
        CK.load_checkpoint(tmp_path / "induction")
    model, meta = CK.load_checkpoint(tmp_path / "induction", task="agreement")
    assert meta["task"] == "agreement" and isinstance(model, TinyTransformer)


def test_load_checkpoint_checks_the_task_it_is_given(tmp_path):
    CK.save_checkpoint(_model(), tmp_path / "m", task="copying", metrics={}, command="c")
    assert CK.load_checkpoint(tmp_path / "m")[1]["task"] == "copying"
    assert CK.load_checkpoint(tmp_path / "m", task="copying")[1]["task"] == "copying"
    with pytest.raises(CK.CheckpointError, match="task 'copying', expected 'sorting'"):
        CK.load_checkpoint(tmp_path / "m", task="sorting")
    for bad, error in ((3, TypeError), ("", ValueError)):
        with pytest.raises(error, match="task must"):
            CK.load_checkpoint(tmp_path / "m", task=bad)


@pytest.mark.parametrize("name", CK.COURSE_TASKS)
def test_the_shipped_checkpoints_hold_the_task_they_are_named_after(name):
    assert CK.load_checkpoint(name)[1]["task"] == name


def test_train_cli_refuses_to_put_an_agreement_model_over_the_induction_checkpoint(tmp_path, capsys):
    """Row 38: refused when the command line is read, before a step is trained."""
    from course_utils.model import train as TRN

    CK.save_checkpoint(_model(), tmp_path / "ck", task="induction", metrics={}, command="c")
    before = _files(tmp_path)
    for out in (tmp_path / "ck", tmp_path / "induction"):
        with pytest.raises(SystemExit) as info:
            TRN.main(["agreement", "--steps", "1", "--no-progress", "--out", str(out)])
        assert info.value.code == 2
        err = capsys.readouterr()
        assert "--replace-task" in err.err and "agreement" in err.err and err.out == ""
    assert _files(tmp_path) == before


# -- checkpoints: a folder that cannot be written (row 22) ---------------------------------------
def test_save_into_a_read_only_folder_names_the_folder_and_keeps_the_old_pair(tmp_path, monkeypatch):
    """A read-only mount refuses the write *and* the clean-up's unlink; the error is a
    CheckpointError naming the folder (no hidden temporary file), the old pair unchanged."""
    CK.save_checkpoint(_model(0), tmp_path / "x", task="t", metrics={}, command="c")
    before = _files(tmp_path)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / ".x.safetensors.saving"))

    monkeypatch.setattr(CK, "save_file", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(CK.CheckpointError) as info:
        CK.save_checkpoint(_model(1), tmp_path / "x", task="t", metrics={}, command="c")
    message = str(info.value)
    assert f"checkpoint x in the folder {tmp_path} (Read-only file system" in message
    assert ".saving" not in message and "left as they were" in message
    monkeypatch.undo()
    assert _files(tmp_path) == before


# -- training: warm-up (row 12), the task and the model (rows 13, 14) ----------------------------
def test_a_warmup_longer_than_the_run_is_refused_and_the_default_fits_the_run():
    from course_utils.model.train import TrainConfig

    with pytest.raises(ValueError, match=r"warmup_steps must be at most steps=5 .*got 10"):
        TrainConfig(steps=5, warmup_steps=10)
    assert TrainConfig(steps=5).warmup_steps == 5 and TrainConfig().warmup_steps == 20
    assert TrainConfig(steps=5, warmup_steps=5).lr_at(4) == pytest.approx(TrainConfig().lr)


def _trainer_cases() -> list[Case]:
    from course_utils.model import train as TRN

    return [
        Case("train_induction task=3", lambda: TRN.train_induction(steps=1, task=3, progress=False),
             TypeError, ["task", "InductionTask", "int 3"]),
        Case("train_agreement task=induction", lambda: TRN.train_agreement(steps=1, task=TRN.INDUCTION_TASK,
                                                                           progress=False),
             TypeError, ["task", "AgreementTask", "InductionTask"]),
        Case("train_mixture task=None", lambda: TRN.train_mixture(steps=1, task=None, progress=False),
             TypeError, ["task", "MixtureTask", "NoneType"]),
        Case("train_mixture config=3", lambda: TRN.train_mixture(steps=1, config=3, progress=False),
             TypeError, ["config", "ModelConfig", "int"]),
        Case("train_agreement config={}", lambda: TRN.train_agreement(steps=1, config={}, progress=False),
             TypeError, ["config", "ModelConfig", "dict"]),
        Case("train_mixture seed='x'", lambda: TRN.train_mixture(steps=1, seed="x", progress=False),
             TypeError, ["seed", "int", "'x'"]),
        Case("evaluate_mixture str", lambda: TRN.evaluate_mixture("induction"),
             TypeError, ["model", "TinyTransformer", "str 'induction'"]),
        Case("evaluate_mixture induction model",
             lambda: TRN.evaluate_mixture(CK.load_checkpoint("induction")[0]),
             ValueError, ["model's config", "vocab_size=64", "mixture: vocab_size=70"]),
        Case("evaluate_induction task str", lambda: TRN.evaluate_induction(_model(), task="x"),
             TypeError, ["task", "InductionTask", "str 'x'"]),
        Case("evaluate_agreement task 3", lambda: TRN.evaluate_agreement(_model(), task=3),
             TypeError, ["task", "AgreementTask", "int 3"]),
    ]


@pytest.mark.parametrize("case", _trainer_cases(), ids=lambda c: c.name)
def test_trainers_and_evaluators_name_a_wrong_task_or_model(case):
    assert_named(case)
