"""Battery 22 (issue 38), fix pass U: ``nbgrader_tools.py source`` refuses a course
nbgrader_config.py that does not load (G2) and a destination reached through a link or inside the
clone (G5); ``course.py test`` refuses a --basetemp / --junitxml that would destroy a file of the
repository (G6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_cases import import_script, load_course, raises_naming

tools = import_script("nbgrader_tools")
course_py = load_course()


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# -- G6: course.py test refuses a --basetemp / --junitxml that would destroy a file of the repo -----
@pytest.fixture
def no_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("course.py went on to install or run something")

    monkeypatch.setattr(course_py, "ensure_environment", refuse)


@pytest.mark.parametrize(("args", "option", "value"), [
    (["--basetemp=docs"], "--basetemp", "docs"),
    (["--basetemp", "docs"], "--basetemp", "docs"),
    (["--basetemp=tests/../README.md"], "--basetemp", "tests/../README.md"),
    (["--basetemp="], "--basetemp", ""),
    (["--junitxml=README.md"], "--junitxml", "README.md"),
    (["--junit-xml", "pyproject.toml"], "--junit-xml", "pyproject.toml"),
])
def test_course_test_refuses_an_output_option_that_clobbers_the_repo(args, option, value, no_run, capsys):
    assert course_py.main(["test", "-q", *args, "tests/test_masks.py"]) == 2
    err = capsys.readouterr().err
    assert option in err and repr(value) in err and "nothing was run" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["--junitxml=artifacts/report.xml"], ["--junitxml", "a_new_report.xml"],
                                  ["--basetemp=a_new_basetemp"], ["-k", "--basetemp=docs"]])
def test_course_test_lets_a_new_or_artifacts_output_path_through(args):
    assert course_py.clobbered_output_paths([*args, "tests/test_masks.py"]) == []
