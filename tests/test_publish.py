"""Every Colab/Binder badge and link agrees with [tool.course] in pyproject.toml."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import publish  # noqa: E402
from publish_copy import copy_for_publish  # noqa: E402


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of what publish reads and what the lessons link to (tests/publish_copy.py)."""
    return copy_for_publish(tmp_path)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1))


def test_every_badge_and_link_agrees_with_the_config():
    problems = publish.check(ROOT)
    assert not problems, "run python3 course.py publish:\n" + "\n".join(problems)


def test_config_is_a_repository_and_a_release_tag():
    published = publish.load_config(ROOT)
    assert published.repo.count("/") == 1 and published.tag.startswith("v")


def test_every_notebook_opens_with_its_badges_then_the_setup_cell():
    published = publish.load_config(ROOT)
    for path in publish.notebook_paths(ROOT):
        nb = nbformat.read(path, as_version=4)
        rel = path.relative_to(ROOT).as_posix()
        assert nb.cells[0].source == published.badges_cell(rel), rel
        assert f"/blob/{published.tag}/{rel})" in nb.cells[0].source
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert first_code.source == published.setup_cell(), rel
        assert f"git+https://github.com/{published.repo}@{published.tag}" in first_code.source


def test_readme_has_a_colab_badge_per_lesson_and_a_binder_badge_on_lesson_00():
    published = publish.load_config(ROOT)
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        rel = path.relative_to(ROOT).as_posix()
        assert published.colab_badge(rel) in readme, rel
        student = f"student/{path.name}"
        assert f"[exercises]({published.colab_url(student)})" in readme, student  # the copy to work in
    assert published.binder_badge("notebooks/00_start_here.ipynb") in readme


@pytest.mark.parametrize("old, new, expected", [
    ("/blob/v0.2.0/notebooks/03_", "/blob/main/notebooks/03_", "pinned to main"),
    ("/blob/v0.2.0/notebooks/03_", "/blob/v0.1.0/notebooks/03_", "pinned to v0.1.0"),
    ("github/mha-course/multi-head-attention/blob/v0.2.0/notebooks/04",
     "github/someone/multi-head-attention/blob/v0.2.0/notebooks/04", "names someone/multi-head-attention"),
    ("notebooks/05_attention_heatmaps.ipynb)", "notebooks/05_heatmaps.ipynb)", "does not exist"),
    ("conda activate mha-course", "see https://github.com/OWNER/REPO", "placeholder"),
])
def test_check_names_each_disagreement_in_readme(copy, old, new, expected):
    assert publish.check(copy) == []
    _edit(copy / "README.md", old, new)
    problems = publish.check(copy)
    assert any(expected in p for p in problems), problems


def test_check_names_a_stale_or_missing_notebook_cell(copy):
    nb_path = copy / "notebooks" / "02_single_head_attention.ipynb"
    _edit(nb_path, "@v0.2.0", "@v0.1.0")
    problems = publish.check(copy)
    assert any("02_single" in p and "set-up cell" in p for p in problems), problems
    assert any("pinned to v0.1.0" in p for p in problems), problems
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells = nb.cells[1:]  # drop the badge cell
    nbformat.write(nb, nb_path)
    assert any("02_single" in p and "badge cell" in p for p in publish.check(copy))


def test_lessons_link_repository_files_absolutely_so_they_open_on_colab(copy):
    """Colab opens one notebook, so a relative link such as ../docs/benchmarks.md leads nowhere
    there; check names it, and the lessons have none (their links carry the repository and tag)."""
    lesson = copy / "notebooks" / "07_grouped_query_attention.ipynb"
    absolute = "https://github.com/mha-course/multi-head-attention/blob/v0.2.0/docs/benchmarks.md#"
    assert absolute in lesson.read_text() and publish.check(copy) == []
    _edit(lesson, absolute, "../docs/benchmarks.md#")
    problems = publish.check(copy)
    assert any("07_grouped" in p and "relative link to ../docs/benchmarks.md" in p and "Colab" in p
               for p in problems), problems
    _edit(lesson, "../docs/benchmarks.md#", absolute.replace("benchmarks.md", "benchmark.md"))
    assert any("docs/benchmark.md, which does not exist" in p for p in publish.check(copy))


def test_check_names_a_link_to_a_heading_that_does_not_exist(copy):
    """An anchor into docs/ must name a heading there, or the link opens at the top of the page."""
    lesson = copy / "notebooks" / "07_grouped_query_attention.ipynb"
    absolute = "https://github.com/mha-course/multi-head-attention/blob/v0.2.0/docs/benchmarks.md#lesson-07-"
    assert absolute in lesson.read_text() and publish.check(copy) == []
    _edit(lesson, absolute, absolute + "no-such-")
    assert any("07_grouped" in p and "#lesson-07-no-such-" in p
               and "names no heading of docs/benchmarks.md" in p for p in publish.check(copy))


def test_publish_moves_every_link_and_is_idempotent(copy):
    new = publish.set_config("course-org/mha", "v1.0.0", root=copy)
    changed = publish.stamp_all(copy, new)
    assert "README.md" in changed and any(c.startswith("notebooks/") for c in changed)
    assert publish.check(copy) == []
    assert publish.stamp_all(copy, new) == []  # a second run changes nothing
    for path in [copy / "README.md", *publish.notebook_paths(copy)]:
        text = path.read_text()
        assert "mha-course/multi-head-attention" not in text, path.name
        assert "v0.2.0" not in text, path.name
    assert 'version = "1.0.0"' in (copy / "pyproject.toml").read_text()  # the package is the release
    # links to the repository's files move with the badges; other projects' links stay
    lesson = (copy / "notebooks" / "07_grouped_query_attention.ipynb").read_text()
    assert "https://github.com/course-org/mha/blob/v1.0.0/docs/benchmarks.md#" in lesson
    assert "https://github.com/ggml-org/llama.cpp" in lesson


def test_the_package_version_is_the_release_tag(copy):
    import course_utils

    published = publish.load_config(ROOT)
    assert course_utils.__version__ == published.tag.removeprefix("v")
    _edit(copy / "pyproject.toml", f'version = "{course_utils.__version__}"', 'version = "0.0.9"')
    assert any("version 0.0.9 but the release tag is" in p for p in publish.check(copy))


def test_stamp_notebook_for_a_student_version_points_at_itself():
    published = publish.Published("course-org/mha", "v1.0.0")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 03"),
                                         nbformat.v4.new_code_cell("x = 1")])
    publish.stamp_notebook(nb, "student/03_dimension_walkthrough.ipynb", published)
    once = nbformat.writes(nb)
    publish.stamp_notebook(nb, "student/03_dimension_walkthrough.ipynb", published)
    assert nbformat.writes(nb) == once
    assert [c.cell_type for c in nb.cells] == ["markdown", "markdown", "code", "code"]
    assert "blob/v1.0.0/student/03_dimension_walkthrough.ipynb" in nb.cells[0].source
    assert "lab/tree/student/03_dimension_walkthrough.ipynb" in nb.cells[0].source
    assert nb.cells[2].source == published.setup_cell() and nb.cells[3].source == "x = 1"


@pytest.mark.parametrize("repo, tag, word", [
    ("mha-course", "v0.2.0", "repo"),
    ("OWNER/REPO", "v0.2.0", "placeholder"),
    ("mha-course/multi-head-attention", "main", "tag"),
    ("mha-course/multi-head-attention", "HEAD", "tag"),
])
def test_set_config_refuses_what_is_not_a_published_release(copy, repo, tag, word):
    with pytest.raises(ValueError, match=word):
        publish.set_config(repo, tag, root=copy)


def test_stamp_notebook_refuses_an_absolute_path():
    nb = nbformat.v4.new_notebook()
    with pytest.raises(ValueError, match="repo_relative_path"):
        publish.stamp_notebook(nb, "/tmp/x.ipynb", publish.Published("a/b", "v1.0"))


# -- bad values and broken files: one line on stderr, exit 2, and no file changed -----------
def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("repo, tag, words", [
    ("a/..", "v1.0.0", ["repo", "owner/name", "'a/..'"]),
    ("a/.", "v1.0.0", ["repo", "'a/.'"]),
    ("a/b\n", "v1.0.0", ["repo", "'a/b\\n'"]),
    ("a/b", "v1.0\n", ["tag", "vMAJOR.MINOR.PATCH", "'v1.0\\n'"]),
    ("a/b", "v1.0", ["tag", "vMAJOR.MINOR.PATCH", "'v1.0'"]),
    ("", "v9.9.9", ["repo", "got ''"]),
    ("-a/b", "v1.0.0", ["repo", "'-a/b'"]),
    ("a" * 40 + "/b", "v1.0.0", ["repo", "1-39"]),
    ("a/" + "b" * 101, "v1.0.0", ["repo", "1-100"]),
    ("a b/c", "v1.0.0", ["repo", "'a b/c'"]),
    ("a/b.git", "v1.0.0", ["repo", "not ending in '.git'", "'a/b.git'"]),
    ("a/b.GIT", "v1.0.0", ["repo", "'a/b.GIT'"]),
    ("a-/b", "v1.0.0", ["repo", "ending with '-'", "'a-/b'"]),
    ("a--b/c", "v1.0.0", ["repo", "no '--'", "'a--b/c'"]),
    ("a/b", "v01.0.0", ["tag", "leading zeros", "'v01.0.0'"]),
    ("a/b", "v1.00.0", ["tag", "'v1.00.0'"]),
    # git cannot make a 406-character ref (its file name is capped at 255 bytes)
    ("a/b", "v" + "9" * 401 + ".0.0", ["tag", "at most 64 characters", "got 406"]),
])
def test_a_bad_repo_or_tag_is_refused_before_any_file_is_written(copy, capsys, repo, tag, words):
    before = _snapshot(copy)
    assert publish.main([f"--repo={repo}", f"--tag={tag}"], root=copy) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err
    assert _snapshot(copy) == before


def test_a_broken_notebook_stops_publish_before_any_file_is_written(copy, capsys):
    before = _snapshot(copy)
    broken = copy / "notebooks" / "03_dimension_walkthrough.ipynb"
    for text, words in (("not json", ["not JSON"]), ('{"nbformat": 4, "nbformat_minor": 5, "cells": "x"}',
                                                     ["not a valid notebook"])):
        broken.write_text(text)
        before[broken.relative_to(copy).as_posix()] = text.encode()
        assert publish.main(["--repo", "course-org/mha", "--tag", "v1.0.0"], root=copy) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "03_dimension_walkthrough.ipynb" in err, err
        assert all(w in err for w in words), err
        assert _snapshot(copy) == before  # pyproject.toml and README.md untouched too
    assert any("03_dimension_walkthrough" in p and "not a valid notebook" in p for p in publish.check(copy))


def test_a_missing_or_invalid_pyproject_is_named(copy, capsys):
    (copy / "pyproject.toml").write_text("[tool.course\n")
    assert publish.main([], root=copy) == 2
    assert "pyproject.toml: not valid TOML" in capsys.readouterr().err
    (copy / "pyproject.toml").unlink()
    assert publish.main(["--repo", "a/b", "--tag", "v1.0.0"], root=copy) == 2
    assert "pyproject.toml: no such file" in capsys.readouterr().err


def test_a_good_publish_writes_every_file_atomically_and_keeps_permissions(copy, capsys):
    readme = copy / "README.md"
    readme.chmod(0o640)
    assert publish.main(["--repo", "course-org/mha", "--tag", "v1.0.0"], root=copy) == 0
    assert "stamped: " in capsys.readouterr().out and publish.check(copy) == []
    assert readme.stat().st_mode & 0o777 == 0o640
    assert not [p for p in copy.rglob("*.tmp")]  # no temporary file left behind
    assert publish.load_config(copy) == publish.Published("course-org/mha", "v1.0.0")
    assert publish.main(["--repo", "", "--tag", "v9.9.9"], root=copy) == 2  # not "use the config"


def test_publish_checks_its_new_files_before_writing_any(copy, capsys, monkeypatch):
    """Were a value to pass validation but stamp links that read back otherwise (as a/b.git
    did: the check reads the link as a/b), publish must stop with every file as it was."""
    monkeypatch.setattr(publish, "REPO_FORMAT", publish.re.compile(r"[A-Za-z0-9./-]+"))
    before = _snapshot(copy)
    assert publish.main(["--repo", "a/b.git", "--tag", "v1.0.0"], root=copy) == 1
    err = capsys.readouterr().err
    assert "nothing was written" in err and "names a/b, config says a/b.git" in err, err
    assert _snapshot(copy) == before


def test_check_reads_planned_texts_in_place_of_the_files(copy):
    text, published = publish.config_text("course-org/mha", "v1.0.0", copy)
    planned = {copy / "pyproject.toml": text, **publish.planned_stamps(copy, published)}
    assert publish.check(copy, planned) == []
    assert publish.check(copy) == []  # the files themselves, untouched, agree with the old config
