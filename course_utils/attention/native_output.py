"""What PyTorch's C++ side prints, kept out of the learner's output.

Some PyTorch calls write warnings straight to file descriptor 2 from C++, with a timestamp
(``[W1130 01:32:38.403618741 sdp_utils_cpp.h:91] Warning: ...``): the profiler when it starts
and stops, and on some builds the ``can_use_*`` checks of the attention backends. Python's
``warnings`` never sees them, and in Jupyter they land in the cell's output.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["NativeOutput", "native_stderr_captured"]


class NativeOutput:
    """What a :func:`native_stderr_captured` block wrote to file descriptor 2: ``text``, filled
    in when the block ends ("" where descriptor 2 could not be redirected)."""

    text: str = ""


def native_stderr_captured() -> _NativeStderrCapture:
    """Capture what is written to file descriptor 2 during the ``with`` block (C++ code's
    stderr; Python's ``sys.stderr`` object is flushed first and otherwise untouched) and give it
    as the yielded object's ``text`` once the block ends. Does nothing where descriptor 2
    cannot be copied. Each call gives a one-use context manager: entering it twice, or leaving
    it without entering, is a RuntimeError saying so (not contextlib's internals)."""
    return _NativeStderrCapture()


class _NativeStderrCapture:
    """What :func:`native_stderr_captured` returns: :func:`_capture` used once, in order."""

    def __init__(self) -> None:
        self._block = _capture()
        self._state = "new"  # then "entered", then "done"

    def __enter__(self) -> NativeOutput:
        if self._state != "new":
            raise RuntimeError("native_stderr_captured() was entered twice: each call gives a one-use "
                               "context manager; call native_stderr_captured() again for another block")
        self._state = "entered"
        return self._block.__enter__()

    def __exit__(self, *exc_info: object) -> bool | None:
        if self._state != "entered":
            misuse = "exited twice" if self._state == "done" else "exited without being entered"
            raise RuntimeError(f"native_stderr_captured() was {misuse}: use it as "
                               "`with native_stderr_captured() as printed:`")
        self._state = "done"
        return self._block.__exit__(*exc_info)


@contextlib.contextmanager
def _capture() -> Iterator[NativeOutput]:
    """:func:`native_stderr_captured`'s work, as a generator."""
    captured = NativeOutput()
    try:
        saved = os.dup(2)
    except OSError:
        yield captured
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace")
