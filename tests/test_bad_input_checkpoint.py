"""Bad input to course_utils.model.checkpoint: save_checkpoint / load_checkpoint /
available_checkpoints / checkpoint_paths. Links, FIFOs and folders where files belong, saves killed
or failing midway (the folder must stay consistent), tied or shared weights, a task's checkpoint
replaced by another's model, and paths or names of the wrong type.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from bad_input_cases import (
    ROOT,
    Case,
    assert_named,
    one_layer_config,
    raises_naming,
    seeded_one_layer_model,
    small_model,
    train_mode_tiny_model,
)

from course_utils.model import checkpoint as C
from course_utils.model import checkpoint as CK
from course_utils.model.checkpoint import available_checkpoints
from course_utils.model.transformer import ModelConfig, TinyTransformer

# -- battery 5 ---------------------------------------------------------------------------------------

SM = small_model()


def test_load_checkpoint_names_a_folder_and_what_it_holds(tmp_path):
    CK.save_checkpoint(SM, tmp_path / "runs" / "toy", task="t", metrics={}, command="c")
    with pytest.raises(IsADirectoryError, match=r"folder .*runs.*\['toy'\]"):
        CK.load_checkpoint(tmp_path / "runs")


def test_save_checkpoint_names_the_path_when_its_folder_cannot_be_made(tmp_path):
    with pytest.raises(CK.CheckpointError, match=r"cannot make the folder /proc/nope .*'/proc/nope/m'"):
        CK.save_checkpoint(SM, "/proc/nope/m", task="t", metrics={}, command="c")


# -- battery 6 (model) -------------------------------------------------------------------------------

def test_available_checkpoints_skips_a_sidecar_without_weights(tmp_path):
    (tmp_path / "stray.json").write_text("{}")
    (tmp_path / "whole.json").write_text("{}")
    (tmp_path / "whole.safetensors").write_bytes(b"")
    assert available_checkpoints(tmp_path) == ["whole"]


# -- battery 7 (b) -----------------------------------------------------------------------------------

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


# -- battery 9b --------------------------------------------------------------------------------------

# -- 3. silent commands -------------------------------------------------------------------------
@pytest.mark.parametrize("ending", ["/", "\\"])
def test_train_out_with_a_trailing_slash_is_refused_by_name(tmp_path, capsys, ending):
    """`train --out /tmp/x/` (a new folder meant) wrote /tmp/x.safetensors and /tmp/x.json."""
    from course_utils.model import train
    from course_utils.model.checkpoint import checkpoint_paths

    out = f"{tmp_path / 'new'}{ending}"
    with pytest.raises(SystemExit) as stop:
        train.main(["induction", "--steps", "1", "--no-progress", "--out", out])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--out {out!r} ends in a slash, so it names a folder" in err and "induction" in err, err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="ends in a slash, so it names a folder"):
        checkpoint_paths(out)


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13: save_checkpoint replaced a .json that is no checkpoint's sidecar without a word -----------
@pytest.mark.parametrize("content", [b"", b"\xff\xfe binary", b"[1, 2, 3]", b'{"notes": "mine"}'],
                         ids=["empty", "binary", "json-array", "other-object"])
def test_save_checkpoint_keeps_a_json_that_is_no_sidecar(tmp_path, content):
    from course_utils.model import checkpoint as CK
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    (tmp_path / "mine.json").write_bytes(content)
    with pytest.raises(CK.CheckpointError, match="is not a checkpoint's sidecar"):
        CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c")
    assert (tmp_path / "mine.json").read_bytes() == content and not (tmp_path / "mine.safetensors").exists()
    CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c", replace_task=True)
    CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c")  # over its own: fine


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

# -- save_checkpoint takes any task name (documented): load_checkpoint holds it to that name ---
def test_save_checkpoint_records_a_task_of_ones_own_and_load_holds_it(tmp_path):
    from course_utils.model import checkpoint as CK
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    assert "Any name is" in CK.save_checkpoint.__doc__
    model = TinyTransformer(ModelConfig(vocab_size=11, max_len=8, d_model=8, num_heads=2, num_layers=1))
    CK.save_checkpoint(model, tmp_path / "m", task="zz", metrics={}, command="c")
    _, meta = CK.load_checkpoint(tmp_path / "m", task="zz")
    assert meta["task"] == "zz"
    with pytest.raises(CK.CheckpointError, match="'zz', expected 'induction'"):
        CK.load_checkpoint(tmp_path / "m", task="induction")


# -- battery 15 --------------------------------------------------------------------------------------

CFG = one_layer_config()


@pytest.mark.parametrize("temporary", [".k.json.saving", ".k.safetensors.saving"])
def test_a_link_at_a_saves_temporary_name_is_never_written_through(tmp_path, temporary):
    precious = tmp_path / "precious.txt"
    precious.write_text("precious data")
    (tmp_path / temporary).symlink_to(precious)
    C.save_checkpoint(seeded_one_layer_model(0), tmp_path / "k", task="t", metrics={}, command="c")
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
        C.save_checkpoint(seeded_one_layer_model(0), tmp_path / "k", task="t", metrics={}, command="c")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "k.safetensors"]


# -- battery 16 (fix46r) -----------------------------------------------------------------------------

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
    old = seeded_one_layer_model(0)
    C.save_checkpoint(old, tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
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
    C.save_checkpoint(seeded_one_layer_model(2), tmp_path / "toy", task="t", metrics={}, command="c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json", "toy.safetensors"]


def test_a_weights_write_that_fails_midway_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    C.save_checkpoint(seeded_one_layer_model(0), tmp_path / "toy", task="t", metrics={}, command="c")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, seen = C._write_new, []

    def full_disk(path, data):
        seen.append(path.name)
        real(path, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(C, "_write_new", full_disk)
    with pytest.raises(C.CheckpointError, match=r"checkpoint toy in the folder .*No space left"):
        C.save_checkpoint(seeded_one_layer_model(1), tmp_path / "toy", task="t", metrics={}, command="c")
    assert seen == [".toy.safetensors.saving"]  # the weights go through the module's own writer
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("after", ["weights", "sidecar"])
def test_an_interrupt_just_after_a_rename_leaves_a_consistent_pair(tmp_path, monkeypatch, after):
    """Ctrl-C (or SIGTERM, now handled alike) landing right after a rename returns, before the
    save notes it: found by interrupt.py (SIGINT at 0.03 s loaded a new sidecar on old weights)."""
    C.save_checkpoint(seeded_one_layer_model(0), tmp_path / "toy", task="t", metrics={}, command="c")
    real = Path.replace

    def interrupted(self, target):
        done = real(self, target)
        if str(target).endswith(".safetensors" if after == "weights" else ".json"):
            raise KeyboardInterrupt
        return done

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        C.save_checkpoint(seeded_one_layer_model(1), tmp_path / "toy", task="t", metrics={}, command="c")
    monkeypatch.undo()
    C.load_checkpoint(tmp_path / "toy", task="t", device="cpu")  # sha256 of the weights matches the sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.json", "toy.safetensors"]


# -- battery 18 (fix48rm) ----------------------------------------------------------------------------

_raises = raises_naming  # call() raises error naming every one of words


# -- g03: checkpoint.save_file checks its arguments before safetensors and the file system -----------
@pytest.mark.parametrize("tensors, filename, metadata, error, words", [
    ({"a": "x"}, "w.safetensors", {}, TypeError, ["tensors['a']", "torch.Tensor", "str"]),
    ({3: torch.zeros(2)}, "w.safetensors", {}, TypeError, ["tensors' keys", "int 3"]),
    (None, "w.safetensors", {}, TypeError, ["tensors must be a dict", "NoneType"]),
    ({"a": torch.zeros(2, device="meta")}, "w.safetensors", {}, ValueError, ["tensors['a']", "meta"]),
    ({"a": torch.zeros(2)}, None, {}, TypeError, ["filename", "None"]),
    ({"a": torch.zeros(2)}, 3, {}, TypeError, ["filename", "int"]),
    ({"a": torch.zeros(2)}, "w.safetensors", {"k": 3}, TypeError, ["metadata", "str -> str", "{'k': 3}"]),
    ({"a": torch.zeros(2)}, "w.safetensors", None, TypeError, ["metadata", "NoneType"]),
])
def test_save_file_names_a_bad_argument_and_writes_nothing(tmp_path, monkeypatch, tensors, filename,
                                                           metadata, error, words):
    from course_utils.model.checkpoint import save_file

    monkeypatch.chdir(tmp_path)
    _raises(error, words, lambda: save_file(tensors, filename, metadata))
    assert list(tmp_path.iterdir()) == []


def test_save_file_still_writes_good_tensors(tmp_path):
    from safetensors.torch import load_file

    from course_utils.model.checkpoint import save_file

    save_file({"a": torch.arange(3.0)}, tmp_path / "w.safetensors", {"k": "v"})
    assert torch.equal(load_file(tmp_path / "w.safetensors")["a"], torch.arange(3.0))


# -- battery 21 (fix51q) -----------------------------------------------------------------------------

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


# -- battery 22 (fix52q) -----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["", "   "])
def test_save_checkpoint_refuses_an_empty_command(tmp_path: Path, command: str) -> None:
    raises_naming(ValueError, ["command", repr(command)],
                  lambda: C.save_checkpoint(TinyTransformer(CFG), tmp_path / "m", task="toy", metrics={},
                                            command=command))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


# -- 7: save_checkpoint refuses a float64 weight instead of narrowing it to float32 ---------------
def _with_float64(which: str) -> tuple[TinyTransformer, str]:
    """A model with float64 weights (all, or one parameter), and the name the error must give."""
    torch.manual_seed(0)
    model = TinyTransformer(CFG)
    if which == "all":
        return model.double(), "token_embedding.weight"
    name, parameter = next((n, p) for n, p in model.named_parameters() if n.endswith("bias"))
    parameter.data = parameter.data.double()
    return model, name


@pytest.mark.parametrize("which", ["all", "one"])
def test_save_checkpoint_refuses_float64_weights(tmp_path: Path, which: str) -> None:
    model, name = _with_float64(which)
    raises_naming(TypeError, [name, "torch.float64", "float32", "model.float()"],
                  lambda: C.save_checkpoint(model, tmp_path / "m", task="toy", metrics={}, command="c"))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
    C.save_checkpoint(model.float(), tmp_path / "m", task="toy", metrics={}, command="c")  # the way out
    assert next(C.load_checkpoint(tmp_path / "m")[0].parameters()).dtype == torch.float32


# -- 2, 3: saves and loads of one checkpoint from several processes take turns --------------------
_WRITER = r"""
import json, pathlib, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from course_utils.model import checkpoint as C
from course_utils.model.transformer import ModelConfig, TinyTransformer
torch.manual_seed(int(sys.argv[3]))
model = TinyTransformer(ModelConfig(50, 32, d_model=64, num_heads=4, num_layers=2))
pathlib.Path(sys.argv[2]).with_name("ready" + sys.argv[3]).touch()
go = pathlib.Path(sys.argv[2]).with_name("go")
while not go.exists():
    time.sleep(0.01)
saves, errors, start = 0, [], time.monotonic()
while time.monotonic() - start < 2:
    try:
        C.save_checkpoint(model, pathlib.Path(sys.argv[2]), task="toy", metrics={}, command="w" + sys.argv[3])
        saves += 1
    except Exception as error:
        errors.append(f"{type(error).__name__}: {error}"[:200])
print(json.dumps([saves, errors[:3]]))
"""


def test_concurrent_saves_and_loads_of_one_checkpoint_take_turns(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys
    import time
    import warnings

    path = tmp_path / "race"
    C.save_checkpoint(TinyTransformer(CFG), path, task="toy", metrics={}, command="start")
    repo = str(ROOT)
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, repo, str(path), str(i)], text=True,
                                stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
               for i in (1, 2)]
    deadline = time.monotonic() + 120  # both writers imported torch: their 2 s of saving overlap
    while not all((tmp_path / f"ready{i}").exists() for i in (1, 2)) and time.monotonic() < deadline:
        if any(w.poll() is not None for w in writers):
            break
        time.sleep(0.05)
    (tmp_path / "go").touch()
    loaded, failed = set(), []
    while any(w.poll() is None for w in writers):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                loaded.add(C.load_checkpoint(path)[1]["command"])
            except Exception as error:  # collected, shown by the assert
                failed.append(f"{type(error).__name__}: {error}"[:200])
        failed += [str(w.message)[:200] for w in caught]  # e.g. 'half replaced by an interrupted save'
    results = [json.loads(w.communicate()[0]) for w in writers]
    assert [errors for _, errors in results] == [[], []] and all(saves > 0 for saves, _ in results)
    assert failed == [] and loaded <= {"start", "w1", "w2"}
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["go", "race.json", "race.safetensors", "ready1", "ready2"]  # no temporary file
    assert C.load_checkpoint(path)[1]["command"] in ("w1", "w2")


# -- battery 24 (fix54a) -----------------------------------------------------------------------------

# -- O4: save_file onto an existing path gave a bare "[Errno 17] File exists" ----------------------------
@pytest.mark.parametrize("kind, shown", [("file", "a regular file"), ("dir", "a directory"),
                                         ("fifo", "a FIFO"), ("dangling", "a broken symlink")])
def test_save_file_names_filename_and_what_is_there(tmp_path, kind: str, shown: str) -> None:
    import os

    from course_utils.model.checkpoint import save_file

    target = tmp_path / "thing"
    {"file": lambda: target.write_text("keep"), "dir": target.mkdir, "fifo": lambda: os.mkfifo(target),
     "dangling": lambda: target.symlink_to(tmp_path / "nowhere")}[kind]()
    before = sorted(p.name for p in tmp_path.iterdir())
    tensors = {"w": torch.zeros(2)}
    save_file(tensors, tmp_path / "new.safetensors", {})  # the control
    raises_naming(FileExistsError, ["filename", str(target), shown, "never overwrites"],
                  lambda: save_file(tensors, target, {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "new.safetensors"])
    if kind == "file":
        assert target.read_text() == "keep"


# -- battery 28 (library) ----------------------------------------------------------------------------

@pytest.mark.parametrize("second", ["same", "view"])
def test_save_file_names_tensors_that_share_memory(tmp_path, second: str) -> None:
    from course_utils.model.checkpoint import save_file

    t = torch.randn(4, 3)
    tensors = {"a": t, "b": t if second == "same" else t[:2]}
    raises_naming(ValueError, ["tensors['a']", "tensors['b']", "share memory", ".clone()"],
                  lambda: save_file(tensors, tmp_path / "x.safetensors", {}))
    assert not (tmp_path / "x.safetensors").exists()
    save_file({"a": t[:2], "b": t[2:]}, tmp_path / "y.safetensors", {})  # disjoint slices are fine


def test_save_checkpoint_of_a_model_with_tied_weights_writes_them_apart(tmp_path) -> None:
    from course_utils.model.checkpoint import load_checkpoint, save_checkpoint

    model = train_mode_tiny_model()
    model.unembed.weight = model.token_embedding.weight  # tied: one tensor under two names
    save_checkpoint(model, tmp_path / "tied", task="toy", metrics={}, command="tests")
    loaded = load_checkpoint(tmp_path / "tied", task="toy")[0]
    torch.testing.assert_close(loaded.unembed.weight, model.token_embedding.weight.detach())


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_load_checkpoint_under_default_float64():
    from course_utils.model.checkpoint import load_checkpoint

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model, _ = load_checkpoint("induction")
        assert next(model.parameters()).dtype == torch.float32
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long))
    finally:
        torch.set_default_dtype(old)


# -- battery 30 --------------------------------------------------------------------------------------

# -- save_checkpoint_names_path: the message named name_or_path, not save_checkpoint's path ----------
def test_save_checkpoint_names_its_path_argument(tmp_path):
    from course_utils.model.checkpoint import save_checkpoint
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with pytest.raises(TypeError, match=r"^path must be a str or Path, got int"):
        save_checkpoint(model, 5, task="induction", metrics={"a": 1.0}, command="x")


# -- battery 31 --------------------------------------------------------------------------------------

# -- load_checkpoint_sha256_uppercase: intact weights whose sidecar digest is upper case were 'corrupted'
def test_load_checkpoint_reads_an_upper_case_sha256_as_the_same_digest(tmp_path):
    C.save_checkpoint(SM, tmp_path / "m", task="t", metrics={}, command="c")
    meta_path = tmp_path / "m.json"
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = meta["sha256"].upper()
    meta_path.write_text(json.dumps(meta))
    model, loaded = C.load_checkpoint(tmp_path / "m", task="t")
    torch.testing.assert_close(model.state_dict(), SM.state_dict())
    assert loaded["sha256"] == meta["sha256"]


@pytest.mark.parametrize("digest", ["g" * 64, "0" * 63, " " + "0" * 63])
def test_load_checkpoint_names_a_malformed_sha256_field(tmp_path, digest):
    C.save_checkpoint(SM, tmp_path / "m", task="t", metrics={}, command="c")
    meta_path = tmp_path / "m.json"
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = digest
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(C.CheckpointError, match=r"m\.json: 'sha256' must be 64 hex digits") as err:
        C.load_checkpoint(tmp_path / "m", task="t")
    assert "corrupted" not in str(err.value)


# -- battery 34 --------------------------------------------------------------------------------------

# -- save_checkpoint_training_falsy: `training or {}` saved 0, False and '' as {} without a word ------
@pytest.mark.parametrize("training", [0, False, "", []])
def test_save_checkpoint_refuses_a_training_that_is_no_dict(tmp_path, training):
    with pytest.raises(TypeError, match=rf"^training must be a dict or None, got {type(training).__name__} "):
        C.save_checkpoint(SM, tmp_path / "m", task="t", metrics={}, command="c", training=training)
    assert list(tmp_path.iterdir()) == []


def test_save_checkpoint_records_training_none_as_an_empty_dict(tmp_path):
    meta_path = C.save_checkpoint(SM, tmp_path / "m", task="t", metrics={}, command="c", training=None)
    assert json.loads(meta_path.read_text())["training"] == {}


# -- save_checkpoint_folder_path: a folder as path wrote folder.safetensors/.json beside it ----------
@pytest.mark.parametrize("as_str", [False, True])
def test_save_and_load_refuse_a_folder_as_path_in_the_same_words(tmp_path, as_str):
    folder = tmp_path / "sd" / "folder"
    folder.mkdir(parents=True)
    C.save_checkpoint(SM, folder / "toy", task="t", metrics={}, command="c")
    before = _files(folder)
    given = str(folder) if as_str else folder
    with pytest.raises(IsADirectoryError) as saved:
        C.save_checkpoint(SM, given, task="t", metrics={}, command="c")
    assert os.listdir(folder.parent) == ["folder"] and _files(folder) == before  # nothing beside it
    with pytest.raises(IsADirectoryError) as loaded:
        C.load_checkpoint(given, task="t")
    for err, name in ((saved, "path"), (loaded, "name_or_path")):
        message = str(err.value)
        assert message.startswith(f"{name} must name a checkpoint, got the folder {str(folder)!r}"), message
        assert "['toy']" in message and repr(str(folder / "toy")) in message, message


def test_a_bare_name_is_not_refused_for_a_folder_of_that_name_in_the_working_directory(tmp_path, monkeypatch):
    """load_checkpoint checked ./NAME for a folder, though a bare name lives in data/checkpoints/."""
    monkeypatch.setattr(C, "CHECKPOINT_DIR", tmp_path / "store")
    C.save_checkpoint(SM, tmp_path / "store" / "toy", task="t", metrics={}, command="c")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy").mkdir()
    model, meta = C.load_checkpoint("toy", task="t")
    assert meta["task"] == "t"
