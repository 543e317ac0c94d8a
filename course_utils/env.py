"""Reproducibility and environment helpers: seeds, device choice, a version report."""

from __future__ import annotations

import contextlib
import importlib
import platform
import random
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["seed_everything", "pick_device", "torch_threads", "environment_report", "REQUIRED_PACKAGES"]

# import name -> minimum version the course is tested against (see pyproject.toml)
REQUIRED_PACKAGES: dict[str, str] = {
    "torch": "2.1",
    "numpy": "1.24",
    "matplotlib": "3.7",
    "seaborn": "0.12",
    "pandas": "2.0",
    "ipywidgets": "8.0",
    "safetensors": "0.4",
    "tqdm": "4.60",
}


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (CPU and CUDA); return a seeded torch Generator."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


def pick_device(prefer: str | None = None) -> torch.device:
    """CUDA when present, else CPU. ``prefer="cpu"`` forces the CPU."""
    if prefer is not None:
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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
