#!/usr/bin/env python3
"""Set up and run the course with nothing but Python 3.10+.

    python3 course.py lab      # open the course in JupyterLab (your copy: student/00)
    python3 course.py test     # run every test and every notebook
    python3 course.py setup    # only make .venv and install the pinned packages
    python3 course.py release  # instructors: nbgrader metadata + student/ notebooks
    python3 course.py student-tree OUT_DIR | --branch NAME  # instructors: a copy without solutions
    python3 course.py publish [--repo OWNER/NAME --tag vX.Y.Z]  # stamp badges and links

The first run creates a virtual environment in .venv and installs the pinned
packages (constraints.txt) with uv, falling back to pip (COURSE_INSTALLER=pip: pip only);
later runs skip the install unless those files changed.
Extra arguments after `test` go to pytest, e.g.
    python3 course.py test notebooks/02_single_head_attention.ipynb
Set COURSE_TORCH_INDEX_URL to an extra package index (for example PyTorch's CPU-only
wheel index) to avoid a large CUDA build of torch on Linux.

`python3 course.py --help` (or -h) prints this text (exit 0; with no command at all, exit 2).
An unknown command, or a test path that does not exist, is named on stderr (exit 2)
before anything is installed or run; an option JupyterLab does not know, or a --notebook-dir
that is no folder or does not hold the lesson it opens (student/00_start_here.ipynb), before it starts.
Interrupted (Ctrl-C, SIGINT, or SIGTERM), a command stops with one line on stderr saying what
was left as it was, and exits 130 or 143. One exception: ``test`` and ``lab`` pass a SIGTERM on
to pytest / JupyterLab, but not a SIGINT sent to course.py's pid alone (``kill -INT PID``): that
one is waited out (they run on, and their exit status is course.py's). A Ctrl-C reaches them
directly (the terminal signals the whole process group), so a relayed copy would be a second
SIGINT: pytest then prints a KeyboardInterrupt traceback in the middle of its summary (seen with
and without xdist, the copy 0-0.3 s after the first), and JupyterLab stops without asking. A
SIGINT sent to the group (``kill -INT -PGID``) cannot be told apart from one sent to course.py
alone, so no rule could relay only the latter. From another shell, stop them with SIGTERM
(``kill PID``: exit 143) or with SIGINT to the group. A second exception no script can close: a
signal in the first few hundredths of a second, while Python itself starts and compiles this file
(before its first line runs), gets Python's own answer (a KeyboardInterrupt traceback, or the
process killed by SIGINT); nothing has been written by then.
"""

# No `from __future__ import annotations` here: importing __future__ runs the import system's own
# code, where a Ctrl-C would raise before the handler below is set (its annotations work on 3.10).
import _signal  # built in and loaded already: SIGINT/SIGTERM are noted before any import that takes time

_early_signals = []  # (list[int]: no annotation evaluated before the version check below)
if __name__ == "__main__":
    # A signal from here until cli.stop_at_once below (the imports of pathlib, course_cli and cli
    # take 0.1 s or more) is noted instead of raising a KeyboardInterrupt traceback in them; it is
    # raised again once stop_at_once's handlers are set, which stop with the one line (130/143).
    try:
        for _sig in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(_sig, lambda signum, frame: _early_signals.append(signum))
    except KeyboardInterrupt:  # it came before the handler was set (signal.signal checks first)
        _early_signals.append(_signal.SIGINT)
        for _sig in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(_sig, lambda signum, frame: _early_signals.append(signum))

import sys  # noqa: E402

if sys.version_info < (3, 10):  # noqa: UP036 - here, before a def whose `str | None` 3.9 cannot evaluate
    sys.exit(f"The course needs Python 3.10 or newer; this is {sys.version.split()[0]}. "
             "Run this script with a newer python, e.g. python3.11 course.py ...")

from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent


def _load_cli():
    """course_utils/cli.py (Ctrl-C and SIGTERM: one line, exit 130/143), through
    scripts/course_cli.py: it needs only the standard library, and importing the course_utils
    package would need .venv's torch."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.append(str(ROOT / "scripts"))
    from course_cli import load_cli

    return load_cli()


cli = _load_cli()
if __name__ == "__main__":
    cli.stop_at_once("course.py")  # before its other imports: a signal while it starts gets one line
    if _early_signals:  # noted above, before the handlers were set
        _signal.raise_signal(_early_signals[0])

import hashlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import venv  # noqa: E402

COMMANDS = ("lab", "test", "setup", "release", "publish", "student-tree")
# pytest options whose next argument is a value, not a path to test
PYTEST_VALUE_OPTIONS = {"-k", "-m", "-n", "-p", "-c", "-o", "-W", "-r", "--numprocesses", "--dist",
                        "--maxfail", "--durations", "--tb", "--basetemp", "--rootdir", "--confcutdir",
                        "--junitxml", "--junit-xml", "--override-ini", "--import-mode", "--log-level",
                        "--deselect", "--ignore", "--ignore-glob", "--timeout", "--cov", "--capture",
                        "--nbval-sanitize-with", "--pythonwarnings", "--color", "--log-file", "--debug"}
# set but empty: the default, not "."; a leading ~ is the home folder, as a shell would read it
# (a quoted '~/venvs/mha' made a folder named '~' here, battery 30)
VENV = Path(os.path.expanduser(os.environ.get("COURSE_VENV") or "") or ROOT / ".venv")
STAMP = VENV / ".course-install-stamp"
INPUTS = ("pyproject.toml", "constraints.txt")




def _bin(name: str) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    suffix = ".exe" if os.name == "nt" else ""
    return VENV / folder / f"{name}{suffix}"


def _fingerprint() -> str:
    """What the install stamp records: this Python's version and the bytes of ``INPUTS``, which
    :func:`inputs_problem` has checked to be files (``_main``, before anything is installed)."""
    digest = hashlib.sha256(sys.version.encode())
    for name in INPUTS:
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def inputs_problem(root: Path = ROOT) -> str | None:
    """Why one of ``INPUTS`` (pyproject.toml, constraints.txt) cannot be read for the install
    stamp, in :func:`cli.path_kind`'s words (missing, a directory, a FIFO, ...), or a
    pyproject.toml that is no TOML (Python 3.11+), or None. Opens nothing before it knows both
    are regular files: reading a FIFO waits forever, and a directory or a missing file gave a
    bare traceback from :func:`_fingerprint` (battery 21, b21b group 1)."""
    for name in INPUTS:
        kind = cli.path_kind(root / name)
        if kind is not None:
            return (f"{root / name} is {kind}, expected the course's {name} (a file: it says what "
                    f"is installed; git checkout -- {name} brings it back)")
    try:  # a pyproject.toml that is no TOML failed inside pip's install (battery 27)
        import tomllib
    except ImportError:  # Python 3.10: pip's install names it
        return None
    try:
        tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as err:
        return (f"{root / 'pyproject.toml'} is not valid TOML ({err}): it says what is installed; "
                f"git checkout -- pyproject.toml brings it back")
    return None


def _venv_is_usable() -> bool:
    """True when .venv exists, runs this Python's version, and has pip."""
    if not _bin("python").exists():
        return False
    probe = subprocess.run(
        [str(_bin("python")), "-c", "import sys, pip; print(tuple(sys.version_info[:2]))"],
        capture_output=True, text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2]))


# What a virtual environment holds at its top (venv on Linux, macOS and Windows; uv adds .lock and
# CACHEDIR.TAG) and what the course adds: a folder with only these may be emptied and made again;
# anything else is someone's files.
VENV_ENTRIES = {"bin", "include", "lib", "lib64", "Scripts", "Include", "Lib", "share", "etc",
                "pyvenv.cfg", ".gitignore", ".lock", "CACHEDIR.TAG", ".course-install-stamp"}


def venv_setting_problem(setting: str | None) -> str | None:
    """Why the COURSE_VENV value ``setting`` names no folder the course may use (None: unset,
    empty, or fine): a blank one made a folder named ' ', and a ``~`` no home folder expands was
    made literally (``rm -rf ~`` to clean it up removes the home folder)."""
    if not setting:
        return None
    if not setting.strip():
        return (f"COURSE_VENV={setting!r} is blank: expected the path of a folder for the course's "
                "virtual environment, or unset it for .venv/")
    if os.path.expanduser(setting).startswith("~"):
        return (f"COURSE_VENV={setting!r} starts with a ~ that names no home folder here: give the "
                "folder's full path")
    # a name too long for the file system: a traceback from stat (battery 33)
    return cli.path_problem(os.path.expanduser(setting), "COURSE_VENV", "a folder for the course's "
                            "virtual environment")


def venv_folder_problem(folder: Path, option: str = "COURSE_VENV",
                        also: frozenset = frozenset()) -> str | None:
    """Why ``folder`` may not be (re)made as the course's virtual environment, or None when it may:
    it is missing, empty, or holds only what a virtual environment holds (and the names in
    ``also``). ``venv`` empties the folder it is given, so a folder of other files is refused
    rather than wiped. ``option`` is what the user set to choose the folder (COURSE_VENV, or a
    script's ``--venv``); the messages tell them to point it elsewhere."""
    if option == "COURSE_VENV":
        named = f"COURSE_VENV={folder}" if os.environ.get("COURSE_VENV") else str(folder)
    else:
        named = f"{option} {folder}"
    if folder.is_symlink() and not folder.exists():
        return f"{named} is {cli.path_kind(folder)}: point {option} at a new or empty folder"
    if not folder.exists():
        return None
    if not folder.is_dir():
        return (f"{named} is {cli.path_kind(folder) or 'a file'}, not a folder: point {option} at a new "
                "or empty folder")  # a FIFO or /dev/null said "is a file" (battery 20)
    try:
        entries = {entry.name for entry in folder.iterdir()}
    except OSError as exc:
        return f"{named} cannot be read ({exc.strerror or exc})"
    others = sorted(entries - VENV_ENTRIES - also)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        return (f"{named} holds files that are not a virtual environment's ({shown}); the course "
                f"would empty it to make one there, so it leaves it alone. Point {option} at a new "
                "or empty folder, or remove that folder yourself")
    return None


def other_checkout_problem(venv_folder: Path | None = None) -> str | None:
    """What is wrong with installing this checkout into ``COURSE_VENV`` when that environment holds
    the course installed (editable) from another checkout that still exists: the install would
    repoint it, and that checkout's commands would then import this one's code without a word
    (battery 34). None when COURSE_VENV is unset (.venv is this checkout's own), when the install
    there is this checkout's, or when its checkout is gone (moved: installing here is then right)."""
    import json
    import urllib.parse

    if not os.environ.get("COURSE_VENV"):
        return None
    folder = VENV if venv_folder is None else venv_folder
    records = [*folder.glob("lib/python*/site-packages/course_utils-*.dist-info/direct_url.json"),
               *folder.glob("Lib/site-packages/course_utils-*.dist-info/direct_url.json")]
    for record in sorted(records):
        try:
            url = json.loads(record.read_text(encoding="utf-8")).get("url")
            if not (isinstance(url, str) and url.startswith("file://")):
                continue
            source = Path(urllib.parse.unquote(url[len("file://"):]))
            if source.resolve() == ROOT or not (source / "course.py").is_file():
                continue
        except (OSError, RuntimeError, ValueError, AttributeError):  # unreadable: not ours to judge
            continue
        return (f"COURSE_VENV={folder} holds the course installed from another checkout, {source}; "
                f"installing this one ({ROOT}) there would make that checkout's commands import this "
                "one's code. Unset COURSE_VENV (this checkout then gets a .venv of its own), point it at "
                "a new folder, or run python3 course.py from that checkout")
    return None


def ensure_environment() -> None:
    """Create .venv and install the course into it, once per change of the pins. A COURSE_VENV that
    holds another existing checkout's install is refused, not repointed (:func:`other_checkout_problem`)."""
    if STAMP.exists() and STAMP.read_text() == _fingerprint() and _bin("python").exists():
        return
    problem = other_checkout_problem()
    if problem:
        sys.exit(f"Cannot install the course: {problem}.")
    if not _venv_is_usable():  # missing, half-made, or made by another Python version
        problem = venv_folder_problem(VENV)
        if problem:
            sys.exit(f"Cannot make the course's virtual environment: {problem}.")
        print(f"Creating a virtual environment in {VENV.name}/ ...", flush=True)
        cli.leaving(f"{VENV} was left half-made; the next python3 course.py makes it again")
        try:  # pip comes from ensurepip in a process group of our own: stopped, nothing of it goes on
            venv.EnvBuilder(with_pip=False, clear=True).create(VENV)  # writing into what we removed
            _ensurepip()
        except Exception as exc:  # e.g. Debian/Ubuntu without python3-venv, a read-only folder
            removed = VENV.is_dir() and not VENV.is_symlink() and venv_folder_problem(VENV) is None
            if removed:  # a half-made .venv would look usable next time
                shutil.rmtree(VENV, ignore_errors=True)
            said = getattr(exc, "output", None) or getattr(exc, "stderr", None) or ""
            said = said.decode(errors="replace") if isinstance(said, bytes) else str(said)
            cause = (said.strip().splitlines() or [_failure(exc)])[-1]
            where = f"COURSE_VENV={VENV}" if os.environ.get("COURSE_VENV") else f"{VENV.name}/"
            advice = ("On Debian or Ubuntu, install the venv module first: sudo apt install python3-venv"
                      if isinstance(exc, subprocess.CalledProcessError) or "ensurepip" in cause
                      else "Check that the folder can be written, or point COURSE_VENV at one that can")
            sys.exit(f"Could not create {where} ({type(exc).__name__}: {cause})"
                     f"{'; what it made was removed' if removed and VENV != Path() else ''}. {advice}")
    print("Installing the course's packages (first run only) ...", flush=True)
    cli.leaving(f"the packages were left half-installed in {VENV}; the next python3 course.py "
                "installs them again")
    wanted = ["-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[dev,lab,instructor]"]
    if os.environ.get("COURSE_TORCH_INDEX_URL"):
        wanted += ["--extra-index-url", os.environ["COURSE_TORCH_INDEX_URL"]]
    if os.environ.get("COURSE_INSTALLER", "uv") == "pip" or not _install_with_uv(wanted):
        try:
            cli.run_in_group([str(_bin("python")), "-m", "pip", "install", "--disable-pip-version-check",
                              *wanted])
        except subprocess.CalledProcessError as exc:  # pip said why above; a traceback would add nothing
            sys.exit(f"Could not install the course's packages into {VENV} ({_failure(exc)}); the next "
                     "python3 course.py installs them again")
    STAMP.write_text(_fingerprint())
    cli.leaving(f"the course's packages were installed in {VENV}")


def _ensurepip() -> None:
    """Put pip into the new venv with ensurepip, in a process group of our own (see
    cli.run_in_group); its output is kept, as venv keeps it, and a failure raises
    CalledProcessError carrying it (the caller shows its last line)."""
    command = [str(_bin("python")), "-Im", "ensurepip", "--upgrade", "--default-pip"]
    with tempfile.TemporaryFile() as said:
        code = cli.run_in_group(command, check=False, stdout=said, stderr=subprocess.STDOUT)
        if code:
            said.seek(0)
            raise subprocess.CalledProcessError(code, command, output=said.read())


def _failure(exc: Exception) -> str:
    """What a failed step says: for a child that exited non-zero, its program, module and status
    (its own output is already on the terminal above), else the exception's text."""
    if isinstance(exc, subprocess.CalledProcessError):
        what = " ".join(Path(exc.cmd[0]).name if i == 0 else word for i, word in enumerate(exc.cmd[:4]))
        return f"{what} ... exited with status {exc.returncode}; its output is above"
    return str(exc)


def _install_with_uv(wanted: list[str]) -> bool:
    """Install with uv (pinned in constraints.txt; a fresh set-up took 49 s on CI's machine,
    against 133 s with pip), from the package sources pip is configured with. False if that
    fails (uv prints why): the caller then installs with pip."""
    python = str(_bin("python"))
    get_uv = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary",
              ":all:", "-c", str(ROOT / "constraints.txt"), "uv"]  # no wheel here: fail fast, use pip
    sources, env = pip_sources_for_uv(_pip_config_listing(python))
    install = [str(_bin("uv")), "pip", "install", "--python", python,
               "--index-strategy", "unsafe-best-match",  # pip's rule: the best version on any index
               "--compile-bytecode",  # as pip does: else, with PYTHONDONTWRITEBYTECODE=1 (as on CI),
               *sources, *wanted]  # every process compiles torch again (import 9.4 s, not 4.1 s)
    for cmd in (get_uv, install):  # in a group of their own, as pip: see ensure_environment
        if cli.run_in_group(cmd, check=False, env=dict(os.environ, **env)) != 0:
            print("uv could not install the packages; installing with pip instead (slower) ...", flush=True)
            return False
    return True


def _pip_config_listing(python: str) -> str:
    done = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else ""


def pip_sources_for_uv(listing: str) -> tuple[list[str], dict[str, str]]:
    """Turn ``pip config list`` output (pip.conf files and PIP_* variables) into uv options
    and environment: uv reads neither, and must install from where pip would (an index,
    a mirror, a folder of wheels). The environment wins over the files, as in pip."""
    rank = {"global": 1, "install": 2, ":env:": 3}
    settings: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():  # e.g. global.find-links='/opt/wheels'
        m = re.match(r"""^(:env:|[a-z]+)\.([a-z-]+)=(['"])(.*)\3$""", line.strip())
        if m and m.group(1) in rank and rank[m.group(1)] >= settings.get(m.group(2), (0, ""))[0]:
            settings[m.group(2)] = (rank[m.group(1)], m.group(4))
    args: list[str] = []
    for key, flag in (("index-url", "--index-url"), ("extra-index-url", "--extra-index-url"),
                      ("find-links", "--find-links")):
        for value in settings.get(key, (0, ""))[1].split():
            args += [flag, value]
    if settings.get("no-index", (0, ""))[1].lower() in {"1", "true", "yes", "on"}:
        args.append("--no-index")
    env = {"SSL_CERT_FILE": settings["cert"][1]} if "cert" in settings else {}
    return args, env


def publish(args: list[str]) -> int:
    """Stamp every Colab/Binder badge and link from [tool.course] (see scripts/publish.py)."""
    return cli.call([str(_bin("python")), str(ROOT / "scripts" / "publish.py"), *args], "course.py publish",
                    cwd=ROOT, course_tool=True)


def _test_path_args(args: list[str]) -> list[tuple[str, str]]:
    """(argument, path) for each argument of ``course.py test`` that names a file or folder to
    test (a path, or a ``path::test`` node id). Options and their values (``-k expr``,
    ``-m "not slow"``) are not paths. A bare word (``tests``, ``a_typo``) is a path too unless an
    option stands right before it (``--maxfail 3``: it may be that option's value); an empty word
    (``''``, no value of an option the course knows) is one too: pytest reads it as a path."""
    found, skip, after_option = [], False, False
    for arg in args:
        if skip:
            skip = after_option = False
            continue
        if arg.startswith("-"):
            skip = arg in PYTEST_VALUE_OPTIONS  # "--opt=value" carries its value
            after_option = True
            continue
        path = arg.split("::", 1)[0]
        if (not path or "::" in arg or "/" in path or "\\" in path or path.endswith((".py", ".ipynb"))
                or not after_option or not path.isprintable()):  # a control character: no value
            found.append((arg, path))  # '' (no option's value: pytest reads it as a path) too
        after_option = False
    return found


def empty_test_paths(args: list[str]) -> list[str]:
    """The arguments of ``course.py test`` that stand where a test path does but name none: ``''``
    or ``'::test'``. pytest takes ``''`` for the current folder and ran the whole quick suite
    (battery 18, finding 2); the other checks read it as the repository itself."""
    return [arg for arg, path in _test_path_args(args) if not path]


def test_path_problems(args: list[str], root: Path = ROOT) -> list[str]:
    """What is wrong with the test paths among ``course.py test``'s arguments, in
    :func:`cli.path_problem`'s words: a name longer than the file system takes (``tests/`` and 300
    characters) gave a raw "OSError: [Errno 36] File name too long" traceback from the checks
    that follow."""
    found = [cli.path_problem(root / path, "a test path", "a test file or folder")
             for arg, path in _test_path_args(args) if path]
    return [problem for problem in found if problem]


def missing_test_paths(args: list[str], root: Path = ROOT) -> list[str]:
    """The arguments of ``course.py test`` that name a file or folder to test that does not
    exist under ``root`` (an empty one: :func:`empty_test_paths`)."""
    return [arg for arg, path in _test_path_args(args) if path and not (root / path).exists()]


def missing_test_names(args: list[str], root: Path = ROOT) -> list[str]:
    """The ``path.py::name`` arguments of ``course.py test`` whose test ``name`` (each part of
    ``Class::test``, a ``[parameter]`` left out) the file never mentions: pytest would collect
    nothing and end in "no tests ran" (exit 5) without naming it. Read as text, not imported: a
    test made by a loop or imported from another module still names itself there."""
    missing = []
    for arg, path in _test_path_args(args):
        if "::" not in arg or not path.endswith(".py") or not (root / path).is_file():
            continue
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (OSError, UnicodeError):
            continue
        names = arg.split("::", 1)[1].split("[", 1)[0].split("::")  # a parameter id may hold "::"
        if any(name and not re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) for name in names):
            missing.append(arg)
    return missing


#: pytest's options whose value is an expression of its own grammar: -k (test names), -m (markers)
EXPRESSION_OPTIONS = {"-k": "test names", "-m": "markers"}


def _expression_args(args: list[str]) -> list[tuple[str, str]]:
    """``(option, expression)`` for each -k and -m among ``course.py test``'s arguments, given as
    ``-k EXPR`` or ``-kEXPR`` (argparse's two spellings of a short option)."""
    found = []
    for i, arg in enumerate(args):
        if arg in EXPRESSION_OPTIONS:
            if i + 1 < len(args):
                found.append((arg, args[i + 1]))
        elif arg[:2] in EXPRESSION_OPTIONS and len(arg) > 2 and not arg.startswith("--"):
            found.append((arg[:2], arg[2:]))
    return found


def expression_problems(args: list[str], python: Path | None = None) -> list[str] | None:
    """What is wrong with the -k and -m expressions among ``course.py test``'s arguments, in
    pytest's words, asked of the pytest installed in the course's environment (``python``, default
    .venv's): with the run spread over xdist workers (:func:`spread_over_cores`), one pytest
    cannot read ended in an INTERNALERROR traceback from xdist ("AssertionError: crashitem"),
    exit 3, naming neither -k nor the expression. None when it cannot be asked (no environment
    yet, or a pytest without the module): pytest then says it itself."""
    given = _expression_args(args)
    if not given:
        return []
    python = python or _bin("python")
    if not python.exists():
        return None
    import json

    ask = ("import json, sys\n"
           "from _pytest.mark.expression import Expression\n"
           "said = []\n"
           "for option, text in json.loads(sys.stdin.read()):\n"
           "    try:\n"
           "        Expression.compile(text)\n"
           "    except Exception as err:  # SyntaxError (pytest 8.4+), ParseError before\n"
           "        column = getattr(err, 'column', None) or getattr(err, 'offset', None)\n"
           "        message = getattr(err, 'message', None) or getattr(err, 'msg', None) or str(err)\n"
           "        said.append([option, text, column, message])\n"
           "print(json.dumps(said))\n")
    done = subprocess.run([str(python), "-c", ask], input=json.dumps(given), capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode != 0:
        return None
    problems = []
    for option, text, column, message in json.loads(done.stdout):
        where = f"at column {column}: " if column else ""
        problems.append(f"{option} {cli.shown(text, 80)} is not an expression of "
                        f"{EXPRESSION_OPTIONS[option]} pytest can read ({where}{message})")
    return problems


def _refuse_bad_expressions(args: list[str]) -> int | None:
    """2, having said why, when a -k or -m expression is one pytest cannot read; else None."""
    problems = expression_problems(args)
    if problems:
        print(cli.one_line(f"course.py test: {'; '.join(problems)}; nothing was run"), file=sys.stderr)
        return 2
    return None


def outside_test_paths(args: list[str], root: Path = ROOT) -> list[str]:
    """The arguments of ``course.py test`` that name a file or folder outside ``root`` (links
    followed): ``test /etc/passwd`` ran pytest with /etc as its rootdir, collecting what it found
    there. Call it once :func:`missing_test_paths` is empty (a symlink loop is missing there)."""
    return [arg for arg, path in _test_path_args(args) if cli.place_in(root / path, root) is None]


def special_test_paths(args: list[str], root: Path = ROOT) -> list[str]:
    """The arguments of ``course.py test`` that name something neither a file nor a folder (a
    FIFO, a socket, a device): pytest would skip it after collecting everything else."""
    return [arg for arg, path in _test_path_args(args)
            if (root / path).exists() and not ((root / path).is_file() or (root / path).is_dir())]


# pytest options whose value is a file or folder pytest removes or overwrites: --basetemp is
# emptied before the tests run, a --junitxml file is overwritten after them (battery 22, G6)
# --log-file and --debug (and the log_file ini setting) truncate their file too (battery 30)
PYTEST_OUTPUT_OPTIONS = ("--basetemp", "--junitxml", "--junit-xml", "--log-file", "--debug")
# ini settings, given as -o NAME=VALUE, whose value is a file pytest overwrites
PYTEST_OUTPUT_INI = ("log_file",)
# course.py reads these options itself rather than asking pytest's parser from a conftest hook:
# pytest opens the --debug file inside its own pytest_cmdline_parse, before any conftest hook can
# look (pytest 9.2, _pytest/helpconfig.py); a check made here, before pytest starts, comes in time.


def _output_option_values(args: list[str]) -> list[tuple[str, str]]:
    """(option, value) for each :data:`PYTEST_OUTPUT_OPTIONS` in ``args``, written
    ``--opt=value`` or ``--opt value`` (pytest takes no abbreviation of a long option), and each
    :data:`PYTEST_OUTPUT_INI` setting given as ``-o NAME=VALUE`` or ``--override-ini=NAME=VALUE``.
    A bare ``--debug`` (last, or before an option) writes pytestdebug.log."""
    found, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        option, eq, value = arg.partition("=")
        following = args[i + 1] if i + 1 < len(args) else None
        if option == "--debug" and not eq and (following is None or following.startswith("-")):
            found.append((option, "pytestdebug.log"))
        elif option in PYTEST_OUTPUT_OPTIONS and (eq or following is not None):
            found.append((option, value if eq else following))
        setting = None
        if arg in ("-o", "--override-ini") and following is not None:
            setting = following
        elif option == "--override-ini" and eq:
            setting = value
        elif arg.startswith("-o") and not arg.startswith("--") and len(arg) > 2:
            setting = arg[2:]
        if setting is not None:
            name, eq_ini, ini_value = setting.partition("=")
            if eq_ini and name.strip() in PYTEST_OUTPUT_INI:
                found.append((f"-o {name.strip()}", ini_value))
        skip = arg in PYTEST_VALUE_OPTIONS and not (arg == "--debug" and (following or "-").startswith("-"))
    return found


def addopts_args(addopts: str) -> list[str]:
    """The arguments pytest reads from PYTEST_ADDOPTS (split as a shell would; one it cannot split
    gives none here: pytest itself refuses it)."""
    import shlex

    try:
        return shlex.split(addopts)
    except ValueError:
        return []


def clobbered_output_paths(args: list[str], root: Path = ROOT) -> list[str]:
    """One line for each path-valued pytest option of ``course.py test`` that would destroy a file
    of the repository ``root`` (pytest runs there; links followed): a ``--basetemp`` naming an
    existing file or folder in it (pytest deletes it: ``--basetemp=docs`` removed the tracked
    docs/), a ``--junitxml`` naming an existing file in it outside ``artifacts/`` (pytest
    overwrites it: ``--junitxml=README.md``; so do ``--log-file``, ``--debug`` and
    ``-o log_file=``). A new path, or one outside ``root``, passes: there
    pytest's own rule holds (it empties an existing ``--basetemp`` folder and overwrites an
    existing ``--junitxml`` file: what a rerun with the same options relies on)."""
    problems = []
    for option, value in _output_option_values(args):
        written = os.path.expandvars(os.path.expanduser(value)) if option != "--basetemp" else value
        path = Path(os.path.normpath(root / written))  # as pytest: relative to root, '..' lexical
        try:
            where = cli.place_in(path, root) if os.path.lexists(path) else None
        except ValueError as exc:  # a link that loops, a NUL character
            problems.append(f"{option} {value!r}: {exc}")
            continue
        if where is None:
            continue
        if option == "--basetemp":
            problems.append(f"{option} {value!r}: an existing file or folder of the repository "
                            f"({where}); pytest deletes its basetemp before the tests: give a new "
                            "folder (pytest empties any existing one, inside the repository or not)")
        elif where != "artifacts" and not where.startswith("artifacts/"):
            problems.append(f"{option} {value!r}: an existing file of the repository ({where}); "
                            "pytest would overwrite it: give a new file or one under artifacts/")
    return problems


def student_tree_problem(args: list[str]) -> str | None:
    """What is missing or extra in ``student-tree``'s arguments, with the usage (``None``: they
    are fine), asked of scripts/student_tree.py, which needs only the standard library: a bad
    command line is refused before anything is installed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_student_tree_args", ROOT / "scripts" / "student_tree.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    problem = module.usage_problem(args)
    if problem is not None:
        return f"course.py student-tree: {problem}\n{module.USAGE}"
    problem = module.path_problem(args)  # one line: the command's shape was right
    return None if problem is None else f"course.py student-tree: {cli.one_line(problem)}; nothing was done"


def _lab_option_values(args: list[str], names: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(option, value)`` for each of ``names`` among ``lab``'s arguments, as ``--name=VALUE`` or
    ``--name VALUE``."""
    found = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            if eq:
                found.append((name, value))
            elif i + 1 < len(args) and not _is_option(args[i + 1]):
                found.append((name, args[i + 1]))
    return found


#: the options that set JupyterLab's root folder (its alias and the settings, as traitlets spells them)
LAB_ROOT_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir",
                    "--NotebookApp.notebook_dir", "--ServerApp.root-dir", "--ServerApp.notebook-dir",
                    "--NotebookApp.notebook-dir")


def lab_args(args: list[str]) -> list[str]:
    """``lab``'s arguments for JupyterLab: with only options, the learner's copy of lesson 00 is
    opened (a root folder given, --notebook-dir, --ServerApp.root_dir, ..., must hold it:
    :func:`lab_value_problems` refuses one that does not, as JupyterLab would only once started)."""
    if any(not a.startswith("-") for a in args):
        return list(args)
    first = ROOT / "student" / "00_start_here.ipynb"
    return [*args, str(first if first.exists() else ROOT / "notebooks" / "00_start_here.ipynb")]


def _is_option(arg: str) -> bool:
    """Whether ``arg`` reads as an option, not a value (``-1`` is a value: a port out of range)."""
    return arg.startswith("-") and not arg[1:].isdigit()


#: ``lab``'s whole-number options (JupyterLab's aliases and the ServerApp settings they stand for):
#: names -> (lowest, highest or None, what the number is, an example). JupyterLab takes any int for
#: them: ``--port-retries=-3`` tried no port at all and stopped with "no available port could be
#: found", naming neither the option nor the value; a negative idle timeout turned it off unsaid.
LAB_NUMBERS = {
    ("--port", "--ServerApp.port"): (0, 65535, "a port number", "8888"),
    ("--port-retries", "--ServerApp.port_retries"): (0, 65535, "a number of further ports to try when "
                                                     "the port is taken", "50"),
    ("--ServerApp.shutdown_no_activity_timeout",): (0, None, "a number of seconds without activity "
                                                    "before the server stops (0: never)", "0"),
    ("--ServerApp.max_body_size", "--ServerApp.max_buffer_size"): (1, None, "a size in bytes",
                                                                   "536870912"),
}


#: JupyterLab's options that take a value (its aliases), and so are followed by no path to open.
LAB_VALUE_ALIASES = {"--log-level", "--config", "--ip", "--port", "--port-retries", "--keyfile", "--certfile",
                     "--client-ca", "--notebook-dir", "--browser", "--pylab", "--watch", "--app-dir",
                     "--preferred-dir", "--sock", "--sock-mode", "--gateway-url"}


def lab_value_problems(args: list[str]) -> list[str]:
    """What is wrong with the values of ``lab``'s --port and --ip (and their ServerApp settings)
    and its other whole-number options (:data:`LAB_NUMBERS`: --port-retries, ...): JupyterLab
    would end in a socket traceback, start on a port no socket can have, or try no port at all. A
    port lies in 0..65535 (0: the system picks a free one); an address must resolve ('' or '*':
    every interface). One given without its value (last, or before another option) is named:
    JupyterLab took the lesson's path, appended after the options, as the value. A root folder
    (--notebook-dir, --ServerApp.root_dir, ...; relative to the repository) must be a folder."""
    import socket

    examples = {name: example for names, (*_, example) in LAB_NUMBERS.items() for name in names}
    examples.update({"--ip": "127.0.0.1", "--ServerApp.ip": "127.0.0.1"})
    examples.update({name: "student" for name in LAB_ROOT_OPTIONS})
    problems = [f"{arg} needs a value (e.g. {arg}={examples[arg]})"
                for i, arg in enumerate(args)  # last, or before an option: the lesson's path became it
                if arg in examples and (i + 1 == len(args) or _is_option(args[i + 1]))]
    for names, (low, high, what, _) in LAB_NUMBERS.items():
        span = f"{low} to {high}" if high is not None else f"{low} or more"
        for option, value in _lab_option_values(args, names):
            try:
                number = int(value.strip())
            except ValueError:
                problems.append(f"{option}={value!r} is not {what} ({span})")
                continue
            if number < low or (high is not None and number > high):
                problems.append(f"{option}={value} is out of range ({what}: {span})")
    for i, arg in enumerate(args):  # the notebooks or folders to open: a name too long (battery 33)
        before = args[i - 1] if i else ""
        setting = before.startswith("--") and "." in before and "=" not in before  # --Class.trait VALUE
        if not _is_option(arg) and before not in LAB_VALUE_ALIASES and not setting:  # no option's value
            problem = cli.path_problem(ROOT / arg, "a path to open", "a notebook or folder")
            if problem:
                problems.append(problem)
    for option, value in _lab_option_values(args, LAB_ROOT_OPTIONS):  # JupyterLab: "Bad config" or worse
        try:
            folder = (ROOT / Path(value).expanduser()).is_dir()
        except (OSError, RuntimeError, ValueError) as exc:  # a name too long, a NUL, no home
            folder = exc
        if folder is not True:
            why = f": {cli.one_line(str(folder))}" if isinstance(folder, Exception) else ""
            problems.append(f"{option} {value!r} is not a folder (the folder JupyterLab opens){why}")
            continue
        lesson = Path(lab_args([])[-1])
        root = (ROOT / Path(value).expanduser()).resolve()
        opens_lesson = not any(not _is_option(a) and a != value for a in args)
        if opens_lesson and not lesson.resolve().is_relative_to(root):
            problems.append(f"{option} {value} does not hold {lesson.relative_to(ROOT)} (the lesson "
                            "course.py opens: JupyterLab refuses a file outside its root, and nbgrader "
                            "needs the course inside it); give a folder that holds it, or a notebook "
                            "in the folder to open")
    for option, value in _lab_option_values(args, ("--ip", "--ServerApp.ip")):
        if value in ("", "*"):
            continue
        try:
            socket.getaddrinfo(value, None)
        except (OSError, UnicodeError, ValueError) as exc:
            problems.append(f"{option}={value!r} is not an address of this machine's network "
                            f"({getattr(exc, 'strerror', None) or exc})")
    return problems


def unknown_lab_options(args: list[str]) -> list[str]:
    """The options among ``lab``'s arguments that JupyterLab does not know (it would start anyway,
    with a warning lost in its log): its flags and aliases, asked of the installed JupyterLab, and
    any ``--Class.trait=VALUE`` setting are known."""
    names = {arg: arg.lstrip("-").split("=", 1)[0] for arg in args if arg.startswith("-") and arg != "-"}
    names = {arg: name for arg, name in names.items() if "." not in name}  # a traitlets setting
    if not names:
        return []
    ask = ("from jupyterlab.labapp import LabApp\n"
           "print(' '.join(n for n in [*LabApp.flags, *LabApp.aliases] if isinstance(n, str)))")
    done = subprocess.run([str(_bin("python")), "-c", ask], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:  # cannot ask: JupyterLab will say what it makes of them
        return []
    known = set(done.stdout.split())
    return [arg for arg, name in names.items() if name not in known]


def main(argv: list[str]) -> int:
    """The command line. Interrupted (Ctrl-C, SIGINT, SIGTERM), it stops with one line on stderr
    saying what was left as it was and exits 130 or 143; a tool it runs (release's
    nbgrader_tools.py, publish.py, student_tree.py) gets the signal too and says that line itself.
    ``test`` and ``lab`` relay only SIGTERM: a SIGINT sent to this pid alone is waited out, as the
    module docstring says why (a relayed Ctrl-C would reach pytest or JupyterLab twice)."""
    cli.leaving(cli.NOTHING_WRITTEN)
    return cli.run(_main, argv, "course.py")


def _listed_args(args: list[str]) -> str:
    """Command-line words for a message, comma-separated; one holding a control character is
    shown as its repr, so the terminal does not run it and the message stays on one line."""
    return ", ".join(arg if arg.isprintable() else repr(arg) for arg in args)


def _print_usage() -> None:
    """This module's docstring on stdout; a reader that closes the pipe early (``| head``) ends
    the output quietly instead of with a BrokenPipeError traceback."""
    try:
        print(__doc__, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (exit's flush goes nowhere)


def _print_command_usage(command: str) -> None:
    """The usage line of ``command`` from this module's docstring, and what the first run does:
    ``course.py setup --help`` answers before anything is installed (exit 0)."""
    lines = [line.strip() for line in (__doc__ or "").splitlines() if f"course.py {command}" in line]
    print("\n".join(["usage:", *lines,
                      "(python3 course.py --help describes every command and the first run)"]))


def _main(argv: list[str]) -> int:
    if not argv:
        _print_usage()
        return 2
    if argv[0] in ("-h", "--help", "help") and len(argv) == 1:  # what every other tool answers
        _print_usage()
        return 0
    if argv[0] not in COMMANDS:
        print(f"course.py: unknown command {argv[0]!r}: expected one of {', '.join(COMMANDS)} "
              "(python3 course.py with no arguments shows what each does)", file=sys.stderr)
        return 2
    if argv[0] in ("setup", "release", "student-tree") and argv[1:] in (["-h"], ["--help"]):
        _print_command_usage(argv[0])  # (test, lab and publish pass --help to their own tools)
        return 0
    if argv[0] == "student-tree":
        problem = student_tree_problem(argv[1:])
        if problem:
            print(problem, file=sys.stderr)
            return 2
    expressions_read = False  # test's -k and -m: asked of .venv's pytest, once
    if argv[0] == "test":
        empty = empty_test_paths(argv[1:])
        if empty:
            print(f"course.py test: an empty test path: {', '.join(map(repr, empty))} (give a test file or "
                  "folder, e.g. tests/test_attention.py, or no path for the quick suite; nothing was run)",
                  file=sys.stderr)
            return 2
        for problem in test_path_problems(argv[1:])[:1]:  # before anything looks at them: stat raised
            print(f"course.py test: {problem}; nothing was run", file=sys.stderr)
            return 2
        missing = missing_test_paths(argv[1:])
        if missing:
            shown = _listed_args(missing)
            print(f"course.py test: no such test file or folder: {shown} (paths are "
                  f"relative to {ROOT}; nothing was run)", file=sys.stderr)
            return 2
        unnamed = missing_test_names(argv[1:])
        if unnamed:
            shown = _listed_args(unnamed)
            print(f"course.py test: no such test: {shown} (the file defines no test of that "
                  "name; nothing was run)", file=sys.stderr)
            return 2
        outside = outside_test_paths(argv[1:])
        if outside:
            shown = _listed_args(outside)
            print(f"course.py test: outside the repository: {shown} (test paths must lie in "
                  f"{ROOT}; pytest would take the folder outside as its rootdir; nothing was run)",
                  file=sys.stderr)
            return 2
        special = special_test_paths(argv[1:])
        if special:
            print(f"course.py test: not a test file or folder: {', '.join(special)} (a FIFO, socket or "
                  "device; expected a .py or .ipynb file or a folder; nothing was run)", file=sys.stderr)
            return 2
        for problem in clobbered_output_paths(argv[1:])[:1]:
            print(f"course.py test: {problem}; nothing was run", file=sys.stderr)
            return 2
        for problem in clobbered_output_paths(addopts_args(os.environ.get("PYTEST_ADDOPTS", "")))[:1]:
            print(f"course.py test: PYTEST_ADDOPTS: {problem}; nothing was run", file=sys.stderr)
            return 2
    if argv[0] == "lab":
        problems = lab_value_problems(argv[1:])
        if problems:
            print(f"course.py lab: {'; '.join(problems)}; JupyterLab was not started", file=sys.stderr)
            return 2
    if argv[0] == "setup" and argv[1:]:
        print(f"course.py setup: takes no arguments, got {' '.join(argv[1:])} (it makes .venv/ and "
              "installs the course; to start again, delete .venv/); nothing was done", file=sys.stderr)
        return 2
    problem = inputs_problem(ROOT) or venv_setting_problem(os.environ.get("COURSE_VENV"))
    if problem:
        print(f"course.py {argv[0]}: {problem}; nothing was installed or run", file=sys.stderr)
        return 2
    if argv[0] == "test":
        expressions_read = _bin("python").exists()  # else asked once the environment is made
        if expressions_read and _refuse_bad_expressions(argv[1:]):
            return 2
    ensure_environment()
    command, rest = argv[0], argv[1:]
    if command == "publish":
        return publish(rest)
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg")
    if command == "setup":
        return 0
    if command == "release":  # convert the lessons in place, regenerate student/ and the table
        tools = ROOT / "scripts" / "nbgrader_tools.py"
        return cli.call([str(_bin("python")), str(tools), "release", *rest], "course.py release",
                        cwd=ROOT, env=env, course_tool=True)
    if command == "student-tree":  # the tree a class receives: student/, the package, no solutions
        tools = ROOT / "scripts" / "student_tree.py"
        if len(rest) == 1 and not rest[0].startswith("-"):  # OUT_DIR: relative to where you are,
            rest = [os.path.abspath(rest[0])]  # not to the repository the script runs in
        return cli.call([str(_bin("python")), str(tools), *rest], "course.py student-tree", cwd=ROOT, env=env,
                        course_tool=True)
    if command == "lab":
        env.pop("MPLBACKEND")
        args = list(rest)
        unknown = unknown_lab_options(args)
        if unknown:
            print(f"course.py lab: unknown option{'s' if len(unknown) > 1 else ''} {' '.join(unknown)} "
                  "(JupyterLab's options are listed by `.venv/bin/jupyter lab --help`; any setting also as "
                  "--Class.trait=VALUE); JupyterLab was not started", file=sys.stderr)
            return 2
        args = lab_args(args)
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
            args.append("--allow-root")
        # Ctrl-C is Jupyter's to answer (it asks before it stops): only SIGTERM is relayed (a relayed
        # SIGINT would be its second, which stops it without asking; see the module docstring)
        return cli.call([str(_bin("jupyter")), "lab", *args], "course.py lab", (signal.SIGTERM,),
                        cwd=ROOT, env=env)
    if "--all" in rest:  # everything, including the slow checks .ci/run adds
        rest = [a for a in rest if a != "--all"]
    elif "-m" not in rest:  # the quick suite: every unit test and every lesson under nbval
        rest = ["-m", "not slow", *rest]
    if not expressions_read and _refuse_bad_expressions(rest):  # a first run: the pytest just installed
        return 2
    rest, env = spread_over_cores(rest, os.cpu_count() or 1, env)
    # pytest answers Ctrl-C with its summary (the terminal sends it the signal): only SIGTERM is
    # relayed (a second SIGINT breaks that summary with a traceback; see the module docstring)
    return cli.call([str(_bin("python")), "-m", "pytest", *rest], "course.py test", (signal.SIGTERM,),
                    cwd=ROOT, env=env)


def spread_over_cores(rest: list[str], cores: int, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """pytest's arguments and environment for ``cores`` CPU cores: one xdist worker per core
    (at most 4, to keep memory modest), each with its share of the cores as torch threads.
    Unless the caller chose the workers (``-n``) or the threads (``OMP_NUM_THREADS``)."""
    if cores < 2 or any(a.startswith(("-n", "--numprocesses")) for a in rest):
        return rest, env
    workers = min(cores, 4)
    # loadfile keeps a notebook on one worker, unless the caller picks another --dist
    # (.ci/run's slow checks do)
    dist = [] if any(a.startswith("--dist") for a in rest) else ["--dist", "loadfile"]
    # Two workers that each run torch on two threads oversubscribe two cores: OpenMP threads
    # then wait on each other (the quick suite took 250 s with that on CI's 2 cores, 220 s without)
    env = {"OMP_NUM_THREADS": str(cores // workers), **env}
    return ["-n", str(workers), *dist, *rest], env


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
