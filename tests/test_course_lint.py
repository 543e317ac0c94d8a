"""ruff keeps the package, tests, scripts and notebooks clean."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_green():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
