"""Battery 13's CLI and grading findings taken by fix43b (issue 38; the rest is in
test_bad_input_battery13.py). Each test failed before its fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_cli_interrupts import _interrupt, _one_line

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_TOOLS = ROOT / "scripts" / "notebook_tools.py"


def _tiny_notebooks(folder: Path, *sources: str) -> list[Path]:
    """One-cell notebooks (a.ipynb, b.ipynb, ...) that running changes (it adds the outputs)."""
    paths = []
    for name, source in zip("abcdefgh", sources, strict=False):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        path = folder / f"{name}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def _tool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


# --- data loss: `notebook_tools execute A B` is all or nothing -------------------------------

@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
def test_execute_interrupted_on_the_second_notebook_leaves_the_first_as_it_was(tmp_path):
    """b13 cli:notebook_tools SIGINT@15s execute-2nbs: the first notebook was already rewritten."""
    work = tmp_path / "nbs"
    work.mkdir()
    paths = _tiny_notebooks(work, "print('first')", "print('second')")
    before = {p: p.read_bytes() for p in paths}
    done = _interrupt(tmp_path, work, [sys.executable, str(NOTEBOOK_TOOLS), "execute", "a.ipynb", "b.ipynb"],
                      "open|b.ipynb|2", signal.SIGINT)  # b opened to run it: a has run
    _one_line(done, signal.SIGINT, "notebook_tools.py: ", "not written")
    assert {p: p.read_bytes() for p in paths} == before
    assert sorted(p.name for p in work.iterdir()) == ["a.ipynb", "b.ipynb"]  # no temporary left


@pytest.mark.slow
def test_execute_with_a_failing_second_notebook_leaves_the_first_as_it_was(tmp_path):
    paths = _tiny_notebooks(tmp_path, "print('first')", "raise ValueError('broken on purpose')")
    before = {p: p.read_bytes() for p in paths}
    done = _tool(str(NOTEBOOK_TOOLS), "execute", *map(str, paths))
    assert done.returncode == 2, done
    assert "ValueError" in done.stderr and "not written" in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in paths} == before


@pytest.mark.slow
def test_execute_of_two_good_notebooks_writes_both(tmp_path):
    paths = _tiny_notebooks(tmp_path, "print('first')", "print('second')")
    done = _tool(str(NOTEBOOK_TOOLS), "execute", *map(str, paths))
    assert done.returncode == 0, done
    outputs = [nbformat.read(p, as_version=4).cells[0].outputs for p in paths]
    assert [o[0]["text"] for o in outputs] == ["first\n", "second\n"]


# --- grading: the grade_id, not the submitted source, says which check grades a test cell ----

SOFTMAX = ("import torch\n\n\ndef softmax_rows(scores):\n    ### BEGIN SOLUTION\n"
           "    e = (scores - scores.max(dim=-1, keepdim=True).values).exp()\n"
           "    return e / e.sum(dim=-1, keepdim=True)\n    ### END SOLUTION\n")
STUB = "def attention_weights(q, k):\n    raise NotImplementedError('your code here')\n"


def _graded_cell(source: str, grade_id: str, *, test: bool) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": test, "grade_id": grade_id, "locked": test, "solution": not test,
                                 "schema_version": 3, **({"points": 1} if test else {})}
    return cell


def _submission(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=list(cells))


def test_a_test_cell_edited_to_call_another_exercises_check_gets_no_points():
    """b13 gradenb2:swap-check-to-easier-done-one: attention_weights' test cell, edited to call the
    (solved) softmax_rows check, gave lesson02_attention_weights_test (True, 'correct')."""
    from course_utils.exercises import autograde

    nb = _submission(_graded_cell(SOFTMAX, "lesson02_softmax_rows", test=False),
                     _graded_cell(STUB, "lesson02_attention_weights", test=False),
                     _graded_cell("lesson02.check_softmax_rows(softmax_rows).assert_passed()",
                                  "lesson02_attention_weights_test", test=True))
    results = autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    feedback = results["lesson02_attention_weights_test"]
    assert not feedback.passed, str(feedback)
    assert "lesson02.check_softmax_rows" in str(feedback) and "released test cell" in str(feedback)
    assert nb.cells[2].outputs[0]["output_type"] == "error"


@pytest.mark.parametrize("grade_id, call", [
    ("lesson02_softmax_rows_test", "lesson02.check_softmax_rows"),
    ("lesson02_softmax_rows_2_test", "lesson02.check_softmax_rows"),
    ("lesson02_softmax_rows_test_2", "lesson02.check_softmax_rows"),
])
def test_a_test_cell_calling_its_own_check_is_its_exercise(grade_id, call):
    from course_utils.exercises import autograde, sandbox

    assert autograde._checks_its_own_exercise(grade_id, sandbox.check_call(f"{call}(f)"))
    assert not autograde._checks_its_own_exercise("lesson02_attention_weights_test",
                                                  sandbox.check_call(f"{call}(f)"))
    assert not autograde._checks_its_own_exercise("lesson03_softmax_rows_test",
                                                  sandbox.check_call(f"{call}(f)"))


def test_a_grade_id_on_two_cells_is_named():
    """b13 gradenb2:grade-id-dup-with-work: the second cell's verdict replaced the first's, no word."""
    from course_utils.exercises import autograde

    nb = _submission(_graded_cell(SOFTMAX, "lesson02_softmax_rows", test=False),
                     _graded_cell("lesson02.check_softmax_rows(softmax_rows).assert_passed()",
                                  "lesson02_softmax_rows_test", test=True),
                     _graded_cell(STUB, "lesson02_attention_weights", test=False),
                     _graded_cell("lesson02.check_attention_weights(attention_weights).assert_passed()",
                                  "lesson02_softmax_rows_test", test=True))
    with pytest.raises(ValueError, match=r"cells 1 and 3 both carry grade_id 'lesson02_softmax_rows_test'"):
        autograde.grade_notebook(nb, salt=None, solutions_dir=None)


@pytest.mark.parametrize("cells, said", [
    (None, "it has no 'cells'"),
    ("x", "its 'cells' is str"),
])
def test_a_notebook_without_a_cells_list_says_what_is_missing(cells, said):
    """b13 gradenb:nb-no-cells-key / nb-cells-not-list: "got NotebookNode", the missing cells unnamed."""
    from course_utils.exercises import autograde

    nb = nbformat.v4.new_notebook()
    if cells is None:
        del nb["cells"]
    else:
        nb["cells"] = cells
    with pytest.raises(TypeError, match="cells") as raised:
        autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    assert said in str(raised.value)


@pytest.mark.parametrize("salt, solutions_dir, said", [
    (3, None, "go together .* got salt=3 and solutions_dir=None"),
    (None, "SOLUTIONS", "go together .* got solutions_dir=.* and salt=None"),
])
def test_a_salt_without_its_solutions_folder_is_refused(salt, solutions_dir, said):
    """b13 grade-args:salt-without-dir: graded with "0 of them unseen", the salt ignored."""
    from course_utils.exercises import autograde

    folder = str(ROOT / "solutions") if solutions_dir else None
    with pytest.raises(ValueError, match=said):
        autograde.grade_answer("lesson02", "check_softmax_rows", SOFTMAX, "softmax_rows", salt=salt,
                               solutions_dir=folder)


# --- CLI ------------------------------------------------------------------------------------

@pytest.mark.parametrize("draft, said", [
    ("# %% [markdown]\n# # Title\nnot a comment\n\n# %%\nx = 1\n", "line 3: in a markdown cell"),
    ("x = 1\n# %%\ny = 2\n", "line 1: text before the first '# %%'"),
])
def test_build_of_a_malformed_draft_leaves_the_notebook_as_it_was(tmp_path, draft, said):
    """b13 cli:notebook_tools build-overwrite-lesson-bad-draft: exit 0, the lesson overwritten."""
    lesson = tmp_path / "02_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("kept")]), lesson)
    before = lesson.read_bytes()
    (tmp_path / "d.py").write_text(draft)
    done = _tool(str(NOTEBOOK_TOOLS), "build", str(tmp_path / "d.py"), str(lesson))
    assert done.returncode == 2 and said in done.stderr and "was not written" in done.stderr, done
    assert lesson.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_lesson.ipynb", "d.py"]


def test_build_of_a_good_draft_still_replaces_the_notebook(tmp_path):
    lesson = tmp_path / "02_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("old")]), lesson)
    (tmp_path / "d.py").write_text("#!/usr/bin/env python\n# %% [markdown]\n# # Title\n#\n# text\n\n"
                                   "# %%\nx = 1\n")
    done = _tool(str(NOTEBOOK_TOOLS), "build", str(tmp_path / "d.py"), str(lesson))
    assert done.returncode == 0, done
    cells = nbformat.read(lesson, as_version=4).cells
    assert [(c.cell_type, c.source) for c in cells] == [("markdown", "# Title\n\ntext"), ("code", "x = 1")]


def _inside_the_clone(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """An OUT_DIR inside the clone (a new folder, removed by the caller), directly or through a link."""
    inside = ROOT / f".b13b-student-tree-{os.getpid()}"
    if how == "direct":
        return inside, inside / "tree"
    (tmp_path / "ln").symlink_to(ROOT)
    return inside, tmp_path / "ln" / inside.name / "tree"


@pytest.mark.parametrize("how", ["direct", "symlink"])
def test_student_tree_into_the_clone_is_refused_before_writing(tmp_path, how):
    """b13 cli:course.py student-tree-inside / student_tree.py out-symlink-into-clone: 92 files
    written inside the clone."""
    inside, out = _inside_the_clone(tmp_path, how)
    try:
        done = _tool(str(ROOT / "scripts" / "student_tree.py"), str(out), cwd=tmp_path)
        assert done.returncode == 2 and "inside this repository" in done.stderr, done
        assert len(done.stderr.strip().splitlines()) == 1 and "nothing was written" in done.stderr
        assert not inside.exists()
    finally:
        import shutil

        shutil.rmtree(inside, ignore_errors=True)


def test_student_tree_through_a_symlink_loop_says_so(tmp_path):
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    done = _tool(str(ROOT / "scripts" / "student_tree.py"), str(tmp_path / "l1" / "tree"), cwd=tmp_path)
    assert done.returncode == 2 and "loops" in done.stderr and "Traceback" not in done.stderr, done


def test_nbgrader_tools_source_on_a_symlink_loop_says_so_in_one_line(tmp_path):
    """b13 cli:nbgrader_tools source-symlink-loop: exit 1 and a Python traceback."""
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    done = _tool(str(ROOT / "scripts" / "nbgrader_tools.py"), "source", str(tmp_path / "l1"), cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "loops" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l1", "l2"]


def test_course_test_refuses_a_path_with_a_control_character_before_running_anything(tmp_path):
    """b13 cli:course.py test-nul: `course.py test 'a\\x01b'` started pytest -n 2 (exit 5)."""
    done = _tool(str(ROOT / "course.py"), "test", "a\x01b", cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.strip() == (f"course.py test: no such test file or folder: 'a\\x01b' (paths are "
                                   f"relative to {ROOT}; nothing was run)"), done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_course_lab_refuses_an_unknown_option_by_name(tmp_path):
    """b13 cli:course.py lab-bogus: JupyterLab started with --bogus (an orphan server to kill)."""
    run = subprocess.Popen([sys.executable, str(ROOT / "course.py"), "lab", "--bogus", "--no-browser",
                            "--ServerApp.token=x"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=dict(os.environ, COURSE_VENV=str(Path(sys.executable).parent.parent)))
    try:
        out, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        pytest.fail("JupyterLab was started: the unknown option was not refused")
    assert run.returncode == 2, (out, err)
    assert "unknown option --bogus" in err and "--no-browser" not in err and "not started" in err, err


@pytest.mark.slow  # it asks the installed JupyterLab (2-3 s)
def test_course_lab_knows_jupyterlabs_own_options():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_course_13b", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    if not course._bin("python").exists():
        pytest.skip("no .venv with JupyterLab here")
    args = ["--no-browser", "--port=8899", "--ip", "0.0.0.0", "--ServerApp.token=x", "--LabApp.x=1",
            "--bogus", "-q", "notebooks/00_start_here.ipynb"]
    assert course.unknown_lab_options(args) == ["--bogus", "-q"]


def test_bench_gqa_refuses_a_shape_too_large_for_memory_when_parsed(capsys):
    """b13 cli:bench gqa-shapes-huge: the decode benchmark ran 13 s, then a traceback from
    check_fits_in_memory in SmallDecoder.__init__ (exit 1)."""
    from course_utils.bench import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["gqa", "--shapes", "1x64", "1024x65536"])
    err = capsys.readouterr()
    assert stopped.value.code == 2 and err.out == "", err
    assert "--shapes 1024x65536 asks for" in err.err and "more than this machine's" in err.err, err.err
    assert "Traceback" not in err.err


def test_bench_gqa_default_options_pass_the_memory_check():
    from course_utils.bench import cli

    for argv in (["gqa"], ["gqa", "--full"], ["gqa", "--shapes", "1x1024", "8x4096"]):
        args = cli.build_parser().parse_args(argv)
        assert args.check(args) is None
