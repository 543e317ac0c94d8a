#!/usr/bin/env python3
"""Run the test suite against the declared floors, or against the newest releases.

    python3 scripts/version_matrix.py floor  [--venv DIR] [-- PYTEST_ARGS...]
    python3 scripts/version_matrix.py newest [--venv DIR] [-- PYTEST_ARGS...]

Not part of the default CI run: each run installs torch from scratch (several GB from
PyPI, whose Linux wheel is the CUDA build). ``floor`` installs every runtime dependency at
exactly the lowest version pyproject.toml allows (``name>=X`` -> ``name==X``), with the
lab/dev tools at their constraints.txt pins; ``newest`` installs everything at the newest
release the index offers, no constraints. Both first install the build requirements
([build-system] requires: the packaging tests build the wheel without build isolation, and a
new venv's setuptools can be older than they need). Both then run pytest on tests/ and notebooks/
(``-m "not slow"``, without the browser tests). docs/developing.md's "Version ranges" section records
the results.

A wrong command, a ``--venv`` that is not a folder (a file, a FIFO, a device) or cannot be written
(a read-only mount), or a missing or malformed pyproject.toml or constraints.txt is reported on one
line on stderr (exit 2) before anything is installed; a failure while installing is one line too (exit 1).

Interrupted (Ctrl-C, SIGINT, or SIGTERM), it says so on one line and exits 130 or 143. Before the
environment is made nothing was written; while it is made or installed into, a new ``--venv``
folder is removed again, and one that was there before (it is reused) is left to a rerun, which
finishes the installation; while pytest runs, the signal reaches pytest too, which stops as it
does, and the environment stays.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # first thing: a signal while it starts gets one line (course_utils/cli.py)
    sys.path.append(str(Path(__file__).resolve().parent))  # scripts/, for course_cli
    from course_cli import load_cli

    load_cli().stop_at_once("version_matrix.py")

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Sequence  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTEST = ["-m", "not slow", "--ignore", "tests/test_course_browser.py", "-q"]


class InputError(ValueError):
    """A wrong command line or input file: printed on one line, exit 2."""


def _read(path: Path) -> str:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, expected a file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None


def _name(requirement: str, where: str = "a requirement") -> str:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)", str(requirement))
    if not m:
        raise InputError(f"{where}: {_shown(requirement)} does not start with a package name")
    return m.group(1).lower().replace("_", "-")


def read_project(root: Path = ROOT) -> dict:
    """``[project]`` of pyproject.toml, with ``dependencies`` and ``optional-dependencies``."""
    path = root / "pyproject.toml"
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    project = data.get("project")
    if not isinstance(project, dict):
        raise InputError(f"{path}: no [project] table")
    for key, kind in (("dependencies", list), ("optional-dependencies", dict)):
        if not isinstance(project.get(key), kind):
            raise InputError(f"{path}: [project] needs {key} as a {kind.__name__}, got "
                             f"{type(project.get(key)).__name__}")
    return project


def build_requires(root: Path = ROOT) -> list[str]:
    """``[build-system] requires`` of pyproject.toml (none: an empty list). Installed into the
    environment before the course: tests build the wheel without build isolation, and a venv
    brings the setuptools of its Python (66 on Python 3.11.2), older than the project needs."""
    path = root / "pyproject.toml"
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    requires = data.get("build-system", {}).get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise InputError(f"{path}: [build-system] requires should be a list of strings, got "
                         f"{_shown(requires, 80)}")
    return requires


def floor_constraints(root: Path = ROOT) -> str:
    """Runtime dependencies pinned at their floors; the extras' tools at constraints.txt's pins."""
    project = read_project(root)
    lines = ["# generated by scripts/version_matrix.py floor"]
    for req in project["dependencies"]:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)\s*$", str(req))
        if not m:
            raise InputError(f"{root / 'pyproject.toml'}: dependency {_shown(req)} should be a plain "
                             "'name>=floor' range")
        lines.append(f"{m.group(1)}=={m.group(2)}")
    tools = {_name(r, "pyproject.toml optional-dependencies") for extra in
             project["optional-dependencies"].values() for r in extra}
    constraints = root / "constraints.txt"
    for line in _read(constraints).splitlines():
        if line.strip() and not line.startswith("#") and _name(line, str(constraints)) in tools:
            lines.append(line.strip())
    return "\n".join(lines) + "\n"


def _check_venv(env_dir: Path, root: Path = ROOT) -> None:
    """``env_dir`` is a folder, or a path one can be made at (no file, FIFO, ... on the way), and the
    nearest existing folder takes a new file (not a read-only mount, not someone else's). A
    folder that holds anything but a virtual environment is refused: venv would empty it. So is
    the course's own environment (``root/.venv``, or COURSE_VENV's): the pins would replace the
    packages that course.py lab and test use (battery 31b)."""
    import tempfile

    course_venvs = [root / ".venv"]
    if (os.environ.get("COURSE_VENV") or "").strip():
        course_venvs.append(Path(os.path.expanduser(os.environ["COURSE_VENV"])))
    for course_venv in course_venvs:
        if os.path.realpath(course_venv) == os.path.realpath(env_dir):
            raise InputError(f"--venv {env_dir} is the course's own environment ({course_venv}, the one "
                             f"course.py lab and test use): its packages would be replaced by the pinned "
                             f"versions; give another folder (the default is .venv-floor or .venv-newest)")

    for parent in (env_dir, *env_dir.parents):
        if parent.exists():
            if not parent.is_dir():
                kind = _cli().path_kind(parent) or "a file"  # a FIFO or /dev/null is no file (battery 20)
                raise InputError(f"{parent}: is {kind}, expected a folder (for --venv {env_dir})")
            try:  # a probe, removed at once: os.access says yes to root on a read-only mount
                handle, probe = tempfile.mkstemp(prefix=".version-matrix-probe-", dir=parent)
                os.close(handle)
                os.unlink(probe)
            except OSError as exc:
                raise InputError(f"{parent}: cannot write there ({exc.strerror or exc}), so the environment "
                                 f"for --venv {env_dir} cannot be made; choose a writable folder") from None
            break
    sys.path.insert(0, str(ROOT))
    try:
        from course import venv_folder_problem  # course.py's rule for COURSE_VENV, the one rule
    finally:
        sys.path.remove(str(ROOT))
    if str(env_dir) in ("", "."):
        raise InputError("--venv '' or '.' names the current folder, which would be emptied to make the "
                         "environment there: give a new or empty folder")
    problem = venv_folder_problem(env_dir, "--venv", frozenset({"constraints-floor.txt"}))
    # an environment of ours is reused, not emptied; a folder with a bin/python that is no virtual
    # environment (no pyvenv.cfg: someone's files, /usr) was "reused" too, and pip installed the
    # pins into that interpreter (battery 32)
    has_python = (env_dir / "bin" / "python").exists()
    if has_python and not (env_dir / "pyvenv.cfg").is_file():
        raise InputError(f"--venv {env_dir} holds a bin/python but is not a virtual environment (no "
                         f"pyvenv.cfg): the pins would be installed into that interpreter; give a new or "
                         f"empty folder, or one this tool made")
    if problem and not has_python:
        raise InputError(f"{problem}.")


def _install(env_dir: Path, root: Path, floor: str | None, build: Sequence[str] = ()) -> str:
    """Make the environment at ``env_dir`` (if it has no python yet), install ``build`` (the
    project's build requirements) and the course into it (at the floors when ``floor`` is
    given, else the newest releases); return its versions line."""
    python = env_dir / "bin" / "python"
    if not python.exists():  # venv as a child, not in this process: its pip grandchild is then ours to stop
        _cli().run_in_group([sys.executable, "-m", "venv", "--clear", str(env_dir)])
    if build:
        cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *build]
        cmd += [] if floor is not None else ["--upgrade"]
        print("$", " ".join(cmd), flush=True)
        _cli().run_in_group(cmd)
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-e", f"{root}[dev,lab]"]
    if floor is not None:
        constraints = env_dir / "constraints-floor.txt"
        constraints.write_text(floor)
        cmd += ["-c", str(constraints)]
    else:
        cmd += ["--upgrade", "--upgrade-strategy", "eager"]
    print("$", " ".join(cmd), flush=True)
    _cli().run_in_group(cmd)
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(', '.join("
                           "f'{n} {m.version(n)}' for n in ['torch', 'numpy', 'pandas', 'matplotlib', "
                           "'seaborn', 'ipywidgets', 'safetensors', 'tqdm']))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str], *, root: Path = ROOT) -> int:
    parser = _cli().ArgumentParser(prog="version_matrix.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["floor", "newest"])
    parser.add_argument("--venv", type=Path, default=None, help="default: .venv-floor or .venv-newest")
    parser.add_argument("pytest_args", nargs="*", default=[],  # without one, argparse calls it required
                        help="after --: passed to pytest instead of the default")
    # everything after the first `--` goes to pytest, wherever --venv stands (argparse alone
    # refuses `newest --venv DIR -- ARGS`: its positional was already filled)
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    args.pytest_args = [*args.pytest_args, *rest]
    env_dir = args.venv or root / f".venv-{args.which}"
    problem = args.venv and _cli().path_problem(args.venv, "--venv", "a virtual environment folder")
    if problem:  # a name too long for the file system: a traceback from stat (battery 33)
        print(f"version_matrix.py: {_cli().one_line(problem)}; nothing was installed", file=sys.stderr)
        return 2
    try:  # every input checked before anything is installed
        _check_venv(env_dir, root)
        floor = floor_constraints(root) if args.which == "floor" else None
        if floor is None:
            read_project(root)  # pip install -e reads it too: a broken one fails here, clearly
        build = build_requires(root)
    except InputError as exc:
        print(f"version_matrix.py: {_cli().one_line(str(exc))}", file=sys.stderr)  # a path: one line
        return 2
    cli, new = _cli(), not env_dir.exists()
    cli.leaving(f"{env_dir} was removed (it was new)" if new else
                f"{env_dir} was left part-installed: run this again to finish it")
    try:  # a failure past the checks (disk full, pip refusing) is one line too, exit 1
        try:
            versions = _install(env_dir, root, floor, build)
        except (KeyboardInterrupt, cli.Interrupted):
            if new:
                shutil.rmtree(env_dir, ignore_errors=True)
            raise
    except (OSError, subprocess.CalledProcessError) as exc:
        if isinstance(exc, subprocess.CalledProcessError):
            what = f"{' '.join(map(str, exc.cmd[:4]))} ... exited with status {exc.returncode}"
        else:
            what = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        print(_cli().one_line(f"version_matrix.py: cannot prepare the environment {env_dir}: {what}"),
              file=sys.stderr)
        return 1
    python = env_dir / "bin" / "python"
    cli.leaving(f"pytest was stopped; the environment {env_dir} is ready")
    print(f"{args.which}: Python {sys.version.split()[0]}, {versions}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONHASHSEED="0", MPLBACKEND="Agg")
    code = subprocess.call([str(python), "-m", "pytest", *(args.pytest_args or DEFAULT_PYTEST)],
                           cwd=root, env=env)
    return 128 - code if code < 0 else code  # killed by a signal: 128 + its number (cli.run takes 0..255)


def _shown(value: object, width: int | None = None) -> str:
    """cli.shown: a value for a message, even one whose repr raises."""
    return _cli().shown(value, width)


def _cli():
    """course_utils/cli.py (Ctrl-C and SIGTERM: one line), through scripts/course_cli.py."""
    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.append(scripts)
    from course_cli import load_cli

    return load_cli()


if __name__ == "__main__":
    _cli().leaving(_cli().NOTHING_WRITTEN)
    sys.exit(_cli().run(main, sys.argv[1:], "version_matrix.py"))
