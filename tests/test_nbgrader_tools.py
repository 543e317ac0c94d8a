"""nbgrader: the lessons are nbgrader-native, student/ is current and leak-free, and the
release -> validate -> autograde -> export cycle works (issue 12).

* every lesson in notebooks/ is converted (a second conversion changes nothing), and
  student/ is exactly what ``python3 course.py release`` would write (stale -> fail);
* no solution text, no printed reference in any student notebook;
* every student notebook runs end to end, failing only in its locked test cells;
* a small course directory in a temp folder (one lesson-format notebook using real
  checks): ``validate`` passes the solution and fails the release, ``autograde`` gives
  full marks to the solution, 0 to the blank release and partial marks to a partly
  right answer, and ``export`` writes a CSV.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

if importlib.util.find_spec("nbgrader") is None:  # found, not imported: importing takes 1.2 s
    pytest.skip("the instructor extra (nbgrader) is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import nbgrader_tools as tools  # noqa: E402

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
STUDENTS = sorted((ROOT / "student").glob("*.ipynb"))
# Known leaks in lessons being rewritten on other branches: strict, so the marker must go
# as soon as the lesson is fixed (issue 12: lesson 02 prints a reference with getsource).
KNOWN_LEAKS: set[str] = set()
# printing source code, or a lesson exercise's reference (lesson 00's own warm-up is no leak)
# (printing the package's own teaching modules, as lesson 04 prints naive_mha's, is no leak)
READS_A_REFERENCE = re.compile(r"getsource\(\s*(lesson\d\d\.|[\w.]*reference)|lesson\d\d\.\w+\.reference"
                               r"|\b_\w*reference\w*\(")


def _grader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _is_test_cell(cell) -> bool:
    meta = _grader(cell)
    return meta.get("grade", False) and not meta.get("solution", False) and meta.get("locked", False)


# -- the committed files are current ------------------------------------------------------
@pytest.fixture(scope="module")
def generated() -> dict[str, nbformat.NotebookNode]:
    converted = {p.name: tools.convert(tools._read(p), p.name)[0] for p in LESSONS}
    return tools.student_notebooks(converted)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_is_converted_and_conversion_is_idempotent(path):
    nb = tools._read(path)
    converted, rows = tools.convert(nb, path.name)
    assert tools._same(converted, nb), f"run `python3 course.py release`: {path.name} is not converted"
    ids = [_grader(c)["grade_id"] for c in nb.cells if _grader(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {path.name}"
    for i, cell in enumerate(nb.cells):
        if _grader(cell).get("solution") and cell.cell_type == "code":
            test = nb.cells[i + 1]
            assert _is_test_cell(test) and test.metadata["nbgrader"]["points"] >= 1
            assert test.source.rstrip().endswith(".assert_passed()")


def test_student_notebooks_are_current(generated):
    stale = tools.stale_students(generated, tools.STUDENT)
    assert not stale, f"stale student notebooks (run `python3 course.py release`): {stale}"


def test_a_stale_or_missing_student_notebook_is_detected(generated, tmp_path):
    for path in STUDENTS:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    edited = tmp_path / "03_dimension_walkthrough.ipynb"
    nb = tools._read(edited)
    nb.cells[0].source += "\nan edit made after the release"
    nbformat.write(nb, edited)
    (tmp_path / "04_pytorch_implementation.ipynb").unlink()
    (tmp_path / "99_renamed.ipynb").write_bytes(STUDENTS[0].read_bytes())
    assert sorted(Path(p).name for p in tools.stale_students(generated, tmp_path)) == [
        "03_dimension_walkthrough.ipynb", "04_pytorch_implementation.ipynb", "99_renamed.ipynb"]


def test_course_source_links_to_the_student_copies(tmp_path):
    written = tools.fill_course_source(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        f"source/{p.stem}/{p.name}" for p in tools._lessons() if not p.name.startswith("00_")]
    for path in written:
        nb = tools._read(path)
        links = nb.cells[0].source
        assert f"/student/{path.name}" in links and "/notebooks/" not in links, links
        tag = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines()
                   if line.startswith("tag = ")).split('"')[1]
        setup = next(c.source for c in nb.cells if "colab_setup" in c.source)
        assert links.count(f"/{tag}-student") == 2 and f"@{tag}-student" in setup  # the student tree
        original = tools._read(ROOT / "notebooks" / path.name)
        stamped = lambda c: "colab-setup" in c.metadata.get("tags", [])  # noqa: E731 - set-up cell
        visible = [c.source.split("\n### BEGIN HIDDEN TESTS")[0] for c in nb.cells[1:] if not stamped(c)]
        assert visible == [c.source for c in original.cells[1:] if not stamped(c)]
        tests = [c for c in nb.cells if _is_test_cell(c)]  # each autograded check regrades hidden
        assert tests and all("### BEGIN HIDDEN TESTS" in c.source and "_autograde.grade(" in c.source
                             and c.source.rstrip().endswith("### END HIDDEN TESTS") for c in tests)


def test_instructors_exercise_table_is_current():
    text = (ROOT / "INSTRUCTORS.md").read_text()
    assert tools.table() in text, "run `python scripts/nbgrader_tools.py table --write`"


def test_every_lesson_has_a_student_notebook_and_the_readme_links_them():
    assert [p.name for p in STUDENTS] == [p.name for p in LESSONS]
    readme = (ROOT / "README.md").read_text()
    assert "student/" in readme and "INSTRUCTORS.md" in readme


# -- integrity: nothing of a solution reaches a student ------------------------------------
def _solution_regions(source: str) -> list[list[str]]:
    regions, current = [], None
    for line in source.splitlines():
        if tools.BEGIN in line:
            current = []
        elif tools.END in line and current is not None:
            regions.append(current)
            current = None
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return regions


def _leaks(solution: nbformat.NotebookNode, student: nbformat.NotebookNode) -> list[str]:
    found = []
    student_code = [c.source for c in student.cells if c.cell_type == "code"]
    for cell in student.cells:
        if tools.MARKERS.search(cell.source):
            found.append("a solution marker survived")
        if cell.get("outputs"):
            found.append("a stored output (it could print a reference)")
        if READS_A_REFERENCE.search(cell.source):
            found.append(f"a cell reads a reference: {cell.source.splitlines()[0][:60]!r}")
    for cell in solution.cells:
        for region in _solution_regions(cell.source):
            body = "\n".join(region)
            for code in student_code:
                lines = "\n".join(line.strip() for line in code.splitlines() if line.strip())
                if body and body in lines:
                    found.append(f"a whole solution body appears in a student cell: {region[0]!r}")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_solution_text_in_the_student_notebook(path, request):
    if path.name in KNOWN_LEAKS:
        request.applymarker(pytest.mark.xfail(strict=True, reason="prints a reference; fixed on its "
                                              "lesson's branch (issue 12): drop it from KNOWN_LEAKS"))
    leaks = _leaks(tools._read(path), tools._read(ROOT / "student" / path.name))
    assert not leaks, leaks


def test_the_leak_finder_finds_leaks():
    solution = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n    ### END SOLUTION")])
    for bad in ("def g(x):\n    y = x + 1\n    return y", "print(inspect.getsource(lesson02.f))",
                "lesson02.SOFTMAX.reference"):
        student = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(bad)])
        assert _leaks(solution, student), bad
    blank = nbformat.v4.new_code_cell("def f(x):\n    raise NotImplementedError()")
    clean = nbformat.v4.new_notebook(cells=[blank])
    assert not _leaks(solution, clean)


# -- the student notebooks run, failing only in their test cells ---------------------------
def _execute(nb: nbformat.NotebookNode, folder: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    return nb


def _errors_outside_test_cells(nb: nbformat.NotebookNode) -> tuple[list[str], list[str]]:
    """(cells that raised, test cells that did not print their 'not attempted' message)."""
    stray, quiet = [], []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            stray.append(f"cell {i}: {errors[0].ename}: {errors[0].evalue[:200]}")
        if _is_test_cell(cell):
            text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
            if "not attempted yet" not in text:
                quiet.append(f"cell {i}: {cell.source.splitlines()[-1]}")
    return stray, quiet


@pytest.mark.slow
@pytest.mark.parametrize("path", STUDENTS, ids=lambda p: p.name)
def test_blank_student_notebook_runs_to_the_end(path, monkeypatch):
    """Run All on a blank student copy (as in JupyterLab or Colab, where no cell tag is read)
    runs every cell; each check prints its 'not attempted' message instead of stopping."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = _execute(tools._read(path), ROOT / "notebooks")
    stray, quiet = _errors_outside_test_cells(nb)
    assert not stray, f"cells that raised (Run All would stop there): {stray}"
    assert not quiet, f"test cells that did not report 'not attempted': {quiet}"
    not_run = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert not not_run, f"code cells not run: {not_run}"


# -- a scripted nbgrader course directory ---------------------------------------------------
TINY = [
    ("markdown", "# A tiny lesson\n\nTwo checked exercises and one answer graded by hand."),
    ("code", "import torch\n\nfrom course_utils.exercises import lesson03"),
    ("markdown", "### Exercise 3.3: count the parameters\n"
                 "> **Difficulty** ★★☆☆☆ · **Importance** ★★★☆☆ · **Time** ~5 min · "
                 "**Library use** plain Python; `course_utils.attention.shapes` no"),
    ("code", "def parameter_count(d_model: int, num_heads: int, bias: bool = True) -> int:\n"
             "    ### BEGIN SOLUTION\n"
             "    d_k = d_model // num_heads\n"
             "    weights = 3 * num_heads * d_model * d_k + d_model * d_model\n"
             "    return weights + (4 * d_model if bias else 0)\n"
             "    ### END SOLUTION"),
    ("code", "# NBVAL_CHECK_OUTPUT\nprint(lesson03.check_parameter_count(parameter_count))"),
    ("markdown", "### Exercise 3.2: merge the heads\n"
                 "> **Difficulty** ★☆☆☆☆ · **Importance** ★★★★☆ · **Time** ~5 min · "
                 "**Library use** torch ops yes; `course_utils` no"),
    ("code", "def merge_heads(heads: torch.Tensor) -> torch.Tensor:\n"
             "    ### BEGIN SOLUTION\n"
             "    B, h, T, dk = heads.shape\n"
             "    return heads.transpose(1, 2).reshape(B, T, h * dk)\n"
             "    ### END SOLUTION"),
    ("code", "# NBVAL_CHECK_OUTPUT\nprint(lesson03.check_merge_heads(merge_heads))"),
    ("markdown", "### Exercise 3.5: why split the width\n"
                 "> **Difficulty** ★★☆☆☆ · **Importance** ★★★☆☆ · **Time** ~5 min · **Library use** none"),
    ("markdown", "**Answer (graded by hand, 3 points):**\n\nSo that h heads cost what one wide head costs."),
    ("code", "print('the lesson goes on without the learners functions')"),
]


# Ways to get points without the work, as the instructor trial scripted them; each gets 0.
_WITH_TWINS = (
    "def parameter_count(d_model, num_heads, bias=True):\n"
    "    import sys\n"
    "    sys.setprofile(None)\n"
    "    from course_utils.attention.shapes import mha_parameter_count\n"
    "    return mha_parameter_count(d_model, num_heads, bias=bias)\n",
    "def merge_heads(heads):\n"
    "    import threading\n"
    "    from course_utils.attention.mha import MultiHeadAttention\n"
    "    box = []\n"
    "    mha = MultiHeadAttention(heads.shape[1] * heads.shape[3], heads.shape[1])\n"
    "    t = threading.Thread(target=lambda: box.append(mha.merge_heads(heads)))\n"
    "    t.start(); t.join()\n"
    "    return box[0]\n",
)
CHEATS = {
    "dave_twins_in_threads": {"answers": _WITH_TWINS},
    "erin_replaces_the_checks": {"before": (
        "from course_utils.exercises.core import Feedback\n"
        "lesson03.check_parameter_count = lambda fn: Feedback('x', 'correct', 'ok')\n"
        "lesson03.check_merge_heads = lambda fn: Feedback('x', 'correct', 'ok')\n")},
    "frank_patches_assert_passed": {"before": (
        "import os\n"
        "from course_utils.exercises.core import Feedback\n"
        "Feedback.assert_passed = lambda self: print(self)\n"
        "os.environ.pop('NBGRADER_EXECUTION', None)\n")},
    "grace_reads_the_stored_answers": {"before": (
        "import torch\n"
        "from course_utils.exercises import answers as _a\n"
        "_table = {}\n"
        "for _name, _ex in (('PARAMETER_COUNT', lesson03.PARAMETER_COUNT),\n"
        "                   ('MERGE_HEADS', lesson03.MERGE_HEADS)):\n"
        "    _entry = _a.stored('lesson03', _name)\n"
        "    for _case, _out in zip(_ex.make_cases(), _entry['expected']):\n"
        "        _table[(_name, repr(_case.args))] = _a.decode(_out)\n"),
        "answers": (
        "def parameter_count(d_model, num_heads, bias=True):\n"
        "    return _table[('PARAMETER_COUNT', repr((d_model, num_heads, bias)))]\n",
        "def merge_heads(heads):\n"
        "    return next(v for (n, a), v in _table.items()\n"
        "                if n == 'MERGE_HEADS' and v.numel() == heads.numel())\n")},
    "heidi_edits_and_deletes_test_cells": {"edit_tests": True},
    # the lookup again, disguised so that no line names the store: passes every practice check
    "ivan_disguised_lookup": {"before": (
        "import importlib\n"
        "_m = importlib.import_module('course_utils.exercises.' + 'an' + 'swers')\n"
        "_raw = getattr(torch, 'lo' + 'ad')(_m.ANSWERS_DIR / ('less' + 'on03.pt'), weights_only=True)\n"
        "_t = {}\n"
        "for _n in ('PARAMETER_COUNT', 'MERGE_HEADS'):\n"
        "    for _c, _o in zip(getattr(lesson03, _n).make_cases(), _raw['exercises'][_n]['expected']):\n"
        "        _t[(_n, repr(_c.args) + repr(_c.kwargs))] = getattr(_m, 'de' + 'code')(_o)\n"),
        "answers": (
        "def parameter_count(d_model, num_heads, bias=True):\n"
        "    return _t.get(('PARAMETER_COUNT', repr((d_model, num_heads)) + repr({'bias': bias})), 0)\n",
        "def merge_heads(heads):\n"
        "    return next((v for (n, a), v in _t.items()\n"
        "                 if n == 'MERGE_HEADS' and v.numel() == heads.numel()), heads)\n")},
}


def _cheating(student: nbformat.NotebookNode, how: dict) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(__import__("copy").deepcopy(student))
    answers = {"lesson03_parameter_count": 0, "lesson03_merge_heads": 1}
    for cell in nb.cells:
        grade_id = _grader(cell).get("grade_id")
        if grade_id in answers and "answers" in how:
            cell.source = how["answers"][answers[grade_id]]
    if "before" in how:
        first_answer = next(i for i, c in enumerate(nb.cells) if _grader(c).get("grade_id") in answers)
        nb.cells.insert(first_answer, nbformat.v4.new_code_cell(how["before"]))
    if how.get("edit_tests"):
        tests = [c for c in nb.cells if _is_test_cell(c)]
        tests[0].source = "print('all good')"
        nb.cells.remove(tests[1])
    return nb


def _tiny_notebook() -> nbformat.NotebookNode:
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    nb = nbformat.v4.new_notebook(cells=[make[kind](source) for kind, source in TINY])
    nb.metadata = {"kernelspec": tools.KERNEL, "language_info": {"name": "python"}}
    return nb


def _api(course: Path):
    """nbgrader's Python API on ``course`` (in-process: one import, no CLI start-ups)."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    config.Execute.timeout = 120
    config.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back (INSTRUCTORS.md)
    return NbGraderAPI(config=config), config


def _ok(result: dict) -> None:
    assert result.get("success"), f"{result.get('error')}\n{result.get('log')}"


@pytest.mark.slow
def test_release_validate_autograde_export_on_a_scripted_course(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin
    from nbgrader.validator import Validator

    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    course = tmp_path / "course"
    (course / "source" / "tiny").mkdir(parents=True)
    solution, rows = tools.convert(_tiny_notebook(), "03_tiny.ipynb")
    assert [(r.grade_id, r.points, r.graded) for r in rows] == [
        ("lesson03_parameter_count", 2, "auto"), ("lesson03_merge_heads", 1, "auto"),
        ("lesson03_ex3_5_answer", 3, "manual")]
    from course_utils.exercises.autograde import manifest

    assert tools.add_hidden_tests(solution, manifest(), salt=2026, solutions_dir=str(ROOT / "solutions")) == 2
    source = course / "source" / "tiny" / "tiny.ipynb"
    nbformat.write(solution, source)
    api, config = _api(course)

    _ok(api.generate_assignment("tiny", force=True, create=True))
    released = course / "release" / "tiny" / "tiny.ipynb"
    student = tools._read(released)
    assert not _leaks(solution, student)
    assert "HIDDEN TESTS" not in nbformat.writes(student) and "autograde" not in nbformat.writes(student)
    validator = Validator(config=config)
    assert not validator.validate(str(source)), "nbgrader validate fails the solution"
    failed = validator.validate(str(released)).get("failed", [])
    errors = sorted(f.get("raw_error", f["error"]) for f in failed)
    assert len(errors) == 3, failed  # two checks, and the answer graded by hand left blank
    assert "did not provide a response" in errors[-1]
    assert all("AssertionError" in e and "not attempted yet" in e for e in errors[:2]), errors

    # alice hands in the solution, bob the blank release, carol one right answer of two
    partly = tools._read(released)
    code = next(c for c in partly.cells if _grader(c).get("grade_id") == "lesson03_parameter_count")
    code.source = next(c.source for c in solution.cells
                       if _grader(c).get("grade_id") == "lesson03_parameter_count").replace(
        "    ### BEGIN SOLUTION\n", "").replace("\n    ### END SOLUTION", "")
    ast.parse(code.source)
    cheaters = {name: _cheating(student, how) for name, how in CHEATS.items()}
    for name, nb in (("alice", solution), ("bob", student), ("carol", partly), *cheaters.items()):
        folder = course / "submitted" / name / "tiny"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "tiny.ipynb")
        _ok(api.autograde("tiny", name, force=True, create=True))

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        names = ("alice", "bob", "carol", *cheaters)
        scores = {name: gradebook.find_submission("tiny", name) for name in names}
        assert scores["alice"].max_code_score == 3
        expected = {"alice": 3, "bob": 0, "carol": 2, **{name: 0 for name in cheaters}}
        assert {n: s.code_score for n, s in scores.items()} == expected
        ivan = tools._read(course / "autograded" / "ivan_disguised_lookup" / "tiny" / "tiny.ipynb")
        ivan_errors = [o.evalue for c in ivan.cells if _is_test_cell(c) for o in c.outputs
                       if o.output_type == "error"]
        assert len(ivan_errors) == 2 and all("not seen" in e for e in ivan_errors), ivan_errors
        assert scores["alice"].max_score == 6  # 3 autograded + 3 graded by hand
        graded = tools._read(course / "autograded" / "carol" / "tiny" / "tiny.ipynb")
        failure = [o for c in graded.cells if _grader(c).get("grade_id") == "lesson03_merge_heads_test"
                   for o in c.outputs if o.output_type == "error"]
        assert failure and failure[0].ename == "AssertionError" and "not attempted yet" in failure[0].evalue

        exporter = CsvExportPlugin(config=config)
        exporter.to = str(tmp_path / "grades.csv")
        exporter.export(gradebook)
    with open(tmp_path / "grades.csv") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    assert float(grades["alice"]["raw_score"]) == 3 and float(grades["bob"]["raw_score"]) == 0
