"""The command-line tools' one way to reach course_utils/cli.py (Ctrl-C and SIGTERM: one line,
exit 130/143).

It is loaded by its path, as ``course_utils.cli``, because importing the course_utils package
imports torch: course.py runs before .venv exists, and the other tools load it before any slow
import so that a signal while they start still gets its one line. Whoever imports the package
later gets this same module from ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def load_cli() -> ModuleType:
    """``course_utils.cli``, loaded once per process by its path.

    A SIGINT/SIGTERM that arrives while it loads is held until it is loaded (it raised a
    KeyboardInterrupt traceback inside cli.py, before the tool's one-line handler existed:
    battery 21). Called from a tool's ``__main__`` (a tool starting: it calls ``stop_at_once``
    next), the signal is handed to :func:`cli.stop_at_once`, which stops the tool at once with its
    one line (exit 130/143); from anywhere else it is raised again as soon as the load ends, for
    the handlers in place before (a library caller still gets its KeyboardInterrupt)."""
    module = sys.modules.get("course_utils.cli")
    if module is None:
        path = Path(__file__).resolve().parent.parent / "course_utils" / "cli.py"
        spec = importlib.util.spec_from_file_location("course_utils.cli", path)
        module = sys.modules["course_utils.cli"] = importlib.util.module_from_spec(spec)
        held = _holding_signals(lambda: spec.loader.exec_module(module))
        if held and sys._getframe(1).f_globals.get("__name__") == "__main__":
            module._held.append(held[0])  # stop_at_once delivers it once its handlers are in place
        elif held:
            signal.raise_signal(held[0])
    return module


def _holding_signals(load: Callable[[], None]) -> list[int]:
    """Run ``load`` with SIGINT/SIGTERM noted instead of handled; the handlers in place before are
    put back afterwards. Returns the signals that arrived meanwhile. Outside the main thread (it
    alone may set handlers), or where a handler was not set from Python (it could not be put
    back), ``load`` simply runs."""
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        load()
        return []
    held: list[int] = []
    for sig in _STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        load()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return held


if __name__ == "__main__":  # a helper the tools import, not a command of its own
    load_cli().not_a_command("scripts/course_cli.py")
