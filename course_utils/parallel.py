"""Independent jobs (training runs) side by side on several CPU cores, with the results of a loop.

The lessons train many tiny models, each on one CPU thread (the fastest setting for models this
small, and the one that makes results independent of the machine's core count). One thread per
run leaves the other cores idle; :func:`parallel_map` runs several runs at once in forked worker
processes, one thread each, and returns exactly what ``[fn(x) for x in items]`` would.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from typing import TypeVar

import torch

from .attention.validation import check_callable, check_int, check_positive_number, shown

__all__ = ["parallel_map", "default_workers"]

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8
#: The most jobs one call takes: each is a forked process's work (a training run, a sweep point),
#: so more is a slip, such as an endless iterator, which would otherwise be listed until the
#: machine's memory ran out.
MAX_JOBS = 1_000_000


def _fork_available() -> bool:
    """Whether jobs may run in forked children here: on Linux only (macOS system libraries can
    break in a forked child), and only where PyTorch sees no CUDA GPU. CUDA does not survive
    fork, and once a backward pass has run on a machine with a GPU, PyTorch's autograd device
    threads make every backward in a forked child fail ("Unable to handle autograd's threading
    in combination with fork-based multiprocessing"; torch's optimizers also query the GPU at
    each step, which fails there with "CUDA error: initialization error"). Seen on an H200
    machine with torch 2.11: lessons 01, 05 and 07 failed at their first parallel_map.
    Nor inside a daemonic process, such as a :func:`parallel_map` worker (a job that calls
    ``parallel_map`` itself): a daemonic process may not have children (multiprocessing said only
    "daemonic processes are not allowed to have children": battery 21), so a nested call runs the
    plain loop inside its worker, which already uses its own core."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon and not torch.cuda.is_available())


def default_workers(num_jobs: int) -> int:
    """Worker processes :func:`parallel_map` uses by default; 1 (a plain loop) where fork is
    unavailable (no Linux fork, or a CUDA GPU that PyTorch sees) or there is one core. Up to
    twice as many jobs as cores all start at once (3 equal jobs on 2 cores then take 1.5
    job-times, not 2); more go one per core. At most ``MAX_WORKERS``. ``num_jobs``: an int >= 0."""
    num_jobs = check_int(num_jobs, "num_jobs", minimum=0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not _fork_available() or cores == 1:
        return 1
    return max(1, min(MAX_WORKERS, num_jobs if num_jobs <= 2 * cores else cores))


def _exit_error(index: int, code: str) -> RuntimeError:
    """The one error for ``fn`` calling ``sys.exit`` (in a worker or in the plain loop);
    ``code`` is ``repr`` of the exit code."""
    return RuntimeError(f"parallel_map: fn(items[{index}]) called sys.exit({code}) (SystemExit); "
                        "a job must return its result or raise an exception, not end the process")


def _run_in_child(fn: Callable[[T], R], item: T, conn: Connection) -> None:
    torch.set_num_threads(1)
    try:
        # plain pickle: tensors travel as bytes (multiprocessing's own pickler would share
        # them through file descriptors that vanish when this process exits)
        message = pickle.dumps(("ok", fn(item)))
    except SystemExit as exc:
        message = pickle.dumps(("exit", _code_text(exc.code)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        message = pickle.dumps(("error", traceback.format_exc()))
    conn.send_bytes(message)
    conn.close()


def _check_arguments(fn: object, items: object, workers: object, timeout: object) -> list:
    check_callable(fn, "fn", "a function of one item", nargs=1)  # the plain loop would raise from here
    try:
        iter(items)
    except TypeError:
        raise TypeError(f"items must be an iterable of jobs (a list, a range...), got "
                        f"{type(items).__name__} {shown(items)}") from None
    if workers is not None:
        workers = check_int(workers, "workers", minimum=1)
    if hasattr(items, "__len__"):  # a list, a range: counted without listing (range(10**13) too)
        try:
            count = len(items)
        except Exception as err:  # noqa: BLE001 - a __len__ that raises or is negative (battery 27)
            raise TypeError(f"items must be an iterable of jobs with a working len(), got a "
                            f"{type(items).__name__} whose len() failed: {err}") from None
        _check_job_count(count, f"{count:,}")
        return list(items)
    jobs = list(itertools.islice(items, MAX_JOBS + 1))  # an endless iterator is read this far only
    _check_job_count(len(jobs), f"more (a {type(items).__name__} that had not ended by then)")
    return jobs


def _check_job_count(count: int, shown: str) -> None:
    if count > MAX_JOBS:
        raise ValueError(f"items must hold at most {MAX_JOBS:,} jobs, got {shown}: each job is a "
                         f"worker's task, so this is likely an endless or mistaken iterable")


def _check_timeout(timeout: object) -> float | None:
    """``None`` or a number > 0 of seconds; infinity means no limit (``None``); a finite value
    beyond what the waits accept (``threading.TIMEOUT_MAX``, about 292 years) is refused."""
    if timeout is None:
        return None
    seconds = check_positive_number(timeout, "timeout", allow_inf=True)
    if math.isinf(seconds):
        return None
    if seconds > threading.TIMEOUT_MAX:
        raise ValueError(f"timeout must be at most {threading.TIMEOUT_MAX:g} s (the longest wait this "
                         f"system allows), got {shown(timeout)}; pass timeout=None (or inf) for no limit")
    return seconds


def _code_text(code: object) -> str:
    """``repr`` of a ``sys.exit`` code, or its type's name when its ``repr`` fails."""
    try:
        return repr(code)
    except BaseException:  # noqa: BLE001 - any repr failure: describe the object by its type
        return f"<{type(code).__name__} object>"


def _plain_loop(fn: Callable[[T], R], items: list, timeout: float | None,
                notice_after: float | None = None) -> list[R]:
    """``[fn(x) for x in items]`` in this process; ``sys.exit`` in ``fn`` becomes the workers' error.
    A ``timeout`` here (no fork) is enforced with a SIGALRM timer."""
    results = []
    for index, item in enumerate(items):
        try:
            if timeout is None:
                with _notice(notice_after, index):
                    results.append(fn(item))
            else:
                with _alarm(timeout, index):
                    results.append(fn(item))
        except SystemExit as exc:
            raise _exit_error(index, _code_text(exc.code)) from None
    return results


class _alarm:  # noqa: N801 - used as a context manager
    """Raise TimeoutError in this (main) thread after ``seconds`` (SIGALRM; Unix, main thread)."""

    def __init__(self, seconds: float, index: int) -> None:
        self.seconds, self.index = seconds, index

    def _ring(self, signum, frame):
        raise TimeoutError(_timeout_message(self.index, self.seconds))

    def __enter__(self):
        self.previous = signal.signal(signal.SIGALRM, self._ring)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def _timeout_message(index: int, seconds: float) -> str:
    return (f"parallel_map: fn(items[{index}]) did not return within timeout={seconds:g} s; "
            "its worker was stopped (raise timeout, or pass timeout=None to wait as long as it takes)")


NOTICE_AFTER = 300.0  # seconds: when a call without a timeout says it is still running


def _still_running_notice(indices: list[int], seconds: float) -> str:
    calls = ", ".join(f"fn(items[{i}])" for i in indices[:4]) + (" ..." if len(indices) > 4 else "")
    return (f"parallel_map: {calls} still running after {seconds:g} s, and no timeout= was given. If it "
            "hangs, stop it with Kernel > Interrupt (Ctrl-C in a terminal), or pass timeout=SECONDS to "
            "stop a call that runs longer; pass notice_after=None to silence this note.")


class _notice:  # noqa: N801 - used as a context manager
    """Print :func:`_still_running_notice` once to stderr if the block runs past ``seconds``."""

    def __init__(self, seconds: float | None, index: int) -> None:
        self.seconds, self.index, self.timer = seconds, index, None

    def _say(self) -> None:
        print(_still_running_notice([self.index], self.seconds), file=sys.stderr, flush=True)

    def __enter__(self):
        if self.seconds is not None:
            self.timer = threading.Timer(self.seconds, self._say)
            self.timer.daemon = True
            self.timer.start()

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()


def parallel_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None,
                 timeout: float | None = None, notice_after: float | None = NOTICE_AFTER) -> list[R]:
    """``[fn(x) for x in items]``, computed in up to ``workers`` forked processes at once.

    For independent jobs that seed themselves, such as training runs: each result is the one
    the plain loop gives (each worker uses one torch thread), in the order of ``items``.
    ``workers=None`` uses :func:`default_workers`; ``1``, a single item, a system without
    ``fork`` (macOS, Windows) or a machine where PyTorch sees a CUDA GPU (CUDA and autograd's
    GPU threads do not survive fork) runs the plain loop in this process, whatever ``workers``
    says; so does a call inside a worker (a job that calls ``parallel_map`` itself: a worker may not
    fork workers of its own, and already uses its own core). ``fn`` may be any callable, a lambda
    or a notebook function included (it is not pickled); its result must pickle.
    Side effects of ``fn`` (appending to a list, printing) stay in the worker: return what you need.

    Errors: ``fn`` that cannot be called with one item (``lambda: 1``) is a TypeError naming
    ``fn``, before any job runs; an exception in a worker, a result that cannot be pickled or unpickled, or a
    worker that dies raise ``RuntimeError`` naming the item (``fn(items[i])``) with the
    worker's traceback; in the plain loop ``fn``'s own exception propagates unchanged.
    ``fn`` calling ``sys.exit`` is the same ``RuntimeError`` in both (never ``SystemExit``).

    ``timeout``: seconds one call of ``fn`` may take (``None``, the default, or ``inf``: no
    limit; at most ``threading.TIMEOUT_MAX``). A call still running after ``timeout``
    seconds is stopped (its worker is terminated, the other workers too; one still running
    2 s later, such as a job that ignores SIGTERM, is killed) and
    ``TimeoutError`` names the item. With a timeout the jobs always run in forked workers
    (``workers=1``: one at a time), so that a job that never returns can be stopped; without
    ``fork`` a SIGALRM timer interrupts the plain loop (main thread of a Unix process only).
    Without a timeout, stop a hung call with Ctrl-C (in Jupyter: the kernel's stop button,
    Kernel > Interrupt): the workers are
    terminated before the ``KeyboardInterrupt`` reaches you. So that a hang is not silent,
    a call without a timeout that is still running after ``notice_after`` seconds (default
    300; ``None``: never) prints one note to stderr naming the items still running and how
    to stop them; the calls go on.
    """
    items = _check_arguments(fn, items, workers, timeout)
    timeout = _check_timeout(timeout)
    if notice_after is not None:
        notice_after = check_positive_number(notice_after, "notice_after", allow_inf=True)
    if timeout is not None:
        notice_after = None  # a call that runs too long is stopped, and says so
    if workers is None:
        workers = default_workers(len(items))
    if not items:
        return []
    if not _fork_available():
        if timeout is not None and (not hasattr(signal, "setitimer")
                                    or threading.current_thread() is not threading.main_thread()):
            raise ValueError("timeout needs forked workers (Linux, no CUDA GPU visible to PyTorch) or a "
                             "SIGALRM timer (Unix, main thread); neither is available here: pass "
                             "timeout=None")
        return _plain_loop(fn, items, timeout, notice_after)
    if timeout is None and (workers == 1 or len(items) <= 1):
        return _plain_loop(fn, items, None, notice_after)

    # The first torch optimizer a process builds imports torch's compiler stack (torch._dynamo,
    # 1.5-2 s). Imported here, once, every worker inherits it instead of importing it again.
    import torch._dynamo  # noqa: F401

    context = multiprocessing.get_context("fork")
    results: list = [None] * len(items)
    waiting = list(enumerate(items))
    running: dict[Connection, tuple[int, multiprocessing.Process, float]] = {}
    noticed = notice_after is None
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns when a process with threads (a Jupyter kernel) forks; the worker
            # only runs single-threaded torch code and never touches the parent's threads.
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks.*",
                                    category=DeprecationWarning)
            while waiting or running:
                while waiting and len(running) < workers:
                    index, item = waiting.pop(0)
                    receive, send = context.Pipe(duplex=False)
                    process = context.Process(target=_run_in_child, args=(fn, item, send), daemon=True)
                    process.start()
                    send.close()
                    running[receive] = (index, process, time.monotonic())
                wait_for = None
                if timeout is not None:
                    first_deadline = min(started for _, _, started in running.values()) + timeout
                    wait_for = max(0.0, first_deadline - time.monotonic())
                elif not noticed:
                    first_notice = min(started for _, _, started in running.values()) + notice_after
                    wait_for = max(0.0, first_notice - time.monotonic())
                ready = wait(list(running), timeout=wait_for)
                if not ready and timeout is None:  # no limit: say once what is still running
                    late = sorted(i for i, _, started in running.values()
                                  if time.monotonic() - started >= notice_after)
                    print(_still_running_notice(late, notice_after), file=sys.stderr, flush=True)
                    noticed = True
                    continue
                if not ready:  # the oldest job ran out of time
                    index = min(running.values(), key=lambda job: job[2])[0]
                    raise TimeoutError(_timeout_message(index, timeout))
                for conn in sorted(ready, key=lambda c: running[c][0]):  # by item: of two failures
                    index, process, _ = running.pop(conn)  # seen at once, the earlier item's is raised
                    results[index] = _receive(conn, process, index)
    finally:
        _stop_workers([process for _, process, _ in running.values()])
        for conn in running:
            conn.close()
    return results


_STOP_GRACE = 2.0  # seconds a terminated worker has to end before it is killed


def _stop_workers(processes: list[multiprocessing.Process]) -> None:
    """Terminate ``processes`` (SIGTERM), give them :data:`_STOP_GRACE` seconds together, then kill
    (SIGKILL) any still running: a job that ignores SIGTERM kept the ``TimeoutError`` waiting until
    it ended by itself (battery 17)."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + _STOP_GRACE
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()


def _receive(conn: Connection, process: multiprocessing.Process, index: int) -> object:
    """The result a worker sent for ``items[index]``, or the error that names what went wrong."""
    try:
        payload = conn.recv_bytes()
    except EOFError:
        payload = None
    finally:
        conn.close()
        process.join()
    if payload is None:
        status, value = "error", f"the worker exited with code {process.exitcode} without a result"
    else:
        try:
            status, value = pickle.loads(payload)
        except BaseException as exc:  # noqa: BLE001 - a result that pickles but does not unpickle
            # (its unpickling may even raise SystemExit or KeyboardInterrupt: only this call is
            # guarded, so a real Ctrl-C elsewhere still interrupts the parent)
            raise RuntimeError(
                f"parallel_map: the result of fn(items[{index}]) was sent back but could not be "
                f"unpickled here ({type(exc).__name__}: {exc}); return plain data (numbers, lists, "
                "dicts, tensors) instead"
            ) from exc
    if status == "exit":
        raise _exit_error(index, value)
    if status != "ok":
        raise RuntimeError(f"parallel_map: fn(items[{index}]) failed in a worker process:\n{value}")
    return value


if __name__ == "__main__":  # a library module, not a command: say so (it exited 0 without a word)
    from . import cli

    cli.not_a_command("python -m course_utils.parallel")
