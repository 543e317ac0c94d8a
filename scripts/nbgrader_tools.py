#!/usr/bin/env python3
"""nbgrader tooling: solution notebooks -> nbgrader-native lessons and student notebooks.

    python scripts/nbgrader_tools.py convert notebooks/*.ipynb
        Add nbgrader metadata to each lesson, in place (idempotent: a second run
        changes nothing). See :func:`convert` for what the exercise format must be.
    python scripts/nbgrader_tools.py release
        ``convert`` every lesson in notebooks/, then write student/NN_topic.ipynb for
        each with ``nbgrader generate_assignment`` (one assignment per lesson, in a
        throw-away course directory). ``python3 course.py release`` runs this.
    python scripts/nbgrader_tools.py check
        Exit 1 (and say which) when a lesson is not converted or a student notebook is
        stale, i.e. when ``release`` would change a file.
    python scripts/nbgrader_tools.py source COURSE_DIR
        Copy the graded lessons (01-07) into an nbgrader course directory as
        COURSE_DIR/source/NN_topic/NN_topic.ipynb, with their Colab/Binder badges pointing
        at the student copy (student/), so the released notebooks never link to solutions;
        write new grading salts (COURSE_DIR/.course_grader.json, one per lesson) and the
        lines in COURSE_DIR/nbgrader_config.py that make `nbgrader autograde` grade outside
        the notebook (course_utils/exercises/autograde.py). COURSE_DIR must be outside this
        clone: the clone or any folder inside it (links followed) is refused, nothing written.
    python scripts/nbgrader_tools.py table
        Print the exercise table (Markdown) that INSTRUCTORS.md holds; ``table --write``
        replaces it between INSTRUCTORS.md's ``<!-- exercise-table -->`` markers.

The exercise format (the course's developers' guide) is what makes this mechanical:
a heading ``### Exercise N.K: title`` with a ``> **Difficulty** ★★☆☆☆ · ...`` line;
one code cell whose function body holds ``### BEGIN SOLUTION`` ... ``### END SOLUTION``;
the next code cell ``# NBVAL_CHECK_OUTPUT`` + ``print(lessonNN.check_xxx(fn))``; and
hand-graded answers as markdown cells starting ``**Answer (graded by hand, N points):**``.

Interrupted (Ctrl-C, SIGINT, or SIGTERM), a command stops with one line on stderr saying what
was left as it was (every write is all or nothing), and exits 130 or 143.
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # scripts/, for course_cli
    sys.path.append(str(Path(__file__).resolve().parent))
from course_cli import load_cli  # noqa: E402  (course_utils/cli.py, before the slow imports)

cli = load_cli()
if __name__ == "__main__":
    # before its other imports: a signal then gets one line; one without .venv's modules: one line
    cli.stop_at_once("nbgrader_tools.py", needs=("nbformat",))

import copy  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import nbformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
STUDENT = ROOT / "student"
INSTRUCTORS = ROOT / "INSTRUCTORS.md"
# what an interruption reports once release has written the lessons and student copies
RELEASED = ("the lessons and student copies were written, INSTRUCTORS.md's exercise table was left as "
            "it was (release again to write it)")

KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CHECK_OUTPUT = "# NBVAL_CHECK_OUTPUT"
HEADING = re.compile(r"^#{2,4}\s*Exercise\s+(?P<number>\d+\.\d+)\s*[:.]\s*(?P<title>.+?)\s*$", re.MULTILINE)
DIFFICULTY = re.compile(
    r"^>\s*\*\*Difficulty\*\*\s*(?P<difficulty>[★☆]+)\s*·\s*\*\*Importance\*\*\s*(?P<importance>[★☆]+)"
    r"\s*·\s*\*\*Time\*\*\s*~?\s*(?P<minutes>\d+)\s*min\s*·\s*\*\*Library use\*\*\s*(?P<library>.+?)\s*$",
    re.MULTILINE,
)
# the check, in any of the forms a lesson may hold: print(...), bare, or already converted
CHECK_CALL = re.compile(
    r"^(?:print\()?(?P<module>lesson\d\d)\.(?P<check>check_\w+)\((?P<arg>\w+)\)(?:\)|\.assert_passed\(\))?\s*$"
)
MARKERS = re.compile(r"(BEGIN|END) SOLUTION")  # what nbgrader looks for, anywhere in a line
ANSWER = re.compile(r"^\*\*Answer \(graded by hand, (?P<points>\d+) points?\):\*\*\s*$")
SCHEMA = 3


class FormatError(ValueError):
    """A notebook does not follow the exercise format; the message says where and how."""


@dataclass
class ExerciseRow:
    """One exercise, for INSTRUCTORS.md's table."""

    lesson: str
    number: str
    title: str
    grade_id: str
    points: int
    difficulty: str
    minutes: str
    graded: str  # "auto" | "manual"
    library: str


def _meta(grade_id: str, *, solution: bool, grade: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def _check_line(source: str) -> re.Match | None:
    """The check call of a check cell: only the marker, the call and blank lines allowed."""
    lines = [line for line in source.strip().splitlines() if line.strip() and line.strip() != CHECK_OUTPUT]
    return CHECK_CALL.match(lines[0].strip()) if len(lines) == 1 else None


def _as_printed(outputs: list) -> list:
    """A displayed Feedback (``execute_result``) becomes the text its ``print`` gives."""
    fixed = []
    for out in outputs:
        if out.get("output_type") == "execute_result" and "text/plain" in out.get("data", {}):
            text = out["data"]["text/plain"]
            fixed.append(nbformat.v4.new_output("stream", name="stdout", text=text.rstrip("\n") + "\n"))
        else:
            fixed.append(out)
    return fixed


def _split_legacy_cell(cell: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    """An older lesson's solution cell that ends with its own check: split the check off.

    Returns the new check cell (with the solution cell's outputs), or None when the
    solution cell holds no check.
    """
    lines = cell.source.rstrip().splitlines()
    ends = [i for i, line in enumerate(lines) if line.strip().startswith(END)]
    if not ends:  # unpaired markers: convert names the cell ("unmatched solution markers")
        return None
    end = ends[-1]
    tail = [line for line in lines[end + 1:] if line.strip() and not line.startswith((" ", "\t"))]
    calls = [line for line in tail if CHECK_CALL.match(line.strip())]
    if not calls:
        return None
    keep = [line for line in lines if line not in calls and line.strip() != CHECK_OUTPUT]
    while keep and not keep[-1].strip():
        keep.pop()
    cell.source = "\n".join(keep)
    check = nbformat.v4.new_code_cell(f"{CHECK_OUTPUT}\n{calls[0].strip()}")
    check.pop("id", None)
    if "id" in cell:  # nbformat 4.5: a stable id, derived from the solution cell's
        check["id"] = f"{cell['id'][:57]}-check"
    check.outputs, cell.outputs = _as_printed(cell.outputs), []
    check.execution_count, cell.execution_count = cell.execution_count, None
    return check


def convert(nb: nbformat.NotebookNode, name: str = "notebook",
            ) -> tuple[nbformat.NotebookNode, list[ExerciseRow]]:
    """Give every exercise of ``nb`` its nbgrader metadata; return the notebook and its exercises.

    * each code cell holding a solution region becomes an autograded-answer cell
      (``grade_id`` ``lessonNN_xxx`` from the check ``lessonNN.check_xxx`` after it);
    * the check cell after it becomes a locked test cell ``lessonNN_xxx_test`` whose
      source is ``lessonNN.check_xxx(fn).assert_passed()`` (it prints the same feedback
      and raises ``AssertionError`` with the named mistake), worth the exercise's
      Difficulty stars in points (1 when the exercise has no Difficulty line);
    * each ``**Answer (graded by hand, N points):**`` markdown cell becomes a manually
      graded answer cell worth N points, ``grade_id`` ``lessonNN_exN_K_answer``.

    Every other cell loses any nbgrader metadata, so the result depends only on the
    cells' text: converting twice gives the same notebook. Raises :class:`FormatError`.
    """
    try:  # an unpaired marker: named by cell and line before any splitting
        _notebook_tools().check_solution_markers(nb, name)
    except _notebook_tools().ToolError as exc:
        raise FormatError(str(exc)) from None
    nb = copy.deepcopy(nb)
    lesson = re.match(r"(\d\d)", name)
    lesson_id = f"lesson{lesson.group(1)}" if lesson else "lesson"
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if nb.nbformat_minor < 5:  # cell ids exist from nbformat 4.5 on
            cell.pop("id", None)
    # older lessons keep the check inside the solution cell: split it off first
    cells: list = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "code" and BEGIN in cell.source:
            check = _split_legacy_cell(cell)
            if check is not None:
                cells.append(check)
    nb.cells = cells

    rows: list[ExerciseRow] = []
    used: set[str] = set()
    heading = {"number": "?", "title": "?", "difficulty": "", "minutes": "", "library": ""}

    def unique(grade_id: str) -> str:
        candidate, n = grade_id, 2
        while candidate in used:
            candidate, n = f"{grade_id}_{n}", n + 1
        used.add(candidate)
        return candidate

    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type == "markdown":
            found = HEADING.search(cell.source)
            if found:
                heading = {"number": found["number"], "title": found["title"].strip(),
                           "difficulty": "", "minutes": "", "library": ""}
                stars = DIFFICULTY.search(cell.source)
                if stars:
                    heading.update(difficulty=stars["difficulty"], minutes=stars["minutes"],
                                   library=stars["library"].strip())
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            answer = ANSWER.match(first.strip())
            if answer:
                grade_id = unique(f"{lesson_id}_ex{heading['number'].replace('.', '_')}_answer")
                points = int(answer["points"])
                cell.metadata["nbgrader"] = _meta(grade_id, solution=True, grade=True, locked=False,
                                                  points=points)
                rows.append(ExerciseRow(lesson_id[-2:], heading["number"], heading["title"], grade_id,
                                        points, heading["difficulty"], heading["minutes"], "manual",
                                        heading["library"]))
            elif MARKERS.search(cell.source):
                raise FormatError(f"{where}: a markdown cell quotes a solution marker; nbgrader takes any "
                                  "line holding 'BEGIN SOLUTION' or 'END SOLUTION' for one. Describe the "
                                  "markers in other words.")
            continue
        if cell.cell_type != "code" or BEGIN not in cell.source:
            if cell.cell_type == "code" and MARKERS.search(cell.source):
                raise FormatError(f"{where}: a solution marker outside a solution region ('{BEGIN}' "
                                  f"... '{END}' inside a function body); nbgrader would refuse the lesson.")
            continue
        if cell.source.count(BEGIN) != cell.source.count(END):
            raise FormatError(f"{where}: unmatched solution markers.")
        for line in cell.source.splitlines():
            if line.strip().startswith(BEGIN) and not line.startswith((" ", "\t")):
                raise FormatError(f"{where}: the solution region must sit inside a function body "
                                  "(indented), so the student version still runs this cell.")
        following = nb.cells[index + 1] if index + 1 < len(nb.cells) else None
        is_code = following is not None and following.cell_type == "code"
        call = _check_line(following.source) if is_code else None
        if call is None:
            raise FormatError(f"{where}: the solution cell must be followed by its check cell, "
                              f"'{CHECK_OUTPUT}' then 'print(lessonNN.check_xxx(fn))'.")
        base = f"{call['module']}_{call['check'].removeprefix('check_')}"
        grade_id = unique(base)
        points = heading["difficulty"].count("★") or 1
        cell.metadata["nbgrader"] = _meta(grade_id, solution=True, grade=False, locked=False)
        following.source = f"{CHECK_OUTPUT}\n{call['module']}.{call['check']}({call['arg']}).assert_passed()"
        following.outputs = _as_printed(following.get("outputs", []))
        following.metadata["nbgrader"] = _meta(unique(f"{grade_id}_test"), solution=False, grade=True,
                                               locked=True, points=points)
        rows.append(ExerciseRow(lesson_id[-2:], heading["number"], heading["title"], grade_id, points,
                                heading["difficulty"], heading["minutes"], "auto", heading["library"]))
    return nb, rows


def _lessons() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _notebook_tools():
    """scripts/notebook_tools.py (regular-file checks, all-or-nothing writes)."""
    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import notebook_tools

    return notebook_tools


class NotebookReadError(ValueError):
    """A file that should be a notebook cannot be read as one; the message names it."""


def _read(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, or a :class:`NotebookReadError` naming the file and why (not
    JSON, not a notebook, missing, a folder, a FIFO: a FIFO would block the read forever)."""
    try:
        _notebook_tools().check_regular(path, "notebook")
        return nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any of those, named with the file
        text = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise NotebookReadError(f"cannot read {_shown(path)} as a notebook ({type(exc).__name__}: "
                                f"{text[:200]})") from None


def _same(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    return nbformat.writes(a) == nbformat.writes(b)


def student_notebooks(sources: dict[str, nbformat.NotebookNode]) -> dict[str, nbformat.NotebookNode]:
    """``nbgrader generate_assignment`` on converted lessons (name -> notebook), in a temp course.

    Each lesson is its own assignment (named after the notebook); returns the student
    versions by the same names. Raises RuntimeError with nbgrader's log when it refuses.
    """
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    # nbgrader runs the `alembic` command for its gradebook: find it beside this Python
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    out: dict[str, nbformat.NotebookNode] = {}
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        config = Config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
        config.GenerateAssignment.force = True
        api = NbGraderAPI(config=config)
        for name, nb in sources.items():
            stem = Path(name).stem
            folder = course / "source" / stem
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / name)
            result = api.generate_assignment(stem, force=True, create=True)
            if not result.get("success"):
                raise RuntimeError(f"nbgrader generate_assignment refused {name}:\n{result.get('error')}\n"
                                   f"{result.get('log')}")
            student = _read(course / "release" / stem / name)
            student.metadata = copy.deepcopy(nb.metadata)  # the lesson's kernelspec, nothing else
            out[name] = _stamped(student, f"student/{name}")
    return out


def _stamped(nb: nbformat.NotebookNode, repo_path: str, *,
             student_tree: bool = False) -> nbformat.NotebookNode:
    """The student notebook with its own Colab/Binder badges and set-up cell (scripts/publish.py).
    With ``student_tree``, every link and the Colab install point at the student tree's tag,
    ``<tag>-student`` (``course.py student-tree --branch``): no solutions behind any link."""
    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    from notebook_tools import ensure_cell_ids
    from publish import Published, load_config, stamp_notebook

    published = files_tag = None
    if student_tree:
        config = load_config()
        published = Published(config.repo, f"{config.tag}-student")
        files_tag = config.tag  # docs/ and tests/ are in the release, not the student tree
    stamp_notebook(nb, repo_path, published, files_tag=files_tag)
    ensure_cell_ids(nb)
    return nb


CONFIG_BEGIN = "# --- course_utils: grade outside the notebook (scripts/nbgrader_tools.py source) ---"
CONFIG_END = "# --- end of course_utils grading ---"


def grading_config_block() -> str:
    """The lines ``nbgrader_config.py`` needs so that ``nbgrader autograde`` grades outside the
    notebook (course_utils.exercises.autograde.configure); no salt or path of the clone in them."""
    return (f"{CONFIG_BEGIN}\n"
            "import pathlib as _pathlib\n"
            "from course_utils.exercises.autograde import configure as _grade_outside\n"
            "_grade_outside(c, _pathlib.Path(__file__).resolve().parent)\n"
            f"{CONFIG_END}\n")


def grading_config_text(course: Path) -> str:
    """What ``course/nbgrader_config.py`` should hold: the file as it is (or a new one) with
    :func:`grading_config_block` in it (an older block is replaced, the rest of the file kept).
    A kept file that does not load, or whose block's markers are not one begin line before one end
    line (:func:`grading_markers_problem`), is a :class:`SourceError`."""
    path = Path(course) / "nbgrader_config.py"
    first = "c = get_config()  # noqa: F821 - nbgrader's config object\n"
    text = _notebook_tools().read_text(path, "nbgrader_config.py") if path.exists() else first
    problem = grading_markers_problem(path, text)
    if problem:
        raise SourceError(problem)
    if CONFIG_BEGIN in text:
        head, rest = text.split(CONFIG_BEGIN, 1)
        block, tail = rest.split(CONFIG_END, 1)
        problem = config_load_problem(path, head + "\n" * block.count("\n") + tail)  # same line numbers
        text = head + tail.lstrip("\n")
    else:
        problem = config_load_problem(path, text) if path.exists() else None
    if problem:
        raise SourceError(problem)
    if "get_config()" not in text:
        text = first + text
    return text.rstrip("\n") + "\n\n" + grading_config_block()


def grading_markers_problem(path: Path, text: str) -> str | None:
    """Why the grading block in ``text`` (``path``, the course's ``nbgrader_config.py``) cannot be
    replaced, or None: its markers must be absent, or one :data:`CONFIG_BEGIN` line before one
    :data:`CONFIG_END` line. An end before the begin, a begin without an end (or the reverse), or a
    marker twice is a block edited by hand: which lines to replace is unknown, so ``source``
    refuses (before anything is written) instead of cutting the wrong lines or adding a second block."""
    begins, ends = text.count(CONFIG_BEGIN), text.count(CONFIG_END)
    in_order = begins == ends == 1 and text.index(CONFIG_BEGIN) < text.index(CONFIG_END)
    if begins == ends == 0 or in_order:
        return None
    if begins > 1 or ends > 1:
        found = f"{begins} begin and {ends} end markers of the grading block (expected one of each)"
    elif begins and ends:
        found = "the grading block's end marker before its begin marker"
    else:
        found = (f"the grading block's {'begin' if begins else 'end'} marker without its "
                 f"{'end' if begins else 'begin'} marker")
    return (f"{path}: nbgrader_config.py holds {found}: begin {CONFIG_BEGIN!r}, end {CONFIG_END!r}; "
            "remove the misplaced marker lines (or the whole block) and run source again")


def config_load_problem(path: Path, text: str) -> str | None:
    """Why ``text``, the course's ``nbgrader_config.py`` at ``path`` (without the grading block),
    would not load, or None. nbgrader only logs such a file's error and ignores all of it, the
    grading lines too, so ``autograde`` would run the notebook's own checks and a cheat in it
    would get full points (battery 22, G2). The file is compiled and run as nbgrader (traitlets'
    PyFileConfigLoader) runs it: ``c`` is given, and ``get_config()`` returns that same config, so a
    file may use ``c`` before (or without) ``c = get_config()``."""
    from traitlets.config import Config

    config = Config()
    namespace = {"__file__": str(path), "__name__": "__nbgrader_config__", "c": config,
                 "get_config": lambda: config, "load_subconfig": lambda *args, **kwargs: None}
    try:
        exec(compile(text, str(path), "exec"), namespace)  # noqa: S102 - as nbgrader does
    except (Exception, SystemExit) as exc:
        line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
        tb = exc.__traceback__
        while tb is not None:  # the deepest line of the file itself
            if tb.tb_frame.f_code.co_filename == str(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        where = f" at line {line}" if line else ""
        said = exc.msg if isinstance(exc, SyntaxError) else exc  # its str repeats the file and line
        return (f"{path}: nbgrader_config.py does not load{where} ({type(exc).__name__}: {said}); "
                "nbgrader would ignore the whole file, the grading lines too: fix it and run source again")
    return None


def write_grading_config(course: Path) -> Path:
    """Put :func:`grading_config_block` into ``course/nbgrader_config.py`` (made when missing;
    an older block is replaced, the rest of the file kept). Returns the file."""
    path = Path(course) / "nbgrader_config.py"
    path.write_text(grading_config_text(course))
    return path


def _shown(path: Path) -> str:
    """``path`` relative to the clone when it is inside it, else as it is."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


class SourceError(Exception):
    """``source`` could not be made; nothing in the course folder was changed."""


def _destination_problem(course: Path, target: Path) -> str | None:
    """Why ``source`` must not write ``target`` (a file under ``course``), or None: a folder
    between ``course`` and it that is a symbolic link (``COURSE_DIR/source`` or a lesson folder
    linked elsewhere), or a place inside the clone, links followed (battery 22, G5: a
    ``source/02_...`` link to the clone's notebooks/ overwrote the instructor's lesson)."""
    for folder in [target.parent, *target.parent.parents]:
        if folder == course or course not in folder.parents:
            break
        if folder.is_symlink():
            return (f"{folder} is a symbolic link (to {os.readlink(folder)}); expected a real folder "
                    "or none: source writes only into COURSE_DIR's own folders")
    try:
        inside = cli.place_in(target, ROOT)
    except ValueError as exc:  # a link that loops on the way
        return str(exc)
    if inside is not None:
        return (f"{target} lies inside this clone ({inside}), links followed; source writes only "
                "outside the clone")
    return None


def _swap_in(staging: Path, course: Path) -> None:
    """Move every file under ``staging`` to the same place under ``course``, all or nothing:
    the old files are kept aside (hard links) until every new one is in place; if any step
    fails, the old files go back, new files and folders made here are removed, and a
    :class:`SourceError` names the file. Once every new file is in place it says so with
    :func:`cli.leaving` (an interruption then reports "every file of COURSE was written")."""
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    for new in files:  # every destination checked before the first change
        problem = _destination_problem(course, course / new.relative_to(staging))
        if problem:
            raise SourceError(problem)
    made: list[Path] = []  # folders this made, deepest last
    kept: dict[Path, str] = {}  # target -> its old file's hard link (make_beside)
    done: list[Path] = []
    current = course
    cli.check_interrupted()  # a signal some library swallowed: stop before the first change
    try:
        for new in files:
            target = course / new.relative_to(staging)
            current = target
            missing = [d for d in [target.parent, *target.parent.parents] if not d.exists()]
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
            if target.is_symlink() or (target.exists() and not target.is_file()):
                raise SourceError(f"{target} is a folder, a link or a special file; expected a file "
                                  "to replace")
            if target.exists():  # kept aside as a hard link, its name known before the link exists
                _notebook_tools().make_beside(target, ".old", kept, lambda name, t=target: os.link(t, name))
        for new in files:
            current = course / new.relative_to(staging)
            os.replace(new, current)
            done.append(current)
    except BaseException as exc:
        for target in reversed(done):
            try:
                if target in kept:
                    os.replace(kept.pop(target), target)
                else:
                    target.unlink(missing_ok=True)
            except OSError:
                pass
        for aside in kept.values():
            Path(aside).unlink(missing_ok=True)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise SourceError(f"cannot write {current} ({exc.strerror or exc})") from None
        raise
    # every new file is in place: an interruption from here on must say so, not "nothing was
    # written" (battery 19, G6: it was said only once fill_course_source had returned)
    cli.leaving(f"every file of {course} was written")
    for aside in kept.values():
        Path(aside).unlink(missing_ok=True)
    for new in files:  # what an earlier, killed run left beside each file
        _notebook_tools().remove_leftovers(course / new.relative_to(staging))


def fill_course_source(course: Path) -> list[Path]:
    """Copy every graded lesson into ``course/source/<stem>/<name>`` for nbgrader, its badges and
    Colab install stamped for ``student/<name>`` at the student tree's tag ``<tag>-student`` (a
    release made from it links to the student tree, never to the solutions). The test cells stay
    as the lesson has them (feedback while learning); the points come from the outside grader:
    this writes its secrets (a new salt per lesson, :func:`course_utils.exercises.autograde.write_secrets`)
    to ``course/.course_grader.json`` and its configuration into ``course/nbgrader_config.py``.

    All or nothing: everything is built in a temporary folder beside ``course`` first and moved
    in only when every lesson was read and written; a lesson that cannot be read (not JSON, not
    a notebook) raises :class:`SourceError` naming it, and the course folder stays as it was
    (no mix of two releases, no half-made folder). Returns the notebooks written."""
    from course_utils.exercises.autograde import write_secrets

    cli.check_interrupted()  # a Ctrl-C during that import (torch) is swallowed there: stop now
    course = Path(course)
    above = course
    while not above.exists() and above != above.parent:
        above = above.parent
    lessons = []
    for path in _lessons():
        try:
            nb = _read(path)
        except NotebookReadError as exc:
            raise SourceError(str(exc)) from None
        if any(cell.metadata.get("nbgrader", {}).get("grade") for cell in nb.cells):
            lessons.append((path, nb))  # lesson 00 has nothing to grade
    try:
        staging = Path(tempfile.mkdtemp(dir=above, prefix=".course-source-"))
    except OSError as exc:
        raise SourceError(f"cannot write into {above} ({exc.strerror or exc})") from None
    try:
        written = []
        for path, nb in lessons:
            relative = Path("source") / path.stem / path.name
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(_stamped(nb, f"student/{path.name}", student_tree=True), staging / relative)
            written.append(course / relative)
        try:
            write_secrets(staging, [p.stem for p, _ in lessons], ROOT / "solutions")
        except (ValueError, FileNotFoundError) as exc:  # no graded lesson, no solutions/ folder
            raise SourceError(str(exc)) from None
        (staging / "nbgrader_config.py").write_text(grading_config_text(course))
        _swap_in(staging, course)
    except _notebook_tools().ToolError as exc:
        raise SourceError(str(exc)) from None
    except OSError as exc:
        raise SourceError(f"cannot write {exc.filename or staging} ({exc.strerror or exc})") from None
    finally:
        try:
            shutil.rmtree(staging, ignore_errors=True)
        except BaseException:  # a signal cut it short, leaving .course-source-XXXX (battery 19, G6):
            shutil.rmtree(staging, ignore_errors=True)  # run's handler now ignores any further one
            raise
    return written


def stale_students(students: dict[str, nbformat.NotebookNode], folder: Path,
                   unreadable: dict[str, str] | None = None) -> list[str]:
    """Student notebooks in ``folder`` that differ from ``students``, are missing, or are extra.
    Those that cannot be read as notebooks are also put in ``unreadable`` (path -> why)."""
    def current(path: Path, nb: nbformat.NotebookNode) -> bool:
        try:
            return _same(_read(path), nb)
        except NotebookReadError as exc:  # a broken student copy is stale: release writes it again
            if unreadable is not None:
                unreadable[str(path)] = str(exc)
            return False

    stale = [str(folder / name) for name, nb in students.items()
             if not (folder / name).exists() or not current(folder / name, nb)]
    stale += [str(p) for p in sorted(folder.glob("*.ipynb")) if p.name not in students]
    return stale


class ReleaseError(Exception):
    """``release`` cannot write where it must; the message says why. Nothing was written."""


def _check_student_folder(folder: Path) -> None:
    """``folder`` (student/) is a folder or absent: a file or a broken link there would stop the
    release half-way, after the lessons were rewritten."""
    if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
        kind = "a broken link" if not folder.exists() else "a file, not a folder"
        raise ReleaseError(f"{folder} is {kind}; the student notebooks go in that folder: move it "
                           f"away (or delete it) and release again")


def release(*, write: bool = True) -> list[str]:
    """Convert every lesson in place and regenerate student/. Returns the files that changed
    (with ``write=False``, the files that *would* change, writing nothing). A student/ that is
    not a folder is a :class:`ReleaseError` before anything is written."""
    _check_student_folder(STUDENT)
    changed: list[str] = []
    converted: dict[str, nbformat.NotebookNode] = {}
    originals = {path: _read(path) for path in _lessons()}  # every lesson read before any is written
    for path, original in originals.items():
        converted[path.name] = convert(original, path.name)[0]
    students = student_notebooks(converted)
    unreadable: dict[str, str] = {}
    stale_copies = stale_students(students, STUDENT, unreadable)
    texts: dict[Path, str] = {}
    removed: list[Path] = []
    for path, original in originals.items():  # nothing is written before here
        nb = converted[path.name]
        if not _same(nb, original):
            changed.append(_shown(path))
            texts[path] = _notebook_tools().notebook_text(nb)
    for stale in stale_copies:
        path = Path(stale)
        why = None if write else unreadable.get(stale)
        changed.append(_shown(path) + (f" (unreadable: {why})" if why else ""))
        if path.name in students:
            texts[path] = _notebook_tools().notebook_text(students[path.name])
        else:  # a lesson that was renamed or removed
            removed.append(path)
    if write:
        _write_release(texts, removed)
    return changed


def _write_release(texts: dict[Path, str], removed: list[Path]) -> None:
    """Write the lessons and student copies all or nothing, through the writer publish and
    notebook_tools use: a link at a student copy is replaced by the file, never written through
    (it may point outside the clone); a folder there is a :class:`ReleaseError`, every file as
    it was."""
    tools = _notebook_tools()
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            raise ReleaseError(f"{_shown(path)} is a folder where release removes an old student notebook; "
                               "move it away and release again")
    if any(path.parent == STUDENT for path in texts):
        STUDENT.mkdir(exist_ok=True)
    try:
        tools.write_all_atomically(texts, written=RELEASED)
    except tools.ToolError as exc:
        raise ReleaseError(str(exc)) from None
    for path in removed:
        path.unlink()  # a file or a link: a folder named *.ipynb was refused before writing


def exercise_rows() -> list[ExerciseRow]:
    rows: list[ExerciseRow] = []
    for path in _lessons():
        rows += convert(_read(path), path.name)[1]
    return rows


def table() -> str:
    """INSTRUCTORS.md's exercise table, from the lessons' headings and Difficulty lines."""
    lines = ["| Lesson | Exercise | Goal | grade_id | Points | Difficulty | Minutes | Graded | Library use |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = exercise_rows()
    for r in rows:
        title, library = (text.replace("|", "\\|") for text in (r.title, r.library or "—"))
        lines.append(f"| {r.lesson} | {r.number} | {title} | `{r.grade_id}` | {r.points} | "
                     f"{r.difficulty or '—'} | {r.minutes or '—'} | {r.graded} | {library} |")
    total = sum(r.points for r in rows)
    lines.append(f"\n{len(lines) - 2} exercises, {total} points in all.")
    return "\n".join(lines)


TABLE_MARKERS = ("<!-- exercise-table -->", "<!-- /exercise-table -->")


TABLE_REGION = re.compile(r"(<!-- exercise-table -->\n).*?(<!-- /exercise-table -->)", re.DOTALL)


def instructors_text() -> str:
    """INSTRUCTORS.md's text, checked to hold the exercise table's markers. A
    :class:`ReleaseError` when it cannot be read (a folder, a link to nothing) or lacks a
    marker: the table would otherwise be left out without a word."""
    tools = _notebook_tools()
    try:
        text = tools.read_text(INSTRUCTORS, "file")
    except tools.ToolError as exc:
        raise ReleaseError(f"{exc}; the exercise table goes in that file") from None
    if not TABLE_REGION.search(text):
        missing = [m for m in TABLE_MARKERS if m not in text]
        fault = (f"lacks the marker line(s) {' and '.join(missing)}" if missing else
                 f"does not have {TABLE_MARKERS[0]} on a line of its own before {TABLE_MARKERS[1]}")
        raise ReleaseError(f"{_shown(INSTRUCTORS)} {fault}; the exercise table goes between them: "
                           "put them back")
    return text


def table_texts() -> tuple[str, str]:
    """INSTRUCTORS.md's text now and with its exercise table made anew (see
    :func:`instructors_text` for what is refused)."""
    text = instructors_text()
    return text, TABLE_REGION.sub(lambda m: m[1] + table() + "\n" + m[2], text)


def write_table() -> bool:
    """Replace the table between INSTRUCTORS.md's markers; True when the file changed.
    Refused (a :class:`ReleaseError`, nothing written) as :func:`table_texts` says."""
    text, new = table_texts()
    if new != text:
        _notebook_tools().write_atomically(INSTRUCTORS, new)
    return new != text


def _course_dir_problem(text: str) -> str | None:
    """Why ``text`` cannot be ``source``'s COURSE_DIR, or None: an empty name (which Path reads as
    the current folder), the clone itself or any folder inside it (notebooks/, student/, ...; links
    followed) would get source/, the grader's secrets and nbgrader_config.py written among the
    course's own files."""
    if not text.strip():
        return (f"COURSE_DIR is empty ({cli.shown(text)}); give the nbgrader course folder to write, outside "
                "this clone, e.g. ../mha-course")
    problem = cli.path_problem(text, "COURSE_DIR", "the nbgrader course folder to write")
    if problem:  # a name too long for the file system: a traceback from stat (battery 33)
        return problem
    try:
        inside = cli.place_in(text, ROOT)  # links followed: a link into the clone too
    except ValueError:
        return (f"COURSE_DIR {cli.shown(text)}: a symbolic link on this path loops (or never ends); give a "
                "real folder outside this clone, e.g. ../mha-course")
    if inside == ".":
        return (f"COURSE_DIR {cli.shown(text)} is this clone's own folder; give the nbgrader course folder "
                "to write, outside the clone, e.g. ../mha-course")
    if inside is not None:
        return (f"COURSE_DIR {cli.shown(text)} is inside this clone ({inside}/); "
                "give the nbgrader course folder to write, outside the clone, e.g. ../mha-course")
    return None


def main(argv: list[str]) -> int:
    """The command line; interrupted (Ctrl-C, SIGINT, SIGTERM), it says on one line what was left
    as it was and returns 128 + the signal's number (course_utils/cli.py)."""
    cli.leaving(cli.NOTHING_WRITTEN)
    return cli.run(_main, argv, "nbgrader_tools.py")


def _main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    if argv in (["-h"], ["--help"]):  # what course.py's "each with --help" promises
        print(__doc__)
        return 0
    command, args = argv[0], argv[1:]
    try:
        if command == "convert":
            if not args or any(a.startswith("-") for a in args):
                print("usage: nbgrader_tools.py convert NOTEBOOK.ipynb [...] (no options; "
                      f"got {' '.join(args) or 'no notebooks'})", file=sys.stderr)
                return 2
            converted = []
            for name in args:  # a name too long for the file system: a traceback from stat (battery 33)
                problem = cli.path_problem(name, "NOTEBOOK.ipynb", "a lesson notebook to convert")
                if problem:
                    print(f"convert: {problem}; nothing was written", file=sys.stderr)
                    return 2
            for name in args:  # read and convert all first: a bad file leaves every file as it was
                path = Path(name)
                try:
                    nb = _read(path)
                except NotebookReadError as exc:  # missing, a folder, not JSON, not a notebook
                    print(f"convert: {exc}; nothing was written", file=sys.stderr)
                    return 2
                converted.append((name, path, *convert(nb, path.name)))
            tools = _notebook_tools()
            try:  # all or nothing: one file that cannot be written leaves every file as it was
                tools.write_all_atomically({path: tools.notebook_text(nb) for _, path, nb, _ in converted},
                                           written="every notebook was converted and written")
            except tools.ToolError as exc:
                print(f"convert: {exc}", file=sys.stderr)
                return 1
            for name, _path, _nb, rows in converted:
                print(f"{name}: {len(rows)} graded exercise(s)")
        elif command in ("release", "check") and args:
            print(f"{command}: takes no arguments, got {' '.join(args)}; nothing was written",
                  file=sys.stderr)
            return 2
        elif command == "release":
            has_table = INSTRUCTORS.exists() or INSTRUCTORS.is_symlink()
            if has_table:
                instructors_text()  # a broken INSTRUCTORS.md is refused before any lesson is written
            changed = release()  # the lessons and student copies: all or nothing
            if changed:
                cli.leaving(RELEASED)
            if has_table and write_table():
                changed.append("INSTRUCTORS.md")
            cli.leaving("every file was written" if changed else cli.NOTHING_WRITTEN)
            print("\n".join(f"wrote {c}" for c in changed) or "everything was current")
        elif command == "check":
            stale = release(write=False)
            if (INSTRUCTORS.exists() or INSTRUCTORS.is_symlink()) and len(set(table_texts())) > 1:
                stale.append("INSTRUCTORS.md (exercise table)")
            if stale:
                print("stale (run `python3 course.py release`):\n  " + "\n  ".join(stale))
                return 1
            print("lessons converted, student notebooks and INSTRUCTORS.md current")
        elif command == "source":
            if len(args) != 1:  # what is missing or extra, named (battery 16)
                got = (f"expected one COURSE_DIR, got {len(args)}: {' '.join(args)} (extra: "
                       f"{' '.join(args[1:])})" if args else "missing COURSE_DIR")
                print(f"usage: nbgrader_tools.py source COURSE_DIR (an nbgrader course directory)\n"
                      f"source: {got}; nothing was written", file=sys.stderr)
                return 2
            problem = _course_dir_problem(args[0])
            if problem:
                print(f"source: {problem}; nothing was written", file=sys.stderr)
                return 2
            course_dir = Path(args[0])
            above = course_dir
            while not above.exists() and not above.is_symlink() and above != above.parent:
                above = above.parent
            if not above.is_dir():
                print(f"source: COURSE_DIR must be a folder (or a new one to make), but {above} is "
                      f"{'a file' if above.is_file() else 'not a folder'}; nothing was written",
                      file=sys.stderr)
                return 2
            try:  # a course nbgrader_config.py that does not load: refused before anything is made
                grading_config_text(course_dir)
            except SourceError as exc:
                print(f"source: {exc}; nothing was written", file=sys.stderr)
                return 2
            try:
                written_files = fill_course_source(course_dir)
            except SourceError as exc:
                print(f"source: {exc}; nothing in {course_dir} was changed", file=sys.stderr)
                return 1
            for written in written_files:  # cli.leaving said so in _swap_in, once they were in place
                print(f"wrote {written}")
            print(f"wrote {Path(args[0]) / '.course_grader.json'} (new salts: run generate_assignment again)")
            print(f"wrote the grading lines in {Path(args[0]) / 'nbgrader_config.py'}")
            from course_utils.exercises import sandbox

            if sandbox.isolation() != "bubblewrap":
                print(sandbox.WARNING, file=sys.stderr)
        elif command == "table":
            if args == ["--write"]:
                written = write_table()  # one file, replaced atomically
                cli.leaving("INSTRUCTORS.md was written" if written else cli.NOTHING_WRITTEN)
                print("INSTRUCTORS.md updated" if written else "INSTRUCTORS.md was current")
            elif args:
                print(f"table: unknown arguments {' '.join(args)}; the only option is --write",
                      file=sys.stderr)
                return 2
            else:  # a star (★) an ASCII stdout lacks is printed escaped, not a traceback (battery 30)
                encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
                print(table().encode(encoding, "backslashreplace").decode(encoding))
        else:
            print(__doc__)
            print(f"unknown command {cli.shown(command)}", file=sys.stderr)
            return 2
    except FormatError as exc:
        print(f"exercise format: {exc}", file=sys.stderr)
        return 1
    except (NotebookReadError, ReleaseError) as exc:  # release, check, table: all checked before any write
        print(f"{command}: {exc}; nothing was written", file=sys.stderr)
        return 1
    except _notebook_tools().ToolError as exc:  # a file that cannot be written (INSTRUCTORS.md's table)
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
