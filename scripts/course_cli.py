"""The command-line tools' one way to reach course_utils/cli.py (Ctrl-C and SIGTERM: one line,
exit 130/143).

It is loaded by its path, as ``course_utils.cli``, because importing the course_utils package
imports torch: course.py runs before .venv exists, and the other tools load it before any slow
import so that a signal while they start still gets its one line. Whoever imports the package
later gets this same module from ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_cli() -> ModuleType:
    """``course_utils.cli``, loaded once per process by its path."""
    module = sys.modules.get("course_utils.cli")
    if module is None:
        path = Path(__file__).resolve().parent.parent / "course_utils" / "cli.py"
        spec = importlib.util.spec_from_file_location("course_utils.cli", path)
        module = sys.modules["course_utils.cli"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module
