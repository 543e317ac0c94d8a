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

__all__ = ["REPO_ROOT", "DATA_DIR", "NOTEBOOKS_DIR"]
