"""Peak memory of every lesson, each run in a fresh kernel (Binder gives 2 GB).

Run ``python -m course_utils.bench memory`` (all of ``notebooks/``) or name notebooks.
Each notebook is executed top to bottom by nbclient in a new ``python3`` kernel; a last
cell, added to the in-memory copy only, reads the kernel process's peak resident set size
(Linux: ``VmHWM`` in ``/proc/self/status``; macOS: ``ru_maxrss``). Nothing is
written back to the notebooks. Unix only (``resource`` module).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TARGET_MB", "BINDER_LIMIT_MB", "NotebookMemory", "notebook_peak_memory",
           "format_memory_table", "add_bench_parser"]

TARGET_MB = 1000.0  # the course's target per lesson (1.0 GB)
BINDER_LIMIT_MB = 2048.0  # mybinder.org's memory limit
_MARK = "COURSE_PEAK_RSS_BYTES"
# Linux: VmHWM, the peak RSS of this process image (ru_maxrss would carry over the peak of
# the process that forked the kernel). macOS: ru_maxrss, in bytes there.
_PROBE = f"""\
import resource as _resource, sys as _sys
if _sys.platform.startswith("linux"):
    with open("/proc/self/status") as _status:
        _peak = next(int(l.split()[1]) * 1024 for l in _status if l.startswith("VmHWM:"))
else:
    _peak = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss
print("{_MARK}", _peak)
"""


@dataclass
class NotebookMemory:
    name: str
    peak_mb: float | None  # None when the notebook failed before the probe ran
    seconds: float
    error: str = ""

    @property
    def verdict(self) -> str:
        if self.peak_mb is None:
            return "not measured"
        if self.peak_mb <= TARGET_MB:
            return "ok"
        return "over target" if self.peak_mb <= BINDER_LIMIT_MB else "over Binder's 2 GB"


def notebook_peak_memory(path: str | Path, timeout: int = 900) -> NotebookMemory:
    """Run one notebook in a fresh kernel and return its kernel's peak RSS in MB (10**6 bytes).

    A notebook that raises is reported with ``peak_mb=None`` and the error's first line,
    never by raising.
    """
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    if not path.is_file() or path.suffix != ".ipynb":
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(_PROBE))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=False, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as err:  # a failing lesson is a row of the table, not a crash
        message = str(err).strip().splitlines()
        return NotebookMemory(path.name, None, time.perf_counter() - start,
                              f"{type(err).__name__}: {message[-1] if message else ''}"[:100])
    elapsed = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    peak = next(int(line.split()[1]) for line in text.splitlines() if line.startswith(_MARK))
    return NotebookMemory(path.name, peak / 1e6, elapsed)


def format_memory_table(rows: list[NotebookMemory]) -> str:
    """A plain-text table, one row per notebook, at most ~90 characters wide."""
    lines = [f"{'notebook':<34} {'peak RSS':>10} {'time':>8}  verdict (target {TARGET_MB / 1000:.1f} GB)",
             f"{'-' * 34} {'-' * 10} {'-' * 8}  {'-' * 26}"]
    for row in rows:
        peak = "-" if row.peak_mb is None else f"{row.peak_mb:,.0f} MB"
        verdict = row.verdict + (f": {row.error[:24]}" if row.error else "")
        lines.append(f"{row.name:<34} {peak:>10} {row.seconds:>6.1f} s  {verdict}")
    return "\n".join(lines)


def _main_memory(args: argparse.Namespace) -> None:
    from ..paths import NOTEBOOKS_DIR

    paths = [Path(p) for p in args.notebooks] or sorted(Path(NOTEBOOKS_DIR).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise SystemExit(f"no notebooks found in {NOTEBOOKS_DIR}; name them on the command line")
    print(f"peak resident memory of each notebook's kernel, run top to bottom in a fresh kernel\n"
          f"(Binder's limit: {BINDER_LIMIT_MB / 1024:.0f} GB; the course's target: "
          f"{TARGET_MB / 1000:.1f} GB per lesson)\n", flush=True)
    rows = []
    for path in paths:
        rows.append(notebook_peak_memory(path, timeout=args.timeout))
        print(f"  {path.name}: done", flush=True)
    print()
    print(format_memory_table(rows))


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``memory`` on ``python -m course_utils.bench``."""
    from .cli import notebook_file, positive_int

    p = sub.add_parser("memory", help="peak memory of every notebook, each in a fresh kernel")
    p.add_argument("notebooks", nargs="*", type=notebook_file,
                   help="notebooks to measure (default: every lesson)")
    p.add_argument("--timeout", type=positive_int, default=900, help="seconds allowed per cell")
    p.set_defaults(run=_main_memory)
