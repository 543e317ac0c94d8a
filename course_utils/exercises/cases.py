"""One set of test inputs for an exercise: its own module, so the checker (:mod:`.core`) and the
stored answers (:mod:`.answers`) both use it without importing each other in a loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class Case:
    """One set of inputs for the learner's function."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.args, tuple):
            raise TypeError(f"args must be a tuple of the positional inputs, got {type(self.args).__name__} "
                            f"(write args=(x, y), or tuple(your_list))")
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise TypeError(f"kwargs must be a dict from argument names to inputs, "
                            f"got {type(self.kwargs).__name__}")
        if not isinstance(self.label, str):
            raise TypeError(f"label must be a str, got {type(self.label).__name__} {self.label!r}")

    def fresh(self) -> tuple[tuple, dict]:
        """Copies of the inputs, so an in-place edit by one call cannot leak into the next."""
        def copy(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, np.ndarray):
                return x.copy()
            return x

        return tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()}
