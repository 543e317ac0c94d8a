#!/usr/bin/env python3
"""Authoring tools for the course notebooks (not needed by learners).

    python scripts/notebook_tools.py build DRAFT.py notebooks/NN_topic.ipynb
        Turn a percent-format draft (``# %%`` code cells, ``# %% [markdown]`` cells
        whose lines start with ``# ``) into a notebook, replacing OUT when it exists; OUT's
        folder must exist (a missing one is refused, exit 2, nothing made). A draft
        that breaks these rules (a markdown line that is no comment, text before the first
        ``# %%``) is refused (file and line named) and OUT is left as it was.
    python scripts/notebook_tools.py execute [--timeout SECONDS] notebooks/NN_topic.ipynb [...]
        Restart-and-run-all in place, then clean the stored state: no timings, no
        widget state, no machine-specific metadata. Prints each notebook's runtime.
        Each cell may run for --timeout seconds (default 600; the option may stand before,
        between or after the notebooks); a cell that fails or runs longer is reported
        on one line (notebook, cell, error), exit 2. All or
        nothing: the notebooks are written only once every one has run, so a failed or
        interrupted run leaves every notebook as it was.
    python scripts/notebook_tools.py student OUT_DIR notebooks/*.ipynb
        Write student versions: every ``### BEGIN SOLUTION`` ... ``### END SOLUTION``
        block becomes ``raise NotImplementedError`` and outputs are cleared.
        A marker without its partner is refused (exit 2, file, cell and line named)
        before anything is written, so no solution leaks.
    python scripts/notebook_tools.py upgrade notebooks/*.ipynb student/*.ipynb
        One-shot: rewrite notebooks as nbformat 4.5 with stable cell ids (kept when
        present, derived from the cell's content when missing), without executing them.

Notebooks are stored as nbformat 4.5 with a stable ``id`` on every cell, and with the
``language_info`` the kernel reports: JupyterLab gives a 4.4 notebook fresh ids when it
opens it, and writes the kernel's language_info when the kernel starts; either marks
the lesson modified (the "unsaved" dot) before the reader has touched anything.

Outputs policy: notebooks are committed *executed* (so a reader on GitHub sees every
table and figure); CI re-runs them under nbval and compares the cells marked
``# NBVAL_CHECK_OUTPUT``.

A wrong command line or input file (an unknown command or option, a missing file, a file
that is not a notebook, a file where a folder is expected, a draft without cells) is
reported on one line on stderr, naming the file and what is wrong, with exit status 2;
every input is read and checked before anything is written.

Interrupted (Ctrl-C, SIGINT, or SIGTERM), a command stops with one line on stderr saying what
was left as it was, and exits 128 + the signal's number (130, 143): ``execute`` shuts the
kernel down and writes no notebook; ``student`` writes its copies all or nothing, so an
interrupted (or failed) run leaves the student folder as it was.
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
    cli.stop_at_once("notebook_tools.py", needs=("nbformat",))

import hashlib  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402

import nbformat  # noqa: E402

KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
SOLUTION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*(\n|$)",
    re.MULTILINE | re.DOTALL,
)


COMMANDS = ("build", "execute", "student", "upgrade")


class ToolError(Exception):
    """A wrong command line or input file: the scripts print it on one line and exit 2."""


STOP_SIGNALS = cli.STOP_SIGNALS
Interrupted = cli.Interrupted  # SIGINT or SIGTERM arrived (one class for every course tool)


def read_text(path: Path, what: str = "file") -> str:
    """The text of ``path``, or a :class:`ToolError` naming it and what is wrong. A UTF-8
    byte-order mark at its start (what Windows editors save) is dropped, as ``utf-8-sig`` reads
    it: kept, it hid the first line from every reader (a draft's '# %%' marker, a notebook's JSON,
    a config's first statement), which then said that line was missing."""
    path = Path(path)
    check_regular(path, what)
    try:
        text = path.read_text(encoding="utf-8")  # not utf-8-sig: its error offsets skip the mark
        return text[1:] if text.startswith("\ufeff") else text
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ToolError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """``path`` read as an nbformat v4 notebook, or a :class:`ToolError` naming it and what
    is wrong (missing, a folder, not JSON, not a valid notebook)."""
    return parse_notebook(read_text(path, "notebook"), path)


def parse_notebook(text: str, path: Path) -> nbformat.NotebookNode:
    """``text`` (the contents of ``path``, which need not be written yet) as an nbformat v4
    notebook, or a :class:`ToolError` naming ``path`` and what is wrong."""
    try:
        return nbformat.reads(text, as_version=4)
    except nbformat.reader.NotJSONError:
        raise ToolError(f"{path}: not a notebook (its text is not JSON)") from None
    except (nbformat.ValidationError, ValueError, KeyError, TypeError, AttributeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolError(f"{path}: not a valid notebook ({first_line})") from None


def check_regular(path: Path, what: str = "file") -> None:
    """A :class:`ToolError` unless ``path`` is a regular file (or a link to one), checked
    without opening it: reading a FIFO would wait for a writer forever."""
    import stat

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ToolError(f"{path}: no such {what}" + (" (a broken symlink)" if path.is_symlink() else "")) \
            from None
    except OSError as exc:
        raise ToolError(f"{path}: cannot be read as a {what} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{path}: is a folder, expected a {what}")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ToolError(f"{path}: is {kind}, expected a {what} (a regular file)")


def remove_leftovers(path: Path) -> list[Path]:
    """Remove the temporary (``.tmp``) and kept-aside (``.old``) files that a writer of ``path``
    killed half-way (SIGKILL, a power cut) left beside it: ``.<name>.<8 characters>.tmp|.old``,
    the names :func:`write_all_atomically` gives them. Called once the file is written anew, so
    nothing they held is needed. Returns what was removed."""
    path = Path(path)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.(tmp|old)")
    removed = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        leftover = path.parent / name
        if pattern.fullmatch(name) and leftover.is_file() and not leftover.is_symlink():
            try:
                leftover.unlink()
                removed.append(leftover)
            except OSError:
                pass
    return removed


def write_all_atomically(texts: dict[Path, str | bytes], written: str | None = None) -> None:
    """Write every ``path -> text`` (a str, written as UTF-8, or bytes, as they are), all or
    nothing: each text goes to a temporary file beside its target first, the old files are kept
    aside, and only then is each renamed into place.
    If any step fails, every file is put back as it was (new ones removed) and a
    :class:`ToolError` names the file that could not be written. Once every file is in place,
    ``written`` (the caller's words, e.g. "every stamped file was written") is what an
    interruption from then on reports (:func:`cli.leaving`); one during the clearing up here
    says so even without it (it said "nothing was written": battery 20)."""
    texts = {Path(p): t for p, t in texts.items()}
    temporaries: dict[Path, str] = {}
    kept: dict[Path, str] = {}
    done: list[Path] = []
    current = None
    try:
        for path, text in texts.items():
            current = path
            if path.exists() and not path.is_file():
                raise ToolError(f"{path}: is a folder or a special file, expected a file to write")
            _fill(make_beside(path, ".tmp", temporaries, _new_file), text)
            temporary = temporaries[path]
            mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
            os.chmod(temporary, mode)
        for path in texts:
            current = path
            if path.exists():  # kept aside as a hard link (a symbolic link is kept, and put back, as one)
                make_beside(path, ".old", kept,
                            lambda name, path=path: os.link(path, name, follow_symlinks=False))
        cli.check_interrupted()  # a signal some library swallowed: stop before the first rename
        for path in texts:
            current = path
            done.append(path)  # before the rename: a signal handled as os.replace returns is undone too
            os.replace(temporaries[path], path)
    except BaseException as exc:
        with _signals_held():  # a second Ctrl-C does not stop the putting back half-way
            for path in reversed(done):  # put back what was there
                try:  # (onto a rename not yet made, this does nothing; the link is removed below)
                    if path in kept:
                        os.replace(kept[path], path)
                    elif not Path(temporaries[path]).exists():  # renamed into place: a new file
                        path.unlink(missing_ok=True)
                except OSError:
                    kept.pop(path, None)  # could not be put back: its kept-aside copy stays
            _discard([*temporaries.values(), *kept.values()])
        if isinstance(exc, OSError):
            raise ToolError(f"{current}: cannot be written "
                            f"({exc.strerror or exc}); every file was left as it was") from None
        raise
    try:  # every file is in place: an interruption from here on reports that
        if written is not None and texts:
            cli.leaving(written)
        for aside in kept.values():
            Path(aside).unlink(missing_ok=True)
        for path in texts:  # what an earlier, killed run left beside each file
            remove_leftovers(path)
    except Interrupted as exc:
        said = written or "it came once every file was written (clearing up)"
        raise Interrupted(exc.signum, said) from None


_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # tempfile's, as remove_leftovers expects


def make_beside(path: Path, suffix: str, names: dict, make: Callable[[str], object]) -> object:
    """Make a new file ``.<name>.<8 characters><suffix>`` beside ``path`` with ``make(name)`` (which
    must refuse a name that exists: ``os.open`` with ``O_EXCL``, ``os.link``) and return what it
    returns. The name is put in ``names[path]`` *before* the file exists, so a clean-up that
    removes every name there (missing ones skipped) leaves nothing behind whenever a signal lands:
    with ``tempfile.mkstemp`` the name was known only once the file existed, and a Ctrl-C as it
    returned left a ``.NAME.XXXX.tmp`` (battery 18, finding 7; blocking signals around it is not
    enough: another thread of the process may take the signal). A name already taken (someone
    else's file) is dropped from ``names`` and another one is tried."""
    path = Path(path)
    for _ in range(100):
        random = "".join(secrets.choice(_NAME_CHARACTERS) for _ in range(8))
        name = str(path.parent / f".{path.name}.{random}{suffix}")
        names[path] = name
        try:
            return make(name)
        except FileExistsError:
            del names[path]  # not ours: the clean-up must leave it
    raise FileExistsError(f"{path}: no free name for a temporary file beside it")


def _new_file(name: str) -> int:
    """A new, owner-only file at ``name`` (none may be there; a link is not followed), open for writing."""
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)


class _signals_held:
    """Hold SIGINT/SIGTERM back while a block runs (delivered, if any came, when it ends)."""

    def __enter__(self) -> None:
        held = hasattr(signal, "pthread_sigmask")  # not on Windows: there the block runs unguarded
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if held else None

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """What :func:`nbformat.write` would put in the file (it adds a final newline)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write ``text`` (a str, written as UTF-8, or bytes, as they are) to ``path`` through a
    temporary file in the same folder and ``os.replace``: a reader (or a failure half-way) sees
    the old file or the new one, never a part; interrupted at any moment, it leaves no temporary
    file. The file keeps its permissions. A file that cannot be written (a folder one
    cannot write to, a full disk) is a :class:`ToolError` naming ``path``, not the temporary file
    (battery 17: a traceback naming ``/proc/.x.ipynb.XXXX.tmp``). The one atomic writer of the
    scripts (``exercise_answers.py`` writes its .pt stores through it)."""
    if not isinstance(text, (str, bytes)):
        raise TypeError(f"text must be the file's contents, a str or bytes, got {type(text).__name__} "
                        f"{cli.shown(text, 60)}")
    path = Path(path)
    try:
        _write_atomically(path, text)
    except OSError as exc:
        raise ToolError(f"{path}: cannot be written ({exc.strerror or exc}); nothing was written") from None


def _write_atomically(path: Path, text: str | bytes) -> None:
    """:func:`write_atomically`'s work; an OSError comes out as it is."""
    if path.exists() and not path.is_file():
        raise ToolError(f"{path}: is a folder or a special file, expected a file to write; "
                        "nothing was written")
    made: dict[Path, str] = {}  # the temporary's name, known before it exists (make_beside)
    try:
        _fill(make_beside(path, ".tmp", made, _new_file), text)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
        os.chmod(made[path], mode)
        cli.check_interrupted()  # a signal some library swallowed: stop before the rename
        os.replace(made[path], path)
    except BaseException:
        _discard(made.values())
        raise


def _fill(handle: int, text: str | bytes) -> None:
    """Write ``text`` (a str as UTF-8, bytes as they are) to the new file open at ``handle``; close it."""
    with (os.fdopen(handle, "wb") if isinstance(text, bytes) else
          os.fdopen(handle, "w", encoding="utf-8", newline="")) as f:
        f.write(text)


def _discard(names: Iterable[str]) -> None:
    """Remove the temporary or kept-aside files ``names`` a failed write made (missing ones
    skipped). One that cannot be removed is left, and the write's own failure goes on up: on a
    read-only folder the name was never made, yet ``unlink`` says "Read-only file system", and
    that OSError replaced the ToolError naming the file (a bare traceback from
    ``nbgrader_tools.py release`` with student/ read-only: battery 21, b21b group 9)."""
    for name in names:
        try:
            Path(name).unlink(missing_ok=True)
        except OSError:
            pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _first_missing(folder: Path) -> Path | None:
    """The topmost folder ``folder.mkdir(parents=True)`` would make, or None when ``folder`` exists."""
    if folder.exists():
        return None
    while not folder.parent.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def make_folder(folder: Path, what: str = "output folder") -> None:
    """``folder`` (and its missing parents) made, or a :class:`ToolError` naming it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"{folder}: cannot make the {what} ({exc.strerror or exc})") from None


def output_folder(folder: Path, what: str = "output folder") -> Path:
    """``folder``, checked to be a folder or a path one can be made at (no file, FIFO, ... on the way)."""
    folder = Path(folder)
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                kind = cli.path_kind(parent) or "a file"  # a FIFO or /dev/null is no file (battery 20)
                raise ToolError(f"{parent}: is {kind}, expected a folder (for the {what} {folder})")
            break
    return folder


def build(draft: Path, out: Path) -> None:
    text = read_text(draft, "draft")
    if not any(line.startswith("# %%") for line in text.splitlines()):
        raise ToolError(f"{draft}: not a percent-format draft: no '# %%' cell marker (a code cell "
                        "starts with '# %%', a markdown cell with '# %% [markdown]')")
    if not str(out).endswith(".ipynb"):
        raise ToolError(f"{out}: the notebook to write must end in .ipynb")
    output_folder(Path(out).parent)  # a file where the folder should be: refused, named
    if not Path(out).parent.is_dir():  # a typo in OUT made the folders without a word (battery 18)
        raise ToolError(f"{out}: its folder {Path(out).parent} does not exist; make it first (build "
                        "makes no folders); nothing was written")
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in text.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            cells.append(nbformat.v4.new_code_cell(text))

    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# %%"):
            flush()
            kind, lines, start = ("markdown" if "[markdown]" in line else "code"), [], number
            continue
        if kind != "code" and line.strip() and not line.startswith("#"):  # it would be lost or garbled
            where = (f"in a markdown cell (from line {start}) but does not start with '# '" if kind else
                     "text before the first '# %%' cell marker would be lost; it must be a '#' comment")
            raise ToolError(f"{draft}, line {number}: {where}, got {cli.shown(line, 60)}; "
                            f"{out} was not written")
        lines.append(line)
    flush()
    for cell in cells:
        cell.pop("id", None)  # random ids from nbformat; ensure_cell_ids derives stable ones
    nb = nbformat.v4.new_notebook()
    nb.cells = cells  # (new_notebook(cells=...) would validate them before they have ids)
    clean(nb)
    write_atomically(Path(out), notebook_text(nb))


def _merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (the kernel may split one print)."""
    merged: list = []
    for out in outputs:
        if (merged and out.get("output_type") == "stream" and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = merged[-1]["text"] + out["text"]
        else:
            merged.append(out)
    return [o for o in merged if not (o.get("output_type") == "stream" and not o["text"].strip())]


CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def ensure_cell_ids(nb: nbformat.NotebookNode) -> None:
    """Give every cell a valid, unique id; keep ids that are already valid and unique.

    A missing id is derived from the cell's type and source (sha1, 8 hex digits, with a
    ``-2``, ``-3``... suffix for repeated contents), so upgrading the same notebook twice,
    or on two machines, gives the same ids.
    """
    seen: set[str] = set()
    for cell in nb.cells:
        cell_id = cell.get("id")
        if isinstance(cell_id, str) and CELL_ID.match(cell_id) and cell_id not in seen:
            seen.add(cell_id)
        else:
            cell.pop("id", None)
    for cell in nb.cells:
        if "id" in cell:
            continue
        base = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        candidate, n = base, 1
        while candidate in seen:
            n += 1
            candidate = f"{base}-{n}"
        cell["id"] = candidate
        seen.add(candidate)


def language_info() -> dict:
    """The ``language_info`` an ipykernel on this Python reports.

    JupyterLab writes the kernel's language_info into the notebook when the kernel starts;
    a stored value that differs marks the notebook modified at once. Storing what the
    kernel will report keeps a freshly opened lesson unmodified (on the same Python version).
    """
    return {"codemirror_mode": {"name": "ipython", "version": sys.version_info[0]},
            "file_extension": ".py", "mimetype": "text/x-python", "name": "python",
            "nbconvert_exporter": "python", "pygments_lexer": f"ipython{sys.version_info[0]}",
            "version": platform.python_version()}


def clean(nb: nbformat.NotebookNode) -> None:
    """Strip machine-specific state; store as nbformat 4.5 with stable cell ids."""
    nb.metadata = {"kernelspec": KERNEL, "language_info": language_info()}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = _merge_streams(cell.outputs)
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("scrolled", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    ensure_cell_ids(nb)


def upgrade(path: Path) -> bool:
    """Rewrite one notebook as nbformat 4.5 with stable ids; True when the file changed."""
    before = read_text(path, "notebook")
    nb = read_notebook(path)
    clean(nb)
    after = notebook_text(nb)
    if after != before:
        write_atomically(path, after)
    return after != before


CELL_TIMEOUT = 600


def _explain_failure(exc: Exception, path: Path, timeout: int, kernel_log=None) -> None:
    """Raise a one-line :class:`ToolError` for a failed run of ``path`` (a cell's error, a
    timeout, a dead kernel: then ``kernel_log``, the kernel's stderr, is shown first, as it may
    say why); any other exception is re-raised as it is."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    if isinstance(exc, CellTimeoutError):
        raise ToolError(f"{path}: a cell ran longer than the {timeout} s cell timeout "
                        "(raise it with --timeout SECONDS); the notebook was not changed") from None
    if isinstance(exc, CellExecutionError):
        name = getattr(exc, "ename", "") or "error"
        value = (getattr(exc, "evalue", "") or "").splitlines()
        raise ToolError(f"{path}: a cell raised {name}: {value[0] if value else ''}; "
                        "the notebook was not changed") from None
    if isinstance(exc, DeadKernelError):
        if kernel_log is not None:  # what the kernel said as it died (a fatal error, a signal)
            kernel_log.seek(0)
            sys.stderr.write(kernel_log.read())
        raise ToolError(f"{path}: the kernel died ({exc}); the notebook was not changed") from None
    raise exc


def execute(path: Path, timeout: int = CELL_TIMEOUT) -> tuple[float, str]:
    """Run ``path`` top to bottom in a fresh kernel; its runtime and the cleaned notebook's text.
    Nothing is written here: the ``execute`` command writes every notebook it ran at once."""
    from nbclient import NotebookClient

    nb = read_notebook(path)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    kernel_log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    try:  # the kernel's stderr (its start-up warning, its log as it is stopped) goes to kernel_log
        cli.run_kernel(client.async_execute(stderr=kernel_log),
                       f"the kernel was shut down; {path} was not changed")
    except Exception as exc:  # a signal is cli.Interrupted, no Exception: it passes
        _explain_failure(exc, path, timeout, kernel_log)
    finally:
        kernel_log.close()
    elapsed = time.perf_counter() - start
    clean(nb)
    return elapsed, notebook_text(nb)


MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION", re.MULTILINE)


def check_solution_markers(nb: nbformat.NotebookNode, path: Path) -> None:
    """Refuse a notebook whose code cells hold an unpaired ``### BEGIN/END SOLUTION``.

    An unpaired marker would leave the solution in the student copy, so it is a
    :class:`ToolError` naming the file, the cell and the line, raised before anything is written.
    """
    for number, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        open_line = None
        for line_no, line in enumerate(cell.source.splitlines(), 1):
            m = MARKER.match(line)
            if not m:
                continue
            if m[1] == "BEGIN":
                if open_line is not None:
                    raise ToolError(f"{path}: cell {number}, line {line_no}: a second ### BEGIN "
                                    f"SOLUTION before the ### END SOLUTION of line {open_line}; "
                                    "the solution would leak into the student copy")
                open_line = line_no
            elif open_line is None:
                raise ToolError(f"{path}: cell {number}, line {line_no}: ### END SOLUTION with no "
                                "### BEGIN SOLUTION before it; the solution would leak into the "
                                "student copy")
            else:
                open_line = None
        if open_line is not None:
            raise ToolError(f"{path}: cell {number}, line {open_line}: ### BEGIN SOLUTION with no "
                            "### END SOLUTION after it; the solution would leak into the student copy")


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.source = SOLUTION.sub(
            lambda m: f'{m["indent"]}raise NotImplementedError("your code here")\n', cell.source
        )
        cell.outputs, cell.execution_count = [], None
    return nb


def _holds(path: Path, text: str) -> bool:
    """Whether ``path`` is a file holding ``text``."""
    try:
        return path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _take_timeout(args: list[str]) -> tuple[list[str], int]:
    """``execute``'s arguments without its ``--timeout SECONDS`` (or ``--timeout=SECONDS``),
    which may stand anywhere among the notebooks, and the timeout (:data:`CELL_TIMEOUT` when not
    given); a :class:`ToolError` for a value that is missing or not a whole number >= 1, or for
    the option given twice."""
    rest, given = [], []
    words = iter(args)
    for word in words:
        if word.split("=")[0] != "--timeout":
            rest.append(word)
            continue
        value = word.split("=", 1)[1] if "=" in word else next(words, None)
        if value is None:
            raise ToolError("--timeout takes a number of seconds, got nothing")
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise ToolError(f"--timeout takes a whole number of seconds >= 1, got {cli.shown(value)}")
        given.append(value)
    if len(given) > 1:
        raise ToolError(f"--timeout given more than once ({', '.join(given)}); give it once")
    return rest, int(given[0]) if given else CELL_TIMEOUT


def _parse(argv: list[str]) -> tuple[str, list[str], int]:
    """The command and its arguments, or a :class:`ToolError` naming what is wrong."""
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        raise ToolError(f"unknown command {cli.shown(command)}: expected one of {', '.join(COMMANDS)} "
                        "(run with no arguments for help)")
    timeout = CELL_TIMEOUT
    if command == "execute":
        args, timeout = _take_timeout(args)
    options = [a for a in args if a.startswith("-") and a != "-"]
    if options:
        takes = "--timeout SECONDS and file names" if command == "execute" else "file names"
        raise ToolError(f"unknown option{'s' if len(options) > 1 else ''} {' '.join(options)} for "
                        f"{command}: it takes {takes} only (run with no arguments for help)")
    wanted = {"build": "DRAFT.py OUT.ipynb", "execute": "[--timeout SECONDS] NOTEBOOK.ipynb [...]",
              "student": "OUT_DIR NOTEBOOK.ipynb [...]", "upgrade": "NOTEBOOK.ipynb [...]"}[command]
    if (command == "build" and len(args) != 2) or (command == "student" and len(args) < 2) or not args:
        got = ", ".join(repr(a) for a in args) or "nothing"
        raise ToolError(f"{command} takes {wanted}, got {got}")
    names = wanted.replace("[--timeout SECONDS] ", "").replace(" [...]", "").split()
    whats = {"DRAFT.py": "a percent-format draft", "OUT.ipynb": "the notebook to write",
             "OUT_DIR": "the student folder", "NOTEBOOK.ipynb": "a notebook"}
    for i, arg in enumerate(args):  # a name too long for the file system: a traceback from stat (battery 33)
        name = names[min(i, len(names) - 1)]
        problem = cli.path_problem(arg, name, whats[name])
        if problem:
            raise ToolError(f"{command}: {problem}; nothing was written")
    return command, args, timeout


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    if argv in (["-h"], ["--help"]):  # what course.py's "each with --help" promises
        print(__doc__)
        return 0
    cli.leaving("a file being written is never left half-written; files finished before the "
                "signal were written")
    try:
        return cli.run(lambda args: _run(*_parse(args)), argv, "notebook_tools.py")
    except ToolError as exc:
        print(f"notebook_tools.py: {cli.one_line(str(exc))}", file=sys.stderr)  # a path: one line
        return 2


def _run(command: str, args: list[str], timeout: int = CELL_TIMEOUT) -> int:
    if command == "build":
        build(Path(args[0]), Path(args[1]))
    elif command == "execute":
        paths = list(dict.fromkeys(Path(name) for name in args))
        for path in paths:
            read_notebook(path)  # every notebook readable before the first (slow) run
        cli.leaving("no notebook was changed")
        texts: dict[Path, str] = {}  # all or nothing: written once every notebook has run
        for path in paths:
            try:
                elapsed, texts[path] = execute(path, timeout)
            except (Interrupted, ToolError) as exc:
                if texts:
                    exc.args = (f"{exc}; the {len(texts)} notebook(s) run before it were not written "
                                "either",)
                raise
            print(f"{path}: {elapsed:.1f} s", flush=True)
        try:
            write_all_atomically(texts)
        except Interrupted as exc:
            if all(_holds(path, text) for path, text in texts.items()):
                raise Interrupted(exc.signum, "it came once every notebook was written") from None
            raise Interrupted(exc.signum, "no notebook was changed") from None
    elif command == "upgrade":
        for name in args:
            read_notebook(Path(name))
        for name in args:
            print(f"{name}: {'upgraded' if upgrade(Path(name)) else 'already nbformat 4.5'}")
    elif command == "student":
        out_dir = output_folder(Path(args[0]), "student folder")
        sources = [Path(name) for name in args[1:]]
        if any(src.resolve().parent == out_dir.resolve() for src in sources):
            raise ToolError(f"refusing to write student versions into {out_dir}/: it holds the "
                            "instructor notebooks, which would be overwritten. Choose another "
                            "folder, e.g. student/.")
        originals = [(src, read_notebook(src)) for src in sources]  # all read before any write
        for src, original in originals:
            check_solution_markers(original, src)
        blanks = {out_dir / src.name: sum(len(SOLUTION.findall(c.source)) for c in original.cells
                                          if c.cell_type == "code") for src, original in originals}
        texts = {out_dir / src.name: notebook_text(student_version(original)) for src, original in originals}
        made = _first_missing(out_dir)  # the top folder this run makes (None: out_dir exists)
        try:  # all or nothing: an interrupted or failed run leaves the student folder as it was
            # made inside the try (battery 17): an interruption just after mkdir removes it too
            make_folder(out_dir, "student folder")
            write_all_atomically(texts)
        except BaseException as exc:
            if isinstance(exc, Interrupted) and all(_holds(path, text) for path, text in texts.items()):
                raise Interrupted(exc.signum, f"it came once every student copy was written to {out_dir}/ "
                                              "(clearing up)") from None
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            if isinstance(exc, Interrupted):
                raise Interrupted(exc.signum, f"{out_dir}/ was left as it was (no student copy "
                                              "written)") from None
            raise
        for target, count in blanks.items():
            print(f"{target}: {count} solution(s) blanked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
