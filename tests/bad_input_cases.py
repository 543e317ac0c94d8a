"""What the table-driven bad-input tests share (tests/test_bad_input_*.py): the row type, the
assertion and the import of a script."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def import_script(name: str) -> ModuleType:
    """scripts/NAME.py, imported from scripts/ (as the tools import each other)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return __import__(name)


def load_course() -> ModuleType:
    """course.py, loaded afresh by its path (it is no package module): each call gives a new copy,
    so one test file's monkeypatching of its globals never reaches another's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_under_test", SCRIPTS.parent / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_model(**change: object):
    """The small seeded model the interp bad-input tests trace: a TinyTransformer with vocabulary
    16, max_len 12, d_model 16, 2 heads and 2 layers (``change`` replaces any of them), in eval mode."""
    import torch

    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    config = {"vocab_size": 16, "max_len": 12, "d_model": 16, "num_heads": 2, "num_layers": 2} | change
    return TinyTransformer(ModelConfig(**config)).eval()


@dataclass
class Case:
    """One bad call: ``call()`` must raise ``error`` with every one of ``words`` in its message
    (the argument's name, what was expected, what arrived)."""

    name: str
    call: Callable[[], object]
    error: type[BaseException]
    words: list[str]


def assert_named(case: Case) -> None:
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    missing = [w for w in case.words if w not in message]
    assert not missing, f"{case.name}: {missing} not in {message!r}"


def raises_naming(error: type[BaseException], words: list[str], call: Callable[[], object]) -> str:
    """``call()`` raises ``error`` whose message holds every one of ``words``; returns the message."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    missing = [w for w in words if w not in message]
    assert not missing, f"{missing} not in {message!r}"
    return message
