"""Battery 5 on the grader's side: its helpers name the argument, what was expected and what
arrived, instead of an AttributeError from deep inside, a misleading "missing", or nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from bad_input_cases import ROOT, Case, assert_named

from course_utils.exercises import answers, autograde, sandbox

SOLUTIONS = ROOT / "solutions"
LESSON = "01_why_multiple_heads"  # a course notebook: secrets are written only for those
ANSWER = "def score_macs(*a):\n    return 0\n"


def _self_holding() -> list:
    x: list = []
    x.append(x)
    return x


def _salted(salt):
    with autograde.salted_seeds(salt):
        pass


CASES = [
    Case("same_raise not Raised", lambda: answers.same_raise(5, "ValueError", "x"), TypeError,
         ["stored", "Raised", "int 5"]),
    Case("run_answer unknown check", lambda: sandbox.run_answer(
        ANSWER, "score_macs", "nope", [[]], sandbox=False),
         ValueError, ["check_key", "lessonNN.check_xxx", "'nope'"]),
    Case("run_answer memory 10", lambda: sandbox.run_answer(
        ANSWER, "score_macs", "lesson03.check_score_macs", [[]], memory=10, sandbox=False),
         ValueError, ["memory", "int >=", "got 10"]),
    Case("run_answer per_call 0", lambda: sandbox.run_answer(
        ANSWER, "score_macs", "lesson03.check_score_macs", [[]], per_call=0, sandbox=False),
         ValueError, ["per_call", "int >= 1", "got 0"]),
    Case("run_answer name", lambda: sandbox.run_answer(
        ANSWER, "score macs", "lesson03.check_score_macs", [[]], sandbox=False),
         ValueError, ["name", "identifier", "'score macs'"]),
    Case("run_answer case_sets str", lambda: sandbox.run_answer(
        ANSWER, "score_macs", "lesson03.check_score_macs", "abc", sandbox=False),
         TypeError, ["case_sets", "list of lists", "str"]),
    Case("salted_seeds str", lambda: _salted("x"), TypeError, ["salt", "int", "str 'x'"]),
    Case("write_secrets no lessons", lambda: autograde.write_secrets(
        Path("/nonexistent"), [], SOLUTIONS),
         ValueError, ["lessons", "non-empty list", "[]"]),
    Case("write_secrets lessons str", lambda: autograde.write_secrets(
        Path("/nonexistent"), "01_x", SOLUTIONS),
         ValueError, ["lessons", "non-empty list", "'01_x'"]),
    Case("write_secrets unknown lesson", lambda: autograde.write_secrets(
        Path("/nonexistent"), [LESSON, "09_tiny"], SOLUTIONS),
         ValueError, ["lessons", "course's notebooks", "'02_single_head_attention'", "got '09_tiny'"]),
    Case("write_secrets lesson twice", lambda: autograde.write_secrets(
        Path("/nonexistent"), [LESSON, LESSON], SOLUTIONS),
         ValueError, ["lessons", "once", f"{LESSON!r} twice"]),
    Case("write_secrets no solutions", lambda: autograde.write_secrets(
        Path("/nonexistent"), [LESSON], Path("/nonexistent/nosol")),
         FileNotFoundError, ["solutions_dir", "solutions folder", "/nonexistent/nosol", "not a folder"]),
    Case("write_secrets unwritable", lambda: autograde.write_secrets(Path("/proc/zz"), [LESSON], SOLUTIONS),
         OSError, ["cannot write the grader's secrets", "/proc/zz/.course_grader.json"]),
    Case("decode tensor tag", lambda: answers.decode({"__tensor__": 5}), ValueError,
         ["'__tensor__'", "torch.Tensor", "int 5"]),
    Case("encode self ref", lambda: answers.encode(_self_holding()), answers.UnstorableValue,
         ["nested more than 32", "holds itself"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_grader_bad_input_is_named(case):
    assert_named(case)


def test_a_secrets_path_that_is_a_folder_is_not_called_missing(tmp_path):
    (tmp_path / autograde.SECRETS_NAME).mkdir()
    with pytest.raises(ValueError, match=r"\.course_grader\.json is a folder, expected the grader's secrets"):
        autograde.read_secrets(tmp_path)


def test_write_secrets_refusing_writes_nothing(tmp_path):
    for lessons, solutions in (([], SOLUTIONS), ([LESSON], tmp_path / "nosol"), (["09_tiny"], SOLUTIONS)):
        with pytest.raises((ValueError, FileNotFoundError)):
            autograde.write_secrets(tmp_path / "course", lessons, solutions)
    assert not (tmp_path / "course").exists()


def test_write_secrets_ends_owner_only_over_an_existing_0644_file(tmp_path):
    path = tmp_path / autograde.SECRETS_NAME
    path.write_text("{}")
    path.chmod(0o644)
    assert autograde.write_secrets(tmp_path, [LESSON], SOLUTIONS) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "salts" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == [autograde.SECRETS_NAME]


@pytest.mark.parametrize("kind, words", [("link", "a symbolic link"), ("fifo", "not a regular file"),
                                         ("dir", "a folder")])
def test_write_secrets_refuses_a_link_a_pipe_or_a_folder(tmp_path, kind, words):
    path, target = tmp_path / autograde.SECRETS_NAME, tmp_path / "elsewhere.json"
    target.write_text("keep")
    {"link": lambda: path.symlink_to(target), "fifo": lambda: os.mkfifo(path),
     "dir": lambda: path.mkdir()}[kind]()
    with pytest.raises(ValueError, match=words):  # a FIFO would block an open(); lstat does not
        autograde.write_secrets(tmp_path, [LESSON], SOLUTIONS)
    assert target.read_text() == "keep" and not list(tmp_path.glob("*.tmp"))


def test_an_answer_cell_that_is_not_python_is_named_not_called_missing():
    with pytest.raises(sandbox.AnswerProblem, match=r"`f` is defined in code cell 1 .*not valid Python "
                                                    r"\(SyntaxError: .*line 1\)"):
        sandbox.answer_source(["def f(:"], "f")
    with pytest.raises(sandbox.AnswerProblem, match=r"no function `f` .*code cell 2 could not be read"):
        sandbox.answer_source(["x = 1", "def g(:"], "f")
    assert "def f" in sandbox.answer_source(["def g(:", "def f(x):\n    return x"], "f")


def test_a_process_that_dies_under_its_memory_limit_says_the_limit():
    run = sandbox.run_answer(ANSWER, "score_macs", "lesson03.check_score_macs", [[]],
                             memory=sandbox.MIN_MEMORY, sandbox=False)
    assert run.outcomes == [] and "memory limit of 256 MiB" in (run.lost or ""), run


def test_write_secrets_never_follows_a_link_never_blocks_and_is_always_owner_only(tmp_path):
    """Battery 6: the secrets file was written through a symlink (overwriting its target),
    stayed 0644 when an old file was, and blocked forever on a FIFO."""
    import os
    import stat

    from course_utils.exercises.autograde import SECRETS_NAME, write_secrets

    solutions = ROOT / "solutions"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / SECRETS_NAME).symlink_to(victim)
    with pytest.raises(ValueError, match="symbolic link"):
        write_secrets(linked, [LESSON], solutions)
    assert victim.read_text() == "keep me"
    piped = tmp_path / "piped"
    piped.mkdir()
    os.mkfifo(piped / SECRETS_NAME)
    with pytest.raises(ValueError, match="not a regular file"):
        write_secrets(piped, [LESSON], solutions)
    old = tmp_path / "old"
    old.mkdir()
    (old / SECRETS_NAME).write_text("{}")
    os.chmod(old / SECRETS_NAME, 0o644)
    written = write_secrets(old, [LESSON], solutions)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600 and '"salts"' in written.read_text()
    assert sorted(p.name for p in old.iterdir()) == [SECRETS_NAME], "no temporary file left behind"


@pytest.mark.parametrize("kwargs,words", [
    ({"lesson": "lesson99"}, "lesson must be one of the course's lessons"),
    ({"code": 5}, "code must be the answer's source text"),
    ({"name": "not a name"}, "name must be the answer function's name"),
    ({"salt": "x"}, "salt must be an int or None"),
    ({"solutions_dir": "/nonexistent/solutions"}, "is not a folder"),
    ({"hide": 5}, "hide must be a list of pathlib.Path"),
    ({"hide": ["/etc/passwd"]}, "hide must be a list of pathlib.Path"),
    ({"sandboxed": "yes"}, "sandboxed must be True, False or None"),
])
def test_grade_answer_names_a_bad_argument_before_running_anything(kwargs, words):
    """Battery 6: these reached a ModuleNotFoundError, compile()'s TypeError, int()'s
    ValueError or a silent truthy flag."""
    call = {"lesson": "lesson02", "check": "check_softmax_rows",
            "code": "def softmax_rows(s):\n    return s\n", "name": "softmax_rows", "salt": None,
            "solutions_dir": None, "hide": (), "sandboxed": None} | kwargs
    lesson, check, code, name = (call.pop(k) for k in ("lesson", "check", "code", "name"))
    with pytest.raises((TypeError, ValueError), match=words):
        autograde.grade_answer(lesson, check, code, name, **call)


def test_a_store_that_is_not_one_is_named(tmp_path):
    """Battery 6: a .pt file of garbage gave a raw UnpicklingError; a lesson without a store
    gave torch's FileNotFoundError."""
    garbage = tmp_path / "lesson02.pt"
    garbage.write_text("garbage")
    with pytest.raises(ValueError, match=r"lesson02\.pt cannot be read as stored answers"):
        answers.read_store(garbage)
    with pytest.raises(FileNotFoundError, match=r"lesson99\.pt: no stored answers"):
        answers.read_store(tmp_path / "lesson99.pt")
    assert "exercises" in answers.read_store(answers.ANSWERS_DIR / "lesson02.pt")
