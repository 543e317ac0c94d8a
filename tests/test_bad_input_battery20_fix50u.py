"""Battery 20 (issue 38), fixes by fix50u: course.py, course_utils/cli.py, env.py, paths.py and scripts/."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from bad_input_cases import import_script, load_course, raises_naming

from course_utils import cli, env, paths

ROOT = Path(__file__).resolve().parent.parent


_script = import_script


# -- F2: the name label of pick_device and cli.words is checked, as check_seed's is -------------

@pytest.mark.parametrize("call, label", [
    (lambda label: env.pick_device("gpu", name=label), 5),
    (lambda label: env.pick_device("cpu", name=label), None),
    (lambda label: env.pick_device(None, name=label), ""),
    (lambda label: cli.words(3, name=label), None),
    (lambda label: cli.words(["a"], name=label), 7),
    (lambda label: cli.words(["a"], name=label), "  "),
])
def test_a_wrong_name_label_is_refused_naming_name(call, label):
    error = ValueError if isinstance(label, str) else TypeError
    message = raises_naming(error, ["name must be a non-empty str", repr(label)], lambda: call(label))
    assert not message.startswith(repr(label)), message  # "5 must be one of ...": the value as the name


# -- F3: cli.run checks a raised SystemExit's code as it checks a returned one ------------------

@pytest.mark.parametrize("code, error", [(True, TypeError), (False, TypeError), (2.5, TypeError),
                                         ((1, 2), TypeError), (300, ValueError), (-1, ValueError)])
def test_run_refuses_a_raised_systemexit_with_a_wrong_code(code, error):
    def main(argv):
        raise SystemExit(code)

    raises_naming(error, ["main(argv) raised SystemExit", repr(code), "expected an exit status"],
                  lambda: cli.run(main, [], "demo"))


@pytest.mark.parametrize("code", [None, 0, 2, 255, "a message"])
def test_run_lets_a_raised_systemexit_with_a_good_code_through(code):
    def main(argv):
        raise SystemExit(code)

    with pytest.raises(SystemExit) as stopped:
        cli.run(main, [], "demo")
    assert stopped.value.code == code


# -- F4: a --venv (or output folder) that is a FIFO or a device is named as what it is ------------

def _not_a_folder(kind: str, tmp_path: Path) -> Path:
    if kind == "FIFO":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if not (os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)):
        pytest.skip("no /dev/null character device here")
    return Path("/dev/null")


_KINDS = [("FIFO", "a FIFO (named pipe)"), ("device", "a character device")]


@pytest.mark.parametrize("below", [False, True])
@pytest.mark.parametrize("kind, words", _KINDS)
def test_version_matrix_venv_names_what_is_there(kind, words, below, tmp_path):
    version_matrix = _script("version_matrix")
    there = _not_a_folder(kind, tmp_path)
    env_dir = there / "venv" if below else there
    message = raises_naming(version_matrix.InputError, [f"{there}: is {words}, expected a folder",
                                                        f"--venv {env_dir}"],
                            lambda: version_matrix._check_venv(env_dir))
    assert "is a file" not in message, message


@pytest.mark.parametrize("kind, words", _KINDS)
def test_notebook_tools_output_folder_names_what_is_there(kind, words, tmp_path):
    notebook_tools = _script("notebook_tools")
    there = _not_a_folder(kind, tmp_path)
    raises_naming(notebook_tools.ToolError, [f"{there}: is {words}, expected a folder"],
                  lambda: notebook_tools.output_folder(there / "out"))


@pytest.mark.parametrize("kind, words", _KINDS)
def test_course_venv_folder_problem_names_what_is_there(kind, words, tmp_path):
    there = _not_a_folder(kind, tmp_path)
    problem = load_course().venv_folder_problem(there, "--venv")
    assert problem is not None and f"--venv {there} is {words}, not a folder" in problem, problem


def test_a_regular_file_is_still_called_a_file(tmp_path):
    (tmp_path / "a_file").write_text("x")
    problem = load_course().venv_folder_problem(tmp_path / "a_file", "--venv")
    assert "a_file is a file, not a folder" in problem
    raises_naming(_script("version_matrix").InputError, [f"{tmp_path / 'a_file'}: is a file, expected"],
                  lambda: _script("version_matrix")._check_venv(tmp_path / "a_file"))


def test_paths_path_kind_is_the_cli_rule(tmp_path):
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
    (tmp_path / "f").write_text("x")
    for path in (tmp_path / "fifo", tmp_path / "f", tmp_path, tmp_path / "missing"):
        assert paths.path_kind(path) == cli.path_kind(path)
    raises_naming(TypeError, ["path must be", "int 3"], lambda: paths.path_kind(3))
