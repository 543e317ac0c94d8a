"""Imported first by ``course_utils/__init__.py``, before torch: ``python -m course_utils.X``
interrupted while it starts (importing torch takes a second or more) stops with one line.

Under ``python -m NAME`` Python imports NAME's packages first, with ``sys.argv[0]`` set to ``"-m"``
until NAME itself runs; the tool's own ``cli.stop_at_once`` (in its ``__main__`` block) would come
only after torch. So while ``course_utils.X`` is being found, the course's handler is set here:
a signal then prints ``python -m course_utils.X: interrupted by SIGINT while starting; nothing was
written`` and exits 130 (143 for SIGTERM). In any other process (a notebook, pytest, a script)
this does nothing, and so does ``python -m`` of a module that is no tool (``course_utils.cli``:
importing it here first would make runpy warn).
"""

from __future__ import annotations

import os
import sys

ENTRIES = ("course_utils.model.train", "course_utils.bench", "course_utils.bench.__main__")


def _module_starting() -> str | None:
    """NAME while ``python -m NAME`` imports NAME's packages, else None."""
    if sys.argv[:1] != ["-m"]:
        return None
    argv = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
    return None


def _check_current_folder() -> None:
    """An ImportError saying why, instead of the process ending inside torch's import: with the
    current folder deleted, Intel's oneMKL stops it ("Cannot load libtorch_cpu.so", exit 2)."""
    if "torch" in sys.modules:
        return
    try:
        os.getcwd()
    except OSError as err:
        raise ImportError(f"course_utils cannot be imported: the current folder cannot be read "
                          f"({err.strerror}; was it deleted?), and torch's import would end the "
                          f"process there; change to an existing folder (os.chdir) first") from None


_name = _module_starting()
if _name in ENTRIES:
    from . import cli  # the standard library only

    cli.stop_at_once(f"python -m {_name.removesuffix('.__main__')}")
_check_current_folder()
