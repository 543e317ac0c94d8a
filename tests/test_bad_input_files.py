"""Issue 38, files and command lines: load_checkpoint on files that exist but cannot be read
as a checkpoint, the benchmark CLI's options (checked when parsed, before any work), and
student-tree refusals that leave nothing behind."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_cases import ROOT, SCRIPTS, Case, assert_named, import_script  # noqa: E402
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from course_utils.bench.cli import batch_by_context, build_parser, device_name, non_negative_int, positive_int
from course_utils.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, sha256_of
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _saved(folder: Path, name: str = "good") -> Path:
    torch.manual_seed(0)
    model = TinyTransformer(
        ModelConfig(vocab_size=np.int64(10), max_len=8, d_model=8, num_heads=2, num_layers=1)
    )
    save_checkpoint(model, folder / name, task="test", metrics={}, command="pytest")
    return folder / name


def _sidecar_of_good(folder: Path, name: str) -> None:
    meta = json.loads((_saved(folder)).with_suffix(".json").read_text())
    (folder / f"{name}.safetensors").write_bytes((folder / "good.safetensors").read_bytes())
    return meta


# -- checkpoints: every unreadable file is a CheckpointError naming the file and what it is ------
def _bad_utf8(folder):
    _sidecar_of_good(folder, "bad")
    (folder / "bad.json").write_bytes(b'{"format": "\xff"}')


def _deep(folder):
    _sidecar_of_good(folder, "bad")
    (folder / "bad.json").write_text("[" * 100_000 + "]" * 100_000)


def _directory(folder):
    _sidecar_of_good(folder, "bad")
    (folder / "bad.json").mkdir()


def _loop(folder):
    _sidecar_of_good(folder, "bad")
    os.symlink("bad.json", folder / "bad.json")


def _fifo(folder):
    _sidecar_of_good(folder, "bad")
    os.mkfifo(folder / "bad.json")


def _weights_fifo(folder):
    meta = _sidecar_of_good(folder, "bad")
    (folder / "bad.safetensors").unlink()
    os.mkfifo(folder / "bad.safetensors")
    (folder / "bad.json").write_text(json.dumps(meta))


def _float16(folder):
    """The weights re-saved as float16, the sidecar's size and sha256 updated to match."""
    good = _saved(folder)
    tensors = load_file(f"{good}.safetensors")
    with safe_open(f"{good}.safetensors", "pt") as f:
        header = f.metadata()
    save_file({k: v.half() for k, v in tensors.items()}, str(folder / "bad.safetensors"), metadata=header)
    meta = json.loads(good.with_suffix(".json").read_text())
    meta.update(
        sha256=sha256_of(folder / "bad.safetensors"), size_bytes=(folder / "bad.safetensors").stat().st_size
    )
    (folder / "bad.json").write_text(json.dumps(meta))


def _nan_weights(folder):
    """One weight set to NaN, re-saved with a header and sidecar that match (as a script
    bypassing save_checkpoint would write it)."""
    good = _saved(folder)
    tensors = load_file(f"{good}.safetensors")
    with safe_open(f"{good}.safetensors", "pt") as f:
        header = f.metadata()
    tensors["blocks.0.attn.in_proj.weight"][0, 0] = float("nan")
    save_file(tensors, str(folder / "bad.safetensors"), metadata=header)
    meta = json.loads(good.with_suffix(".json").read_text())
    meta.update(
        sha256=sha256_of(folder / "bad.safetensors"), size_bytes=(folder / "bad.safetensors").stat().st_size
    )
    (folder / "bad.json").write_text(json.dumps(meta))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks (Unix)")
@pytest.mark.parametrize(
    "make, words",
    [
        (_bad_utf8, ["bad.json", "not UTF-8", "\\xff", "offset"]),
        (_deep, ["bad.json", "nests its JSON too deeply"]),
        (_directory, ["bad.json", "is a directory"]),
        (_loop, ["bad.json", "is a symlink loop"]),
        (_fifo, ["bad.json", "is a FIFO"]),
        (_weights_fifo, ["bad.safetensors", "weights", "is a FIFO"]),
        (_float16, ["bad.safetensors", "expected dtype torch.float32, found torch.float16"]),
        (_nan_weights, ["bad.safetensors", "blocks.0.attn.in_proj.weight", "1 NaN", "expected finite"]),
    ],
    ids=[
        "invalid UTF-8",
        "nested 100,000 deep",
        "directory",
        "symlink loop",
        "FIFO",
        "weights FIFO",
        "float16 re-save",
        "NaN weight",
    ],
)
def test_an_unreadable_checkpoint_file_is_a_checkpoint_error(tmp_path, make, words):
    make(tmp_path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "bad")
    missing = [w for w in words if w not in str(info.value)]
    assert not missing, f"{missing} not in {str(info.value)!r}"
    assert "available there" not in str(info.value)  # no more "missing ... (available: [..., 'bad'])"


def test_a_numpy_sized_config_saves_and_loads(tmp_path):
    """ModelConfig(vocab_size=np.int64) used to fail in save_checkpoint's JSON; a float16 model
    is saved as float32 (what load_checkpoint builds and now checks)."""
    path = _saved(tmp_path)
    model, meta = load_checkpoint(path)
    assert meta["config"]["vocab_size"] == 10 and type(model.config.vocab_size) is int
    save_checkpoint(model.half(), tmp_path / "half", task="t", metrics={}, command="c")
    loaded, _ = load_checkpoint(tmp_path / "half")
    assert loaded.token_embedding.weight.dtype == torch.float32


def test_a_missing_checkpoint_is_still_file_not_found(tmp_path):
    _saved(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint sidecar nope.json .*\['good'\]"):
        load_checkpoint(tmp_path / "nope")


# -- save_checkpoint: refused before the first byte is written, and a failed save changes nothing
def _model(poison=None):
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1)
    if poison == "meta":
        with torch.device("meta"):
            return TinyTransformer(config)
    model = TinyTransformer(config)
    if poison is not None:
        with torch.no_grad():
            model.blocks[0].attn.in_proj.weight[0, 0] = poison
    return model


def _listing(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` and its bytes (None for a folder)."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))
    }


def _json_folder(folder):
    (folder / "ck.json").mkdir()


def _parent_file(folder):
    (folder / "parent").write_text("a file, not a folder")


SAVE_CASES = [
    Case(
        "NAME.json is a directory",
        lambda: (_json_folder, "ck", _model()),
        CheckpointError,
        ["ck.json", "JSON sidecar", "is a directory"],
    ),
    Case(
        "parent is a file",
        lambda: (_parent_file, "parent/sub/ck", _model()),
        CheckpointError,
        ["ck.safetensors", "parent", "is a file, not a folder"],
    ),
    Case(
        "meta-device model",
        lambda: (None, "new/ck", _model("meta")),
        ValueError,
        ["token_embedding.weight", "meta device"],
    ),
    Case(
        "NaN weight",
        lambda: (None, "new/ck", _model(float("nan"))),
        ValueError,
        ["blocks.0.attn.in_proj.weight", "1 NaN", "finite"],
    ),
    Case(
        "infinite weight",
        lambda: (None, "ck", _model(float("inf"))),
        ValueError,
        ["blocks.0.attn.in_proj.weight", "infinite"],
    ),
]


@pytest.mark.parametrize("case", SAVE_CASES, ids=[c.name for c in SAVE_CASES])
def test_a_refused_save_names_the_problem_and_leaves_every_file_as_it_was(tmp_path, case):
    make, name, model = case.call()
    if make is not None:
        make(tmp_path)
    before = _listing(tmp_path)
    assert_named(
        Case(
            case.name,
            lambda: save_checkpoint(model, tmp_path / name, task="t", metrics={}, command="c"),
            case.error,
            case.words,
        )
    )
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("fails_in", ["save_file", "sha256_of"])
def test_a_save_that_fails_midway_keeps_the_old_checkpoint(tmp_path, monkeypatch, fails_in):
    """Writing goes to temporary files renamed into place at the end: an error while writing
    (a full disk, say) leaves the checkpoint that was there, byte for byte, and no stray file."""
    from course_utils.model import checkpoint

    _saved(tmp_path, "ck")
    before = _listing(tmp_path)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, fails_in, fail)
    with pytest.raises(CheckpointError, match=r"checkpoint ck in the folder .*No space left"):
        save_checkpoint(_model(), tmp_path / "ck", task="other", metrics={}, command="c", replace_task=True)
    with pytest.raises(CheckpointError, match=r"checkpoint ck in the folder .*deeper .*No space left"):
        save_checkpoint(_model(), tmp_path / "new" / "deeper" / "ck", task="t", metrics={}, command="c")
    assert _listing(tmp_path) == before  # nor were new/deeper left behind


# -- the benchmark CLI: options refused when parsed ----------------------------------------------
@pytest.mark.parametrize(
    "argv, words",
    [
        (["gqa", "--shapes", "0x0"], ["--shapes", "BATCHxCONTEXT", "'0x0'"]),
        (["gqa", "--shapes", "4096"], ["--shapes", "'4096'"]),
        (["gqa", "--repeats", "0"], ["--repeats", ">= 1", "'0'"]),
        (["gqa", "--context", "-1"], ["--context", "'-1'"]),
        (["memory", "--timeout", "0"], ["--timeout", ">= 1", "'0'"]),
        (["memory", "--timeout", "-5"], ["--timeout", "'-5'"]),
        (["memory", "no_such_lesson.ipynb"], ["notebooks", "no_such_lesson.ipynb"]),
        (["memory", "README.md"], ["notebooks", ".ipynb", "README.md"]),
        (["mha", "--threads", "0"], ["--threads", "'0'"]),
        (["mha", "--threads", "100000"], ["--threads", "at most", "'100000'"]),
        (["gqa", "--threads", "100000"], ["--threads", "at most", "'100000'"]),
        (["gqa", "--layers", "1000000000000"], ["--layers", "at most 1024", "'1000000000000'"]),
        (["train", "--seeds", "-1"], ["--seeds", ">= 0", "'-1'"]),
        (["train", "--agreement-steps", "1.5"], ["--agreement-steps", "'1.5'"]),
        (["mha", "--device", "bogus"], ["--device", "'cpu'", "'bogus'"]),
        (["mha", "--device", "meta"], ["--device", "'meta'", "no numbers"]),
        (["train", "--device", "cuda:99"], ["--device", "'cuda:99'"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bench_options_are_refused_when_parsed(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)  # parsing only: no benchmark can have started
    assert info.value.code == 2
    err = capsys.readouterr().err
    missing = [w for w in words if w not in err]
    assert not missing, f"{missing} not in {err!r}"


def test_no_bench_option_is_a_bare_int():
    """The root rule: every integer option goes through positive_int or non_negative_int."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        (name, action.dest)
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if action.type in (int, float)
    ]
    assert not bare, bare


def test_every_device_option_is_checked_when_parsed():
    """The same root rule for devices: every --device goes through device_name."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    devices = [
        (name, action.type)
        for name, sub in subparsers.choices.items()
        for action in sub._actions
        if action.dest == "device"
    ]
    assert devices and all(kind is device_name for _, kind in devices), devices
    assert build_parser().parse_args(["mha", "--device", " cpu "]).device == "cpu"


def test_the_argparse_types_accept_what_they_should():
    assert positive_int("12") == 12 and positive_int(" 1_000 ") == 1000
    assert non_negative_int("0") == 0 and batch_by_context("2X512") == (2, 512)
    for bad in ("0", "-3", "1.5", "", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad).replace(".", r"\.")):
            positive_int(bad)


def test_a_bench_memory_timeout_of_zero_exits_before_any_work():
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.bench", "memory", "--timeout", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 2 and "--timeout" in done.stderr and "peak resident memory" not in done.stdout


# -- student-tree: a refused command leaves nothing behind --------------------------------------
def _student_tree(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "student_tree.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


@pytest.mark.parametrize(
    "args, words",
    [
        ([], ["missing OUT_DIR", "--branch NAME"]),
        (["--branch"], ["--branch needs a NAME"]),
        (["out1", "out2"], ["one OUT_DIR", "got 2", "extra: out2"]),
        (["--branch", "s", "t"], ["--branch takes one NAME", "extra: t"]),
        (["out", "--branch", "s"], ["--branch must come first", "out --branch s"]),
        (["--brnch", "x"], ["unknown option --brnch", "unexpected arguments: --brnch x"]),
    ],
    ids=["nothing", "--branch alone", "two OUT_DIRs", "two names", "both", "misspelt option"],
)
def test_student_tree_says_what_is_missing_or_extra(args, words):
    student_tree = import_script("student_tree")
    problem = student_tree.usage_problem(args)
    assert problem is not None and not [w for w in words if w not in problem], problem
    for fine in (["out"], ["--branch", "student"]):
        assert student_tree.usage_problem(fine) is None


def test_course_student_tree_with_no_argument_shows_usage_before_installing(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "course.py"), "student-tree", "a", "b"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "COURSE_VENV": str(tmp_path / "no-venv")},  # an install would create it
    )
    assert done.returncode == 2 and "extra: b" in done.stderr and "usage:" in done.stderr
    assert not (tmp_path / "no-venv").exists() and list(tmp_path.iterdir()) == []


def test_student_tree_inside_a_copied_folder_is_refused_cleanly():
    target = ROOT / "course_utils" / "inside_by_test"
    done = _student_tree(str(target))
    assert done.returncode == 2, done.stderr
    assert "course_utils/" in done.stderr and "copies" in done.stderr and str(target) in done.stderr
    assert "File name too long" not in done.stderr and not target.exists()
    assert not [p for p in (ROOT / "course_utils").iterdir() if p.name.startswith(".inside_by_test")]


def test_a_failed_student_tree_removes_the_parent_folders_it_made(tmp_path, monkeypatch):
    student_tree = import_script("student_tree")

    def fail(folder):
        raise RuntimeError("stamping failed")

    monkeypatch.setattr(student_tree, "_point_links_at_the_tree", fail)
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError, match="stamping failed"):
        student_tree.build(tmp_path / "kept" / "newparent" / "sub" / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not list((tmp_path / "kept").iterdir())


def _installed_stand_in(folder: Path) -> Path:
    """A folder course.py takes for its environment, installed for the current pins, whose
    python is the interpreter running this test: course.py then neither makes nor installs
    an environment. (With the checkout's .venv, a run under another Python emptied and rebuilt
    it; with COURSE_VENV=sys.prefix it began installing constraints.txt's pins, torch 2.13,
    into the environment of the floor run, scripts/version_matrix.py's, until the timeout.)"""
    sys.path.insert(0, str(ROOT))
    try:
        import course
    finally:
        sys.path.remove(str(ROOT))
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)
    (folder / course.STAMP.name).write_text(course._fingerprint())
    return folder


@pytest.mark.skipif(os.name == "nt", reason="the stand-in's python is a shell script")
def test_course_student_tree_reads_out_dir_from_where_you_are(tmp_path):
    """course.py runs the script from the repository; OUT_DIR is still relative to the caller."""
    venv = _installed_stand_in(tmp_path / "venv")
    before = sorted(p.name for p in venv.rglob("*"))
    done = subprocess.run(
        [sys.executable, str(ROOT / "course.py"), "student-tree", "here/tree"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "COURSE_VENV": str(venv)},
    )
    assert done.returncode == 0, done.stderr
    assert "Installing" not in done.stdout and sorted(p.name for p in venv.rglob("*")) == before
    assert (tmp_path / "here" / "tree" / "course_utils").is_dir() and not (ROOT / "here").exists()


# -- thread counts, files that are not files, messages too long to show ---------------------------
def test_a_thread_count_beyond_the_cap_is_refused_before_torch_sees_it():
    from course_utils.attention.validation import MAX_THREADS
    from course_utils.env import torch_threads

    before = torch.get_num_threads()
    with pytest.raises(ValueError) as info, torch_threads(100_000):
        pass
    message = str(info.value)
    assert all(w in message for w in ["num_threads", f"1..{MAX_THREADS}", "100000"]), message
    assert torch.get_num_threads() == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_hashing_a_fifo_or_a_folder_is_refused_instead_of_blocking(tmp_path):
    from course_utils.model.checkpoint import sha256_of

    fifo = tmp_path / "weights.safetensors"
    os.mkfifo(fifo)
    for path, what in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                       (tmp_path / "missing", "missing")):
        with pytest.raises(ValueError) as info:
            sha256_of(path)  # a FIFO would block the read forever
        message = str(info.value)
        assert all(w in message for w in ["path", str(path), what]), message


def test_an_answers_huge_or_unprintable_message_is_cut_or_described():
    from course_utils.exercises import lesson02, lesson07

    def shouts(scores):
        raise ValueError("x" * 20_000_000)

    feedback = lesson02.check_softmax_rows(shouts)
    assert not feedback.passed and len(str(feedback)) < 5_000 and "20,000,000 characters" in str(feedback)

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("str exploded")

    def explodes(*args):
        raise Unprintable()

    feedback = lesson07.check_repeat_kv(explodes)
    assert not feedback.passed and "could not be printed" in str(feedback), str(feedback)


def test_the_answer_store_and_the_grader_name_a_bad_lesson_or_check():
    from course_utils.exercises import answers, autograde

    for call, words in [
        (lambda: answers.stored("../../etc/passwd", "X"), ["lesson", "'lessonNN'", "'../../etc/passwd'"]),
        (lambda: autograde.exercise_of("lesson99/..", "check_x"), ["lesson", "'lesson99/..'"]),
        (lambda: autograde.exercise_of("lesson02", "check_nope"),
         ["check", "check_softmax_rows", "'check_nope'"]),
    ]:
        with pytest.raises(ValueError) as info:
            call()
        message = str(info.value)
        assert all(w in message for w in words), message


def test_training_settings_workers_and_detokenize_name_what_is_wrong():
    from course_utils.model.train import TrainConfig
    from course_utils.parallel import default_workers
    from course_utils.tasks.synthetic import detokenize

    for call, error, words in [
        (lambda: TrainConfig(decay="yes"), TypeError, ["decay", "True or False", "'yes'"]),
        (lambda: TrainConfig(steps=10).lr_at(-1), ValueError, ["step", "0..9", "-1"]),
        (lambda: TrainConfig(steps=10).lr_at(1.5), TypeError, ["step", "float", "1.5"]),
        (lambda: default_workers(-1), ValueError, ["num_jobs", "-1"]),
        (lambda: default_workers(2.5), TypeError, ["num_jobs", "2.5"]),
        (lambda: detokenize(torch.zeros(2, 3, dtype=torch.long)), ValueError, ["tokens", "(T,)", "(2, 3)"]),
        (lambda: detokenize(torch.tensor([1.5])), ValueError, ["tokens", "integer", "torch.float32"]),
        (lambda: detokenize([1, True]), TypeError, ["tokens", "integer ids", "True"]),
    ]:
        with pytest.raises(error) as info:
            call()
        message = str(info.value)
        assert all(w in message for w in words), message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_memory_report_that_is_not_json_or_not_a_file_is_named(tmp_path):
    from course_utils.bench.memory import read_test_report

    bad, latin, fifo = tmp_path / "bad.json", tmp_path / "latin.json", tmp_path / "pipe.json"
    bad.write_text("{not json")
    latin.write_bytes(b"{\"tests\": \"\xe9\"}")
    os.mkfifo(fifo)
    for path, words in [(bad, ["bad.json", "not UTF-8 JSON"]), (latin, ["latin.json", "not UTF-8 JSON"]),
                        (fifo, ["pipe.json", "not a regular file"]), (tmp_path, ["not a regular file"])]:
        with pytest.raises(ValueError) as info:
            read_test_report(path)
        message = str(info.value)
        assert all(w in message for w in words), message


@pytest.mark.parametrize("drop", ["### END SOLUTION", "### BEGIN SOLUTION"])
def test_a_solution_marker_without_its_partner_is_refused_before_anything_is_written(tmp_path, drop):
    """Battery 6: a BEGIN SOLUTION with no END SOLUTION was left in place, so the student copy
    showed the reference code and the tool said '2 solution(s) blanked'."""
    source = ROOT / "notebooks" / "01_why_multiple_heads.ipynb"
    text = source.read_text(encoding="utf-8")
    assert drop in text
    broken = tmp_path / "in" / source.name
    broken.parent.mkdir()
    broken.write_text(text.replace(drop, "# (marker removed)", 1), encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(SCRIPTS / "notebook_tools.py"), "student", str(out),
                           str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert "would leak into the student copy" in done.stderr and str(broken) in done.stderr
    assert not out.exists(), "a refused command leaves no folder behind"
