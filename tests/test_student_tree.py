"""The student-only tree (course.py student-tree): a class gets the lessons and the package,
never the solved notebooks or the reference code."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "student_tree.py"


def _run(*args: str, cwd: Path = ROOT, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """One tree for the tests that only read it (and run the package from it)."""
    out = tmp_path_factory.mktemp("student_tree") / "tree"
    done = _run(str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_the_tree_holds_the_lessons_and_no_solutions(tree):
    out = tree
    names = {p.name for p in out.iterdir()}
    assert {"student", "course_utils", "data", "course.py", "pyproject.toml", "README.md"} <= names
    assert not names & {"notebooks", "solutions", "tests", "scripts", "INSTRUCTORS.md", ".ci"}
    lessons = sorted(p.name for p in (out / "student").glob("*.ipynb"))
    assert lessons == sorted(p.name for p in (ROOT / "student").glob("*.ipynb")) and len(lessons) == 8
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".md"):
            assert "### BEGIN SOLUTION" not in path.read_text(errors="replace"), path
    assert list((out / "course_utils" / "exercises" / "answers").glob("lesson0*.pt"))
    tag = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines()
               if line.startswith("tag = ")).split('"')[1]
    for path in (out / "student").glob("*.ipynb"):  # every launch link opens the tree, not the full repo
        text = path.read_text()
        # links to repository files (docs/, tests/, INSTRUCTORS.md and the solution notebooks/, which the
        # tree leaves out; data/ and README.md) read the release; course_utils/ is in the tree, so
        # lessons name no link there
        elsewhere = re.findall(rf"https://github\.com/[^/]+/[^/]+/blob/{re.escape(tag)}/([^)#\s]+)", text)
        # and a lesson names another lesson by its learner's copy (student/), never by the solutions
        # in notebooks/, except the two whose written exercises' model answers (6.4, 7.4) the rubrics
        # point those learning on their own to
        answers = ("notebooks/06_head_ablation.ipynb", "notebooks/07_grouped_query_attention.ipynb")
        assert all(p.startswith(("docs/", "tests/", "data/", "student/"))
                   or p in ("INSTRUCTORS.md", "README.md", *answers) for p in elsewhere), elsewhere
        assert all((ROOT / p).is_file() for p in elsewhere), elsewhere
        text = re.sub(rf"https://github\.com/[^/]+/[^/]+/blob/{re.escape(tag)}/"
                      r"(docs/|tests/|data/|student/|notebooks/0[67]_[a-z_]+\.ipynb|INSTRUCTORS\.md|README\.md)",
                      "", text)
        assert f"/{tag}-student" in text and f"@{tag}-student" in text and f"/{tag}/" not in text, path


def test_the_checks_work_from_the_tree_without_any_reference(tree):
    out = tree
    probe = (
        "import sys; sys.path.insert(0, '.')\n"
        "import course_utils, inspect\n"
        "assert course_utils.__file__.startswith(sys.path[0]) or 'tree' in course_utils.__file__\n"
        "from course_utils.exercises import all_exercises, lesson03\n"
        "assert all(e.reference is None for e in all_exercises().values())\n"
        "def stub(*a):\n    raise NotImplementedError\n"
        "print(lesson03.check_score_macs(stub).status)\n"
        "print(lesson03.check_score_macs(lambda T, d, h: h * T * T * (d // h)).status)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=out,
                          env={"PYTHONPATH": str(out), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["not attempted", "correct"], done.stdout


def test_an_existing_folder_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "tree"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    done = _run(str(out))
    assert done.returncode == 2 and "already exists" in done.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tree.")]  # no staging left


def test_bad_arguments_are_named():
    done = _run("--brnch", "x")
    assert done.returncode == 2 and "unexpected arguments: --brnch x" in done.stderr
    for name in ("../evil", "HEAD", "refs/heads/x", "a.lock", "a//b", "a."):
        done = _run("--branch", name)
        assert done.returncode == 2 and "--branch: expected a branch name" in done.stderr, name
    current = subprocess.run(["git", "-C", str(ROOT), "symbolic-ref", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    if current:
        done = _run("--branch", current)
        assert done.returncode == 2 and "checked out here" in done.stderr
    done = _run("/proc/no-such-place/tree")
    assert done.returncode == 2 and "cannot write into /proc/no-such-place" in done.stderr


def test_branch_is_committed_without_touching_the_checkout(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for rel in ("scripts/student_tree.py",):  # the version under test, committed or not
        shutil.copy2(ROOT / rel, clone / rel)
    env_git = ["git", "-C", str(clone)]
    subprocess.run([*env_git, "config", "user.email", "t@example.org"], check=True)
    subprocess.run([*env_git, "config", "user.name", "test"], check=True)
    head = subprocess.run([*env_git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    status = subprocess.run([*env_git, "status", "--porcelain"], capture_output=True, text=True).stdout
    for _ in range(2):  # the second commit is a child of the first
        done = _run("--branch", "student", script=clone / "scripts" / "student_tree.py", cwd=clone)
        assert done.returncode == 0, done.stderr
    files = subprocess.run([*env_git, "ls-tree", "-r", "--name-only", "refs/heads/student"],
                           capture_output=True, text=True).stdout.split()
    assert "student/02_single_head_attention.ipynb" in files and "course_utils/exercises/core.py" in files
    assert not [f for f in files if f.startswith(("notebooks/", "solutions/", "tests/"))]
    count = subprocess.run([*env_git, "rev-list", "--count", "refs/heads/student"],
                           capture_output=True, text=True)
    assert count.stdout.strip() == "2"
    assert subprocess.run([*env_git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
    after = subprocess.run([*env_git, "status", "--porcelain"], capture_output=True, text=True).stdout
    assert after == status


def test_course_lab_opens_the_learners_copy(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_lab", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    calls = []
    monkeypatch.setattr(course, "ensure_environment", lambda: None)
    monkeypatch.setattr(course.cli, "call", lambda args, *rest, **kw: calls.append(args) or 0)
    assert course.main(["lab"]) == 0
    assert calls[0][-1].endswith("student/00_start_here.ipynb") or calls[0][-2].endswith(
        "student/00_start_here.ipynb"), calls
    assert course.main(["student-tree", "--branch", "student"]) == 0  # passed on to the script as given
    assert calls[1][-3:] == [str(ROOT / "scripts" / "student_tree.py"), "--branch", "student"]
    assert course.main(["student-tree", "--branch"]) == 2 and len(calls) == 2  # refused before running


def test_nbgrader_tools_refuses_bad_arguments_and_changes_nothing(tmp_path):
    tools = ROOT / "scripts" / "nbgrader_tools.py"
    good = tmp_path / "03_x.ipynb"
    good.write_text((ROOT / "notebooks" / "00_start_here.ipynb").read_text())
    before = good.read_bytes()
    (tmp_path / "bad.ipynb").write_text("{}")
    for args, said in ((["convert", str(good), str(tmp_path / "missing.ipynb")], "missing.ipynb"),
                       (["convert", str(good), str(tmp_path / "bad.ipynb")], "bad.ipynb"),
                       (["convert", str(tmp_path)], "cannot read"),
                       (["release", "--bogus"], "takes no arguments"),
                       (["check", "extra"], "takes no arguments")):
        done = subprocess.run([sys.executable, str(tools), *args], capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, args
        assert good.read_bytes() == before, args


def test_a_broken_student_notebook_is_named(tmp_path):
    # battery 5: "Notebook does not appear to be JSON: '{bad'" without the file's name
    import importlib.util

    spec = importlib.util.spec_from_file_location("_student_tree_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    good = sorted((ROOT / "student").glob("*.ipynb"))[0]
    shutil.copy(good, tmp_path / good.name)
    (tmp_path / "02_broken.ipynb").write_text("{bad")
    try:
        module._point_links_at_the_tree(tmp_path)
    except ValueError as exc:
        message = str(exc)
    else:
        raise AssertionError("a notebook that is not JSON was taken")
    assert "student/02_broken.ipynb" in message and "NotJSONError" in message and "release" in message
