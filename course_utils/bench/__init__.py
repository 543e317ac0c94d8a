"""Benchmarks: one timing core (timing.py), and each benchmark a thin client of it
(MHA speed, GQA decode speed, the whole decode step, training time, each lesson's time and
memory).
"""

# imported by the old flat module and used from it by lessons: still importable from here
from ..attention.sdpa_backends import cuda_unavailable_reason  # noqa: F401,E402
from ..env import torch_threads  # noqa: F401,E402
from .cli import *  # noqa: F401,F403
from .cli import __all__ as _cli
from .mha_speed import *  # noqa: F401,F403
from .mha_speed import __all__ as _mha
from .timing import *  # noqa: F401,F403
from .timing import __all__ as _timing

__all__ = [*_timing, *_mha, *_cli]
