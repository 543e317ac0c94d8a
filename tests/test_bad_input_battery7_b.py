"""Battery 7 (b): bad input to the model, interp, tasks, bench CLI and scripts, refused by name."""
from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.model import checkpoint as CK
from course_utils.model.transformer import ModelConfig, TinyTransformer

ROOT = Path(__file__).resolve().parent.parent


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


# -- task metrics: logits of another vocabulary or of integers (rows 44-47) ----------------------
def _metric_cases() -> list[Case]:
    from course_utils.tasks import synthetic as SY

    induction = SY.InductionTask().eval_batch(4)
    sentences = SY.AgreementTask().eval_batch(4)
    B, T = sentences.tokens.shape
    largest = int(induction.tokens.max())
    return [
        Case("induction_accuracy V=10", lambda: SY.induction_accuracy(torch.randn(4, 32, 10), induction),
             ValueError, ["logits", f"up to {largest}", "V = 10"]),
        Case("induction_accuracy int64",
             lambda: SY.induction_accuracy(torch.ones(4, 32, 64, dtype=torch.long), induction),
             TypeError, ["logits", "floating-point", "torch.int64"]),
        Case("agreement_margins V=5", lambda: SY.agreement_margins(torch.randn(B, T, 5), sentences),
             ValueError, ["logits", f"up to {len(SY.AGREEMENT_VOCAB) - 1}", "V = 5"]),
        Case("agreement_accuracy V=5", lambda: SY.agreement_accuracy(torch.randn(B, T, 5), sentences),
             ValueError, ["logits", "V = 5"]),
        Case("agreement_accuracy int32",
             lambda: SY.agreement_accuracy(torch.ones(B, T, 70, dtype=torch.int32), sentences),
             TypeError, ["logits", "floating-point", "torch.int32"]),
        Case("agreement_margins batch=3", lambda: SY.agreement_margins(torch.randn(B, T, 70), 3),
             TypeError, ["batch", "AgreementBatch", "int"]),
    ]


@pytest.mark.parametrize("case", _metric_cases(), ids=lambda c: c.name)
def test_task_metrics_refuse_logits_that_cannot_score_the_batch(case):
    assert_named(case)


def test_task_metrics_still_score_logits_of_the_right_vocabulary():
    from course_utils.tasks import synthetic as SY

    induction = SY.InductionTask().eval_batch(4)
    sentences = SY.AgreementTask().eval_batch(4)
    perfect = torch.nn.functional.one_hot(induction.tokens.roll(-1, dims=1), 64).float()
    assert SY.induction_accuracy(perfect, induction) == 1.0
    assert 0.0 <= SY.agreement_accuracy(torch.randn(*sentences.tokens.shape, 70), sentences)["all"] <= 1.0


# -- interp: a score's name, rounding, chance levels (rows 41-43) -------------------------------
def _interp_cases() -> list[Case]:
    from course_utils.interp import ablation as AB
    from course_utils.interp import scores as SC

    tokens = torch.zeros(2, 4, dtype=torch.long)
    grid = {"previous token": torch.full((2, 4), 0.6)}
    return [
        Case("loss_evaluation name=3", lambda: AB.loss_evaluation(tokens, tokens, 3),
             TypeError, ["name", "non-empty str", "int 3"]),
        Case("loss_evaluation name=''", lambda: AB.loss_evaluation(tokens, tokens, ""),
             ValueError, ["name", "non-empty str", "''"]),
        Case("loss_evaluation float targets", lambda: AB.loss_evaluation(tokens, tokens.float()),
             TypeError, ["targets", "torch.long", "torch.float32"]),
        Case("mean_by_group decimals=-1",
             lambda: SC.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=-1),
             ValueError, ["decimals", "0..15", "-1"]),
        Case("mean_by_group values list", lambda: SC.mean_by_group([1.0, 2.0], {"g": ["x", "y"]}),
             TypeError, ["values", "dict", "list"]),
        Case("role_verdicts chance 2.0", lambda: SC.role_verdicts(grid, chance={"previous token": 2.0}),
             ValueError, ["chance['previous token']", "(0, 1]", "2.0"]),
        Case("role_verdicts chance 0", lambda: SC.role_verdicts(grid, chance={"previous token": 0.0}),
             ValueError, ["chance['previous token']", "(0, 1]", "0.0"]),
    ]


@pytest.mark.parametrize("case", _interp_cases(), ids=lambda c: c.name)
def test_interp_helpers_refuse_a_bad_name_rounding_or_chance(case):
    assert_named(case)


def test_interp_helpers_still_take_good_values():
    from course_utils.interp import ablation as AB
    from course_utils.interp import scores as SC

    tokens = torch.zeros(2, 4, dtype=torch.long)
    assert AB.loss_evaluation(tokens, tokens, "loss_copy").score(torch.zeros(2, 4, 3)).keys() == {"loss_copy"}
    table = SC.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=0)
    assert table["a"].tolist() == [1.0, 2.0] and table["sentences"].tolist() == [1, 1]
    verdict = SC.role_verdicts({"previous token": torch.full((2, 4), 0.6)}, chance={"previous token": 0.25})
    assert "2.4x chance" in verdict[0]


# -- the bench CLI: notebooks that are no notebook files (rows 19, 55), repeated values (row 20) --
def _bench(argv: list[str], capsys) -> tuple[int, str, str]:
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_bench_memory_says_a_fifo_is_a_fifo(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.ipynb")
    code, out, err = _bench(["memory", str(tmp_path / "pipe.ipynb")], capsys)
    assert code == 2 and out == ""
    assert "pipe.ipynb', which is a FIFO (named pipe)" in err and "no notebook file" not in err


def test_bench_memory_refuses_json_that_is_no_notebook_when_parsed(tmp_path, capsys):
    (tmp_path / "b.ipynb").write_text('{"cells": 3}')
    code, out, err = _bench(["memory", str(tmp_path / "b.ipynb")], capsys)
    assert code == 2 and out == "" and "b.ipynb is not a notebook nbformat can read" in err


@pytest.mark.parametrize("text", ['{"cells": 3}', '{"cells": [3]}', "[1, 2]",
                                  '{"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, '
                                  '"metadata": {}}'])
def test_notebook_peak_memory_names_a_file_that_is_no_notebook(tmp_path, text):
    from course_utils.bench.memory import notebook_peak_memory

    (tmp_path / "b.ipynb").write_text(text)
    with pytest.raises(ValueError, match=r"b\.ipynb is not a notebook nbformat can read \("):
        notebook_peak_memory(tmp_path / "b.ipynb")


def test_notebook_peak_memory_names_what_its_path_is(tmp_path):
    from course_utils.bench.memory import notebook_peak_memory

    with pytest.raises(ValueError, match="which is a directory"):
        notebook_peak_memory(tmp_path)
    with pytest.raises(TypeError, match="path must be a str or Path .*got int 3"):
        notebook_peak_memory(3)


def test_format_slowest_cells_names_a_row_that_is_no_notebook_memory():
    from course_utils.bench.memory import CellTime, NotebookMemory, format_slowest_cells

    with pytest.raises(TypeError, match="row must be a NotebookMemory .*got str 'x'"):
        format_slowest_cells("x")
    row = NotebookMemory("n.ipynb", 1.0, 3.0, cells=[CellTime(0, 2.0, "x = 1")])
    assert "n.ipynb: 1 code cells" in format_slowest_cells(row)


@pytest.mark.parametrize("argv, words", [
    (["train", "--seeds", "0", "0", "--induction-max-steps", "1", "--agreement-steps", "1"],
     ["--seeds", "distinct", "got 0 more than once"]),
    (["train", "--seeds", "2", "1", "2", "1"], ["--seeds", "got 2, 1 more than once"]),
    (["gqa", "--shapes", "1x8", "2x8", "1x8"], ["--shapes", "got 1x8 more than once"]),
])
def test_bench_refuses_repeated_values_when_parsed(argv, words, capsys):
    """Row 20: a usage error (exit 2) before the header is printed, not a traceback after it."""
    code, out, err = _bench(argv, capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert all(w in last for w in words), last


def test_bench_takes_distinct_seeds():
    from course_utils.bench.cli import build_parser

    assert build_parser().parse_args(["train", "--seeds", "3", "1"]).seeds == [3, 1]


# -- scripts/version_matrix.py: a --venv that cannot be written (row 21) -------------------------
@pytest.mark.parametrize("venv", ["/proc/nope/v", "/proc/v"])
def test_version_matrix_names_a_venv_folder_it_cannot_write(venv, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import version_matrix
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def refuse(*args, **kwargs):
        raise AssertionError("version_matrix.py went on to create a venv or run pip")

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", refuse)  # venv and pip both run through it
    monkeypatch.setattr(version_matrix.subprocess, "run", refuse)
    assert version_matrix.main(["floor", "--venv", venv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("version_matrix.py: /proc: cannot write there")
    assert f"--venv {venv}" in err and "Traceback" not in err


def test_version_matrix_reports_a_failed_install_on_one_line(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import version_matrix
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def disk_full(cmd):  # the venv is made first, in a child (battery 21)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cmd[-1]))

    monkeypatch.setattr(version_matrix._cli(), "run_in_group", disk_full)
    assert version_matrix.main(["newest", "--venv", str(tmp_path / "env")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot prepare the environment" in err and "No space left" in err
