#!/usr/bin/env python3
"""The student-only tree: what a class receives, with no solutions in it.

    python3 course.py student-tree OUT_DIR        # write the tree into a new folder
    python3 course.py student-tree --branch NAME  # commit it to the local branch NAME

The tree holds the blank student notebooks (``student/``), the course package (which ships
stored answers, never reference code), ``data/``, the set-up files (``course.py``,
``pyproject.toml``, ``constraints.txt``, ``binder/``, ``environment.yml``), the licence and
a short README for students; every badge and Colab install in it points at the tree's own
tag, ``<tag>-student``. It leaves out ``notebooks/`` (the solved lessons),
``solutions/`` (the reference code), ``tests/``, ``scripts/``, INSTRUCTORS.md and CI.
``--branch`` writes it as a commit on NAME without touching your checkout (a child of NAME's
last commit when it exists); push that branch, tag it, and point nbgitpuller, Binder and
the student links at it (INSTRUCTORS.md, "Publishing the student tree").
A failure leaves OUT_DIR absent (and no parent folder it created) and the branch where it
was. OUT_DIR must lie outside this clone (links followed).
Interrupted (Ctrl-C, SIGINT, or SIGTERM), it says so on one line and exits 130 or 143, leaving
OUT_DIR absent or the branch where it was.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # first thing: a signal while it starts gets one line (course_utils/cli.py)
    sys.path.append(str(Path(__file__).resolve().parent))  # scripts/, for course_cli
    from course_cli import load_cli

    load_cli().stop_at_once("student_tree.py", needs=("nbformat",))

import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KEEP = ["student", "course_utils", "data", "binder", "course.py", "pyproject.toml", "constraints.txt",
        "environment.yml", "LICENSE", ".gitignore"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".ipynb_checkpoints")
# Marks that only a solved lesson or the reference code carries.
SOLUTION_MARKS = re.compile(r"### BEGIN SOLUTION|### END SOLUTION|^REFERENCES = \{", re.MULTILINE)

README = """# Multi-head attention: student copy

The lessons are in `student/`, with their exercises blank. Open them with

```bash
python3 course.py lab    # creates .venv on first run, then opens student/00_start_here.ipynb
```

or on Binder or Colab from the links your instructor gave you. Each exercise has a check
cell that tells you what is wrong with your answer; run the lesson top to bottom at any
time, unfinished exercises just say "not attempted yet". This copy holds no solutions.
"""


def _check_outside_the_copied_folders(out: Path) -> None:
    """``out`` must lie outside this clone (links followed): inside it, the tree's files would be
    written among the course's own (and inside a folder the tree copies, the copy would hold its
    own staging folder and copy it again inside itself, "File name too long")."""
    cli = _cli()
    try:
        inside = cli.place_in(out, ROOT)
    except ValueError:  # a symlink loop on the way
        raise ValueError(f"{out}: a symbolic link on this path loops (or never ends): choose a real "
                         "folder outside this clone (nothing was written)") from None
    for name in KEEP:
        if (ROOT / name).resolve().is_dir() and cli.place_in(out, ROOT / name) is not None:
            raise ValueError(f"{out} lies inside {name}/, which the tree copies (it would copy itself): "
                             "choose a folder outside it (nothing was written)")
    if inside is not None:  # notebooks/out: pytest, git and release would see it
        raise ValueError(f"{out} lies inside this repository ({inside}/ of {ROOT.resolve()}): its tests, git "
                         "and the release would take the copy for course files; choose a folder outside "
                         "it (nothing was written)")


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created, deepest first."""
    missing = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing.append(path)
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(created: list[Path]) -> None:
    """Undo :func:`_make_parents`: remove the folders it created, deepest first, if still empty."""
    for path in created:
        try:
            path.rmdir()
        except OSError:
            break


def build(out: Path) -> list[str]:
    """Write the tree into ``out`` (which must not exist); returns the paths written. A refusal
    or a failure leaves nothing behind: no staging folder, and no parent folder it created."""
    if out.exists() or out.is_symlink():
        raise FileExistsError(f"{out} already exists: choose a new folder (nothing was written)")
    _check_outside_the_copied_folders(out)
    missing = [name for name in KEEP if not (ROOT / name).exists()]
    if missing:
        raise FileNotFoundError(f"the repository lacks {missing}; run this from a full checkout")
    created: list[Path] = []
    try:
        created = _make_parents(out.parent)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        _remove_empty(created)
        raise OSError(f"cannot write into {out.parent} ({exc.strerror or exc}): choose a folder you "
                      "can write to (nothing was written)") from None
    try:
        for name in KEEP:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, staging / name, ignore=IGNORE)
            else:
                shutil.copy2(source, staging / name)
        (staging / "README.md").write_text(README)
        _point_links_at_the_tree(staging / "student")
        leaks = [str(p.relative_to(staging)) for p in staging.rglob("*")
                 if p.is_file() and p.suffix in (".py", ".ipynb", ".md")
                 and SOLUTION_MARKS.search(p.read_text(errors="replace"))]
        if leaks:
            raise RuntimeError(f"solution marks found in {leaks}: refusing to publish them")
        _cli().check_interrupted()  # a signal some library swallowed: stop before the rename
        try:
            os.rename(staging, out)
        except OSError:  # another run made OUT meanwhile (ENOTEMPTY, EEXIST, ENOTDIR)
            if not (out.exists() or out.is_symlink()):
                raise
            raise FileExistsError(f"{out} already exists (made by another run while this one copied): "
                                  "choose a new folder (nothing was written)") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(created)
        raise
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def _point_links_at_the_tree(folder: Path) -> None:
    """Re-stamp each notebook's Colab/Binder badges and Colab install for the tree's own tag,
    ``<tag>-student``: a link in a class's copy never opens the full repository."""
    import nbformat

    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    from publish import Published, load_config, stamp_notebook

    config = load_config(ROOT)
    published = Published(config.repo, f"{config.tag}-student")
    for path in sorted(folder.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception as exc:  # noqa: BLE001 - not JSON, not a notebook: name the file
            text = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise ValueError(f"cannot read student/{path.name} as a notebook ({type(exc).__name__}: "
                             f"{text[:200]}); run `python3 course.py release` to make it again "
                             "(nothing was written)") from None
        stamp_notebook(nb, f"student/{path.name}", published, files_tag=config.tag)  # docs/: the release
        nbformat.write(nb, path)


def _git(*args: str, env: dict | None = None) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _shadowing_problem(branch: str) -> str:
    """What a local branch named ``branch`` would shadow, or "": a tag or a remote-tracking branch of
    the same short name (``git push origin NAME``, ``git merge NAME`` and ``git show NAME:...`` would
    then be ambiguous or name the student tree), or a name under a remote's prefix (``origin/x``)."""
    for kind, ref in (("a tag", f"refs/tags/{branch}"),
                      ("a remote-tracking branch", f"refs/remotes/{branch}")):
        found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", ref],
                               capture_output=True)
        if found.returncode == 0:
            return (f"is already {kind}; a branch of the same name makes `git push origin {branch}` "
                    "fail or push the wrong commit, and every checkout of it ambiguous")
    remotes = subprocess.run(["git", "-C", str(ROOT), "remote"], capture_output=True,
                             text=True).stdout.split()
    prefix = branch.split("/", 1)[0]
    if "/" in branch and prefix in remotes:
        return (f"starts with the remote {prefix!r}: a local branch of that name would be mistaken for "
                f"the remote's branch {branch.split('/', 1)[1]!r}")
    return ""


def commit_to_branch(branch: str) -> str:
    """Commit the tree to ``branch`` (created when missing) without touching the checkout;
    returns the new commit's hash."""
    git_refuses = subprocess.run(["git", "check-ref-format", "--branch", branch], capture_output=True)
    if (not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}", branch) or ".." in branch
            or branch == "HEAD" or branch.startswith("refs/") or git_refuses.returncode):
        raise ValueError(f"--branch: expected a branch name such as 'student', got {_shown(branch)}")
    current = subprocess.run(["git", "-C", str(ROOT), "symbolic-ref", "--quiet", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    if branch == current:
        raise ValueError(f"--branch: {_shown(branch)} is the branch checked out here; the student tree goes "
                         "on a branch of its own, e.g. 'student'")
    problem = _shadowing_problem(branch)
    if problem:
        raise ValueError(f"--branch: {_shown(branch)} {problem}: give another name, e.g. 'student'")
    with tempfile.TemporaryDirectory() as tmp:
        tree_dir = Path(tmp) / "tree"
        build(tree_dir)
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git("--work-tree", str(tree_dir), "add", "-A", ".", env=env)
        tree = _git("write-tree", env=env)
    parent = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
                            capture_output=True, text=True).stdout.strip()
    source = _git("rev-parse", "--short", "HEAD")
    args = ["commit-tree", tree, "-m", f"Student tree of {source} (course.py student-tree)"]
    if parent:
        args[2:2] = ["-p", parent]
    commit = _git(*args)
    _git("update-ref", f"refs/heads/{branch}", commit, *([parent] if parent else []))
    _cli().leaving(f"the branch {branch} was moved to {commit[:12]}")
    return commit


USAGE = ("usage: python3 course.py student-tree OUT_DIR        (write the tree into a new folder)\n"
         "       python3 course.py student-tree --branch NAME  (commit it to the local branch NAME)")


def usage_problem(argv: list[str]) -> str | None:
    """What is wrong with the command line, in words (``None`` when it is one OUT_DIR or
    ``--branch NAME``): what is missing, or what is extra. Only the standard library, so
    course.py can ask before it installs anything."""
    options = [a for a in argv if a.startswith("-")]
    plain = [a for a in argv if not a.startswith("-")]
    unknown = [a for a in options if a != "--branch"]
    if unknown:
        return (f"unknown option {unknown[0]} (expected OUT_DIR or --branch NAME); "
                f"unexpected arguments: {' '.join(argv)}")
    if not argv:
        return "missing OUT_DIR (a new folder to write the tree into) or --branch NAME"
    if "" in plain:  # os.path.abspath('') is the current folder: "already exists" (battery 19, G5)
        name, what = (("--branch NAME", "the local branch to commit the tree to") if options else
                      ("OUT_DIR", "a new folder to write the tree into"))
        return f"{name} is empty (''): give {what}; got: {' '.join(map(repr, argv))}"
    if options:
        if argv[0] != "--branch" or len(options) > 1:
            return f"--branch must come first and once, followed by one NAME; got: {' '.join(argv)}"
        if not plain:
            return "--branch needs a NAME (the local branch to commit the tree to), e.g. --branch student"
        if len(plain) > 1:
            return (f"--branch takes one NAME, got {len(plain)}: {' '.join(plain)} (extra: "
                    f"{' '.join(plain[1:])}); to write a folder instead, give OUT_DIR alone")
        return None
    if len(plain) > 1:
        return (f"expected one OUT_DIR, got {len(plain)}: {' '.join(plain)} (extra: {' '.join(plain[1:])}); "
                "a path with spaces needs quotes")
    return None


def path_problem(argv: list[str]) -> str | None:
    """Why OUT_DIR, once :func:`usage_problem` has taken the command line, names no folder the
    file system can make (:func:`course_utils.cli.path_problem`: a name longer than it takes gave
    a raw "File name too long" traceback, battery 33), or None (also for ``--branch NAME``)."""
    if len(argv) != 1 or argv[0].startswith("-"):
        return None
    return _cli().path_problem(argv[0], "OUT_DIR", "a new folder to write the tree into")


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):  # what course.py's "each with --help" promises
        print(f"{__doc__.strip()}\n\n{USAGE}")
        return 0
    problem = usage_problem(argv)
    if problem is not None:
        print(f"student-tree: {_cli().one_line(problem)}\n{USAGE}", file=sys.stderr)
        return 2
    problem = path_problem(argv)
    if problem is not None:
        print(f"student-tree: {_cli().one_line(problem)}; nothing was written", file=sys.stderr)
        return 2
    cli = _cli()
    if len(argv) == 2 and argv[0] == "--branch":  # interrupted: one line, exit 130/143 (cli.run)
        cli.leaving(f"the branch {argv[1]} was left where it was (and the checkout as it was)")
    else:  # build() removes what it made when it is stopped
        cli.leaving(f"{argv[0]} was not made" if argv else cli.NOTHING_WRITTEN)
    return cli.run(_main, argv, "student_tree.py")


def _shown(value: object, width: int | None = None) -> str:
    """cli.shown: a value for a message, even one whose repr raises."""
    return _cli().shown(value, width)


def _cli():
    """course_utils/cli.py (Ctrl-C and SIGTERM: one line), through scripts/course_cli.py: this
    script needs only the standard library until it stamps the notebooks."""
    scripts = str(Path(__file__).resolve().parent)
    if scripts not in sys.path:
        sys.path.append(scripts)
    from course_cli import load_cli

    return load_cli()


def _main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "--branch":
            commit = commit_to_branch(argv[1])
            print(f"branch {argv[1]} -> {commit[:12]}: push it with `git push origin {argv[1]}`")
            return 0
        if len(argv) == 1 and not argv[0].startswith("-"):
            written = build(Path(argv[0]))
            _cli().leaving(f"{argv[0]} was written")
            _say(f"wrote {len(written)} files into {argv[0]} (student notebooks, course_utils, data, set-up)")
            return 0
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"student-tree: {_cli().one_line(_described(exc))}", file=sys.stderr)  # a path: one line
        return 2
    raise AssertionError(f"usage_problem let {_shown(argv)} through")  # every other shape is refused above


def _say(line: str) -> None:
    """Print ``line`` on stdout, a character its encoding lacks (PYTHONIOENCODING=ascii, a folder
    named trée) as a backslash escape: the tree is written by then, and a codec error would report
    a failure that left it behind."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding))


def _described(exc: BaseException) -> str:
    """``exc`` in words: shutil.Error (copytree's failures, a list of (source, target, why)) as
    how many files failed and the first one's reason, not the list's repr."""
    failures = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failures, list) and failures \
            and all(isinstance(f, tuple) and len(f) == 3 for f in failures):
        source, _, why = failures[0]
        return (f"could not copy {len(failures)} file(s) into the tree, the first {source}: {why} "
                "(a full disk or a file-size limit?); nothing was written")
    return str(exc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
