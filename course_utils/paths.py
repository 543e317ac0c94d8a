"""Where the course's files live, independent of the notebook's working directory."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"

__all__ = ["REPO_ROOT", "DATA_DIR", "NOTEBOOKS_DIR"]
