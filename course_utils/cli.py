"""Ctrl-C and SIGTERM for the course's command-line tools: one line, never a traceback.

Interrupted (Ctrl-C, SIGINT, or SIGTERM), a tool stops with one line on stderr saying what was
left as it was, and exits 128 + the signal's number (130, 143), as a shell reports a program
the signal stopped::

    if __name__ == "__main__":
        sys.exit(cli.run(main, sys.argv[1:], "exercise_answers.py"))

:func:`run` turns the signal into :class:`Interrupted` inside ``main``, so ``finally`` blocks and
all-or-nothing writers put things back; ``main`` says what an interruption at each stage would
leave with :func:`leaving`. Call :func:`stop_at_once` first thing in a script, before its slow
imports: a signal while it starts stops it at once (nothing has been written yet). After the first
signal, further SIGINT/SIGTERM are ignored, so a second Ctrl-C (or a parent relaying the one the
terminal already sent) cannot break a clean-up half-way. :func:`call` runs a child tool the same
way: a signal is relayed to it, and the child's one line is all that is printed.

Standard library only: course.py loads this file before the virtual environment exists, and the
scripts that never need torch load it by its path as the module ``course_utils.cli`` (``import
course_utils`` imports torch), so that it is one module, and :class:`Interrupted` one class,
however it is reached.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import numbers
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTHING_WRITTEN = "nothing was written"
_left = [NOTHING_WRITTEN]  # what an interruption now would leave: set with leaving()
_received: list[int] = []  # the signal that arrived, once one did
_script: list[bool] = []  # stop_at_once was called: this process is a tool run from the command line
_running: list[bool] = []  # run's main is running, its handlers raising Interrupted
_held: list[int] = []  # a signal course_cli.load_cli held while loading this module: stop_at_once delivers it


def shown(value: object, width: int | None = None) -> str:
    """``repr(value)``, cut to ``width`` characters, for a message; never raises for any value: one whose
    ``__repr__`` raises is named by its type (its error would replace the message). The twin of
    ``course_utils.attention.validation.shown``, here because this module imports the standard
    library only (it must start fast, before torch). Its one error is the same as the twin's: a
    ``width`` that is not None or an int >= 0 (the caller's mistake, not the value's)."""
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 0):
        raise TypeError(f"shown's width must be None or an int >= 0, got {type(width).__name__} "
                        f"{shown(width, 40)}")
    try:
        text = repr(value)
    except Exception as err:  # noqa: BLE001 - its repr is the broken part; say so instead
        text = f"<a {type(value).__name__} whose repr raised {type(err).__name__}>"
    return text if width is None else text[:width]


def one_line(text: str) -> str:
    """``text`` for a tool's one-line message on a terminal: each character that is not printable
    (a newline, a tab, the ESC of a colour sequence) written as its escape (``\\n``, ``\\x1b``).
    A path the user gave holding one was printed as it was: the terminal ran the escape sequence
    and the one line broke into several, naming a path that looked different from the one given
    (battery 32). Printable text, a folder named trée included, is kept as it is."""
    if type(text) is not str:
        raise TypeError(f"one_line needs the message (a str), got {type(text).__name__} {shown(text, 60)}")
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that no ``except
    Exception`` takes it for an error; :func:`run` prints it on one line and returns 128 + the
    signal's number."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = _stop_signal(signum, "signum")
        if type(message) is not str:
            raise TypeError(f"message must be a str saying what the interruption left, got "
                            f"{type(message).__name__} {shown(message, 60)}")
        name = signal.Signals(self.signum).name
        super().__init__(f"interrupted by {name}" + (f": {message}" if message else ""))


def place_in(path: str | os.PathLike, root: str | os.PathLike) -> str | None:
    """Where ``path`` lies in the folder ``root``, links followed (a link into ``root`` counts as
    inside): ``"."`` for ``root`` itself, ``"a/b"`` for a folder inside it, None outside. A symbolic
    link that loops on the way is a ValueError naming ``path``; so is a current folder that was
    deleted (:func:`cwd_problem`). The one test the tools that must
    write outside the course's clone share (``nbgrader_tools.py source``'s COURSE_DIR,
    ``student_tree.py``'s OUT_DIR, ``autograde.write_secrets``'s course)."""
    check_path(path, "path", "a file or folder")
    check_path(root, "root", "a folder")
    try:
        where, top = Path(path).resolve(), Path(root).resolve()
    except (OSError, RuntimeError):  # Python 3.11/3.12 raise RuntimeError on a loop, 3.13 OSError
        problem = cwd_problem()  # a relative path in a deleted current folder fails the same way
        if problem is not None:
            raise ValueError(f"path {shown(os.fspath(path), 80)} in root {shown(os.fspath(root), 80)}: "
                             f"{problem}") from None
        raise ValueError(f"{os.fspath(path)}: a symbolic link on this path loops (or never ends)") from None
    if where != top and top not in where.parents:
        return None
    return where.relative_to(top).as_posix()


def check_path(value: object, name: str, what: str = "a file") -> None:
    """The package's one path rule (:func:`course_utils.paths.check_path` is this function; it
    lives here, in the standard-library-only module, so that the tools loading this file before
    torch share it): ``value`` is a non-empty str or a path-like object, else a TypeError naming
    the argument ``name``, what it should name (``what``) and what arrived; an empty path is a
    ValueError saying so (it was a TypeError calling '' not a str); a path holding a NUL
    character (no file system takes one: ``open`` and ``stat`` said only "embedded null byte") is a
    ValueError naming it; so is a str subclass whose ``str()`` raises (a TypeError: a root that did
    was reported as a symbolic link loop: battery 29). ``name`` and ``what`` are non-empty str
    (:func:`check_label`)."""
    check_label(name, "name", "the name of the argument checked")
    check_label(what, "what", "what the path should name, e.g. 'a file'")
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or Path naming {what}, got {type(value).__name__} "
                        f"{shown(value, 60)}")
    try:
        text = os.fspath(value)
    except Exception as err:  # noqa: BLE001 - returned neither str nor bytes, or raised (battery 27)
        raise TypeError(f"{name} must be a str or Path naming {what}, got a {type(value).__name__} "
                        f"whose __fspath__ failed: {err}") from None
    if type(text) is not str and type(text) is not bytes:  # a subclass: its str() may raise (battery 29)
        try:
            str(text)
        except Exception as err:  # noqa: BLE001 - its str is the broken part; say so
            raise TypeError(f"{name} must be a str or Path naming {what}, got a {type(value).__name__} "
                            f"whose str() raised {type(err).__name__}") from None
    if not text:
        raise ValueError(f"{name} must name {what}, got an empty path {shown(text)}")
    if ("\0" if isinstance(text, str) else b"\0") in text:
        raise ValueError(f"{name} must be a str or Path naming {what}, without a NUL character ('\\x00', "
                         f"which no file system takes), got {shown(text, 80)}")


def path_problem(path: object, name: str, what: str = "a file") -> str | None:
    """Why ``path``, a path the user gave as the argument ``name`` (an option such as
    ``--exchange``, or ``COURSE_DIR``), cannot name ``what``, as the one line a tool prints, or None.
    The package's one such rule for every command taking a path, checked before any work: a
    name longer than the file system takes (300 characters: ENAMETOOLONG), a whole path longer
    than the system takes, or any other OSError from looking it up (a folder on the way that may
    not be entered, a symbolic link loop) gave a raw "OSError: [Errno 36] File name too long"
    traceback from ``stat`` or ``mkdir`` (battery 33). Also :func:`check_path`'s rule (an empty
    path, a NUL character). A path that does not exist yet is no problem here (a tool may make
    it); its missing names are measured against the limit of the folder they would be made in."""
    try:
        check_path(path, name, what)
    except (TypeError, ValueError) as err:
        return str(err)
    text = os.fsdecode(os.fspath(path))
    above = Path(text)  # the nearest part that exists: the file system the missing names go to
    try:
        while not os.path.lexists(above) and above != above.parent:
            above = above.parent
    except ValueError:
        pass
    limit = _path_limit(above, "PC_NAME_MAX", 255)
    long = [part for part in Path(text).parts if len(os.fsencode(part)) > limit]
    if long:
        return (f"{name} must name {what}, each name in it at most {limit} bytes (this file system's "
                f"limit), got {shown_path(text)} with a name of {len(os.fsencode(long[0]))} bytes "
                f"(File name too long)")
    try:
        whole = len(os.fsencode(os.path.abspath(text)))
    except OSError:  # the current folder was deleted: the tool says so itself
        whole = len(os.fsencode(text))
    most = _path_limit(above, "PC_PATH_MAX", 4096)
    if whole >= most:
        return (f"{name} must name {what} in fewer than {most} bytes in all (the system's limit), got "
                f"{shown_path(text)} of {whole} bytes (File name too long)")
    try:
        os.lstat(text)
    except (FileNotFoundError, NotADirectoryError):
        pass  # missing: whether it may be made is the tool's to say
    except OSError as err:
        return os_problem(err, text, name, what)
    return None


def shown_path(path: object, width: int = 80) -> str:
    """A path the user gave, for a one-line message: quoted, its control characters escaped, and
    one longer than ``width`` characters cut in the middle (``'/tmp/nnnn...nnnn/x'``), so both
    its start and its end show and the quotes stay paired."""
    text = os.fsdecode(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    if len(text) > width:
        keep = max(width - 5, 2)
        text = f"{text[:keep * 2 // 3]}...{text[len(text) - keep // 3:]}"
    return repr(text)


def os_problem(err: OSError, path: object, name: str, what: str = "a file") -> str:
    """The one line for an OSError that looking up, reading or making the user's path ``path`` (the
    argument ``name``, which should name ``what``) raised: the argument, what it should name, the
    path (cut to 80 characters) and the system's reason, e.g. ``--venv must name a folder, got
    '/tmp/nnn...': a name in it is too long for the file system (File name too long)``."""
    if not isinstance(err, OSError):
        raise TypeError(f"err must be the OSError to report, got {type(err).__name__} {shown(err, 60)}")
    why = {errno.ENAMETOOLONG: "a name in it is longer than the file system takes",
           errno.ELOOP: "a symbolic link on it loops",
           errno.EACCES: "a folder on it may not be entered or read",
           errno.EPERM: "the system does not allow it"}.get(err.errno, "it cannot be looked at")
    return f"{name} must name {what}, got {shown_path(path)}: {why} ({err.strerror or err})"


def _path_limit(folder: Path, setting: str, default: int) -> int:
    """``os.pathconf(folder, setting)`` (NAME_MAX, PATH_MAX), or ``default`` where it cannot be
    asked (Windows, a folder that cannot be read)."""
    try:
        return int(os.pathconf(folder, setting))
    except (OSError, ValueError, AttributeError):
        return default


def path_kind(path: str | os.PathLike) -> str | None:
    """``None`` for a regular file (or a link to one); otherwise what ``path`` is, in words:
    "missing", "a directory", "a symlink loop", "a FIFO (named pipe)", ...; never opens it
    (reading a FIFO would wait for a writer forever). ``path`` is a str or a path-like object
    (:func:`check_path`). The package's one such rule (:func:`course_utils.paths.path_kind` is
    this function), here so that the standard-library tools share it (``version_matrix.py --venv
    FIFO`` said "is a file": battery 20)."""
    check_path(path, "path")
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return "a broken symlink" if Path(path).is_symlink() else "missing"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop"
        if err.errno == errno.ENAMETOOLONG:
            return f"a path with a name longer than the file system takes ({err.strerror})"
        return f"unreadable ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def path_type(what: str) -> Callable[[str], Path]:
    """An argparse type for an option naming a file or folder: the text as a Path, refused by
    :func:`path_problem`'s rule when it is empty, holds a NUL character or a name longer than the
    file system takes, or cannot be looked up (``type=Path`` turned
    ``--exchange ''`` into the current folder without a word: battery 19, G5). ``what`` says
    what the path should name (argparse puts the option's name before the message)."""
    check_label(what, "what", "what the path should name, e.g. 'a folder'")

    def parse(text: str) -> Path:
        problem = path_problem(text, "the value", what)  # a name too long: a traceback later (battery 33)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return Path(text)
    return parse


def check_label(value: object, name: str, what: str) -> str:
    """``value``, a label (a ``name``, ``what`` or ``prog`` argument a helper puts in its
    messages, a table's row name): a non-empty str. Else a TypeError (another type) or a
    ValueError (``''`` or blanks) naming ``name``, saying ``what`` it labels, and what arrived (a
    ``name=None`` gave "None must be >= 0", a message naming no argument: battery 18). The
    package's one such rule; here because this module imports nothing but the standard library
    (the tools load it before torch), so callers elsewhere import it inside their functions:
    importing it with the package would make ``python -m course_utils.cli`` warn. ``name`` and
    ``what`` are checked first, by the same rule (``check_label('', None, 'w')`` said "None must be
    a non-empty str": battery 21)."""
    _label(name, "name", "the name of the argument checked")
    _label(what, "what", "what the value labels")
    return _label(value, name, what)


def _label(value: object, name: str, what: str) -> str:
    """:func:`check_label`'s rule, once ``name`` and ``what`` are known to be labels. A str
    subclass comes back as the plain str it holds (read through ``str.__str__``, as
    ``validation.plain_str`` does; this module cannot import it): its own ``__str__``, ``__repr__``
    or ``strip`` is never called, so every caller's f-string prints the text (battery 32)."""
    if isinstance(value, str):
        value = str.__str__(value)
    if not isinstance(value, str) or not value.strip():
        raise (TypeError if not isinstance(value, str) else ValueError)(
            f"{name} must be a non-empty str ({what}), got {type(value).__name__} {shown(value, 60)}")
    return value


def _check_prog(prog: object) -> str:
    """``prog``, the tool's name for its messages: a non-empty str, else a TypeError naming it."""
    return check_label(prog, "prog", "the tool's name for its messages")


def _is_real(value: object) -> bool:
    """:func:`course_utils.attention.validation.is_real`'s rule, here because this module imports
    the standard library only: any ``numbers.Real`` but a bool (``np.float32(1.5)`` is a number)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _stop_signal(value: object, name: str) -> int:
    """``value`` as one of :data:`STOP_SIGNALS` (an int or a ``signal.Signals``), or a TypeError /
    ValueError naming ``name``, what is taken and what arrived (``Interrupted('x')`` said "invalid
    literal for int()"; ``relay=(999,)`` was ignored without a word). Standard library only, like
    this module, so not validation.check_int (it imports torch)."""
    taken = ", ".join(f"{sig.name} ({int(sig)})" for sig in STOP_SIGNALS)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a stop signal, one of {taken}, got {type(value).__name__} "
                        f"{shown(value, 60)}")
    if value not in STOP_SIGNALS:
        raise ValueError(f"{name} must be a stop signal, one of {taken}, got {shown(value, 60)}")
    return int(value)


COMMANDS = ("python course.py (setup, checks, publishing: see its --help), python -m course_utils.bench "
            "(the benchmarks) and the tools in scripts/ (each with --help)")


def not_a_command(prog: str) -> None:
    """The ``__main__`` of a library module: run as a command (``python -m course_utils.cli``,
    any arguments), it did nothing and exited 0 without a word, so a mistyped command looked as
    if it had worked. Now a usage error: one line on stderr naming the course's real commands,
    exit 2 (argparse's status for a command line it refuses)."""
    prog = _check_prog(prog)
    print(f"{prog}: a library module, not a command (nothing was run); the course's commands are "
          f"{COMMANDS}", file=sys.stderr)
    sys.exit(2)


def leaving(text: str) -> None:
    """Say what an interruption from now on would leave, e.g. ``"lesson01.pt was written, the
    others were left as they were"``; it is the end of the one line :func:`run` prints. ``text``
    is a non-empty str (the line is printed when a signal comes: a wrong one is refused now)."""
    if type(text) is not str or not text.strip():
        raise (TypeError if type(text) is not str else ValueError)(
            f"text must be a non-empty str saying what an interruption would leave, got "
            f"{type(text).__name__} {shown(text, 60)}")
    _left[0] = text


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()  # only it may set handlers


def _ignore_more() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def stop_at_once(prog: str, needs: Sequence[str] = ()) -> None:
    """Until :func:`run` starts ``main``: a signal prints one line and exits at once (the script is
    still importing; it has written nothing). Marks the process as a command-line tool: when
    ``main`` is done, :func:`run` leaves the signals ignored (see there). ``prog`` (the tool's name
    for the line) is checked now: a wrong one would only fail inside the signal handler.

    A tool calls it before any import but those it needs to reach this module (``sys``,
    ``pathlib``, ``course_cli``). A signal while ``course_cli.load_cli`` loads this module is held
    there and delivered here, once the handlers are set (battery 21). A signal earlier still, while
    the interpreter itself starts (its ``site`` and ``.pth`` files), comes before any handler of
    the course's: Python's own KeyboardInterrupt (or the signal's default) ends it; nothing is
    written by then either; except for a tool started by :func:`call` with ``course_tool=True``
    (``course.py``'s commands): it starts with the stop signals held, and they are let through
    here, once the handlers are set.

    ``needs``: the top-level modules the tool imports from the course's environment (``.venv``),
    e.g. ``("nbformat",)``. One missing (the tool run by a Python outside ``.venv``, such as the
    system's ``python3``) stops it with one line naming the module, the Python that ran and the
    command to use instead, exit 2, instead of a ModuleNotFoundError traceback from its imports
    (battery 30)."""
    _check_prog(prog)
    problem = cwd_problem() or missing_modules_problem(prog, needs)
    if problem is not None:  # torch's MKL ends the process at import there (battery 27)
        print(f"{prog}: {problem}; {NOTHING_WRITTEN}", file=sys.stderr, flush=True)
        raise SystemExit(2)

    def stop(signum: int, frame: object) -> None:
        _ignore_more()
        if not _received:
            print(f"{prog}: interrupted by {signal.Signals(signum).name} while starting; {NOTHING_WRITTEN}",
                  file=sys.stderr, flush=True)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(128 + (_received[0] if _received else signum))

    if _main_thread():
        _script.append(True)
        for sig in STOP_SIGNALS:
            signal.signal(sig, stop)
        if _held:
            signal.raise_signal(_held.pop())
        if hasattr(signal, "pthread_sigmask"):  # held by call(..., course_tool=True) while we started
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


# the course.py command that runs a script with the course's environment (making it first)
COURSE_COMMANDS = {"publish.py": "publish", "nbgrader_tools.py": "release", "student_tree.py": "student-tree"}


def missing_modules_problem(prog: str, needs: Sequence[str]) -> str | None:
    """None when each of ``needs`` (top-level module names) can be imported by this Python; else
    what is missing, the Python that ran and the command to use instead, in words (see
    :func:`stop_at_once`). ``prog`` is the script's file name in scripts/."""
    if isinstance(needs, str) or not isinstance(needs, (tuple, list)) \
            or not all(type(name) is str and name.isidentifier() for name in needs):
        raise TypeError(f"needs must be a tuple of module names, e.g. ('nbformat',), got "
                        f"{type(needs).__name__} {shown(needs, 60)}")
    missing = []
    for name in needs:
        try:
            found = name in sys.modules or importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # it is there but broken: its own import says how
            found = True
        if not found:
            missing.append(name)
    if not missing:
        return None
    python = sys.executable or "this Python"
    instead = f"`.venv/bin/python scripts/{prog} ...`"
    if prog in COURSE_COMMANDS:
        instead = f"`python3 course.py {COURSE_COMMANDS[prog]} ...` (it makes .venv/ first) or {instead}"
    else:
        instead += " (`python3 course.py setup` makes .venv/)"
    names = " and ".join(f"'{name}'" for name in missing)
    module = "modules" if len(missing) > 1 else "module"
    return (f"no {module} named {names} in {python}, which ran it: the course's packages are in its "
            f"environment, .venv/; run {instead}")


def cwd_problem() -> str | None:
    """None while the current folder exists; else what is wrong, in words. A tool started in a
    folder deleted after the shell entered it died importing torch ("Intel oneMKL FATAL ERROR:
    Cannot load libtorch_cpu.so", exit 2) or in ``os.path.abspath`` (battery 27)."""
    try:
        os.getcwd()
    except OSError as err:
        return (f"the current folder cannot be read ({err.strerror}; was it deleted while the shell "
                f"was in it?): cd to an existing folder and run the command again")
    return None


def raise_interrupted(signum: int, frame: object) -> None:
    """The handler :func:`run` sets: note the signal, ignore any more, raise :class:`Interrupted`."""
    _received.append(signum)
    _ignore_more()
    raise Interrupted(signum, _left[0])


def check_interrupted() -> None:
    """Raise :class:`Interrupted` now if a SIGINT/SIGTERM arrived while :func:`run`'s ``main`` runs,
    even though the :class:`Interrupted` its handler raised never got here. A library may take it:
    torch's C extension imports numpy as it loads and clears any error that import raised, so a
    Ctrl-C during ``import torch`` vanished there, the handler had already ignored any further
    signal, and ``nbgrader_tools.py source`` wrote every file (new salts) before exiting 130
    (battery 18, finding 1). Every all-or-nothing writer calls this just before its first
    irreversible step (a rename into place); outside :func:`run` it does nothing."""
    if _running and _received:
        raise Interrupted(_received[0], _left[0])


def words(argv: object, name: str = "argv", *, none_reads_sys_argv: bool = True) -> list[str]:
    """``argv`` as a list of str: the words of a command line (``sys.argv[1:]`` when None, unless
    ``none_reads_sys_argv`` is False), or a TypeError naming ``name`` (``main(3)`` said "'int'
    object is not iterable"). ``name``, the argument the message names, is a non-empty str, else a
    TypeError naming ``name`` (``name=None`` said "None must be a list of str": battery 20).
    ``none_reads_sys_argv`` is a bool, else a TypeError naming it (``'no'`` read as True and
    returned ``sys.argv[1:]``: battery 21)."""
    check_label(name, "name", "the name of the argument checked, e.g. 'argv'")
    if type(none_reads_sys_argv) is not bool:
        raise TypeError(f"none_reads_sys_argv must be a bool (True: argv=None reads sys.argv[1:]), got "
                        f"{type(none_reads_sys_argv).__name__} {shown(none_reads_sys_argv, 60)}")
    argv = sys.argv[1:] if argv is None and none_reads_sys_argv else argv
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise TypeError(f"{name} must be a list of str (the words of a command line, as sys.argv[1:]), "
                        f"got {type(argv).__name__} {shown(argv, 80)}")
    # read by iterating, once: list(argv) asks a subclass's __len__, which may lie (-1: battery 28)
    items = [word for word in argv]
    odd = next((i for i, word in enumerate(items) if type(word) is not str), None)  # exactly str, as argv
    if odd is not None:
        raise TypeError(f"{name} must be a list of str (the words of a command line, as sys.argv[1:]), "
                        f"got {type(argv).__name__} {shown(items, 80)}, whose {name}[{odd}] is "
                        f"{type(items[odd]).__name__} {shown(items[odd], 60)}, not exactly str")
    return items


def run(main, argv: list[str], prog: str) -> int:
    """``main(argv)`` with SIGINT/SIGTERM raising :class:`Interrupted`; an interruption is printed
    on one line, ``prog: interrupted by SIGINT: <what was left>``, and gives 128 + its number.
    A library that catches everything (nbgrader does) turns the signal into its own error: once a
    signal arrived, any exception is reported as the interruption, and so is a normal return.
    The handlers in place before are put back when it returns; in a tool run from the command line
    (:func:`stop_at_once` was called) the signals are ignored instead: its work is done or reported,
    and a signal while the interpreter shuts down (Jupyter's clean-ups can take a second) would
    otherwise end it silently with the signal's status, or with a wrong line.

    ``main`` returns what ``sys.exit`` takes: None (0), an exit status 0..255 or a message str
    (printed, status 1); any other type (a bool, a float) or an int outside 0..255 is refused with
    a TypeError/ValueError after ``main`` ran (``True`` read as 1, 999 as 231 and 2.0 as 1, by
    accident). A ``SystemExit`` that ``main`` raises goes on up, its code checked the same way
    first (``raise SystemExit(300)`` exited 44 unchecked: battery 20)."""
    if not callable(main):
        raise TypeError(f"main must be the tool's function main(argv), got {type(main).__name__} "
                        f"{shown(main, 60)}")
    argv = words(argv)
    _check_prog(prog)
    _received.clear()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if _main_thread() else {}
    try:
        return _run_main(main, argv, prog, previous)
    except Interrupted as exc:  # it came as main returned, or as the handlers were being put back
        code = _report(prog, exc)
        _put_back(previous)  # the handler ignored any further signal: this finishes undisturbed
        return code


def _put_back(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_IGN if _script else handler)


def _run_main(main, argv: list[str], prog: str, previous: dict) -> int:
    """:func:`run`'s work, the handlers set to ``raise_interrupted`` meanwhile. A signal between
    ``main``'s return and the end of the ``finally`` raises :class:`Interrupted` out of here (it
    gave a traceback and exit 1 after every file was written): :func:`run` reports it."""
    _running.append(True)
    unraisable = sys.unraisablehook
    sys.unraisablehook = _quiet_interrupted(unraisable)
    try:
        for sig in previous:
            signal.signal(sig, raise_interrupted)
        try:
            code = main(argv)
        except Interrupted as exc:
            return _report(prog, exc)
        except BaseException as exc:
            if not _received:
                if isinstance(exc, SystemExit):  # sys.exit(True) inside main: as if returned (battery 20)
                    _exit_status(exc.code, "raised SystemExit with")
                raise
            return _report(prog, Interrupted(_received[0], _left[0]))
        if _received:
            return _report(prog, Interrupted(_received[0], _left[0]))
        return _exit_status(code)
    finally:
        _running.clear()
        _put_back(previous)
        sys.unraisablehook = unraisable


def _quiet_interrupted(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A ``sys.unraisablehook`` that drops :class:`Interrupted` and passes anything else on: the
    handler's Interrupted raised where Python cannot pass it on (a weakref callback, a
    ``__del__``) printed "Exception ignored in ..." and a traceback before the one line (battery
    20); the signal is still seen (:func:`check_interrupted`, and :func:`run` after ``main``)."""
    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            previous(unraisable)
    return hook


def _exit_status(code: object, how: str = "returned") -> object:
    """``code``, what ``main`` returned for ``sys.exit`` (or the code of the ``SystemExit`` it
    raised: ``how`` says which in the message), refused when it is a bool (True gave
    exit status 1 by accident) or an int outside 0..255 (``sys.exit(999)`` exits 231): None, an
    int 0..255, or a message str (``sys.exit`` prints it and exits 1) pass (battery 16). Any other
    type (a float: ``sys.exit(2.0)`` printed "2.0" and exited 1) is a TypeError too (battery 17)."""
    if isinstance(code, bool) or not (code is None or isinstance(code, (int, str))):
        raise TypeError(f"main(argv) {how} {type(code).__name__} {shown(code, 60)}: expected an exit "
                        "status (an int 0..255, None for 0, or a message str)")
    if isinstance(code, int) and not 0 <= code <= 255:
        raise ValueError(f"main(argv) {how} {shown(code)}: expected an exit status 0..255 "
                         f"(sys.exit takes it modulo 256: {code % 256})")
    return code


def _report(prog: str, exc: Interrupted) -> int:
    _ignore_more()
    if not _received:
        _received.append(exc.signum)
    print(f"{prog}: {one_line(str(exc))}", file=sys.stderr, flush=True)
    return 128 + exc.signum


def call(command: list[str], prog: str, relay: tuple[int, ...] = STOP_SIGNALS, *,
         course_tool: bool = False, **kwargs) -> int:
    """Run a child tool (``subprocess.Popen(command, **kwargs)``) and return its exit status. The
    signals in ``relay`` sent to this process are passed on to the child (on Windows, Ctrl-C reaches
    the child's console itself), which stops with its own one line and status 128 + the signal's
    number (as :func:`run` makes it); this process says one line itself only when the child died of
    the signal without a word, and returns 128 + its number then. The other stop signals are not
    relayed (a terminal's Ctrl-C reaches the child anyway) and only waited out, as a shell does.
    A child killed by any other signal gives 128 + its number too (an exit status :func:`run`
    accepts), not Popen's negative number. A child that stops cleanly on a relayed signal and exits
    0 (JupyterLab does on SIGTERM) still gives 128 + the signal's number: the command was stopped,
    it did not finish (``course.py lab`` exited 0 after ``kill PID``: battery 19, G7).

    ``course_tool=True`` says the child is one of the course's tools, which calls
    :func:`stop_at_once` first thing: it is started with the stop signals blocked (a signal mask
    survives exec), so that a Ctrl-C while its interpreter starts waits until its handlers are
    set and then ends it with its one line (it raised Python's KeyboardInterrupt traceback inside
    ``site``'s start-up: battery 21). Any other child would never unblock them: leave it False.
    A course tool's exit status is trusted as it is: its :func:`run` turns a signal into 130/143 with
    its own line, and ignores one that comes once its work is done, so a 0 means done, even with a
    relayed signal (``course.py student-tree`` exited 130 without a word after "wrote 94 files":
    battery 22, G3). For the same reason, inside a tool's :func:`run` (:func:`stop_at_once` was
    called) the stop signals are left ignored once a course tool has ended, as :func:`run` leaves
    them once ``main`` is done: the tool was the command's work (``return cli.call(...)``), and a
    signal just after it would have said "nothing was written" of a tree that was written."""
    command = words(command, "command", none_reads_sys_argv=False)  # read once: Popen reads it again
    if not command:
        raise ValueError("command must hold at least the program to run, got []")
    if not isinstance(relay, (tuple, list)):
        raise TypeError(f"relay must be a tuple of stop signals (a subset of cli.STOP_SIGNALS), got "
                        f"{type(relay).__name__} {shown(relay, 60)}")
    relay = tuple(_stop_signal(sig, "relay") for sig in relay)
    _check_prog(prog)
    if type(course_tool) is not bool:
        raise TypeError(f"course_tool must be a bool (True: the child calls stop_at_once), got "
                        f"{type(course_tool).__name__} {shown(course_tool, 60)}")
    held = course_tool and hasattr(signal, "pthread_sigmask")  # not on Windows
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if held else None
    try:
        child = subprocess.Popen(command, **kwargs)
    except BaseException as err:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if not isinstance(err, OSError):
            raise
        # a bare "[Errno 13] Permission denied: '/x'" did not say it was the program
        cwd = kwargs.get("cwd")
        if cwd is not None and not os.path.isdir(cwd):  # not the program's fault (battery 16)
            raise type(err)(err.errno, f"cwd: {prog} cannot run {shown(command[0])} in "
                                       f"{shown(os.fsdecode(cwd))}: "
                                       f"{'not a folder' if os.path.exists(cwd) else 'no such folder'} "
                                       f"({err.strerror or err})") from None
        kind = ("a folder, not a program" if os.path.isdir(command[0]) else
                "not found" if isinstance(err, FileNotFoundError) else
                "not runnable" if isinstance(err, PermissionError) else err.strerror or str(err))
        raise type(err)(err.errno, f"command[0]: {prog} cannot run {shown(command[0])}: {kind} "
                                   f"({err.strerror or err})") from None
    received: list[int] = []

    def relayed(signum: int, frame: object) -> None:
        if signum not in relay:
            return
        received.append(signum)
        if child.poll() is None and os.name != "nt":  # Windows: Ctrl-C reaches the child's console too
            try:
                child.send_signal(signum)
            except OSError:  # it had just ended
                pass

    previous = {sig: signal.signal(sig, relayed) for sig in STOP_SIGNALS} if _main_thread() else {}
    if held:  # a signal that came meanwhile is relayed now: the child holds it until it is ready
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        code = child.wait()
    finally:
        done = course_tool and child.returncode is not None and bool(_script and _running)
        for sig, handler in previous.items():  # the command's work ended with the tool: as run() after main
            signal.signal(sig, signal.SIG_IGN if done else handler)
    if code < 0 and -code in STOP_SIGNALS:
        signum = received[0] if received else -code
        name = next((Path(c).name for c in command[1:] if not c.startswith("-")), Path(command[0]).name)
        print(f"{prog}: interrupted by {signal.Signals(signum).name}: {name} was stopped before it "
              "could say what it left", file=sys.stderr, flush=True)
        return 128 + signum
    if code == 0 and received and not course_tool:  # it stopped as asked, with status 0: report the signal
        return 128 + received[0]
    return 128 - code if code < 0 else code  # killed by another signal: 128 + its number, as a shell


def run_in_group(command: Sequence[str], *, check: bool = True, patience: float = 10.0, **kwargs) -> int:
    """Run ``command`` (``subprocess.Popen(command, start_new_session=True, **kwargs)``) in a
    process group of its own, wait for it and return its exit status (a non-zero one raises
    :class:`subprocess.CalledProcessError` when ``check``). Interrupted meanwhile (a signal that
    :func:`run` turns into :class:`Interrupted`, or Ctrl-C's KeyboardInterrupt), the whole group
    is SIGKILLed and waited for (up to ``patience`` seconds) before the interruption goes on.

    For installers: venv's ensurepip and pip start children of their own, and such a grandchild
    went on writing into a folder after the tool had removed it and said so (battery 21). In its
    own group, a terminal's Ctrl-C reaches only this process, which stops the group itself."""
    command = words(command, "command", none_reads_sys_argv=False)
    if not command:
        raise ValueError("command must hold at least the program to run, got []")
    if type(check) is not bool:
        raise TypeError(f"check must be a bool, got {type(check).__name__} {shown(check, 60)}")
    if not _is_real(patience) \
            or not 0 <= patience < float("inf"):
        raise ValueError(f"patience must be a finite number of seconds >= 0, got "
                         f"{type(patience).__name__} {shown(patience, 60)}")
    patience = float(patience)  # np.float32 too: a number like any other
    child = subprocess.Popen(command, start_new_session=True, **kwargs)
    try:
        code = child.wait()
    except BaseException:
        _kill_group(child, patience)
        raise
    if code and check:
        raise subprocess.CalledProcessError(code, command)
    return code


def _kill_group(child: subprocess.Popen, patience: float) -> None:
    """SIGKILL ``child``'s process group, reap ``child``, then wait (up to ``patience`` seconds)
    until no member of the group is left; a killed grandchild is reaped by init, not by us."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        try:
            os.killpg(child.pid, 0)
        except (ProcessLookupError, PermissionError):  # PermissionError: a member changed its user,
            return  # it was killed all the same
        time.sleep(0.05)


def run_kernel(work, message: str):
    """Run the coroutine ``work`` (nbclient's ``client.async_execute()``) on a fresh event loop
    and return its result; a SIGINT/SIGTERM that arrives meanwhile raises :class:`Interrupted`
    with ``message`` (say what was left, e.g. ``"the kernel was shut down; 02.ipynb was not
    changed"``), whatever the run then returned or raised (a kernel still starting is cancelled:
    CancelledError; a finished task's failure is retrieved, so asyncio prints no "Task exception
    was never retrieved" after the one line). nbclient stops its kernel on those
    signals through the running loop's handlers, after which the run fails with whatever the dead
    kernel gives (``AttributeError``, ``AssertionError``): without this, a caller's ``except
    Exception`` would report an interrupted run as a failed one and carry on. The signal handlers
    in place before (:func:`run`'s) are put back afterwards. One implementation for every tool
    that runs a notebook (``notebook_tools.py execute``, ``python -m course_utils.bench memory``)."""
    import asyncio

    _check_kernel_work(work, message)
    received: list[int] = []
    made: list[asyncio.Task] = []  # every task run: their failures after a signal are looked at here

    class NotingLoop(asyncio.SelectorEventLoop):
        def create_task(self, coro, **kwargs):
            task = super().create_task(coro, **kwargs)
            made.append(task)
            return task

        def add_signal_handler(self, sig: int, callback, *args) -> None:
            def noted(*given) -> None:
                received.append(sig)
                callback(*given)
            super().add_signal_handler(sig, noted, *args)

    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if _main_thread() else {}
    loop = NotingLoop()
    try:
        result = loop.run_until_complete(work)
    except BaseException:  # CancelledError too: nbclient cancels a kernel still starting
        if not received:
            raise
    finally:
        if received:  # let nbclient's kernel clean-ups finish (they race; one fails on the other's None)
            pending = asyncio.all_tasks(loop)
            if pending:  # gather() of nothing is a future of another loop: run_until_complete refuses it
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for task in made:  # a dead kernel's poll fails: retrieved here, or asyncio prints
                if task.done() and not task.cancelled():  # "Task exception was never retrieved" later
                    task.exception()
        loop.close()
        for sig, handler in handlers.items():  # the loop reset them to the defaults as it closed
            signal.signal(sig, handler)
    if received:  # the run had finished (or failed) as the signal came: still an interruption
        raise Interrupted(received[0], message) from None
    return result


def _check_kernel_work(work: object, message: object) -> None:
    """:func:`run_kernel`'s arguments: ``work`` an awaitable (the coroutine
    ``client.async_execute()``, called), ``message`` a non-empty str; else a TypeError (a
    ValueError for an empty message) naming the argument
    (asyncio said only "An asyncio.Future, a coroutine or an awaitable is required"). A coroutine
    refused for its message is closed, so Python prints no "was never awaited" after the error."""
    import inspect

    if not inspect.isawaitable(work):
        hint = " (call it: client.async_execute(), not client.async_execute)" if callable(work) else ""
        raise TypeError(f"work must be the coroutine to run, such as nbclient's client.async_execute()"
                        f"{hint}, got {type(work).__name__} {shown(work, 60)}")
    if type(message) is not str or not message.strip():  # (leaving's rule: the line says what was left)
        if inspect.iscoroutine(work):
            work.close()
        raise (TypeError if type(message) is not str else ValueError)(
            f"message must be a non-empty str saying what an interruption leaves, got "
            f"{type(message).__name__} {shown(message, 60)}")


#: Actions whose option may be given more than once: each use adds to the value.
_ACCUMULATING = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction,
                 argparse._HelpAction, argparse._VersionAction)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser for the course's tools, except that an option it does not know is named
    first: argparse reports missing required arguments before unknown options, so ``train
    --bogus`` said "the following arguments are required: task", hiding the typo. ``parse_args``
    first parses with every required argument made optional (its own, its subcommands'); an
    option left over is refused as argparse would refuse it, ``unrecognized arguments: --bogus``;
    otherwise the arguments are parsed as usual.

    An option given twice is a usage error too (``bench mha --repeats 1 --repeats 2``: argparse
    keeps the last without a word), in every subcommand, as :class:`bench.cli.Distinct` refuses a
    value repeated inside a list option; so are both spellings of one flag (``--whole-step
    --no-whole-step``). Options that add up (``action="append"``, ``"count"``) may repeat."""

    def __init__(self, *args, conflict_handler: str = "error", **kwargs) -> None:
        # argparse formats it into a method's name: a value whose str raises, or an unknown one,
        # failed with its own error or "invalid conflict_resolution value: ..." naming no argument
        if type(conflict_handler) is not str or conflict_handler not in ("error", "resolve"):
            raise (TypeError if type(conflict_handler) is not str else ValueError)(
                f"conflict_handler must be 'error' or 'resolve' (argparse's two), got "
                f"{type(conflict_handler).__name__} {shown(conflict_handler, 60)}")
        super().__init__(*args, conflict_handler=conflict_handler, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:  # argparse failed on an int with "'int' object is not subscriptable"
            args = words(args, "args", none_reads_sys_argv=False)
        self._given = {}  # action -> the words it was given, for this parse (subcommands parse themselves)
        return super().parse_known_args(args, namespace)

    def _get_values(self, action, arg_strings):
        if action.option_strings and not isinstance(action, _ACCUMULATING):
            given = getattr(self, "_given", {})
            if action in given:
                both = f" ({' '.join(given[action])}, then {' '.join(arg_strings)})" if arg_strings else ""
                raise argparse.ArgumentError(action, f"given more than once{both}; give it once "
                                                     "(argparse would keep the last without a word)")
            given[action] = list(arg_strings)
        return super()._get_values(action, arg_strings)

    def parse_args(self, args=None, namespace=None):
        args = words(args, "args")  # a list of str, or a TypeError naming args
        relaxed = [action for parser in _parsers(self) for action in parser._actions if action.required]
        for action in relaxed:
            action.required = False
        try:
            _, extras = self.parse_known_args(args, argparse.Namespace())
        finally:
            for action in relaxed:
                action.required = True
        unknown = [a for a in extras if a.startswith("-") and len(a) > 1 and not _is_number(a)]
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return super().parse_args(args, namespace)


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and the parsers of its subcommands, and theirs."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found += _parsers(sub)
    return found


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    not_a_command("python -m course_utils.cli")
