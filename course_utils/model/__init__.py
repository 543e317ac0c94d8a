"""The tiny transformer the lessons train: its blocks, checkpoints, training loop, KV caches,
and the helper that runs training jobs side by side.
"""

from .transformer import *  # noqa: F401,F403 - the names of the old flat module
from .transformer import __all__  # noqa: F401
