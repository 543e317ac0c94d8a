"""Attention itself: masks, scaled dot-product attention, multi-head and grouped-query
attention (one forward path), the naive loop, the fused decode kernel, shapes and input checks.
"""

from .mha import *  # noqa: F401,F403 - the names of the old flat module
from .mha import __all__  # noqa: F401
