"""Binder's environment, built the way repo2docker builds it from ``binder/``, runs a lesson.

repo2docker, for a ``binder/`` folder holding ``runtime.txt``, ``requirements.txt`` and
``postBuild``: takes that Python, runs ``pip install --no-cache-dir -r binder/requirements.txt``
from the repository root, then runs ``binder/postBuild`` there, then starts Jupyter. This
test does the same in a fresh virtual environment (this interpreter stands in for the
runtime.txt Python when the minor versions differ, which the test reports) on a copy of
the repository, then executes one lesson in it with nbclient. One difference: pip runs with
``--no-compile``. Byte-compiling every installed file was about a third of the install's CPU
time; it cannot fail an install (pip skips a file that does not compile), and Python compiles
the modules the lesson imports when it imports them. The packages, versions and files are the
ones Binder installs.

Extra package indexes named in the requirements that this machine cannot reach (e.g.
PyTorch's CPU index on a machine that only reaches PyPI) are left out after a 3 s probe,
and said so; the CPU-only build of torch is then asserted on whatever pip installed.
Slow (a full install, a few minutes): deselect with ``-m "not slow"``.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
LESSON = os.environ.get("COURSE_BINDER_LESSON", "notebooks/00_start_here.ipynb")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__",
                                     ".ipynb_checkpoints", "artifacts", "student")
EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(nb, timeout=600, kernel_name="python3",
                        resources={"metadata": {"path": "notebooks"}})
client.execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
ran = sum(1 for c in nb.cells if c.cell_type == "code" and c.execution_count)
print(f"ran {ran} code cells, {len(errors)} errors")
sys.exit(1 if errors else 0)
"""


def _reachable(url: str, timeout: float = 3.0) -> bool:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(parsed.path).exists()
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _requirements_for_this_machine(dest: Path) -> tuple[Path, list[str]]:
    """binder/requirements.txt, less the index lines whose host does not answer here."""
    notes, kept = [], []
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        m = re.match(r"^\s*--(?:extra-)?index-url\s+(\S+)", line)
        if m and not _reachable(m.group(1)):
            notes.append(f"left out (unreachable here): {line.strip()}")
            continue
        kept.append(line)
    dest.write_text("\n".join(kept) + "\n")
    return dest, notes


@pytest.mark.slow
def test_binder_environment_runs_a_lesson(tmp_path):
    runtime = (BINDER / "runtime.txt").read_text().strip()
    m = re.fullmatch(r"python-(\d+)\.(\d+)", runtime)
    assert m, f"binder/runtime.txt should read python-X.Y, got {runtime!r}"
    wanted = (int(m.group(1)), int(m.group(2)))
    assert wanted >= (3, 10), "the course needs Python 3.10 or newer"
    if wanted != sys.version_info[:2]:
        print(f"note: runtime.txt asks for {runtime}; this test runs Python {sys.version.split()[0]}")

    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=COPY_IGNORE)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "MPLBACKEND"}}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(env_dir),
               PIP_DEFAULT_TIMEOUT="20", PIP_RETRIES="1")
    requirements, notes = _requirements_for_this_machine(tmp_path / "requirements.txt")
    print("\n".join(notes))

    start = time.perf_counter()
    install = subprocess.run([str(bin_dir / "pip"), "install", "--no-cache-dir", "--no-compile", "-r",
                              str(requirements)],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    post = subprocess.run(["bash", str(repo / "binder" / "postBuild")], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert post.returncode == 0, post.stdout[-3000:] + post.stderr[-3000:]
    built = time.perf_counter() - start

    probe = subprocess.run([str(bin_dir / "python"), "-c",
                            "import torch, course_utils; print(torch.__version__, torch.version.cuda, "
                            "course_utils.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    version, cuda, location = probe.stdout.split()
    assert cuda == "None", f"Binder has no GPU: expected CPU-only torch, got CUDA {cuda} ({version})"
    assert Path(location).is_relative_to(repo), f"course_utils imported from {location}, not the repo"

    start = time.perf_counter()
    run = subprocess.run([str(bin_dir / "python"), "-c", EXECUTE, LESSON], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(f"binder environment built in {built:.0f} s; {LESSON}: {run.stdout.strip()} "
          f"in {time.perf_counter() - start:.0f} s")
