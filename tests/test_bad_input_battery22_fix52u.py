"""Battery 22 (issue 38), fix pass U: ``nbgrader_tools.py source`` refuses a course
nbgrader_config.py that does not load (G2) and a destination reached through a link or inside the
clone (G5); ``course.py test`` refuses a --basetemp / --junitxml that would destroy a file of the
repository (G6)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bad_input_cases import import_script, load_course, raises_naming

tools = import_script("nbgrader_tools")
course_py = load_course()


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# -- G2: a course nbgrader_config.py that does not load is refused, not kept ------------------------
BROKEN_CONFIGS = {
    "syntax error": ("c = get_config()\nc.Exchange.course_id = (\n", "SyntaxError", 2),
    "NameError": ("c = get_config()\nc.Exchange.root = undefined_root\n", "NameError", 2),
    "raises SystemExit": ("c = get_config()\n\nraise SystemExit(3)\n", "SystemExit", 3),
    "broken after an old block": ("c = get_config()\n" + tools.grading_config_block()
                                  + "c.X.y = missing\n", "NameError", 7),
}


@pytest.mark.parametrize("case", list(BROKEN_CONFIGS))
def test_source_refuses_a_course_config_that_does_not_load(case, tmp_path, capsys):
    text, error, line = BROKEN_CONFIGS[case]
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(text)
    raises_naming(tools.SourceError, ["nbgrader_config.py", error, f"line {line}"],
                  lambda: tools.grading_config_text(course))
    assert tools.main(["source", str(course)]) == 2
    err = capsys.readouterr().err
    assert "nbgrader_config.py" in err and error in err and f"line {line}" in err
    assert "nothing was written" in err and err.count("\n") == 1
    assert _tree(course) == {"nbgrader_config.py": text.encode()}  # nothing written


@pytest.mark.parametrize("kept", [
    'c = get_config()\nc.CourseDirectory.course_id = "mha"\n',
    'c.CourseDirectory.course_id = "mha"\n',  # traitlets gives c: no get_config() needed
    'c.CourseDirectory.course_id = "mha"\nc = get_config()\n',  # c used before it is asked for
], ids=["get_config first", "c alone", "c before get_config"])
def test_a_config_that_loads_is_kept_with_the_grading_block(kept, tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(kept + tools.grading_config_block())
    text = tools.grading_config_text(course)
    assert kept in text and text.count(tools.CONFIG_BEGIN) == 1  # c = get_config() put first if missing


# -- G5: source never writes through a link below COURSE_DIR, nor inside the clone ------------------
@pytest.mark.parametrize("case", ["source is a link", "a lesson folder is a link", "course links into clone"])
def test_swap_in_refuses_a_destination_through_a_link_or_in_the_clone(case, tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    (clone / "docs").mkdir(parents=True)
    (clone / "notebooks").mkdir()
    (clone / "notebooks" / "02_x.ipynb").write_text("instructor's lesson")
    monkeypatch.setattr(tools, "ROOT", clone)
    staging = tmp_path / "staging"
    (staging / "source" / "02_x").mkdir(parents=True)
    (staging / "source" / "02_x" / "02_x.ipynb").write_text("student copy")
    (staging / "nbgrader_config.py").write_text("c = get_config()\n")
    course = tmp_path / "course"
    if case == "source is a link":
        course.mkdir()
        os.symlink(clone / "docs", course / "source")
        named = course / "source"
    elif case == "a lesson folder is a link":
        (course / "source").mkdir(parents=True)
        os.symlink(clone / "notebooks", course / "source" / "02_x")
        named = course / "source" / "02_x"
    else:
        os.symlink(clone / "docs", course)
        named = course
    before = _tree(clone)
    raises_naming(tools.SourceError, [str(named)], lambda: tools._swap_in(staging, course))
    assert _tree(clone) == before
    assert sorted(p.name for p in (clone / "docs").iterdir()) == []


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
