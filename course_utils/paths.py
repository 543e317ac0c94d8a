"""Where the course's files live, independent of the notebook's working directory.

``data/`` (the checkpoints and the worked example) sits at the top of the repository
and ships inside the installed package as ``course_utils/data`` (pyproject.toml maps the
``course_utils.data`` package to ``data/``). So :data:`DATA_DIR` is:

* ``course_utils/data`` next to this file, after ``pip install .`` or
  ``pip install git+...@tag`` (a wheel);
* ``data/`` beside the package, in a checkout (also with ``pip install -e .``).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent  # in an installed wheel: site-packages, not a repository


def _data_dir() -> Path:
    installed = PACKAGE_DIR / "data"
    if (installed / "checkpoints").is_dir():
        return installed
    return REPO_ROOT / "data"


DATA_DIR = _data_dir()
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"  # only in a checkout; a wheel carries no lessons

__all__ = ["REPO_ROOT", "DATA_DIR", "NOTEBOOKS_DIR", "check_path", "path_kind"]


def check_path(value: object, name: str, what: str = "a file") -> None:
    """The package's one path rule: ``value`` is a non-empty str or a path-like object without a
    NUL character, else a TypeError / ValueError naming the argument ``name``, what it should name
    (``what``) and what arrived. It is :func:`course_utils.cli.check_path`, which lives in the
    standard-library module the tools load before torch; imported when first called, so that
    ``import course_utils`` does not load cli.py (``python -m course_utils.cli`` would warn)."""
    from .cli import check_path as rule

    rule(value, name, what)


def path_kind(path: Path) -> str | None:
    """``None`` for a regular file (or a link to one); otherwise what ``path`` is, in words:
    "missing", "a directory", "a symlink loop", "a FIFO (named pipe)", ...; never opens it
    (reading a FIFO would wait for a writer forever). ``path`` is a str or a path-like object.
    It is :func:`course_utils.cli.path_kind`, imported when first called, as :func:`check_path`
    is, so that the tools loading cli.py before torch share the one rule."""
    from .cli import path_kind as rule

    return rule(path)


if __name__ == "__main__":  # a library module, not a command: say so (it exited 0 without a word)
    from . import cli

    cli.not_a_command("python -m course_utils.paths")
