"""Independent jobs (training runs) side by side on several CPU cores, with the results of a loop.

The lessons train many tiny models, each on one CPU thread (the fastest setting for models this
small, and the one that makes results independent of the machine's core count). One thread per
run leaves the other cores idle; :func:`parallel_map` runs several runs at once in forked worker
processes, one thread each, and returns exactly what ``[fn(x) for x in items]`` would.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from typing import TypeVar

import torch

__all__ = ["parallel_map", "default_workers"]

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8


def _fork_available() -> bool:
    # fork is only safe for this on Linux (macOS system libraries can break in a forked child)
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def default_workers(num_jobs: int) -> int:
    """Worker processes :func:`parallel_map` uses by default; 1 (a plain loop) where fork is
    unavailable or there is one core. Up to twice as many jobs as cores all start at once
    (3 equal jobs on 2 cores then take 1.5 job-times, not 2); more go one per core. At most
    ``MAX_WORKERS``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not _fork_available() or cores == 1:
        return 1
    return max(1, min(MAX_WORKERS, num_jobs if num_jobs <= 2 * cores else cores))


def _run_in_child(fn: Callable[[T], R], item: T, conn: Connection) -> None:
    torch.set_num_threads(1)
    try:
        # plain pickle: tensors travel as bytes (multiprocessing's own pickler would share
        # them through file descriptors that vanish when this process exits)
        message = pickle.dumps(("ok", fn(item)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        message = pickle.dumps(("error", traceback.format_exc()))
    conn.send_bytes(message)
    conn.close()


def parallel_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, computed in up to ``workers`` forked processes at once.

    For independent jobs that seed themselves, such as training runs: each result is the one
    the plain loop gives (each worker uses one torch thread), in the order of ``items``.
    ``workers=None`` uses :func:`default_workers`; ``1``, a single item, or a system without
    ``fork`` (macOS, Windows) runs the plain loop in this process. ``fn`` may be any callable,
    a lambda or a notebook function included (it is not pickled); its result must pickle.
    Side effects of ``fn`` (appending to a list, printing) stay in the worker: return what you need.
    """
    items = list(items)
    if workers is None:
        workers = default_workers(len(items))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    if workers == 1 or len(items) <= 1 or not _fork_available():
        return [fn(item) for item in items]

    # The first torch optimizer a process builds imports torch's compiler stack (torch._dynamo,
    # 1.5-2 s). Imported here, once, every worker inherits it instead of importing it again.
    import torch._dynamo  # noqa: F401

    context = multiprocessing.get_context("fork")
    results: list = [None] * len(items)
    waiting = list(enumerate(items))
    running: dict[Connection, tuple[int, multiprocessing.Process]] = {}
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
                    running[receive] = (index, process)
                for conn in wait(list(running)):
                    index, process = running.pop(conn)
                    try:
                        status, value = pickle.loads(conn.recv_bytes())
                    except EOFError:
                        process.join()
                        status, value = "error", f"the worker exited with code {process.exitcode}"
                    conn.close()
                    process.join()
                    if status != "ok":
                        raise RuntimeError(f"parallel_map: fn(items[{index}]) failed in a worker "
                                           f"process:\n{value}")
                    results[index] = value
    finally:
        for conn, (_, process) in running.items():
            process.terminate()
            process.join()
            conn.close()
    return results
