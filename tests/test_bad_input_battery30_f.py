"""Battery 30 (commands, exercise checks, grading), fix pass F: ``course.py test`` refuses the
pytest options that would overwrite a tracked file when they come from PYTEST_ADDOPTS, and
--log-file / --debug / -o log_file= on its own command line."""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import load_course

course_py = load_course()


@pytest.fixture(autouse=True)
def _nothing_installed(monkeypatch):
    """A command that gets past its checks fails at once here, rather than installing or running."""
    def refuse():
        raise AssertionError("course.py went on to install the environment")
    monkeypatch.setattr(course_py, "ensure_environment", refuse)


# -- pytest_addopts_clobbers: PYTEST_ADDOPTS is guarded as the command line is -----------------------
def test_test_refuses_clobbering_options_from_pytest_addopts(monkeypatch, capsys):
    monkeypatch.setenv("PYTEST_ADDOPTS", "--basetemp=docs --junitxml=README.md")
    assert course_py._main(["test", "tests/test_attention.py"]) == 2
    err = capsys.readouterr().err
    assert "PYTEST_ADDOPTS" in err and "--basetemp" in err and "nothing was run" in err


def test_addopts_args_splits_as_a_shell_and_tolerates_a_bad_quote():
    assert course_py.addopts_args("--junitxml='a b.xml' -x") == ["--junitxml=a b.xml", "-x"]
    assert course_py.addopts_args("--junitxml='unclosed") == []


# -- pytest_log_file_clobbers: --log-file, --debug and -o log_file= overwrite their file -------------
@pytest.mark.parametrize("args", [["--log-file=README.md"], ["--log-file", "README.md"],
                                  ["--debug=docs/lessons.md"], ["--debug", "README.md"],
                                  ["-o", "log_file=LICENSE"], ["-olog_file=LICENSE"],
                                  ["--override-ini=log_file=LICENSE"],
                                  ["--override-ini", "log_file=LICENSE"]],
                         ids=lambda a: " ".join(a))
def test_test_refuses_a_log_file_over_a_tracked_file(args):
    problems = course_py.clobbered_output_paths(args)
    assert len(problems) == 1 and "overwrite" in problems[0]


@pytest.mark.parametrize("args", [["--debug"], ["--debug", "-x"], ["--log-file=artifacts/run.log"],
                                  ["-o", "log_cli=true"], ["--log-file=new-file-here.log"]],
                         ids=lambda a: " ".join(a))
def test_test_lets_a_new_log_file_or_other_settings_pass(args):
    assert course_py.clobbered_output_paths(args) == []


# -- course_venv_tilde_blank: COURSE_VENV='~/x' is the home folder's x; a blank one is refused --------
@pytest.mark.parametrize("setting", [" ", "\t", "~no_such_user_b30f/venv"],
                         ids=["space", "tab", "unknown-user"])
def test_course_venv_blank_or_unexpandable_is_refused(setting, monkeypatch, capsys):
    assert "COURSE_VENV" in course_py.venv_setting_problem(setting)
    monkeypatch.setenv("COURSE_VENV", setting)
    assert course_py._main(["publish", "--check"]) == 2
    assert "COURSE_VENV" in capsys.readouterr().err


@pytest.mark.parametrize("setting", [None, "", "/tmp/some-venv", "~/venvs/mha"])
def test_course_venv_usable_settings_pass(setting):
    assert course_py.venv_setting_problem(setting) is None


def test_course_venv_tilde_is_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COURSE_VENV", "~/venvs/mha")
    fresh = load_course()
    assert fresh.VENV == tmp_path / "venvs" / "mha"


# -- lab_port_without_value: `lab --port` (value forgotten) is named, not fed the lesson's path ------
@pytest.mark.parametrize("args", [["--port"], ["--no-browser", "--port"], ["--port", "--no-browser"],
                                  ["--ServerApp.port"], ["--ip"], ["--ServerApp.ip", "--no-browser"]],
                         ids=lambda a: " ".join(a))
def test_lab_option_without_its_value_is_named(args, capsys):
    option = next(a for a in args if a != "--no-browser")
    assert course_py.lab_value_problems(args) == [course_py.lab_value_problems(args)[0]]
    assert course_py.lab_value_problems(args)[0].startswith(f"{option} needs a value")
    assert course_py._main(["lab", *args]) == 2
    assert "needs a value" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--port", "8888"], ["--port=0"], ["--ip", "127.0.0.1", "--no-browser"]])
def test_lab_option_with_its_value_passes(args):
    assert course_py.lab_value_problems(args) == []


def test_lab_negative_port_is_out_of_range_not_missing():
    assert "out of range" in course_py.lab_value_problems(["--port", "-1"])[0]


# -- student_tree_branch_named_like_tag: --branch NAME where NAME is a tag is refused ------------------
def test_student_tree_refuses_a_branch_named_like_a_tag(tmp_path, monkeypatch):
    import subprocess

    from bad_input_cases import import_script, raises_naming

    student_tree = import_script("student_tree")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "tag", "v9.8.7"], check=True)
    monkeypatch.setattr(student_tree, "ROOT", repo)
    monkeypatch.setattr(student_tree, "build", lambda out: pytest.fail("built a tree for a tag's name"))
    raises_naming(ValueError, ["--branch", "'v9.8.7'", "tag"],
                  lambda: student_tree.commit_to_branch("v9.8.7"))
    assert subprocess.run([*git, "for-each-ref", "refs/heads/v9.8.7"], capture_output=True,
                          text=True).stdout == ""


# -- table_ascii_stdout_traceback: `nbgrader_tools.py table` on an ASCII stdout escapes the stars ----
def test_table_on_an_ascii_stdout_prints_escaped(monkeypatch, capsys):
    import io
    import sys

    from bad_input_cases import import_script

    tools = import_script("nbgrader_tools")
    if "★" not in tools.table():
        pytest.skip("the table has no star to escape")
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    assert tools._main(["table"]) in (0, None)
    out.flush()
    text = out.buffer.getvalue().decode("ascii")
    assert "\\u2605" in text


# -- test_memory_default_relative_to_cwd: the default report is the repository's, from any folder ----
def test_test_memory_default_report_is_the_repositorys(tmp_path, monkeypatch):
    import argparse
    from pathlib import Path

    from course_utils.bench import memory

    root = Path(__file__).resolve().parents[1]
    assert memory.DEFAULT_TEST_REPORT == root / "artifacts" / "test_peak_rss.json"
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    memory.add_bench_parser(parser.add_subparsers(dest="command"))
    assert Path(parser.parse_args(["test-memory"]).report) == root / "artifacts" / "test_peak_rss.json"


# -- check_leaves_torch_modes: a check leaves the answer's torch modes and autocast ------------------
def _enters_function_mode(s, v):
    from torch.overrides import TorchFunctionMode

    TorchFunctionMode().__enter__()
    return torch.softmax(s, -1) @ v


def _enters_dispatch_mode(s, v):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    Passing().__enter__()
    return torch.softmax(s, -1) @ v


def _enters_autocast(s, v):
    torch.autocast("cpu", dtype=torch.bfloat16).__enter__()
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("answer", [_enters_function_mode, _enters_dispatch_mode, _enters_autocast],
                         ids=["function-mode", "dispatch-mode", "autocast"])
def test_a_check_leaves_the_answers_torch_modes(answer, monkeypatch):
    from course_utils.exercises import lesson01

    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "5")
    before = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
              torch.is_autocast_enabled("cpu"))
    try:
        lesson01.check_attend(answer)
        after = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
                 torch.is_autocast_enabled("cpu"))
    finally:  # never leave a mode on for the other tests, whatever the check did
        while torch._C._len_torch_function_stack() > before[0]:
            torch._C._pop_torch_function_stack()
        from torch.utils._python_dispatch import _pop_mode
        while torch._C._len_torch_dispatch_stack() > before[1]:
            _pop_mode()
        torch.set_autocast_enabled("cpu", before[2])
    assert after == before
