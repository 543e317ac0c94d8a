"""Imported first by ``course_utils/__init__.py``, before torch: ``python -m course_utils.X``
interrupted while it starts (importing torch takes a second or more) stops with one line.

Under ``python -m NAME`` Python imports NAME's packages first, with ``sys.argv[0]`` set to ``"-m"``
until NAME itself runs; the tool's own ``cli.stop_at_once`` (in its ``__main__`` block) would come
only after torch. So while ``course_utils.X`` is being found, the course's handler is set here:
a signal then prints ``python -m course_utils.X: interrupted by SIGINT while starting; nothing was
written`` and exits 130 (143 for SIGTERM). In any other process (a notebook, pytest, a script)
this does nothing.

``python -m`` of a module of the package that is no command (``course_utils.attention.mha``,
``course_utils.bench.cli``, a slip for ``course_utils.bench``) ran its definitions and exited 0
without a word, as if it had worked: it is refused here, for every such module at once, with
:func:`cli.not_a_command`'s one line and exit 2, before the module runs (so runpy has nothing to
warn about: it never imports the module as ``__main__``). A name that is no module of the
package is left to Python ("No module named ...").
"""

from __future__ import annotations

import os
import sys

ENTRIES = ("course_utils.model.train", "course_utils.bench", "course_utils.bench.__main__")
PACKAGE = "course_utils"


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


def _is_library_module(name: str | None) -> bool:
    """True when ``name`` (what ``python -m`` runs) is a module or package of course_utils that is
    not one of the commands (:data:`ENTRIES`). Looked up as files next to this one: importing it
    would run it, and a name that is no module at all is Python's to report."""
    if name is None or name in ENTRIES or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return False
    parts = name.split(".")[1:]
    if not all(part.isidentifier() for part in parts):
        return False
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)
    return os.path.isfile(where + ".py") or os.path.isfile(os.path.join(where, "__init__.py"))


_name = _module_starting()
if _name in ENTRIES:
    from . import cli  # the standard library only

    cli.stop_at_once(f"python -m {_name.removesuffix('.__main__')}")
elif _is_library_module(_name):
    from . import cli

    cli.not_a_command(f"python -m {_name.removesuffix('.__main__')}")
_check_current_folder()
