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
import json
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
BROWSER_RUNS_STUDENT_COPIES = (Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")).exists()
                               and importlib.util.find_spec("playwright") is not None)
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
        assert "HIDDEN TESTS" not in nbformat.writes(nb)  # the points come from the outside grader
    secrets = json.loads((tmp_path / ".course_grader.json").read_text())
    assert sorted(secrets["salts"]) == sorted(p.stem for p in written)
    assert len(set(secrets["salts"].values())) == len(written)  # one salt per lesson
    assert (tmp_path / ".course_grader.json").stat().st_mode & 0o077 == 0  # the instructor's only
    for path in written:
        text = path.read_text()
        assert all(str(salt) not in text for salt in secrets["salts"].values())
        assert str(ROOT / "solutions") not in text
    config = (tmp_path / "nbgrader_config.py").read_text()
    assert config.count(tools.CONFIG_BEGIN) == 1 and "configure as _grade_outside" in config
    again = json.loads((tools.fill_course_source(tmp_path) and tmp_path / ".course_grader.json").read_text())
    assert again["salts"] != secrets["salts"]  # a new release, new salts
    assert (tmp_path / "nbgrader_config.py").read_text().count(tools.CONFIG_BEGIN) == 1


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
    runs every cell; each check prints its 'not attempted' message instead of stopping.

    tests/test_course_browser.py asserts the same in JupyterLab itself; where it can run (Debian's
    chromium and playwright present, as in .ci/run) this kernel-only run is skipped."""
    if BROWSER_RUNS_STUDENT_COPIES:
        pytest.skip("tests/test_course_browser.py runs this copy to the end in JupyterLab")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = _execute(tools._read(path), ROOT / "notebooks")
    stray, quiet = _errors_outside_test_cells(nb)
    assert not stray, f"cells that raised (Run All would stop there): {stray}"
    assert not quiet, f"test cells that did not report 'not attempted': {quiet}"
    not_run = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert not not_run, f"code cells not run: {not_run}"


# -- the outside grader on the real lessons ------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in LESSONS if not p.name.startswith("00_")], ids=lambda p: p.name)
def test_each_lesson_scores_in_full_outside_the_notebook_and_its_release_scores_zero(path):
    """Every answer of the solution notebook, taken and run as autograde takes and runs it,
    is right on its own and on unseen cases; every answer of the student copy is not attempted."""
    from course_utils.exercises import autograde

    solutions_dir = str(ROOT / "solutions")
    solved = autograde.grade_notebook(tools._read(path), salt=20261128, solutions_dir=solutions_dir)
    assert solved and all(f.passed for f in solved.values()), {k: str(f) for k, f in solved.items()}
    blank = autograde.grade_notebook(tools._read(ROOT / "student" / path.name), salt=20261128,
                                     solutions_dir=solutions_dir)
    assert sorted(blank) == sorted(solved)
    assert all(f.status == "not attempted" for f in blank.values()), {k: str(f) for k, f in blank.items()}


# -- a scripted nbgrader course directory ---------------------------------------------------
# the tiny lesson's assignment and notebook: a course notebook's name, since the grader's secrets
# hold salts for the course's notebooks only
ASSIGNMENT = "03_dimension_walkthrough"
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


# Ways to get points without the work, as instructor trials scripted them (issues 29 and 34);
# every one of them hands in blank or broken work and must score 0. "before" is a cell put
# before the first answer (it runs only in the student's own kernel, never at autograde);
# "answers" replace the two answer cells; COURSE and CLONE stand for the real folders.
_BLANK = ("def parameter_count(d_model, num_heads, bias=True):\n    raise NotImplementedError()\n",
          "def merge_heads(heads):\n    raise NotImplementedError()\n")
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
# the right formulas, reached only when a file the answer must not see could be read
_IF_IT_CAN_READ = (
    "def parameter_count(d_model, num_heads, bias=True):\n"
    "    open(SECRET).read()\n"
    "    return 4 * d_model * d_model + (4 * d_model if bias else 0)\n",
    "def merge_heads(heads):\n"
    "    open(SECRET).read()\n"
    "    B, h, T, dk = heads.shape\n"
    "    return heads.transpose(1, 2).reshape(B, T, h * dk)\n",
)


def _writes(target: str, data: str) -> tuple[str, str]:
    """Blank answers that first try to write ``data`` to ``target`` (no flagged name in them)."""
    body = (f"    try:\n        with open({target!r}, 'w') as f:\n            f.write({data!r})\n"
            "    except OSError:\n        pass\n    raise NotImplementedError()\n")
    return ("def parameter_count(d_model, num_heads, bias=True):\n" + body,
            "def merge_heads(heads):\n" + body)


def _cheats(course: Path) -> dict[str, dict]:
    gradebook = str(course / "gradebook.db")
    solution_cell = ("def parameter_count(d_model, num_heads, bias=True):\n"
                     "    return 4 * d_model * d_model + (4 * d_model if bias else 0)\n")
    pyc = ROOT / "course_utils" / "exercises" / "__pycache__" / f"core.{sys.implementation.cache_tag}.pyc"
    next_student = course / "submitted" / "zoe_blank_after_planter" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    planted = (_writes(str(pyc), "a bytecode file that passes every check")[0],  # the manifest skips these
               _writes(str(next_student), "{}")[1])
    return {
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
        "ivan_disguised_lookup": {"answers": (  # the store read inside the answer, by plain names
            "import torch\n"
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    import course_utils\n"
            "    return 0\n",
            "import torch\n"
            "from pathlib import Path\n"
            "def merge_heads(heads):\n"
            "    raw = torch.load(STORE, weights_only=True)\n"
            "    outs = [v['__tensor__'] for v in raw['exercises']['MERGE_HEADS']['expected']]\n"
            "    return next((o for o in outs if o.numel() == heads.numel()), heads)\n")},
        # issue 34's list: the notebook's own test cells carry no grade
        "jack_input_transformer": {"before": (
            "get_ipython().input_transformers_post.append(\n"
            "    lambda lines: ['pass\\n'] if 'assert_passed' in ''.join(lines) else lines)\n")},
        "kate_ast_transformer": {"before": (
            "import ast\n"
            "class _Empty(ast.NodeTransformer):\n"
            "    def visit_Module(self, node):\n"
            "        if 'assert_passed' in ast.unparse(node):\n"
            "            node.body = [ast.Pass()]\n"
            "        return node\n"
            "get_ipython().ast_transformers.append(_Empty())\n")},
        "liam_custom_exc": {"before": (
            "import sys\n"
            "def _swallow(shell, etype, value, tb, tb_offset=None):\n"
            "    frame = sys._getframe()\n"
            "    while frame is not None:\n"
            "        result = frame.f_locals.get('result')\n"
            "        if result is not None and hasattr(result, 'error_in_exec'):\n"
            "            result.error_in_exec = None\n"
            "        frame = frame.f_back\n"
            "get_ipython().set_custom_exc((AssertionError,), _swallow)\n")},
        "mia_displayhook_points": {"before": (
            "import sys\n"
            "from course_utils.exercises.core import Feedback\n"
            "Feedback.assert_passed = lambda self: sys.displayhook(3)\n"),
            "answers": (
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    import sys\n"
            "    sys.displayhook(2)\n"
            "    raise NotImplementedError()\n", _BLANK[1])},
        "noah_writes_the_gradebook": {"before": (
            "import sqlite3\n"
            f"_db = sqlite3.connect({gradebook!r})\n"
            "_db.execute('update grade set auto_score = 0')\n"
            "_db.commit()\n"),
            "answers": _writes(gradebook, "not a database any more")},
        "olga_edits_core": {"answers": _writes(str(ROOT / "course_utils" / "exercises" / "core.py"),
                                               "raise SystemExit('edited')\n")},
        "oscar_patches_the_checks_in_memory": {"before": (
            "import sys\n"
            "from course_utils.exercises import core\n"
            "vars(core)['outputs_close'] = lambda *a, **k: True\n"
            "sys.addaudithook(lambda event, args: None)\n"
            "class _Finder:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        return None\n"
            "sys.meta_path.insert(0, _Finder())\n")},
        "paul_frame_walk": {"answers": (
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    try:\n"
            "        raise ValueError\n"
            "    except ValueError as e:\n"
            "        frame = e.__traceback__.tb_frame\n"
            "    while frame is not None:\n"
            "        for value in frame.f_locals.values():\n"
            "            if isinstance(value, list) and value and isinstance(value[0], int):\n"
            "                return value[0]\n"
            "        frame = frame.f_back\n"
            "    raise NotImplementedError()\n", _BLANK[1])},
        "quinn_reads_the_source_notebook": {"answers": tuple(
            a.replace("SECRET", repr(str(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")))
            for a in _IF_IT_CAN_READ)},
        "rita_reads_the_solutions": {"answers": tuple(
            a.replace("SECRET", repr(str(ROOT / "solutions" / "lesson03.py"))) for a in _IF_IT_CAN_READ)},
        "rob_imports_the_references": {"answers": (
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    from solutions.lesson03 import REFERENCES\n"
            "    return REFERENCES['PARAMETER_COUNT'](d_model, num_heads, bias)\n", _BLANK[1])},
        "sara_reads_the_secrets": {"answers": tuple(
            a.replace("SECRET", repr(str(course / ".course_grader.json"))) for a in _IF_IT_CAN_READ)},
        "tom_subclass_and_complex": {"answers": (
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    return complex(4 * d_model * d_model + (4 * d_model if bias else 0), 5)\n",
            "import torch\n"
            "class Agreeable(torch.Tensor):\n"
            "    def allclose(self, *args, **kwargs):\n"
            "        return True\n"
            "    def numpy(self, *args, **kwargs):\n"
            "        return torch.Tensor.numpy(self)\n"
            "def merge_heads(heads):\n"
            "    B, h, T, dk = heads.shape\n"
            "    return torch.zeros(B, T, h * dk).as_subclass(Agreeable)\n")},
        "uma_honest_only_outside_grading": {"answers": (
            "import os\n"
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    if os.environ.get('NBGRADER_EXECUTION'):\n"
            "        return 4 * d_model * d_model + (4 * d_model if bias else 0)\n"
            "    raise NotImplementedError()\n", _BLANK[1])},
        "vic_defaults_run_at_definition": {"answers": (  # new: code in a default argument
            "import torch\n"
            "def parameter_count(d_model, num_heads, bias=True, _t=torch.load(STORE, weights_only=True)):\n"
            "    for case, out in zip(_t['exercises']['PARAMETER_COUNT'].get('cases', []), []):\n"
            "        pass\n"
            "    return 0\n", _BLANK[1])},
        "wes_lingers_and_floods": {"answers": (  # new: a process left behind, and a memory flood
            "def parameter_count(d_model, num_heads, bias=True):\n"
            "    import time\n"
            "    from concurrent.futures import ProcessPoolExecutor\n"
            "    ProcessPoolExecutor(1).submit(time.sleep, 600)\n"
            "    raise NotImplementedError()\n",
            "def merge_heads(heads):\n"
            "    hoard = []\n"
            "    while True:\n"
            "        hoard.append(bytearray(2**28))\n")},
        "xena_the_solution_cell_elsewhere": {"answers": (  # the right code, but in no answer cell
            "def parameter_count(d_model, num_heads, bias=True):\n    raise NotImplementedError()\n"
            "exec(" + repr(solution_cell) + ")\n", _BLANK[1])},
        # the planter writes into the next student's submission, the package and the gradebook;
        # zoe, graded after, hands in the blank release
        "yuri_planter": {"answers": planted},
    }


# what only the sandbox stops (a plain subprocess lets them read or write the folders)
SANDBOX_ONLY = {"noah_writes_the_gradebook", "olga_edits_core", "quinn_reads_the_source_notebook",
                "rita_reads_the_solutions", "sara_reads_the_secrets", "yuri_planter"}


def _cheating(student: nbformat.NotebookNode, how: dict, store: str) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(__import__("copy").deepcopy(student))
    answers = {"lesson03_parameter_count": 0, "lesson03_merge_heads": 1}
    for cell in nb.cells:
        grade_id = _grader(cell).get("grade_id")
        if grade_id in answers and "answers" in how:
            cell.source = how["answers"][answers[grade_id]].replace("STORE", repr(store))
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
    """nbgrader's Python API on ``course`` (in-process: one import, no CLI start-ups), configured
    by the nbgrader_config.py lines that ``nbgrader_tools.py source`` writes."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    config = Config()
    config_file = tools.write_grading_config(course)
    exec(compile(config_file.read_text(), str(config_file), "exec"),  # as nbgrader would load it
         {"c": config, "get_config": lambda: config, "__file__": str(config_file)})
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    config.GradeOutside.per_call = 20  # seconds; the tiny answers take milliseconds
    config.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back (INSTRUCTORS.md)
    return NbGraderAPI(config=config), config


def _ok(result: dict) -> None:
    assert result.get("success"), f"{result.get('error')}\n{result.get('log')}"


def _test_outputs(course: Path, student: str) -> dict[str, str]:
    """grade_id -> the text of each test cell's outputs in the autograded notebook."""
    nb = tools._read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    return {_grader(c)["grade_id"]: "".join(o.get("text", "") + o.get("evalue", "") for o in c.outputs)
            for c in nb.cells if _is_test_cell(c)}


@pytest.mark.slow
def test_release_validate_autograde_export_on_a_scripted_course(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin
    from nbgrader.validator import Validator

    from course_utils.exercises import autograde, sandbox

    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    course = tmp_path / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    solution, rows = tools.convert(_tiny_notebook(), "03_tiny.ipynb")
    assert [(r.grade_id, r.points, r.graded) for r in rows] == [
        ("lesson03_parameter_count", 2, "auto"), ("lesson03_merge_heads", 1, "auto"),
        ("lesson03_ex3_5_answer", 3, "manual")]
    secrets = json.loads(autograde.write_secrets(course, [ASSIGNMENT], ROOT / "solutions").read_text())
    source = course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nbformat.write(solution, source)
    api, config = _api(course)

    _ok(api.generate_assignment(ASSIGNMENT, force=True, create=True))
    released = course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    student = tools._read(released)
    assert not _leaks(solution, student)
    validator = Validator(config=config)
    assert not validator.validate(str(source)), "nbgrader validate fails the solution"
    failed = validator.validate(str(released)).get("failed", [])
    errors = sorted(f.get("raw_error", f["error"]) for f in failed)
    assert len(errors) == 3, failed  # two checks, and the answer graded by hand left blank
    assert "did not provide a response" in errors[-1]
    assert all("AssertionError" in e and "not attempted yet" in e for e in errors[:2]), errors

    # alice hands in the solution, bob the blank release, carol one right answer of two, sam
    # two slips; then every cheat, the planter and zoe's blank release after it
    partly = tools._read(released)
    code = next(c for c in partly.cells if _grader(c).get("grade_id") == "lesson03_parameter_count")
    code.source = next(c.source for c in solution.cells
                       if _grader(c).get("grade_id") == "lesson03_parameter_count").replace(
        "    ### BEGIN SOLUTION\n", "").replace("\n    ### END SOLUTION", "")
    ast.parse(code.source)
    slips = _cheating(student, {"answers": (
        "def parameter_count(d_model, num_heads, bias=True):\n    return 4 * d_model * d_model\n",
        "def merge_heads(heads):\n    B, h, T, dk = heads.shape\n    return heads.reshape(B, T, h * dk)\n")},
        "")
    store = str(ROOT / "course_utils" / "exercises" / "answers" / "lesson03.pt")
    cheats = _cheats(course)
    if sandbox.isolation() != "bubblewrap":  # without the sandbox these would write into the clone
        cheats = {name: how for name, how in cheats.items() if name not in SANDBOX_ONLY}
    cheaters = {name: _cheating(student, how, store) for name, how in cheats.items()}
    before = autograde.manifest()
    order = (("alice", solution), ("bob", student), ("carol", partly), ("sam", slips), *cheaters.items(),
             ("zoe_blank_after_planter", student))
    for name, nb in order:
        folder = course / "submitted" / name / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")
    logs = {}
    for name, _ in order:
        result = api.autograde(ASSIGNMENT, name, force=True, create=True)
        _ok(result)
        logs[name] = result.get("log", "")
    assert "has changed" not in logs["alice"] + logs["bob"]  # no hidden tests: checksums stay the same

    assert autograde.manifest() == before, "an answer changed the course package"
    if "yuri_planter" in cheaters:
        pyc = ROOT / "course_utils" / "exercises" / "__pycache__" / f"core.{sys.implementation.cache_tag}.pyc"
        assert not pyc.exists() or b"passes every check" not in pyc.read_bytes()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        names = [name for name, _ in order]
        scores = {name: gradebook.find_submission(ASSIGNMENT, name) for name in names}
        assert scores["alice"].max_code_score == 3
        expected = {"alice": 3, "bob": 0, "carol": 2, "sam": 0, **{name: 0 for name in cheaters},
                    "zoe_blank_after_planter": 0}
        assert {n: s.code_score for n, s in scores.items()} == expected
        assert scores["alice"].max_score == 6  # 3 autograded + 3 graded by hand
        exporter = CsvExportPlugin(config=config)
        exporter.to = str(tmp_path / "grades.csv")
        exporter.export(gradebook)
    sam = _test_outputs(course, "sam")
    assert "without biases" in sam["lesson03_parameter_count_test"], sam
    assert "transpose" in sam["lesson03_merge_heads_test"], sam
    carol = _test_outputs(course, "carol")
    assert "not attempted yet" in carol["lesson03_merge_heads_test"], carol
    ivan = _test_outputs(course, "ivan_disguised_lookup")
    assert "course_utils" in ivan["lesson03_parameter_count_test"]
    # its lookup of the stored outputs reads a file: refused before it runs (it failed on the
    # unseen cases before the grader refused file readers)
    assert "`.load` (reads or writes files" in ivan["lesson03_merge_heads_test"], ivan
    for name in ("quinn_reads_the_source_notebook", "rita_reads_the_solutions", "sara_reads_the_secrets"):
        if name not in cheaters:  # a sandbox-only cheat, left out above without bubblewrap
            continue
        for text in _test_outputs(course, name).values():  # refused unread, or out of sight
            refused = "reads or writes files" in text or "imports" in text
            unseen = sandbox.isolation() == "bubblewrap" and "FileNotFoundError" in text
            assert refused or unseen, (name, text)
    assert "MemoryError" in _test_outputs(course, "wes_lingers_and_floods")["lesson03_merge_heads_test"]
    zoe = tools._read(course / "submitted" / "zoe_blank_after_planter" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    assert "tiny" in zoe.cells[0].source  # the planter could not overwrite the next submission
    with open(tmp_path / "grades.csv") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    assert float(grades["alice"]["raw_score"]) == 3 and float(grades["bob"]["raw_score"]) == 0

    # the feedback shows the grader's verdict, and no salt or path of the grader (sara's own
    # code names the secrets file: it is her cell, shown back to her; its contents are not)
    for name in ("alice", "bob", "sara_reads_the_secrets"):
        if name not in logs:  # sara is a sandbox-only cheat, left out above without bubblewrap
            continue
        _ok(api.generate_feedback(ASSIGNMENT, name))
        html = (course / "feedback" / name / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        assert "Graded outside the notebook" in html
        assert str(secrets["salts"][ASSIGNMENT]) not in html and secrets["release"] not in html
        if name != "sara_reads_the_secrets":
            assert str(ROOT / "solutions") not in html and ".course_grader" not in html


@pytest.mark.parametrize("inside", ["notebooks", "student", "student/new/course", "docs/..", "tests/./x"])
def test_source_into_a_folder_inside_the_clone_is_refused(inside, tmp_path, capsys, monkeypatch):
    """`source notebooks` or `source student` wrote source/NN_topic/, nbgrader_config.py and the
    grader's secret salts among the lessons or the learners' copies (battery 12, items 4b/4c):
    every folder inside the clone is refused, like the clone itself, also through a link."""
    monkeypatch.setattr(tools, "fill_course_source", lambda *a: pytest.fail("it wrote"))
    link = tmp_path / "course-link"
    link.symlink_to(ROOT / inside.split("/")[0])
    for course_dir in (str(ROOT / inside), str(link)):
        assert tools.main(["source", course_dir]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "inside this clone" in err or "this clone's own folder" in err, err
        assert "outside the clone, e.g. ../mha-course" in err and "nothing was written" in err, err


def test_source_beside_the_clone_is_not_refused():
    """A sibling whose name starts like the clone's (../mha-course-2 beside ../mha-course) is outside."""
    assert tools._course_dir_problem(str(ROOT.parent / (ROOT.name + "-course"))) is None
    assert tools._course_dir_problem(str(ROOT.parent / "mha-course")) is None
