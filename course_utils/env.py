"""Reproducibility and environment helpers: seeds, device choice, a version report."""

from __future__ import annotations

import contextlib
import importlib
import numbers
import platform
import random
from collections.abc import Iterator

import numpy as np
import torch

from .attention.validation import check_device_present, check_thread_count, shown

__all__ = ["seed_everything", "check_seed", "pick_device", "torch_threads", "gradients_on",
           "environment_report", "REQUIRED_PACKAGES"]

# import name -> minimum version: pyproject.toml's floors, the oldest versions the suite has
# been run on (tests/test_course_packaging.py holds the two lists together)
REQUIRED_PACKAGES: dict[str, str] = {
    "torch": "2.5.1",
    "numpy": "1.26.4",
    "matplotlib": "3.9.4",
    "seaborn": "0.13.2",
    "pandas": "2.2.2",
    "ipywidgets": "8.1.2",
    "safetensors": "0.4.3",
    "tqdm": "4.66.4",
}


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` must be a Python or NumPy int (not a bool, str or float), as
    :func:`~course_utils.attention.validation.check_int` takes, with ``0 <= seed < 2**64``, the
    range ``torch.manual_seed`` accepts; returned as a Python int. ``name`` (the argument's name
    in the messages) is a non-empty str, else a TypeError naming ``name``."""
    from .cli import check_label  # not at import: python -m course_utils.cli would warn

    check_label(name, "name", "the name of the argument checked, e.g. 'seed'")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"{name} must be an int such as 0, got {type(seed).__name__} {shown(seed, 60)}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"{name} must be >= 0, got {seed}")
    if seed >= 2**64:
        raise ValueError(f"{name} must be < 2**64 (torch.manual_seed accepts 0 <= seed < 2**64), "
                         f"got {seed}")
    return seed


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a seeded torch Generator. ``seed``
    is a Python or NumPy int (:func:`check_seed`), used as a Python int (``random.seed`` refuses
    NumPy's)."""
    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


_DEVICE_TYPES = ("cpu", "cuda", "mps")


def pick_device(prefer: str | torch.device | None = None, name: str = "prefer") -> torch.device:
    """CUDA when present, else CPU. ``prefer`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``
    or a ``torch.device``) asks for one device, and is refused with a clear ``ValueError``
    when this machine does not have it (rather than failing later, inside a tensor op). ``name``
    is the argument the messages name: a caller passing its own ``device=`` on says ``"device"``;
    a non-empty str, else a TypeError naming ``name`` (``name=5`` said "5 must be one of ...")."""
    from .cli import check_label  # not at import: python -m course_utils.cli would warn

    check_label(name, "name", "the name of the argument checked, e.g. 'prefer' or 'device'")
    if prefer is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(prefer, str | torch.device):
        raise TypeError(f"{name} must be a str such as 'cpu' or 'cuda', a torch.device or None, "
                        f"got {type(prefer).__name__}")
    try:
        device = torch.device(prefer)
    except RuntimeError:
        device = None
    if device is None or device.type not in _DEVICE_TYPES:
        raise ValueError(f"{name} must be one of {list(_DEVICE_TYPES)} (optionally with an index, "
                         f"'cuda:0'), or None for the best available; got {shown(prefer)}")
    return check_device_present(device, name, asked=prefer)


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(num_threads)``, then restore the previous
    setting; ``None`` leaves it alone.

    One thread makes CPU timings far steadier on a busy machine (a thread waiting for a
    core stalls every parallel matmul), trains tiny models fastest, and makes results
    independent of the number of cores."""
    if num_threads is None:
        yield
        return
    check_thread_count(num_threads, "num_threads")
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def gradients_on(what: str) -> Iterator[None]:
    """Run the block with autograd on, as ``what`` (a training run) needs, even when the caller
    is inside ``torch.no_grad()``; inside ``torch.inference_mode()``, where no gradient can be
    recorded, a RuntimeError naming ``what`` instead of torch's "element 0 of tensors does not
    require grad" at the first step. ``what`` is a non-empty str (:func:`.cli.check_label`)."""
    from .cli import check_label

    check_label(what, "what", "what needs the gradients, e.g. 'train_model'")
    if torch.is_inference_mode_enabled():
        raise RuntimeError(f"{what} needs gradients and cannot run inside torch.inference_mode(): "
                           f"call it outside that block")
    with torch.enable_grad():
        yield


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def environment_report() -> tuple[list[dict[str, str]], list[str]]:
    """Rows ``{package, need, found, status}`` and a list of problems (empty = all clear)."""
    rows, problems = [], []
    for name, minimum in REQUIRED_PACKAGES.items():
        try:
            module = importlib.import_module(name)
            found = getattr(module, "__version__", "unknown")
        except ImportError:
            rows.append({"package": name, "need": f">={minimum}", "found": "missing",
                         "status": "MISSING"})
            problems.append(f"{name} is not installed: run `python3 course.py lab` from the "
                            f"repository root, or `pip install '{name}>={minimum}'`")
            continue
        ok = found == "unknown" or _version_tuple(found) >= _version_tuple(minimum)
        rows.append({"package": name, "need": f">={minimum}", "found": found,
                     "status": "ok" if ok else "TOO OLD"})
        if not ok:
            problems.append(f"{name} {found} is older than {minimum}: "
                            f"`pip install -U '{name}>={minimum}'`")
    return rows, problems


def describe_hardware() -> str:
    """One line about Python, CPU threads and the GPU (if any)."""
    gpu = (f"CUDA GPU: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
           else "no CUDA GPU (CPU only; every lesson runs on CPU)")
    return (f"Python {platform.python_version()} on {platform.system()} {platform.machine()}; "
            f"torch uses {torch.get_num_threads()} CPU thread(s); {gpu}")


if __name__ == "__main__":  # a library module, not a command: say so (it exited 0 without a word)
    from . import cli

    cli.not_a_command("python -m course_utils.env")
