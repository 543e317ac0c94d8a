"""One copy of what `scripts/publish.py` reads, for the tests that run it on a scratch tree."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_for_publish(dest: Path) -> Path:
    """Copy into ``dest`` the files publish stamps (README, pyproject and the notebooks) and
    everything the lessons link to (docs/, tests/, data/ and INSTRUCTORS.md), so that its link
    check finds each target; returns ``dest``."""
    import publish  # scripts/ is on sys.path in the tests that call this

    for name in ("README.md", "pyproject.toml", "INSTRUCTORS.md"):
        shutil.copy(ROOT / name, dest / name)
    for folder in (*publish.NOTEBOOK_DIRS, "docs", "tests", "data"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, dest / folder,
                            ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    return dest
