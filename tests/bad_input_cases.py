"""What the bad-input tests share (tests/test_bad_input_*.py): the row type, the assertions, the
import of a script or of course.py, a few odd values (a repr, len, str or index that raises) and the
small seeded models several subjects' files build."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent  # the checkout: course.py, scripts/, solutions/
SCRIPTS = ROOT / "scripts"
BEYOND_FLOAT = 10**400  # an int no float holds: float(BEYOND_FLOAT) raises OverflowError


def import_script(name: str) -> ModuleType:
    """scripts/NAME.py, imported from scripts/ (as the tools import each other): the one copy in
    sys.modules, as a plain ``import NAME`` with scripts/ on the path gives it. scripts/ stays on
    the path."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return __import__(name)


def load_script_copy(name: str) -> ModuleType:
    """scripts/NAME.py run afresh as a module of its own (``_NAME_under_test``, put in sys.modules,
    where its dataclasses look their module up), with scripts/ on the path for its imports of the
    other tools: a test may change its globals without reaching ``import_script``'s copy."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec.loader.exec_module(module)
    return module


def load_course() -> ModuleType:
    """course.py, loaded afresh by its path (it is no package module): each call gives a new copy,
    so one test file's monkeypatching of its globals never reaches another's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_under_test", ROOT / "course.py")
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


def small_model():
    """The seeded model the module-level cases of several subjects' files run (SM, MODEL or M in
    attention, tasks, checkpoint, model_training, interp, interp_scores_patching and
    interp_heatmaps_widgets): ``tiny_model`` with vocabulary 10, max_len 8 and d_model 8 (2 heads,
    2 layers), in eval mode. Each call seeds torch's global generator with 0 and builds a new model, as
    the files' own ``torch.manual_seed(0); SM = TinyTransformer(...)`` did: what a file draws after it
    (a MultiHeadAttention's weights, torch.randn) is unchanged, and a test that changes its file's
    model changes no other file's."""
    return tiny_model(vocab_size=10, max_len=8, d_model=8)


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


def refused(call: Callable[[], object], error: type[BaseException], words: list[str]) -> None:
    """``call()`` raises ``error`` whose message holds every one of ``words`` (``raises_naming`` with
    the call first, as the tables of several bad-input files write it)."""
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


class BadRepr:
    """A value whose repr (and so str) raises: messages must still name what they refuse."""

    def __repr__(self) -> str:
        raise RuntimeError("repr raises")

    __str__ = __repr__


class LyingLen(list):
    """A list whose len raises."""

    def __len__(self) -> int:
        raise RuntimeError("len lies")


class LyingStr(str):
    """A str subclass whose str and repr raise."""

    def __str__(self) -> str:
        raise RuntimeError("str raises")

    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


class EqRaises:
    """An argument that is no str, whose ``==`` raises (its repr works): a string option must be
    refused by its type, unread (battery 33: 18 options compared it first and let its error out)."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq boom")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "EqRaises()"


class BadIndex:
    """An object whose __index__ raises."""

    def __index__(self) -> int:
        raise RuntimeError("index raises")


def train_mode_tiny_model():
    """A seeded TinyTransformer with vocabulary 12, max_len 10, d_model 16, 4 heads and 2 layers, left
    in training mode (as built), for the library tests that train, save or trace it."""
    import torch

    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2))


def one_layer_config():
    """The ModelConfig of ``seeded_one_layer_model``: vocabulary 12, max_len 10, d_model 16, 4 heads and
    1 layer (frozen, so the files that keep it as CFG may share it)."""
    from course_utils.model.transformer import ModelConfig

    return ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


def seeded_one_layer_model(seed: int):
    """A TinyTransformer of ``one_layer_config()`` (vocabulary 12, max_len 10, d_model 16, 4 heads and
    1 layer), seeded with ``seed``, in training mode: the model the checkpoint and training tests save,
    kill and move."""
    import torch

    from course_utils.model.transformer import TinyTransformer

    torch.manual_seed(seed)
    return TinyTransformer(one_layer_config())


def meta_copy(model):
    """A deep copy of ``model`` moved to the meta device."""
    import copy

    return copy.deepcopy(model).to("meta")
