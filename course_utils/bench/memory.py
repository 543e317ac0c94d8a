"""Peak memory of every lesson, each run in a fresh kernel (Binder gives 2 GB).

Run ``python -m course_utils.bench memory`` (all of ``notebooks/``) or name notebooks.
Each notebook is executed top to bottom by nbclient in a new ``python3`` kernel; a last
cell, added to the in-memory copy only, reads the kernel process's peak resident set size
(Linux: ``VmHWM`` in ``/proc/self/status``; macOS: ``ru_maxrss``). Nothing is
written back to the notebooks. Unix only (``resource`` module). ``--slowest N`` lists each
notebook's N slowest cells (nbgrader stops a cell after 120 s), and the load average before
and after the run is printed, since the times depend on what else the machine runs.
A notebook that fails (a cell raises, or runs past ``--timeout``) is a row of the table "not
measured"; then each is named on stderr, one line with its cell and error, and the command exits 1.

``python -m course_utils.bench test-memory`` prints the largest per-test peaks that the
course's pytest plugin (``tests/conftest.py``) records into ``artifacts/test_peak_rss.json``:
before each test the process's peak (``VmHWM``) is reset to its current size through
``/proc/self/clear_refs``, and read again when the test's setup, call and teardown are over.

:class:`CellTime` and :class:`NotebookMemory` check their fields when made (``check_record``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from .. import cli
from ..attention.validation import (
    check_distinct,
    check_record,
    finite,
    freeze_fields,
    is_real,
    plain_str,
    shown,
)
from ..paths import check_path, path_kind

__all__ = ["TARGET_MB", "BINDER_LIMIT_MB", "CELL_TIMEOUT_S", "CellTime", "NotebookMemory",
           "notebook_peak_memory", "format_memory_table", "format_slowest_cells", "peak_rss_bytes",
           "reset_peak_rss", "rss_bytes", "TEST_REPORT", "read_test_report", "format_test_report",
           "read_notebook", "notebook_file", "add_bench_parser"]

TARGET_MB = 1000.0  # the course's target per lesson (1.0 GB)
BINDER_LIMIT_MB = 2048.0  # mybinder.org's memory limit
CELL_TIMEOUT_S = 120.0  # nbgrader's default time limit per cell (ExecutePreprocessor.timeout)
TEST_REPORT = Path("artifacts") / "test_peak_rss.json"  # relative to the repository root
# where the tests write it, whatever the current folder (the package sits in the repository root;
# read relative to the current folder, test-memory run elsewhere said "no report", battery 30)
DEFAULT_TEST_REPORT = Path(__file__).resolve().parents[2] / TEST_REPORT
_MARK = "COURSE_PEAK_RSS_BYTES"
# Linux sums a process's RSS over per-CPU counters without locking them, so VmHWM (the peak) may
# read a little below the VmRSS read when the test began: 0.1-0.3 MB on 2 CPUs in the course's
# own reports, up to CPUs x max(32, 2 x CPUs) pages on a larger machine. A peak this far below the start
# is such a reading, and its rise prints as 0; a peak further below is a wrong record.
_RSS_SLACK_MB, _RSS_SLACK_FRACTION = 1.0, 0.02
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


@dataclass(frozen=True)
class CellTime:
    """One code cell's run time: its index in the notebook and its first line. ``seconds`` is
    finite and >= 0, and may be 0: it is the difference of the kernel's two timestamps, which
    coincide for a cell quicker than their resolution, and nothing divides by it."""

    index: int
    seconds: float
    first_line: str

    def __post_init__(self) -> None:
        check_record(self)


@dataclass(frozen=True)
class NotebookMemory:
    """One notebook's run: its kernel's peak resident memory (> 0 MB: a process holds memory;
    None when it was not measured, which happens when and only when the run failed: ``error``
    then says why) and its wall time (finite, >= 0; nothing divides by it). ``cells`` are in
    notebook order (increasing indices), and their times add up to no more than the notebook's
    (give or take the two clocks' resolution: the kernel stamps the cells, this process times
    the whole run). Frozen (``cells`` kept as a tuple), so a row checked once stays valid."""

    name: str
    peak_mb: float | None  # None when the notebook failed before the probe ran
    seconds: float
    error: str = ""
    cells: tuple[CellTime, ...] = ()  # code cells that ran, in notebook order

    def __post_init__(self) -> None:
        freeze_fields(self)
        check_record(self, positive=("peak_mb",))
        if (self.peak_mb is None) != bool(self.error):
            raise ValueError(f"NotebookMemory({shown(self.name)}) must have peak_mb None exactly when "
                             f"error says "
                             f"why the run failed, got peak_mb={shown(self.peak_mb)} and "
                             f"error={shown(self.error, 60)}")
        indices = [c.index for c in self.cells]
        if any(a >= b for a, b in zip(indices, indices[1:], strict=False)):
            raise ValueError(f"NotebookMemory({shown(self.name)}).cells must be in notebook order "
                             f"(increasing "
                             f"indices, each cell once), got indices {indices}")
        total = sum(c.seconds for c in self.cells)
        if total > self.seconds * 1.01 + 0.1:  # the slack: two clocks, each with its resolution
            raise ValueError(f"NotebookMemory({shown(self.name)}).cells must take no longer than the "
                             f"notebook's "
                             f"seconds={shown(self.seconds)}, got {shown(total)} s in all")

    @property
    def verdict(self) -> str:
        if self.peak_mb is None:
            return "not measured"
        if self.peak_mb <= TARGET_MB:
            return "ok"
        return "over target" if self.peak_mb <= BINDER_LIMIT_MB else "over Binder's 2 GB"


def notebook_peak_memory(path: str | Path, timeout: int = 900) -> NotebookMemory:
    """Run one notebook in a fresh kernel and return its kernel's peak RSS in MB (10**6 bytes).

    A notebook that raises is reported with ``peak_mb=None`` and the error's telling line (see
    :func:`_error_line`),
    never by raising; a SIGINT/SIGTERM meanwhile shuts the kernel down and raises
    :class:`course_utils.cli.Interrupted` (the benchmark stops with one line, exit 130/143).
    A ``timeout`` (seconds per cell) that is not an int in ``1 .. MAX_SECONDS`` (a week, as the
    command's ``--timeout`` takes) is refused: ``10**400`` overflowed the kernel client's float
    clock, which came back as the notebook's own error row.

    The kernel process's own stderr (not the cells' output, which comes back as messages) is
    held by :func:`_kernel_stderr` and written to this process's stderr once the notebook has
    run; after a signal it is dropped: the shutdown that follows interrupts the kernel, which
    then prints a traceback of its own (a KeyboardInterrupt while it imports, a ZMQError from a
    message handler whose socket closed), and the tool's one line must stay the only one.
    """
    from ..attention.validation import check_int  # torch only when called
    from .cli import MAX_SECONDS

    timeout = check_int(timeout, "timeout", minimum=1, maximum=MAX_SECONDS)
    import nbformat
    from nbclient import NotebookClient

    nb = read_notebook(path)
    path = Path(path)
    nb.cells.append(nbformat.v4.new_code_cell(_PROBE))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            store_widget_state=False, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    with _kernel_stderr() as kernel_stderr:
        try:  # a signal stops the run: cli.Interrupted (no Exception) reaches the tool's cli.run
            cli.run_kernel(client.async_execute(stderr=kernel_stderr), f"the kernel running {path.name} "
                           "was shut down; nothing was written")
        except Exception as err:  # a failing lesson is a row of the table, not a crash
            if isinstance(err, TimeoutError):  # nbclient stopped the kernel: its dying words (a
                kernel_stderr.seek(0)  # ZMQError traceback from a closed socket) are no news
                kernel_stderr.truncate()
            return NotebookMemory(path.name, None, time.perf_counter() - start,
                                  _failure_text(err, nb.cells[:-1]), _cell_times(nb.cells[:-1]))
    elapsed = time.perf_counter() - start
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    peak = next(int(line.split()[1]) for line in text.splitlines() if line.startswith(_MARK))
    return NotebookMemory(path.name, peak / 1e6, elapsed, cells=_cell_times(nb.cells[:-1]))


def _failure_text(err: Exception, cells) -> str:
    """What ``error`` says of a failed run: the cell that failed (its index and first line, when
    one can be told) and the error, e.g. ``cell 1 (raise ValueError('boom')): ValueError: boom``
    or ``cell 0 (time.sleep(30)): CellTimeoutError: A cell timed out ...``; the row's table cell
    showed only "CellExecutionError: Valu" and no cell."""
    ename, evalue = getattr(err, "ename", None), getattr(err, "evalue", None)
    if isinstance(ename, str) and ename:
        said = f"{ename}: {evalue}"
    else:
        said = f"{type(err).__name__}: {_error_line(err)}"
    index = _failed_cell(cells)
    if index is not None:
        lines = [line.strip() for line in cells[index].source.splitlines() if line.strip()]
        said = f"cell {index}" + (f" ({lines[0][:60]})" if lines else "") + f": {said}"
    return cli.one_line(said)[:300]


def _failed_cell(cells) -> int | None:
    """The index of the code cell that failed: the first with an error output, else the one the
    kernel started and never answered (a cell that timed out); None when no cell can be told."""
    code = [(i, cell) for i, cell in enumerate(cells) if cell.cell_type == "code"]
    for index, cell in code:
        if any(output.get("output_type") == "error" for output in cell.get("outputs", [])):
            return index
    for index, cell in code:
        stamps = cell.get("metadata", {}).get("execution", {})
        if stamps.get("iopub.execute_input") and not stamps.get("shell.execute_reply"):
            return index
    return None


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # the colours of a kernel's traceback


def _error_line(err: Exception) -> str:
    """The line of a failed run's error that says what happened, without ANSI colour codes: the
    first line with words of a timeout (nbclient's ``CellTimeoutError`` says "A cell timed out
    ... after N seconds", then quotes the cell between rules), else the last one (a traceback ends
    with the exception); '' if no line has words."""
    lines = [line.strip() for line in _ANSI_ESCAPE.sub("", str(err)).splitlines()]
    worded = [line for line in lines if any(c.isalnum() for c in line)]
    if not worded:
        return ""
    return worded[0] if isinstance(err, TimeoutError) else worded[-1]


@contextlib.contextmanager
def _kernel_stderr() -> Iterator[IO[bytes]]:
    """A file for a kernel process's stderr: an anonymous temporary file (removed from the disk as
    it is made, so nothing is left even if this process is killed). When the block ends normally,
    or with an ``Exception`` (a failed notebook), what the kernel wrote is copied to
    ``sys.stderr``; when it ends with anything else (:class:`course_utils.cli.Interrupted`,
    ``KeyboardInterrupt``) it is dropped, with the kernel's dying words."""
    with tempfile.TemporaryFile() as held:
        try:
            yield held
        except Exception:
            _copy_to_stderr(held)
            raise
        _copy_to_stderr(held)


def _copy_to_stderr(held: IO[bytes]) -> None:
    held.seek(0)
    text = held.read().decode("utf-8", errors="replace")
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()


def read_notebook(path: str | Path):
    """The notebook at ``path`` (an ``nbformat`` v4 node), checked against nbformat's schema; a
    path that is not an existing ``.ipynb`` file (saying what it is: missing, a folder, a FIFO),
    or a file that is not a notebook (``{"cells": 3}``), is a ValueError naming it."""
    import nbformat

    check_path(path, "path", "a .ipynb file")
    path = Path(path)
    kind = path_kind(path)
    if kind is not None or path.suffix != ".ipynb":
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}"
                         + (f", which is {kind}" if kind else ""))
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or err})") from None
    except Exception as err:  # nbformat's readers raise anything on JSON of the wrong shape
        first = str(err).strip().splitlines()[0][:100] if str(err).strip() else ""
        raise ValueError(f"{path} is not a notebook nbformat can read ({type(err).__name__}"
                         + (f": {first}" if first else "") + ")") from None
    return nb


def _cell_times(cells) -> list[CellTime]:
    """Each executed code cell's time, from the kernel's own timestamps (nbclient's
    ``record_timing``: from the kernel announcing the input to its reply)."""
    times = []
    for index, cell in enumerate(cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        begin, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if cell.cell_type != "code" or not begin or not end:
            continue
        seconds = (datetime.fromisoformat(end.replace("Z", "+00:00"))
                   - datetime.fromisoformat(begin.replace("Z", "+00:00"))).total_seconds()
        lines = [line for line in cell.source.splitlines() if line.strip()]
        times.append(CellTime(index, seconds, lines[0][:60] if lines else ""))
    return times


def format_slowest_cells(row: NotebookMemory, count: int = 3) -> str:
    """The ``count`` slowest code cells of one notebook, slowest first, one line each."""
    from ..attention.validation import check_int  # torch only when called

    if not isinstance(row, NotebookMemory):
        raise TypeError(f"row must be a NotebookMemory (what notebook_peak_memory returns), got "
                        f"{type(row).__name__} {shown(row, 60)}")
    count = check_int(count, "count", minimum=1)
    slowest = sorted(row.cells, key=lambda c: -c.seconds)[:count]
    lines = [f"  {row.name}: {len(row.cells)} code cells, slowest:"]
    for cell in slowest:
        warn = "  <- over half of nbgrader's 120 s" if cell.seconds > CELL_TIMEOUT_S / 2 else ""
        lines.append(f"    cell {cell.index:>3} {cell.seconds:6.1f} s  {cell.first_line}{warn}")
    return "\n".join(lines)


def format_memory_table(rows: list[NotebookMemory]) -> str:
    """A plain-text table, one row per notebook (each name once: the rows are told apart by
    their names), at most ~90 characters wide."""
    if not isinstance(rows, (list, tuple)) or not all(isinstance(row, NotebookMemory) for row in rows):
        raise TypeError(f"rows must be a list of NotebookMemory (what notebook_peak_memory returns), got "
                        f"{shown(rows, 80)}")
    check_distinct([row.name for row in rows], "rows' names", "notebook names (one row per notebook)")
    lines = [f"{'notebook':<34} {'peak RSS':>10} {'time':>8}  verdict (target {TARGET_MB / 1000:.1f} GB)",
             f"{'-' * 34} {'-' * 10} {'-' * 8}  {'-' * 26}"]
    for row in rows:
        peak = "-" if row.peak_mb is None else f"{row.peak_mb:,.0f} MB"
        verdict = row.verdict + (f": {row.error[:24]}" if row.error else "")
        lines.append(f"{row.name:<34} {peak:>10} {row.seconds:>6.1f} s  {verdict}")
    return "\n".join(lines)


def _load() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _check_notebook_names(args: argparse.Namespace) -> None:
    """The notebooks named have distinct file names, checked before any runs: the table names each
    row by its notebook's file name (``notebooks/04_x.ipynb`` and ``student/04_x.ipynb`` would be
    two rows of one name)."""
    check_distinct([Path(p).name for p in args.notebooks], "notebooks",
                   "file names (the table names each notebook by its file name)")


def _main_memory(args: argparse.Namespace) -> int | None:
    from ..paths import NOTEBOOKS_DIR

    paths = [Path(p) for p in args.notebooks] or sorted(Path(NOTEBOOKS_DIR).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise SystemExit(f"no notebooks found in {NOTEBOOKS_DIR}; name them on the command line")
    print(f"peak resident memory of each notebook's kernel, run top to bottom in a fresh kernel\n"
          f"(Binder's limit: {BINDER_LIMIT_MB / 1024:.0f} GB; the course's target: "
          f"{TARGET_MB / 1000:.1f} GB per lesson)\n"
          f"load average at the start: {_load()} ({os.cpu_count()} CPUs)\n", flush=True)
    rows = []
    for path in paths:
        rows.append(notebook_peak_memory(path, timeout=args.timeout))
        print(f"  {path.name}: done in {rows[-1].seconds:.1f} s, load average {_load()}", flush=True)
        if args.slowest:
            print(format_slowest_cells(rows[-1], args.slowest), flush=True)
    print()
    print(format_memory_table(rows))
    print(f"\nload average at the end: {_load()}", flush=True)
    failed = [row for row in rows if row.error]
    for row in failed:  # the table's cell holds only the start of it: each said in full, on one line
        limit = f" (--timeout {args.timeout}: the seconds allowed per cell)" \
            if "CellTimeoutError: " in row.error else ""
        print(f"python -m course_utils.bench memory: {row.name} failed at {row.error}{limit}; its peak "
              "memory was not measured", file=sys.stderr)
    return 1 if failed else None


# -- per-test peaks (recorded by the plugin in tests/conftest.py) --------------------------
def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field))
    except (OSError, StopIteration):
        return None


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size since it started or since the last
    :func:`reset_peak_rss`, in bytes (Linux: ``VmHWM``); ``None`` where it cannot be read."""
    return _status_bytes("VmHWM:")


def rss_bytes() -> int | None:
    """This process's resident set size now, in bytes (Linux: ``VmRSS``); ``None`` elsewhere."""
    return _status_bytes("VmRSS:")


def reset_peak_rss() -> bool:
    """Set this process's peak RSS back to its current RSS (Linux >= 4.0: write 5 to
    ``/proc/self/clear_refs``). False where that is not possible; then peaks only rise."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False



def read_test_report(path: str | Path = DEFAULT_TEST_REPORT) -> dict[str, dict]:
    """The per-test records, ``{test id: {"peak_mb": ..., "start_mb": ..., "children_mb": ...,
    "seconds": ...}}``: ``peak_mb`` a finite number > 0, each of the others a finite number >= 0,
    null or absent (not measured: :func:`format_test_report` prints ``-`` for it). A file that is
    not such a report (not UTF-8 JSON, JSON nested too deeply to read, no ``tests`` table, a record
    with any other value) is a ValueError naming it."""
    check_path(path, "path", "the per-test memory report (JSON)")
    path = Path(path)
    kind = path_kind(path)
    if kind not in (None, "missing"):
        raise ValueError(f"the per-test memory report {path} is {kind}, not a regular file: expected the "
                         "JSON file the tests write")
    if kind == "missing":
        raise FileNotFoundError(f"no per-test memory report at {path}: run the tests first "
                                f"(python3 course.py test), which write it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        why = ("JSON nested too deeply to read" if isinstance(err, RecursionError)
               else f"not UTF-8 JSON ({err})")
        raise ValueError(f"{path} is not a per-test memory report: {why}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), dict):
        raise ValueError(f"{path} is not a per-test memory report (expected a 'tests' table)")
    return _checked_records(data["tests"], str(path))


def _checked_records(tests: object, source: str) -> dict[str, dict]:
    """``tests`` if it is ``{test id: {"peak_mb": number, ...}}``, with each test id as the plain
    str it holds (a str subclass's own ``__str__`` may raise), else a ValueError or TypeError that
    names ``source`` and the first record that is not."""
    if not isinstance(tests, dict):
        raise TypeError(f"tests must be a dict {{test id: record}} as read_test_report returns, got "
                        f"{type(tests).__name__}")
    checked: dict[str, dict] = {}
    for nodeid, record in tests.items():
        nodeid = plain_str(nodeid, f"each test id (key) of {source}", "a str (a pytest node id)")
        checked[nodeid] = record
        peak = record.get("peak_mb") if isinstance(record, dict) else None
        if not is_real(peak):
            raise ValueError(f"{source}: the record of {shown(nodeid, 80)} has no numeric 'peak_mb' (got "
                             f"{shown(record, 80)}): expected the JSON file the tests write")
        # JSON reads NaN and Infinity: a peak (> 0: a process holds memory) and the optional sizes
        # and time must be real amounts, else they sort and print as "nan MB"
        for key in ("peak_mb", "start_mb", "children_mb", "seconds"):
            value = record.get(key)
            if value is not None and (not is_real(value)
                                      or not finite(value) or value < 0
                                      or (key == "peak_mb" and value == 0)):
                raise ValueError(f"{source}: the record of {shown(nodeid, 80)} has {key}={shown(value)}: "
                                 f"expected a finite number {'> 0' if key == 'peak_mb' else '>= 0 or null'}")
        start = record.get("start_mb")  # the peak of a test counts the size it began with
        if start is not None and start - peak > max(_RSS_SLACK_MB, _RSS_SLACK_FRACTION * start):
            raise ValueError(f"{source}: the record of {shown(nodeid, 80)} has peak_mb={shown(peak)} below "
                             f"start_mb={shown(start)}: expected a peak >= the size the test began with (the "
                             f"peak counts it)")
    return checked


def format_test_report(tests: dict[str, dict], top: int = 10) -> str:
    """The ``top`` largest per-test peaks, largest first, with the limit each is judged by,
    then the ``top`` largest rises. ``rise`` is the peak less the process's size when the
    test began: what the test itself added, where the peak also counts what earlier tests in
    the same process left behind. A peak at most 1 MB or 2 % below the start is taken (Linux's
    RSS counters are summed per CPU without a lock: the course's own reports hold peaks 0.1-0.3 MB
    below the start) and its rise prints as 0; a peak further below is refused, naming the test.
    ``tests`` is checked as :func:`read_test_report` checks a file: a ``start_mb`` or ``seconds``
    that is null or absent (not measured) prints as ``-``, never as 0."""
    from ..attention.validation import check_int  # torch only when called

    top = check_int(top, "top", minimum=1)
    tests = _checked_records(tests, "tests")

    def rise_of(record: dict) -> float | None:
        start = record.get("start_mb")
        return None if start is None else max(0.0, record["peak_mb"] - start)  # (see _RSS_SLACK_MB)

    def line(nodeid: str, record: dict) -> str:
        flag = "  OVER 2 GB" if record["peak_mb"] > BINDER_LIMIT_MB else ""
        rise = rise_of(record)
        rise_text = "-" if rise is None else f"{rise:+,.0f} MB"
        seconds = record.get("seconds")  # null or absent: not measured, not 0 s
        time_text = "-" if seconds is None else f"{seconds:.1f} s"
        return f"  {record['peak_mb']:>8,.0f} MB  {rise_text:>9}  {time_text:>8}  {nodeid}{flag}"

    by_peak = sorted(tests.items(), key=lambda item: -(item[1].get("peak_mb") or 0.0))
    over = sum(1 for _, r in by_peak if (r.get("peak_mb") or 0.0) > BINDER_LIMIT_MB)
    children = max((r.get("children_mb") or 0.0 for r in tests.values()), default=0.0)
    lines = [f"per-test peak RSS of the test process ({len(tests)} tests; {over} over Binder's "
             f"{BINDER_LIMIT_MB / 1024:.0f} GB); largest child process: {children:,.0f} MB",
             f"  {'peak':>11}  {'rise':>9}  {'time':>8}  test"]
    lines += [line(nodeid, record) for nodeid, record in by_peak[:top]]
    risen = [(n, r) for n, r in tests.items() if rise_of(r) is not None]
    if risen:
        lines.append(f"the {min(top, len(risen))} largest rises over the size each test began with:")
        lines += [line(n, r) for n, r in sorted(risen, key=lambda item: -rise_of(item[1]))[:top]]
    return "\n".join(lines)


def _main_test_memory(args: argparse.Namespace) -> None:
    try:
        tests = read_test_report(args.report)
    except (FileNotFoundError, ValueError) as err:
        print(f"bench test-memory: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    print(format_test_report(tests, args.top))


def notebook_file(text: str) -> str:
    """An argparse type: an existing ``.ipynb`` file that nbformat reads as a notebook (checked
    before the first notebook runs, by :func:`read_notebook`); an empty word is refused as one."""
    from .cli import not_blank

    not_blank(text, "a notebook file (.ipynb)")
    check_path(text, "notebook_file's text", "a lesson notebook")
    problem = cli.path_problem(text, "the notebook", "a lesson notebook (.ipynb)")
    if problem:  # a name too long: a traceback from stat (battery 33)
        raise argparse.ArgumentTypeError(problem)
    path = Path(text)
    if path.suffix != ".ipynb":
        raise argparse.ArgumentTypeError(f"expected a notebook file (.ipynb), got {shown(text)}")
    kind = path_kind(path)  # (never opens the path: reading a FIFO would wait forever)
    if kind == "missing":
        raise argparse.ArgumentTypeError(f"no notebook file {shown(text)} (relative to {Path.cwd()})")
    if kind is not None:
        raise argparse.ArgumentTypeError(f"expected a notebook file, got {shown(text)}, which is {kind}")
    if path.stat().st_size == 0:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a notebook: the file is empty")
    try:
        read_notebook(path)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def report_file(text: str) -> str:
    """An argparse type: the per-test memory report's path, not an empty word (``''`` or ``' '``
    names no file); whether it exists and holds a report is said by :func:`read_test_report`."""
    from .cli import not_blank

    not_blank(text, "the per-test memory report (a JSON file the tests write)")
    check_path(text, "report_file's text", "the per-test memory report (JSON)")
    problem = cli.path_problem(text, "the report", "the per-test memory report (JSON)")
    if problem:  # a name too long: a traceback from stat (battery 33)
        raise argparse.ArgumentTypeError(problem)
    return text


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``memory`` on ``python -m course_utils.bench``."""
    from .cli import Distinct, check_subparsers, non_negative_int, positive_int, seconds

    check_subparsers(sub, "memory")

    p = sub.add_parser("memory", help="peak memory of every notebook, each in a fresh kernel")
    p.add_argument("notebooks", nargs="*", type=notebook_file, action=Distinct, key=os.path.realpath,
                   help="notebooks to measure, each once (default: every lesson)")
    p.add_argument("--timeout", type=seconds, default=900, help="seconds allowed per cell")
    p.add_argument("--slowest", type=non_negative_int, default=3, metavar="N",
                   help="list each notebook's N slowest cells (0: none)")
    p.set_defaults(run=_main_memory, check=_check_notebook_names)
    t = sub.add_parser("test-memory", help="the largest per-test peak memory of the last test runs")
    t.add_argument("report", nargs="?", default=str(DEFAULT_TEST_REPORT), type=report_file,
                   help=f"the report the tests wrote (default: {TEST_REPORT} in the repository)")
    t.add_argument("--top", type=positive_int, default=10, help="how many tests to list")
    t.set_defaults(run=_main_test_memory)
