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

    def fresh(self) -> tuple[tuple, dict]:
        """Copies of the inputs, so an in-place edit by one call cannot leak into the next."""
        def copy(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, np.ndarray):
                return x.copy()
            return x

        return tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()}
