"""Battery 15's findings in the command-line helpers, the path rule and the exercises (issue 38,
helper fix45c): each bad call now raises (or, for an exercise check, answers) naming the argument,
what was expected and what arrived; the valid call beside it still works."""

from __future__ import annotations

import ast
import asyncio
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named, load_course

from course_utils import cli, paths
from course_utils.bench import decode_step, memory
from course_utils.exercises import answers, autograde, sandbox
from course_utils.exercises.core import Exercise, Mistake
from course_utils.exercises.raising import DiagnosingExercise, RaisingMistake
from course_utils.model import checkpoint
from course_utils.tasks.worked_example import load_worked_example

ROOT = Path(__file__).resolve().parent.parent


async def _nothing() -> int:
    return 7


# -- cli.py's helpers look at their arguments' types before using them ----------------------------
CLI_CASES = [
    Case("run_kernel/work not awaitable", lambda: cli.run_kernel(3, "left"), TypeError,
         ["work", "coroutine", "int 3"]),
    Case("run_kernel/work not called", lambda: cli.run_kernel(_nothing, "left"), TypeError,
         ["work", "call it", "function"]),
    Case("run_kernel/message not str", lambda: cli.run_kernel(asyncio.sleep(0), 3), TypeError,
         ["message", "str", "int 3"]),
    Case("stop_at_once/prog int", lambda: cli.stop_at_once(3), TypeError, ["prog", "str", "int 3"]),
    Case("place_in/path int", lambda: cli.place_in(3, "/tmp"), TypeError, ["path", "str or Path", "int 3"]),
    Case("place_in/root None", lambda: cli.place_in("/tmp", None), TypeError,
         ["root", "str or Path", "NoneType None"]),
    Case("parse_args/int items", lambda: cli.ArgumentParser().parse_args([1, 2]), TypeError,
         ["args", "list of str", "[1, 2]"]),
    Case("parse_known_args/int items", lambda: cli.ArgumentParser().parse_known_args(["a", 2]), TypeError,
         ["args", "list of str", "['a', 2]"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.name)
def test_cli_helpers_refuse_wrong_argument_types_by_name(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a refused coroutine is closed, never left un-awaited
        assert_named(case)


def test_cli_helpers_still_take_good_arguments(tmp_path):
    assert cli.run_kernel(_nothing(), "nothing was written") == 7
    assert cli.place_in(tmp_path / "a", tmp_path) == "a"
    parser = cli.ArgumentParser(prog="t")
    parser.add_argument("--n", type=int)
    assert parser.parse_args(("--n", "2")).n == 2


# -- a NUL character in a path is refused by the one path rule, in every path-taking function ----
NUL = "/tmp/fix45c\0x"
PATH_CASES = [
    Case("check_path/str", lambda: paths.check_path(NUL, "where"), ValueError, ["where", "NUL", repr(NUL)]),
    Case("check_path/Path", lambda: paths.check_path(Path(NUL), "where"), ValueError, ["where", "NUL"]),
    Case("path_kind", lambda: paths.path_kind(NUL), ValueError, ["path", "NUL"]),
    Case("place_in/path", lambda: cli.place_in(NUL, "/tmp"), ValueError, ["path", "NUL"]),
    Case("place_in/root", lambda: cli.place_in("/tmp", NUL), ValueError, ["root", "NUL"]),
    Case("sha256_of", lambda: checkpoint.sha256_of(NUL), ValueError, ["path", "NUL"]),
    Case("available_checkpoints", lambda: checkpoint.available_checkpoints(NUL), ValueError,
         ["directory", "NUL"]),
    Case("load_checkpoint", lambda: checkpoint.load_checkpoint(NUL), ValueError, ["name_or_path", "NUL"]),
    Case("load_worked_example", lambda: load_worked_example(NUL), ValueError, ["path", "NUL"]),
    Case("read_store", lambda: answers.read_store(NUL), ValueError, ["path", "NUL"]),
    Case("read_secrets", lambda: autograde.read_secrets(NUL), ValueError, ["course", "NUL"]),
    Case("reference_outputs", lambda: autograde.reference_outputs(NUL, "lesson01", 1), ValueError,
         ["solutions_dir", "NUL"]),
    Case("hidden_paths", lambda: sandbox.hidden_paths([NUL]), ValueError, ["extra[0]", "NUL"]),
    Case("last_level_cache_bytes", lambda: decode_step.last_level_cache_bytes(NUL), ValueError,
         ["sysfs", "NUL"]),
    Case("read_notebook", lambda: memory.read_notebook(NUL), ValueError, ["path", "NUL"]),
    Case("read_test_report", lambda: memory.read_test_report(NUL), ValueError, ["path", "NUL"]),
]


@pytest.mark.parametrize("case", PATH_CASES, ids=lambda c: c.name)
def test_paths_with_a_nul_character_are_refused_by_name(case):
    assert_named(case)


def test_path_rule_still_takes_good_paths(tmp_path):
    paths.check_path(tmp_path, "where")
    paths.check_path(str(tmp_path), "where")
    assert paths.path_kind(tmp_path) == "a directory"


# -- autograde.configure wants nbgrader's config, not a plain dict --------------------------------
def test_configure_refuses_a_plain_dict_naming_c():
    assert_named(Case("configure/plain dict", lambda: autograde.configure({}, "."), TypeError,
                      ["c", "nbgrader's config", "plain dict", "dict {}"]))


def test_configure_still_takes_a_traitlets_config(tmp_path):
    pytest.importorskip("nbgrader")
    from traitlets.config import Config

    c = Config()
    autograde.configure(c, tmp_path)
    assert c.GradeOutside.course_root == str(tmp_path.resolve())


# -- an exercise's mistakes have distinct keys; a RaisingMistake's pattern is plain text ----------
def _mistake(key: str) -> Mistake:
    return Mistake(key, "a message", "a hint")


@pytest.mark.parametrize("kind", [Exercise, DiagnosingExercise])
def test_exercise_refuses_two_mistakes_with_one_key(kind):
    assert_named(Case("mistakes/repeated key", lambda: kind("Exercise 9.9: twice", list,
                                                             [_mistake("a"), _mistake("b"), _mistake("a")]),
                      ValueError, [kind.__name__, "Exercise 9.9: twice", "mistakes", "distinct", "['a']"]))


def test_exercise_still_takes_distinct_keys_and_a_literal_pattern():
    exercise = DiagnosingExercise("Exercise 9.9: once", list,
                                  [_mistake("a"), RaisingMistake("b", "m", "h", pattern="[(*")])
    assert [m.key for m in exercise.mistakes] == ["a", "b"]


# -- the sandbox's Refused says what was refused, where in the output, and what is taken ----------
REFUSED_CASES = [
    Case("to_plain/object in a list", lambda: sandbox.to_plain([1, object()]), sandbox.Refused,
         ["object", "output[1]", "plain data", "torch.Tensor"]),
    Case("to_plain/complex tensor deep", lambda: sandbox.to_plain(([torch.zeros(1, dtype=torch.complex64)],)),
         sandbox.Refused, ["complex64", "output[0][0]", "plain data"]),
    Case("to_plain/int key", lambda: sandbox.to_plain({"a": {1: 2}}), sandbox.Refused,
         ["key that is not a str", "output['a']", "str-keyed dicts"]),
    Case("accept/forged tensor", lambda: sandbox.accept([1, {"__tensor__": 3}]), sandbox.Refused,
         ["not a plain real tensor", "output[1]", "plain data"]),
    Case("accept/unknown dict", lambda: sandbox.accept({"__dict__": {"k": {"x": 1}}}), sandbox.Refused,
         ["['x']", "output['k']", "plain data"]),
]


@pytest.mark.parametrize("case", REFUSED_CASES, ids=lambda c: c.name)
def test_refused_outputs_are_named_with_their_place(case):
    assert_named(case)


def test_plain_outputs_still_come_back():
    value = {"a": [torch.arange(3.0), (1, "x", None)]}
    back = sandbox.accept(sandbox.to_plain(value))
    assert back["a"][1] == (1, "x", None) and torch.equal(back["a"][0], value["a"][0])


# -- notebook_tools.py execute takes --timeout anywhere among the notebooks ------------------------
def _notebook_tools():
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import notebook_tools

    return notebook_tools


@pytest.mark.parametrize("argv", [["execute", "a.ipynb", "--timeout", "5"],
                                  ["execute", "a.ipynb", "--timeout=5"],
                                  ["execute", "--timeout", "5", "a.ipynb"]])
def test_execute_takes_its_timeout_before_or_after_the_notebooks(argv):
    assert _notebook_tools()._parse(argv) == ("execute", ["a.ipynb"], 5)


@pytest.mark.parametrize("argv, words", [
    (["execute", "a.ipynb", "--timeout"], ["--timeout", "got nothing"]),
    (["execute", "a.ipynb", "--timeout", "x"], ["--timeout", "whole number", "'x'"]),
    (["execute", "--timeout", "5", "a.ipynb", "--timeout=6"], ["--timeout", "more than once", "5, 6"]),
    (["execute", "a.ipynb", "--bogus"], ["--bogus", "--timeout SECONDS and file names"]),
])
def test_execute_refuses_a_wrong_timeout_by_name(argv, words):
    tools = _notebook_tools()
    assert_named(Case(" ".join(argv), lambda: tools._parse(argv), tools.ToolError, words))


# -- course.py test refuses paths outside the repository before running anything -----------------


def test_course_test_refuses_a_path_outside_the_repository(monkeypatch, capsys, tmp_path):
    course = load_course()

    def refuse(*args, **kwargs):
        raise AssertionError("course.py went on to install or run something")

    monkeypatch.setattr(course, "ensure_environment", refuse)
    outside = tmp_path / "test_elsewhere.py"
    outside.write_text("def test_x():\n    pass\n")
    for path in ("/etc/passwd", str(outside)):
        assert course.main(["test", "-q", path]) == 2
        err = capsys.readouterr().err
        assert path in err and "outside the repository" in err and "nothing was run" in err
    assert course.outside_test_paths(["tests/test_ablation.py", "-k", "x"]) == []


# -- an ndarray subclass that says "equal" to everything is never graded as right -----------------
class _AlwaysEqual(np.ndarray):
    """Its comparisons all say yes: ==, np.isclose / np.equal, np.allclose / np.array_equal."""

    def __eq__(self, other):
        return np.ones(self.shape, dtype=bool)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return True if ufunc.__name__ in ("isclose", "equal") else NotImplemented

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("allclose", "isclose", "array_equal", "all"):
            return True
        return super().__array_function__(func, types, args, kwargs)


def test_ndarray_subclass_answer_is_named_not_passed_on_2_1_and_1_1():
    from course_utils.exercises import lesson01, lesson02

    for check, answer in (
            (lesson02.check_softmax_rows, lambda s: np.zeros(np.shape(s)).view(_AlwaysEqual)),
            (lesson01.check_attend, lambda s, v: np.zeros((s.shape[0], v.shape[1])).view(_AlwaysEqual)),
            (lesson01.check_attend, lambda s, v: (np.zeros((s.shape[0], v.shape[1])).view(_AlwaysEqual),))):
        feedback = check(answer)
        assert not feedback.passed and feedback.status == "wrong", feedback
        assert "class _AlwaysEqual, a subclass of numpy.ndarray" in feedback.message


def test_plain_array_answer_still_passes_2_1():
    from course_utils.exercises import lesson02

    def softmax_rows(scores):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    assert lesson02.check_softmax_rows(softmax_rows).passed


# -- every tool sets its one-line signal guard before its other imports -----------------------------
_BEFORE_GUARD = {"__future__", "sys", "pathlib", "course_cli"}  # what the guard itself needs


def _imported(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        return {(node.module or "").split(".")[0]}
    return set()


_TOOLS = ["course.py"] + sorted(f"scripts/{p.name}" for p in (ROOT / "scripts").glob("*.py")
                               if "stop_at_once(" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", _TOOLS)
def test_each_tool_guards_signals_before_its_other_imports(script):
    """A SIGINT while notebook_tools.py student imported its modules (before stop_at_once) gave a
    KeyboardInterrupt traceback: the guard comes first, before any import but what it needs."""
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    guarded = False
    for node in tree.body:
        guarded = guarded or "stop_at_once(" in ast.unparse(node)
        early = _imported(node) - _BEFORE_GUARD
        assert guarded or not early, f"{script}: imports {sorted(early)} before cli.stop_at_once"
    assert guarded, f"{script}: calls stop_at_once only inside a function, after its imports"


def test_an_empty_path_is_called_empty_not_the_wrong_type() -> None:
    """``''`` is a str: the message said "must be a str or Path ..., got str ''"; it says empty."""
    from course_utils.paths import check_path

    with pytest.raises(ValueError, match=r"^report must name a file, got an empty path ''$"):
        check_path("", "report")
